//! `fntrace replay`: the call tree of a trace with durations and thread
//! ids, filtered by function, depth, duration, thread and time window.

use rustc_hash::FxHashMap as HashMap;
use std::io::{self, Write};
use std::path::Path;

use fntrace_format::Trace;

use crate::Result;
use crate::analysis::{Clock, Event, Events, fmt_ns, indent, parse_duration};
use crate::pattern::NamePattern;
use crate::symbols::Symbolizer;
use crate::tracefile::open_checked;

/// Options of `fntrace replay`.
#[derive(Debug, Clone, Default)]
pub struct ReplayOptions {
    /// Show calls at depth < N only (relative to a filter's match).
    pub depth: Option<usize>,
    /// Show only subtrees rooted at functions whose name contains this.
    pub filter: Option<NamePattern>,
    /// Hide calls shorter than this (ns).
    pub threshold_ns: u64,
    /// Only this thread.
    pub tid: Option<u32>,
    /// Show source locations.
    pub srcline: bool,
    /// Only calls entered in this window (ns since the start of the
    /// recording, inclusive).
    pub time_range: Option<(u64, u64)>,
    /// Colour durations (≥ 1 ms red, ≥ 10 µs yellow).
    pub color: bool,
}

/// One open call of a thread being replayed.
struct Frame {
    func: u64,
    start: u64,
    /// Depth relative to the root of the filtered subtree, if inside one.
    rel: Option<usize>,
    /// Whether this call may be shown (inside a subtree, within `--depth`).
    eligible: bool,
    /// Its opening line `name() {` was printed.
    opened: bool,
    /// Argument values, when the trace has them.
    args: Option<Vec<i64>>,
    /// Return value, when the trace has it.
    ret: Option<i64>,
}

impl Frame {
    /// `(1, 2)` or `()`.
    fn arg_list(&self) -> String {
        match &self.args {
            Some(a) => format!(
                "({})",
                a.iter()
                    .map(|v| v.to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            None => "()".into(),
        }
    }

    /// ` = 832040` or nothing.
    fn ret_text(&self) -> String {
        self.ret.map(|r| format!(" = {r}")).unwrap_or_default()
    }
}

/// Replay state of one thread.
struct ThreadView<'t> {
    tid: u32,
    events: std::iter::Peekable<Events<'t>>,
    stack: Vec<Frame>,
    /// Every shown frame of `stack[..opened_upto]` has its opening line
    /// printed: [`Replayer::open_ancestors`] only looks above it, so each
    /// frame is visited once while it is open (linear on deep stacks).
    opened_upto: usize,
    /// Off-CPU intervals (`record --sched`) and the next one to show.
    off: Vec<(u64, u64, bool)>,
    next_off: usize,
}

impl ThreadView<'_> {
    /// When the thread's next item happens: its next event or its next
    /// switch-out, whichever is first.
    fn next_tsc(&mut self) -> Option<u64> {
        let ev = self.events.peek().map(event_tsc);
        let off = self.off.get(self.next_off).map(|o| o.0);
        match (ev, off) {
            (Some(e), Some(o)) => Some(e.min(o)),
            (e, o) => e.or(o),
        }
    }
}

struct Replayer<'a, 't> {
    out: &'a mut dyn Write,
    sym: Symbolizer<'t>,
    clock: Clock,
    o: &'a ReplayOptions,
    matches: HashMap<u64, bool>,
}

impl Replayer<'_, '_> {
    fn matches(&mut self, func: u64) -> bool {
        let Some(f) = &self.o.filter else {
            return true;
        };
        if let Some(&m) = self.matches.get(&func) {
            return m;
        }
        let m = f.matches(self.sym.name(func));
        self.matches.insert(func, m);
        m
    }

    fn src(&mut self, func: u64) -> String {
        if !self.o.srcline {
            return String::new();
        }
        self.sym
            .srcline(func)
            .map(|s| format!(" /* {s} */"))
            .unwrap_or_default()
    }

