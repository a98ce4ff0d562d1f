//! `fntrace export --format folded`: collapsed stacks (self time in ns
//! per stack), the input of flame-graph tools, and the stacks the flame
//! graph is drawn from. Frames keep their names (spaces included: the
//! tools take the count after the last space); a `;` in a name, which
//! would split the frame, becomes `_`.

use rustc_hash::FxHashMap as HashMap;
use std::io::{self, Write};

use fntrace_format::Trace;

use crate::analysis::{Clock, OffCpuClock};
use crate::select::{Selected, Selection, Selector};

/// Deepest stack written to folded stacks and flame graphs. A line per
/// distinct stack is inherently O(depth), so a 100,000-deep recursion
/// would give lines of megabytes each (gigabytes in all) and a graph
/// nobody can read; calls deeper than this count in the frame at the cut.
pub const MAX_FOLDED_DEPTH: usize = 1024;

/// What a stack's value is: the time of its innermost function itself
/// (children excluded), all of it, or only its time on or off CPU
/// (`record --sched`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Weight {
    /// Wall-clock self time.
    #[default]
    Wall,
    /// Self time on CPU (off-CPU time left out).
    OnCpu,
    /// Self time off CPU (blocked or preempted): an off-CPU flame graph.
    OffCpu,
}

/// One open call of [`Cct`].
struct OpenFrame {
    node: u32,
    start: u64,
    children: u64,
    wait_at: u64,
    children_wait: u64,
}

/// The calling-context tree being built, and one thread's open calls.
struct Cct<'a> {
    /// (parent node, function, self ticks); node 0 is the root, above
    /// every thread's outermost calls.
    nodes: &'a mut Vec<(u32, u64, u64)>,
    children_of: &'a mut HashMap<(u32, u64), u32>,
    cut_calls: &'a mut u64,
    stack: Vec<OpenFrame>,
    weight: Weight,
    /// The thread's off-CPU clock (with a weight other than wall).
    off: OffCpuClock,
}

impl Cct<'_> {
    fn enter(&mut self, func: u64, tsc: u64) {
        let parent = self.stack.last().map_or(0, |f| f.node);
        let node = if self.stack.len() >= MAX_FOLDED_DEPTH {
            *self.cut_calls += 1;
            parent
        } else {
            let nodes = &mut *self.nodes;
            *self.children_of.entry((parent, func)).or_insert_with(|| {
                nodes.push((parent, func, 0));
                (nodes.len() - 1) as u32
            })
        };
        let wait_at = if self.weight == Weight::Wall {
            0
        } else {
            self.off.at(tsc)
        };
        self.stack.push(OpenFrame {
            node,
            start: tsc,
            children: 0,
            wait_at,
            children_wait: 0,
        });
    }

    fn exit(&mut self, tsc: u64) {
        let Some(f) = self.stack.pop() else {
            return;
        };
        let dur = tsc.saturating_sub(f.start);
        let wait = if self.weight == Weight::Wall {
            0
        } else {
            self.off.at(tsc.max(f.start)).saturating_sub(f.wait_at)
        };
        if let Some(p) = self.stack.last_mut() {
            p.children += dur;
            p.children_wait += wait;
        }
        let self_wall = dur.saturating_sub(f.children);
        let self_wait = wait.saturating_sub(f.children_wait);
        self.nodes[f.node as usize].2 += match self.weight {
            Weight::Wall => self_wall,
            Weight::OnCpu => self_wall.saturating_sub(self_wait),
            Weight::OffCpu => self_wait,
        };
    }
}

/// Collapsed stacks (`main;work;fib 1234` per line, the value the self
/// time in nanoseconds), the input of flame-graph tools; threads merged.
/// Stacks are aggregated in a calling-context tree (memory grows with the
/// distinct stacks, not with their depth) and cut at
/// [`MAX_FOLDED_DEPTH`] frames, with a message saying how many calls the
/// cut merged. With a selection, the stacks are those of the selected
/// calls (a selected call whose caller is not selected starts a stack;
/// the time of unselected callees counts as their caller's self time).
pub fn folded_stacks(trace: &Trace, sel: &Selection) -> Vec<String> {
    folded_stacks_of(trace, sel, Weight::Wall)
}

