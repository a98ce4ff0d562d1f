//! Selections of calls shared by views and exports: `--tid`,
//! `--time-range`, `--filter`, `--depth`, `--threshold`, with the meaning
//! `fntrace replay` gives them, and [`Selector`], which applies them to one
//! thread's event stream while it streams (memory bounded by the open
//! call depth).

use fntrace_format::Trace;

use crate::analysis::{Clock, Event, Events, parse_duration};
use crate::pattern::NamePattern;
use crate::replay::parse_range;
use crate::symbols::Symbolizer;
use crate::{Error, Result};

/// The selection options as given on the command line.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct SelectArgs {
    /// Only this thread.
    #[arg(long)]
    pub tid: Option<u32>,
    /// Only calls entered in this window since the start of the
    /// recording, e.g. `1ms~2.5ms` (either side may be empty).
    #[arg(short = 'r', long, value_name = "START~END")]
    pub time_range: Option<String>,
    /// Only subtrees of these functions: a full name, a last path
    /// component (`fib`, `operator()`), with or without parameters, or a
    /// regular expression when it has `^ $ \ | .* .+ .?` or a `[class]`
    /// (`^app::.*::run$`).
    #[arg(short = 'F', long)]
    pub filter: Option<String>,
    /// Only this many levels (below a `--filter` match, else from the
    /// outermost call).
    #[arg(short = 'D', long)]
    pub depth: Option<usize>,
    /// Leave out calls shorter than this (e.g. 10us).
    #[arg(short = 't', long)]
    pub threshold: Option<String>,
}

/// A parsed selection.
#[derive(Debug, Clone, Default)]
pub struct Selection {
    /// Only this thread.
    pub tid: Option<u32>,
    /// Only calls entered in this window (ns since the start of the
    /// recording, inclusive).
    pub time_range: Option<(u64, u64)>,
    /// Only subtrees rooted at matching functions.
    pub filter: Option<NamePattern>,
    /// Only calls at depth < N (relative to a filter's match).
    pub depth: Option<usize>,
    /// Leave out calls shorter than this (ns).
    pub threshold_ns: u64,
}

impl SelectArgs {
    /// Parses the options; a bad value is an error naming the option.
    pub fn parse(&self) -> Result<Selection> {
        let threshold_ns = match &self.threshold {
            Some(s) => parse_duration(s).ok_or_else(|| {
                Error::Invalid(format!("bad --threshold {s:?} (use e.g. 10us, 1ms)"))
            })?,
            None => 0,
        };
        let filter = match &self.filter {
            Some(f) => {
                Some(NamePattern::new(f).map_err(Error::pattern(format!("bad --filter {f:?}")))?)
            }
            None => None,
        };
        let time_range = match &self.time_range {
            Some(r) => Some(parse_range(r).ok_or_else(|| {
                Error::Invalid(format!(
                    "bad --time-range {r:?} (use e.g. 1ms~2.5ms, ~10ms, 5s~)"
                ))
            })?),
            None => None,
        };
        Ok(Selection {
            tid: self.tid,
            time_range,
            filter,
            depth: self.depth,
            threshold_ns,
        })
    }
}

impl Selection {
    /// Whether nothing is left out.
    pub fn is_all(&self) -> bool {
        self.tid.is_none()
            && self.time_range.is_none()
            && self.filter.is_none()
            && self.depth.is_none()
            && self.threshold_ns == 0
    }

    /// A `--tid` that names no thread of `trace` (at `path`) is an error
    /// naming it, the same for every view and export (an empty output
    /// would look like an empty trace).
    pub fn check_tid(&self, trace: &Trace, path: &std::path::Path) -> Result<()> {
        match self.tid {
            Some(tid) if !trace.thread_ids().contains(&tid) => Err(Error::Invalid(format!(
                "{}: no thread {tid} in the trace (threads: {})",
                path.display(),
                list_tids(&trace.thread_ids())
            ))),
            _ => Ok(()),
        }
    }