    /// Prints the opening lines of the shown frames of the thread's stack
    /// not printed yet.
    fn open_ancestors(&mut self, t: &mut ThreadView<'_>) -> io::Result<()> {
        let tid = t.tid;
        let from = t.opened_upto.min(t.stack.len());
        t.opened_upto = t.stack.len();
        for f in t.stack[from..].iter_mut() {
            if f.eligible && !f.opened {
                f.opened = true;
                let indent = indent(f.rel.unwrap_or(0));
                let name = self.sym.name(f.func).to_string();
                let src = self.src(f.func);
                let args = f.arg_list();
                writeln!(
                    self.out,
                    "{:>12} [{tid:>6}] | {indent}{name}{args} {{{src}",
                    ""
                )?;
            }
        }
        Ok(())
    }

    /// Whether the thread's next item (its next event, or the off-CPU
    /// interval `off` when that comes first) can print a line: then
    /// another thread's call waiting to be printed as a one-liner must be
    /// opened first (`name() {`), or its line would come after lines of
    /// later events. Items nothing shows (outside the filter, the window
    /// or the depth) do not count.
    fn may_print(&mut self, t: &mut ThreadView<'_>, off: Option<(u64, u64, bool)>) -> bool {
        let top = t.stack.last().map(|f| (f.eligible, f.rel));
        let shown_here = || match top {
            Some((eligible, _)) => eligible,
            None => self.o.filter.is_none(),
        };
        if off.is_some() {
            return shown_here();
        }
        match t.events.peek() {
            Some(&Event::Enter { func, tsc, .. }) => {
                let rel = match top {
                    Some((_, Some(r))) => Some(r + 1),
                    _ if self.matches(func) => Some(0),
                    _ => None,
                };
                let in_time = self.o.time_range.is_none_or(|(a, b)| {
                    let at = self.clock.since_start(tsc);
                    at >= a && at <= b
                });
                in_time && rel.is_some_and(|r| self.o.depth.is_none_or(|d| r < d))
            }
            Some(Event::Exit { .. }) => top.is_some_and(|(eligible, _)| eligible),
            Some(Event::Marker { .. } | Event::Switch { .. }) => shown_here(),
            Some(Event::Args(_) | Event::RetVal(_)) | None => false,
        }
    }

    /// The level at which a note (a marker, a context switch) at `tsc`
    /// is shown on thread `t`, if it is: where the calls around it are
    /// shown (or at the top when no filter hides the outer level), within
    /// the time window and `--depth`.
    fn note_level(&self, t: &ThreadView<'_>, tsc: u64) -> Option<usize> {
        let in_time = self.o.time_range.is_none_or(|(a, b)| {
            let at = self.clock.since_start(tsc);
            at >= a && at <= b
        });
        let (shown, rel) = match t.stack.last() {
            Some(f) => (f.eligible, f.rel.map_or(0, |r| r + 1)),
            None => (self.o.filter.is_none(), 0),
        };
        (in_time && shown && self.o.depth.is_none_or(|d| rel <= d)).then_some(rel)
    }

    /// A switch point: the thread was off CPU from `out` to `back`, shown
    /// where it happened in the call tree with how long it lasted.
    fn offcpu(
        &mut self,
        t: &mut ThreadView<'_>,
        (out, back, preempted): (u64, u64, bool),
    ) -> io::Result<()> {
        let in_time = self.o.time_range.is_none_or(|(a, b)| {
            let at = self.clock.since_start(out);
            at >= a && at <= b
        });
        let (shown, rel) = match t.stack.last() {
            Some(f) => (f.eligible, f.rel.map_or(0, |r| r + 1)),
            None => (self.o.filter.is_none(), 0),
        };
        let dur = self.clock.ns(back.saturating_sub(out));
        if !in_time || !shown || self.o.depth.is_some_and(|d| rel > d) || dur < self.o.threshold_ns
        {
            return Ok(());
        }
        self.open_ancestors(t)?;
        let indent = indent(rel);
        let why = if preempted { "preempted" } else { "blocked" };
        writeln!(
            self.out,
            "{:>12} [{:>6}] | {indent}/* off CPU: {why} */",
            fmt_ns(dur),
            t.tid
        )
    }

