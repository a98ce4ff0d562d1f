//! `fntrace export --format folded`: collapsed stacks (self time in ns
//! per stack), the input of flame-graph tools, and the stacks the flame
//! graph is drawn from.

use rustc_hash::FxHashMap as HashMap;
use std::io::{self, Write};

use fntrace_format::Trace;

use crate::analysis::Clock;

/// Deepest stack written to folded stacks and flame graphs. A line per
/// distinct stack is inherently O(depth), so a 100,000-deep recursion
/// would give lines of megabytes each (gigabytes in all) and a graph
/// nobody can read; calls deeper than this count in the frame at the cut.
pub const MAX_FOLDED_DEPTH: usize = 1024;

/// Collapsed stacks (`main;work;fib 1234` per line, the value the self
/// time in nanoseconds), the input of flame-graph tools; threads merged.
/// Stacks are aggregated in a calling-context tree (memory grows with the
/// distinct stacks, not with their depth) and cut at
/// [`MAX_FOLDED_DEPTH`] frames, with a message saying how many calls the
/// cut merged.
pub fn folded_stacks(trace: &Trace) -> Vec<String> {
    use crate::analysis::{Event, Events};
    let clock = Clock::of(trace);
    let mut sym = crate::symbols::Symbolizer::new(trace.metadata());
    // The calling-context tree: (parent node, function, self ticks); node
    // 0 is the root, above every thread's outermost calls.
    let mut nodes: Vec<(u32, u64, u64)> = vec![(0, 0, 0)];
    let mut children_of: HashMap<(u32, u64), u32> = HashMap::default();
    let mut cut_calls = 0u64;
    for tid in trace.thread_ids() {
        // Open calls: (node, start, children ticks).
        let mut stack: Vec<(u32, u64, u64)> = vec![];
        for ev in Events::new(trace, tid) {
            match ev {
                Event::Enter { func, tsc, .. } => {
                    let parent = stack.last().map_or(0, |f| f.0);
                    let node = if stack.len() >= MAX_FOLDED_DEPTH {
                        cut_calls += 1;
                        parent
                    } else {
                        *children_of.entry((parent, func)).or_insert_with(|| {
                            nodes.push((parent, func, 0));
                            (nodes.len() - 1) as u32
                        })
                    };
                    stack.push((node, tsc, 0));
                }
                Event::Exit { tsc, .. } => {
                    let Some((node, start, children)) = stack.pop() else {
                        continue;
                    };
                    let dur = tsc.saturating_sub(start);
                    if let Some(p) = stack.last_mut() {
                        p.2 = p.2.saturating_add(dur);
                    }
                    nodes[node as usize].2 = nodes[node as usize]
                        .2
                        .saturating_add(dur.saturating_sub(children));
                }
                Event::Args(_) | Event::RetVal(_) | Event::Marker { .. } => {}
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
                .or_insert_with(|| sym.name(f).replace([';', ' '], "_"));
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

/// Writes the folded stacks, one per line.
pub fn write_folded(out: &mut dyn Write, trace: &Trace) -> io::Result<usize> {
    let lines = folded_stacks(trace);
    for l in &lines {
        writeln!(out, "{l}")?;
    }
    Ok(lines.len())
}