    /// The threads selected, in the trace's order.
    pub fn threads(&self, trace: &Trace) -> Vec<u32> {
        trace
            .thread_ids()
            .into_iter()
            .filter(|t| self.tid.is_none_or(|x| x == *t))
            .collect()
    }
}

/// `1, 2, 3` or `1, 2, 3, ... (40 in all)`.
fn list_tids(tids: &[u32]) -> String {
    let mut s: Vec<String> = tids.iter().take(8).map(|t| t.to_string()).collect();
    if tids.len() > 8 {
        s.push(format!("... ({} in all)", tids.len()));
    }
    if s.is_empty() {
        return "none".into();
    }
    s.join(", ")
}

/// What a [`Selector`] lets through, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Selected {
    /// A selected call begins (at its entry TSC).
    Begin {
        /// Function key.
        func: u64,
        /// Entry TSC.
        tsc: u64,
    },
    /// The innermost selected open call ends.
    End {
        /// Exit TSC.
        tsc: u64,
    },
}

struct Frame {
    func: u64,
    start: u64,
    /// Depth below the filter's match, if inside a matching subtree.
    rel: Option<usize>,
    /// Its begin was let through.
    emitted: bool,
}

/// Applies a [`Selection`] to one thread's entries and exits as they
/// stream. With a threshold, a call's begin is let through once the
/// stream has passed its entry by the threshold (or at its exit when it is
/// long enough), so that it still comes before its selected children and
/// nothing is held but the open frames.
pub struct Selector<'s> {
    sel: &'s Selection,
    clock: Clock,
    threshold_ticks: u64,
    stack: Vec<Frame>,
    /// Indices (in `stack`) of the selected open calls whose begin is not
    /// let through yet, outermost first (with a threshold): the first is
    /// always the next one due.
    pending: std::collections::VecDeque<usize>,
    matches: rustc_hash::FxHashMap<u64, bool>,
    out: Vec<Selected>,
}