    fn event(&mut self, t: &mut ThreadView<'_>, ev: Event) -> io::Result<()> {
        match ev {
            Event::Enter { func, tsc, .. } => {
                let rel = match t.stack.last() {
                    Some(Frame { rel: Some(r), .. }) => Some(r + 1),
                    _ if self.matches(func) => Some(0),
                    _ => None,
                };
                let in_time = self.o.time_range.is_none_or(|(a, b)| {
                    let at = self.clock.since_start(tsc);
                    at >= a && at <= b
                });
                let eligible = in_time && rel.is_some_and(|r| self.o.depth.is_none_or(|d| r < d));
                // Without a threshold every eligible call is shown, so its
                // parent can be opened now, keeping lines in time order.
                if eligible && self.o.threshold_ns == 0 {
                    self.open_ancestors(t)?;
                }
                t.stack.push(Frame {
                    func,
                    start: tsc,
                    rel,
                    eligible,
                    opened: false,
                    args: None,
                    ret: None,
                });
            }
            Event::Args(a) => {
                if let Some(f) = t.stack.last_mut() {
                    f.args = Some(a);
                }
            }
            Event::RetVal(v) => {
                if let Some(f) = t.stack.last_mut() {
                    f.ret = Some(v);
                }
            }
            Event::Marker { tsc, name, text } => {
                if let Some(rel) = self.note_level(t, tsc) {
                    self.open_ancestors(t)?;
                    let indent = indent(rel);
                    let sep = if text.is_empty() { "" } else { " " };
                    writeln!(
                        self.out,
                        "{:>12} [{:>6}] | {indent}/* marker {name}{sep}{text} */",
                        "", t.tid
                    )?;
                }
            }
            Event::Switch { resumed, calls } => {
                // At the time of the exit or entry that follows it.
                let at = t.events.peek().map(event_tsc).unwrap_or(0);
                if let Some(rel) = self.note_level(t, at) {
                    self.open_ancestors(t)?;
                    let (what, s) = (
                        if resumed { "resumes" } else { "suspends" },
                        if calls == 1 { "" } else { "s" },
                    );
                    writeln!(
                        self.out,
                        "{:>12} [{:>6}] | {}/* context switch: {what} {calls} call{s} */",
                        "",
                        t.tid,
                        indent(rel)
                    )?;
                }
            }
            Event::Exit { tsc, incomplete } => {
                let Some(f) = t.stack.pop() else {
                    return Ok(());
                };
                t.opened_upto = t.opened_upto.min(t.stack.len());
                let dur = self.clock.ns(tsc.saturating_sub(f.start));
                if !f.eligible || dur < self.o.threshold_ns {
                    return Ok(());
                }
                self.open_ancestors(t)?;
                let tid = t.tid;
                let d = format!("{:>12}", fmt_ns(dur));
                let d = match (self.o.color, dur) {
                    (true, 1_000_000..) => format!("\x1b[31m{d}\x1b[0m"),
                    (true, 10_000..) => format!("\x1b[33m{d}\x1b[0m"),
                    _ => d,
                };
                let indent = indent(f.rel.unwrap_or(0));
                let name = self.sym.name(f.func).to_string();
                let note = if incomplete {
                    " (no exit recorded)"
                } else {
                    ""
                };
                let ret = f.ret_text();
                if f.opened {
                    writeln!(
                        self.out,
                        "{d} [{tid:>6}] | {indent}}}{ret} /* {name}{note} */"
                    )?;
                } else {
                    let src = self.src(f.func);
                    let note = if incomplete {
                        " /* no exit recorded */"
                    } else {
                        ""
                    };
                    let args = f.arg_list();
                    writeln!(
                        self.out,
                        "{d} [{tid:>6}] | {indent}{name}{args}{ret};{src}{note}"
                    )?;
                }
            }
        }
        Ok(())
    }
}

fn event_tsc(ev: &Event) -> u64 {
    match *ev {
        Event::Enter { tsc, .. } | Event::Exit { tsc, .. } | Event::Marker { tsc, .. } => tsc,
        // Attached to the call before them (or the one after a context
        // switch): due at once.
        Event::Args(_) | Event::RetVal(_) | Event::Switch { .. } => 0,
    }
}