/// [`folded_stacks`] with the stacks' values measured as `weight` says
/// (on-CPU or off-CPU self time need a trace recorded with `--sched`).
pub fn folded_stacks_of(trace: &Trace, sel: &Selection, weight: Weight) -> Vec<String> {
    use crate::analysis::{Event, Events};
    let clock = Clock::of(trace);
    let mut sym = crate::symbols::Symbolizer::new(trace.metadata());
    // The calling-context tree: (parent node, function, self ticks); node
    // 0 is the root, above every thread's outermost calls.
    let mut nodes: Vec<(u32, u64, u64)> = vec![(0, 0, 0)];
    let mut children_of: HashMap<(u32, u64), u32> = HashMap::default();
    let mut cut_calls = 0u64;
    let mut cct = Cct {
        nodes: &mut nodes,
        children_of: &mut children_of,
        cut_calls: &mut cut_calls,
        stack: vec![],
        weight,
        off: OffCpuClock::default(),
    };
    for tid in sel.threads(trace) {
        cct.stack.clear();
        if weight != Weight::Wall {
            cct.off = OffCpuClock::of(trace, tid);
        }
        let mut selector = (!sel.is_all()).then(|| Selector::new(sel, trace));
        for ev in Events::new(trace, tid) {
            let x = match (&mut selector, ev) {
                (None, Event::Enter { func, tsc, .. }) => {
                    cct.enter(func, tsc);
                    continue;
                }
                (None, Event::Exit { tsc, .. }) => {
                    cct.exit(tsc);
                    continue;
                }
                (Some(s), Event::Enter { func, tsc, .. }) => s.enter(func, tsc, &mut sym),
                (Some(s), Event::Exit { tsc, .. }) => s.exit(tsc),
                (
                    _,
                    Event::Args(_) | Event::RetVal(_) | Event::Switch { .. } | Event::Marker { .. },
                ) => continue,
            };
            for &x in x {
                match x {
                    Selected::Begin { func, tsc } => cct.enter(func, tsc),
                    Selected::End { tsc } => cct.exit(tsc),
                }
            }
        }
    }
    if cut_calls > 0 {
        eprintln!(
            "fntrace: stacks deeper than {MAX_FOLDED_DEPTH} frames are cut there: the self \
             time of {cut_calls} deeper calls counts in the frame at the cut"
        );
    }
    let mut names: HashMap<u64, String> = HashMap::default();
    let mut path = vec![];
    let mut lines: Vec<String> = vec![];
    for (i, &(_, _, ticks)) in nodes.iter().enumerate().skip(1) {
        if ticks == 0 {
            continue;
        }
        path.clear();
        let mut n = i;
        while n != 0 {
            let (parent, func, _) = nodes[n];
            path.push(func);
            n = parent as usize;
        }
        let mut line = String::new();
        for &f in path.iter().rev() {
            let name = names
                .entry(f)
                .or_insert_with(|| sym.name(f).replace(';', "_"));
            if !line.is_empty() {
                line.push(';');
            }
            line.push_str(name);
        }
        lines.push(format!("{line} {}", clock.ns(ticks).max(1)));
    }
    lines.sort();
    lines
}

/// Writes the folded stacks (of the selected calls), one per line.
pub fn write_folded(out: &mut dyn Write, trace: &Trace, sel: &Selection) -> io::Result<usize> {
    write_folded_of(out, trace, sel, Weight::Wall)
}

/// [`write_folded`] with the values measured as `weight` says.
pub fn write_folded_of(
    out: &mut dyn Write,
    trace: &Trace,
    sel: &Selection,
    weight: Weight,
) -> io::Result<usize> {
    let lines = folded_stacks_of(trace, sel, weight);
    for l in &lines {
        writeln!(out, "{l}")?;
    }
    Ok(lines.len())
}