impl<'s> Selector<'s> {
    /// A selector for one thread of `trace`.
    pub fn new(sel: &'s Selection, trace: &Trace) -> Selector<'s> {
        let clock = Clock::of(trace);
        let hz = u128::from(trace.tsc_hz().max(1));
        let threshold_ticks = (u128::from(sel.threshold_ns) * hz).div_ceil(1_000_000_000) as u64;
        Selector {
            sel,
            clock,
            threshold_ticks,
            stack: vec![],
            pending: Default::default(),
            matches: Default::default(),
            out: vec![],
        }
    }

    fn matches(&mut self, func: u64, sym: &mut Symbolizer<'_>) -> bool {
        let Some(f) = &self.sel.filter else {
            return true;
        };
        *self
            .matches
            .entry(func)
            .or_insert_with(|| f.matches(sym.name(func)))
    }

    fn in_time(&self, tsc: u64) -> bool {
        self.sel.time_range.is_none_or(|(a, b)| {
            let at = self.clock.since_start(tsc);
            at >= a && at <= b
        })
    }

    /// Lets through the begins of open selected calls that have lasted
    /// the threshold by `tsc`, outermost first.
    fn due(&mut self, tsc: u64) {
        while let Some(&i) = self.pending.front() {
            let f = &mut self.stack[i];
            if tsc.saturating_sub(f.start) < self.threshold_ticks {
                break;
            }
            f.emitted = true;
            self.out.push(Selected::Begin {
                func: f.func,
                tsc: f.start,
            });
            self.pending.pop_front();
        }
    }

    /// A call entered: returns what to write now.
    pub fn enter(&mut self, func: u64, tsc: u64, sym: &mut Symbolizer<'_>) -> &[Selected] {
        self.out.clear();
        self.due(tsc);
        let rel = match self.stack.last().and_then(|f| f.rel) {
            Some(r) => Some(r + 1),
            None if self.matches(func, sym) => Some(0),
            None => None,
        };
        let eligible =
            self.in_time(tsc) && rel.is_some_and(|r| self.sel.depth.is_none_or(|d| r < d));
        let emitted = eligible && self.threshold_ticks == 0;
        if emitted {
            self.out.push(Selected::Begin { func, tsc });
        } else if eligible {
            self.pending.push_back(self.stack.len());
        }
        self.stack.push(Frame {
            func,
            start: tsc,
            rel,
            emitted,
        });
        &self.out
    }

    /// The innermost call returned: returns what to write now.
    pub fn exit(&mut self, tsc: u64) -> &[Selected] {
        self.out.clear();
        self.due(tsc);
        // A call lasting the threshold had its begin let through just now.
        if let Some(f) = self.stack.pop() {
            if f.emitted {
                self.out.push(Selected::End { tsc });
            } else if self.pending.back() == Some(&self.stack.len()) {
                self.pending.pop_back();
            }
        }
        &self.out
    }

    /// Whether the innermost open call was let through (its argument and
    /// return values go with it).
    pub fn top_selected(&self) -> bool {
        self.stack.last().is_some_and(|f| f.emitted)
    }

    /// Whether a marker at `tsc` is shown (where `replay` shows it: inside
    /// a selected call, or at the top when no filter hides the outer
    /// level, within the window and the depth); lets through the begins
    /// due by then (returned).
    pub fn marker(&mut self, tsc: u64) -> (bool, &[Selected]) {
        self.out.clear();
        self.due(tsc);
        let (shown, rel) = match self.stack.last() {
            Some(f) => (f.emitted, f.rel.map_or(0, |r| r + 1)),
            None => (self.sel.filter.is_none(), 0),
        };
        let shown = shown && self.in_time(tsc) && self.sel.depth.is_none_or(|d| rel <= d);
        (shown, &self.out)
    }
}

/// A [`crate::analysis::Visitor`] that hands on only the calls (and
/// markers) a [`Selection`] selects, for views built on
/// [`crate::analysis::walk_thread`] (`report`). The times of a selected
/// call are its own: its self time still excludes every recorded child,
/// selected or not.
pub struct SelectVisitor<'a, 't> {
    inner: &'a mut dyn crate::analysis::Visitor,
    sel: &'a Selection,
    clock: Clock,
    threshold_ticks: u64,
    sym: Symbolizer<'t>,
    matches: rustc_hash::FxHashMap<u64, bool>,
    /// Per open call: depth below the filter's match (if inside one) and
    /// whether it is selected so far (window and depth).
    open: Vec<(Option<usize>, bool)>,
}

impl<'a, 't> SelectVisitor<'a, 't> {
    /// Wraps `inner` for one thread of `trace`.
    pub fn new(
        inner: &'a mut dyn crate::analysis::Visitor,
        sel: &'a Selection,
        trace: &'t Trace,
    ) -> SelectVisitor<'a, 't> {
        let hz = u128::from(trace.tsc_hz().max(1));
        SelectVisitor {
            inner,
            sel,
            clock: Clock::of(trace),
            threshold_ticks: (u128::from(sel.threshold_ns) * hz).div_ceil(1_000_000_000) as u64,
            sym: Symbolizer::new(trace.metadata()),
            matches: Default::default(),
            open: vec![],
        }
    }

    fn in_time(&self, tsc: u64) -> bool {
        self.sel.time_range.is_none_or(|(a, b)| {
            let at = self.clock.since_start(tsc);
            at >= a && at <= b
        })
    }
}

impl crate::analysis::Visitor for SelectVisitor<'_, '_> {
    fn enter(&mut self, func: u64, depth: usize, tsc: u64) {
        let rel = match self.open.last().and_then(|f| f.0) {
            Some(r) => Some(r + 1),
            None => {
                let m = match &self.sel.filter {
                    None => true,
                    Some(f) => *self
                        .matches
                        .entry(func)
                        .or_insert_with(|| f.matches(self.sym.name(func))),
                };
                m.then_some(0)
            }
        };
        let selected =
            self.in_time(tsc) && rel.is_some_and(|r| self.sel.depth.is_none_or(|d| r < d));
        self.open.push((rel, selected));
        self.inner.enter(func, depth, tsc);
    }

    fn call(&mut self, call: &crate::analysis::Call) {
        let selected = self.open.pop().is_some_and(|f| f.1);
        if selected && call.end - call.start >= self.threshold_ticks {
            self.inner.call(call);
        }
    }