/// Writes the call tree, uftrace style: threads are merged in time order
/// (each line carries its thread id), memory stays bounded by the open call
/// depth and one decoded chunk per thread.
pub fn write_replay(out: &mut dyn Write, trace: &Trace, o: &ReplayOptions) -> io::Result<()> {
    let mut r = Replayer {
        out,
        sym: Symbolizer::new(trace.metadata()),
        clock: Clock::of(trace),
        o,
        matches: HashMap::default(),
    };
    writeln!(r.out, "# DURATION     TID     FUNCTION")?;
    let mut threads: Vec<ThreadView> = trace
        .thread_ids()
        .into_iter()
        .filter(|t| o.tid.is_none_or(|x| x == *t))
        .map(|tid| ThreadView {
            tid,
            events: Events::new(trace, tid).peekable(),
            stack: vec![],
            opened_upto: 0,
            off: trace.offcpu_tsc(tid),
            next_off: 0,
        })
        .collect();
    // Min-heap of (next timestamp, thread index).
    let mut heap = std::collections::BinaryHeap::new();
    for (i, t) in threads.iter_mut().enumerate() {
        if let Some(at) = t.next_tsc() {
            heap.push(std::cmp::Reverse((at, i)));
        }
    }
    // The thread whose newest call may still be printed as a one-liner
    // (`name();`): its line waits for the call's exit, unless another
    // thread prints first.
    let mut waiting: Option<usize> = None;
    while let Some(std::cmp::Reverse((_, i))) = heap.pop() {
        let t = &mut threads[i];
        // A switch-out before (or at) the next event comes first.
        let off = t.off.get(t.next_off).copied();
        let ev_at = t.events.peek().map(event_tsc);
        let off = off.filter(|o| ev_at.is_none_or(|e| o.0 <= e));
        if let Some(j) = waiting
            && j != i
            && r.may_print(t, off)
        {
            waiting = None;
            r.open_ancestors(&mut threads[j])?;
        }
        let t = &mut threads[i];
        match off {
            Some(o) => {
                t.next_off += 1;
                r.offcpu(t, o)?;
            }
            None => {
                let Some(ev) = t.events.next() else { continue };
                let enter = matches!(ev, Event::Enter { .. });
                r.event(t, ev)?;
                if enter
                    && o.threshold_ns == 0
                    && t.stack.last().is_some_and(|f| f.eligible && !f.opened)
                {
                    waiting = Some(i);
                }
            }
        }
        if let Some(at) = t.next_tsc() {
            heap.push(std::cmp::Reverse((at, i)));
        }
    }
    Ok(())
}

/// The options of `fntrace replay` as given on the command line.
#[derive(Debug, Clone, clap::Args)]
pub struct CliOptions {
    /// Which calls: `--tid`, `--time-range`, `--filter`, `--depth`,
    /// `--threshold` (the same on the exports).
    #[command(flatten)]
    pub select: crate::select::SelectArgs,
    /// Show source locations.
    #[arg(long)]
    pub srcline: bool,
    /// Colour long calls: auto (when stdout is a terminal), always, never.
    #[arg(long, value_enum, default_value = "auto")]
    pub color: ColorMode,
}

/// When to colour output.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ColorMode {
    /// When stdout is a terminal.
    Auto,
    /// Always.
    Always,
    /// Never.
    Never,
}

/// Parses `START~END` (durations; either side may be empty).
pub fn parse_range(s: &str) -> Option<(u64, u64)> {
    let (a, b) = s.split_once('~')?;
    let a = if a.trim().is_empty() {
        0
    } else {
        parse_duration(a)?
    };
    let b = if b.trim().is_empty() {
        u64::MAX
    } else {
        parse_duration(b)?
    };
    (a <= b).then_some((a, b))
}

/// `fntrace replay`: the call tree of the trace at `path`.
pub fn run(out: &mut dyn Write, path: &Path, o: &CliOptions) -> Result<()> {
    let sel = o.select.parse()?;
    let t = open_checked(path)?;
    sel.check_tid(&t, path)?;
    // SAFETY: isatty has no preconditions.
    let tty = unsafe { libc::isatty(1) } == 1;
    let o = ReplayOptions {
        depth: sel.depth,
        filter: sel.filter,
        threshold_ns: sel.threshold_ns,
        tid: sel.tid,
        srcline: o.srcline,
        time_range: sel.time_range,
        color: o.color == ColorMode::Always || (o.color == ColorMode::Auto && tty),
    };
    write_replay(out, &t, &o)?;
    Ok(())
}