    fn marker(&mut self, name: &str, text: &str, tsc: u64) {
        let (shown, rel) = match self.open.last() {
            Some(&(rel, selected)) => (selected, rel.map_or(0, |r| r + 1)),
            None => (self.sel.filter.is_none(), 0),
        };
        if shown && self.in_time(tsc) && self.sel.depth.is_none_or(|d| rel <= d) {
            self.inner.marker(name, text, tsc);
        }
    }
}

/// One thread's [`Event`]s restricted to a [`Selection`]: the entries and
/// exits of the selected calls (depths counted among them, so a selected
/// call whose caller is not selected is at depth 0), the markers `replay`
/// would show, and the argument and return values of selected calls
/// (without a threshold; with one, a call's values come before its
/// entry is known to be selected and are left out). With an empty
/// selection it is the thread's events unchanged. Memory is bounded by the
/// open call depth, as for [`Selector`].
pub struct SelectedEvents<'s, 't> {
    events: Events<'t>,
    selector: Option<Selector<'s>>,
    sym: Symbolizer<'t>,
    queue: std::collections::VecDeque<Event>,
    depth: usize,
}

impl<'s, 't> SelectedEvents<'s, 't> {
    /// The selected events of thread `tid` of `trace`.
    pub fn new(trace: &'t Trace, tid: u32, sel: &'s Selection) -> SelectedEvents<'s, 't> {
        SelectedEvents {
            events: Events::new(trace, tid),
            selector: (!sel.is_all()).then(|| Selector::new(sel, trace)),
            sym: Symbolizer::new(trace.metadata()),
            queue: Default::default(),
            depth: 0,
        }
    }

    /// What was learnt about the thread (complete once exhausted).
    pub fn into_summary(self) -> crate::analysis::ThreadSummary {
        self.events.into_summary()
    }
}

/// Queues what a [`Selector`] let through as events, at the selected depth.
fn queue_selected(
    queue: &mut std::collections::VecDeque<Event>,
    depth: &mut usize,
    x: &[Selected],
) {
    for &x in x {
        match x {
            Selected::Begin { func, tsc } => {
                queue.push_back(Event::Enter {
                    func,
                    tsc,
                    depth: *depth,
                });
                *depth += 1;
            }
            Selected::End { tsc } => {
                *depth = depth.saturating_sub(1);
                queue.push_back(Event::Exit {
                    tsc,
                    incomplete: false,
                });
            }
        }
    }
}

impl Iterator for SelectedEvents<'_, '_> {
    type Item = Event;

    fn next(&mut self) -> Option<Event> {
        loop {
            if let Some(e) = self.queue.pop_front() {
                return Some(e);
            }
            let ev = self.events.next()?;
            let Some(s) = &mut self.selector else {
                return Some(ev);
            };
            match ev {
                Event::Enter { func, tsc, .. } => {
                    let x = s.enter(func, tsc, &mut self.sym);
                    queue_selected(&mut self.queue, &mut self.depth, x);
                }
                Event::Exit { tsc, incomplete } => {
                    let x = s.exit(tsc);
                    queue_selected(&mut self.queue, &mut self.depth, x);
                    // The popped call's own end comes last.
                    if let Some(Selected::End { .. }) = x.last()
                        && let Some(Event::Exit { incomplete: i, .. }) = self.queue.back_mut()
                    {
                        *i = incomplete;
                    }
                }
                Event::Marker { tsc, name, text } => {
                    let (shown, x) = s.marker(tsc);
                    queue_selected(&mut self.queue, &mut self.depth, x);
                    if shown {
                        self.queue.push_back(Event::Marker { tsc, name, text });
                    }
                }
                Event::Args(v) => {
                    if s.top_selected() {
                        return Some(Event::Args(v));
                    }
                }
                Event::RetVal(v) => {
                    if s.top_selected() {
                        return Some(Event::RetVal(v));
                    }
                }
                // Which calls it concerns depends on the selection.
                Event::Switch { .. } => {}
            }
        }
    }
}
