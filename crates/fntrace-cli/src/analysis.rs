//! Call reconstruction: walks a thread stream with a stack, pairing entries
//! with exits, and hands every completed call (with its children's time) to
//! a visitor. Streams that end with open calls (process exit inside them,
//! crash, stop) close them at the thread's last timestamp; gaps from damage
//! resynchronise the stack to the depth the writer recorded.

use fntrace_format::{FastItem, Record, StreamItem, ThreadReader, Trace};

/// A completed call.
#[derive(Debug, Clone, Copy)]
pub struct Call {
    /// Function key.
    pub func: u64,
    /// Depth (0 = outermost recorded call).
    pub depth: usize,
    /// Entry TSC.
    pub start: u64,
    /// Exit TSC.
    pub end: u64,
    /// Ticks spent in recorded children.
    pub children: u64,
    /// Whether the same function is further up the stack (recursion).
    pub recursive: bool,
    /// The exit was not recorded (closed at the end of the stream).
    pub incomplete: bool,
    /// Ticks the thread spent off CPU during the call, children included
    /// (`record --sched`; 0 without it).
    pub wait: u64,
    /// Of [`Call::wait`], the ticks spent in recorded children.
    pub children_wait: u64,
    /// This piece continues a call that a user-level context switch
    /// (`swapcontext`) suspended: the call was counted at its first piece.
    pub continued: bool,
    /// This piece ended with a context switch, not a return.
    pub suspended: bool,
}

impl Call {
    /// Ticks off CPU in the function itself (not in a recorded child).
    pub fn self_wait(&self) -> u64 {
        self.wait.saturating_sub(self.children_wait)
    }

    /// Ticks on CPU in the function itself: self time minus its own wait.
    pub fn self_cpu(&self) -> u64 {
        (self.end - self.start)
            .saturating_sub(self.children)
            .saturating_sub(self.self_wait())
    }
}

/// The cumulative off-CPU time of one thread, read at non-decreasing
/// timestamps (a cursor over its sorted off-CPU intervals).
#[derive(Debug, Default, Clone)]
pub struct OffCpuClock {
    iv: Vec<(u64, u64, bool)>,
    i: usize,
    done: u64,
    last: u64,
}

impl OffCpuClock {
    /// The clock of thread `tid` of `trace` (always 0 without off-CPU
    /// records).
    pub fn of(trace: &Trace, tid: u32) -> OffCpuClock {
        OffCpuClock {
            iv: trace.offcpu_tsc(tid),
            ..OffCpuClock::default()
        }
    }

    /// Whether the thread has any off-CPU interval.
    pub fn is_empty(&self) -> bool {
        self.iv.is_empty()
    }

    /// The intervals (switch-out TSC, switch-in TSC, preempted).
    pub fn intervals(&self) -> &[(u64, u64, bool)] {
        &self.iv
    }

    /// Off-CPU ticks before `t` (an earlier `t` than a previous call reads
    /// as that previous one).
    pub fn at(&mut self, t: u64) -> u64 {
        let t = t.max(self.last);
        self.last = t;
        while let Some(&(a, b, _)) = self.iv.get(self.i) {
            if b > t {
                return self.done + t.saturating_sub(a);
            }
            self.done += b - a;
            self.i += 1;
        }
        self.done
    }
}

/// Receives calls of one thread.
pub trait Visitor {
    /// A call was entered (its exit is not known yet).
    fn enter(&mut self, _func: u64, _depth: usize, _tsc: u64) {}
    /// A call completed.
    fn call(&mut self, call: &Call);
    /// A marker fired (`name`, formatted arguments `text`).
    fn marker(&mut self, _name: &str, _text: &str, _tsc: u64) {}
    /// The thread was off CPU from `out` to `back` (`record --sched`),
    /// with `depth` calls open when it was switched out; called in time
    /// order with the other events.
    fn offcpu(&mut self, _out: u64, _back: u64, _preempted: bool, _depth: usize) {}
}

/// What walking one thread found.
#[derive(Debug, Default, Clone)]
pub struct ThreadSummary {
    /// Thread id.
    pub tid: u32,
    /// Name (at exit if recorded, else at start).
    pub name: String,
    /// Entry and exit events.
    pub events: u64,
    /// First and last TSC.
    pub first_tsc: u64,
    /// Last TSC.
    pub last_tsc: u64,
    /// Events the runtime reported lost.
    pub lost: u64,
    /// Calls closed at the end without an exit.
    pub incomplete: u64,
    /// Exits without a matching entry (ignored).
    pub unmatched_exits: u64,
    /// Whether the thread's exit was recorded.
    pub exited: bool,
    /// Damage found in the stream.
    pub damage: Vec<fntrace_format::Damage>,
    /// User-level context switches (`swapcontext`, `setcontext`) that
    /// suspended recorded calls, and that resumed them.
    pub switches: u64,
}

struct Open {
    func: u64,
    start: u64,
    children: u64,
    /// Continues a call suspended by a context switch.
    continued: bool,
}

/// Open frames searched linearly for recursion; frames deeper than this are
/// counted per function instead, so that a call returning under a deep
/// stack (a leaf called at every level of a 100,000-deep recursion) costs
/// a bounded scan and one map lookup rather than a scan of the whole stack.
const SCAN_DEPTH: usize = 64;

/// The open calls of a thread walk.
#[derive(Default)]
struct OpenCalls {
    stack: Vec<Open>,
    /// How many of the frames at index `SCAN_DEPTH` and above are open,
    /// per function (functions with none are absent).
    deep: std::collections::HashMap<u64, u32>,
}

impl OpenCalls {
    fn push(&mut self, o: Open) {
        if self.stack.len() >= SCAN_DEPTH {
            *self.deep.entry(o.func).or_default() += 1;
        }
        self.stack.push(o);
    }

    /// Pops the innermost call; returns it and whether its function is
    /// still open further out (recursion).
    fn pop(&mut self) -> Option<(Open, bool)> {
        let o = self.stack.pop()?;
        if self.stack.len() >= SCAN_DEPTH
            && let std::collections::hash_map::Entry::Occupied(mut e) = self.deep.entry(o.func)
        {
            *e.get_mut() -= 1;
            if *e.get() == 0 {
                e.remove();
            }
        }
        let shallow = &self.stack[..self.stack.len().min(SCAN_DEPTH)];
        let recursive = shallow.iter().any(|p| p.func == o.func) || self.deep.contains_key(&o.func);
        Some((o, recursive))
    }
}

/// Walks one thread's stream, handing every completed call to `v`.
pub fn walk_thread(trace: &Trace, tid: u32, v: &mut dyn Visitor) -> ThreadSummary {
    let mut open = OpenCalls::default();
    let mut events = Events::new(trace, tid);
    let mut clock = OffCpuClock::of(trace, tid);
    // Two copies of the loop: without off-CPU intervals (the common case)
    // none of their bookkeeping is compiled in.
    if clock.is_empty() {
        walk_events::<false>(&mut open, &mut events, v, &mut None);
    } else {
        walk_events::<true>(&mut open, &mut events, v, &mut Some((&mut clock, 0)));
    }
    events.into_summary()
}

/// The loop of [`walk_thread`]; with `SCHED`, `off` is the thread's
/// off-CPU clock and the index of the next interval to announce, and each
/// open call's off-CPU clock at entry and its children's wait are kept in
/// a stack of their own (without `SCHED` none of it is compiled in).
#[inline(always)]
fn walk_events<const SCHED: bool>(
    open: &mut OpenCalls,
    events: &mut Events<'_>,
    v: &mut dyn Visitor,
    off: &mut Option<(&mut OffCpuClock, usize)>,
) {
    // (off-CPU clock at entry, wait in completed children) per open call.
    let mut waits: Vec<(u64, u64)> = vec![];
    // Announces the intervals that started before `tsc`.
    let announce = |off: &mut Option<(&mut OffCpuClock, usize)>,
                    v: &mut dyn Visitor,
                    tsc: u64,
                    depth: usize| {
        if !SCHED {
            return;
        }
        if let Some((c, next)) = off {
            while let Some(&(a, b, p)) = c.intervals().get(*next) {
                if a > tsc {
                    break;
                }
                v.offcpu(a, b, p, depth);
                *next += 1;
            }
        }
    };
    let exit = |open: &mut OpenCalls,
                suspending: &mut u64,
                waits: &mut Vec<(u64, u64)>,
                v: &mut dyn Visitor,
                off: &mut Option<(&mut OffCpuClock, usize)>,
                tsc: u64,
                incomplete: bool| {
        announce(off, v, tsc, open.stack.len());
        let Some((o, recursive)) = open.pop() else {
            return;
        };
        let end = tsc.max(o.start);
        let dur = end - o.start;
        let (mut wait, mut children_wait) = (0, 0);
        if SCHED && let (Some((c, _)), Some((at, cw))) = (off.as_mut(), waits.pop()) {
            wait = c.at(end).saturating_sub(at);
            children_wait = cw;
            if let Some(p) = waits.last_mut() {
                p.1 = p.1.saturating_add(wait);
            }
        }
        if let Some(p) = open.stack.last_mut() {
            p.children = p.children.saturating_add(dur);
        }
        v.call(&Call {
            func: o.func,
            depth: open.stack.len(),
            start: o.start,
            end,
            children: o.children,
            recursive,
            incomplete,
            wait,
            children_wait,
            continued: o.continued,
            suspended: *suspending > 0 && {
                *suspending -= 1;
                true
            },
        });
    };
    let enter = |open: &mut OpenCalls,
                 continuing: &mut u64,
                 waits: &mut Vec<(u64, u64)>,
                 v: &mut dyn Visitor,
                 off: &mut Option<(&mut OffCpuClock, usize)>,
                 func: u64,
                 tsc: u64,
                 depth| {
        announce(off, v, tsc, open.stack.len());
        v.enter(func, depth, tsc);
        if SCHED && let Some((c, _)) = off.as_mut() {
            waits.push((c.at(tsc), 0));
        }
        let continued = *continuing > 0;
        *continuing = continuing.saturating_sub(1);
        open.push(Open {
            func,
            start: tsc,
            children: 0,
            continued,
        });
    };
    let w = &mut waits;
    // Entries still to come that continue suspended calls, exits that
    // suspend calls (after a context-switch record).
    let (mut cont, mut susp) = (0u64, 0u64);
    let (c, s) = (&mut cont, &mut susp);
    loop {
        match events.step() {
            Step::Enter { func, tsc, depth } => enter(open, c, w, v, off, func, tsc, depth),
            Step::Exit { tsc } => exit(open, s, w, v, off, tsc, false),
            Step::Other => match events.next() {
                None => break,
                Some(Event::Enter { func, tsc, depth }) => {
                    enter(open, c, w, v, off, func, tsc, depth)
                }
                Some(Event::Exit { tsc, incomplete }) => exit(open, s, w, v, off, tsc, incomplete),
                Some(Event::Switch { resumed, calls }) => {
                    if resumed {
                        *c = calls;
                    } else {
                        *s = calls;
                    }
                }
                Some(Event::Marker { tsc, name, text }) => {
                    announce(off, v, tsc, open.stack.len());
                    v.marker(&name, &text, tsc)
                }
                Some(Event::Args(_) | Event::RetVal(_)) => {}
            },
        }
    }
    // Intervals after the thread's last event.
    announce(off, v, u64::MAX, open.stack.len());
}

/// A normalised event of one thread: entries and exits with absolute
/// timestamps, gaps already resolved into synthetic exits (of calls whose
/// exit was lost) and synthetic entries (of calls whose entry was lost,
/// function 0), and open calls closed at the end of the stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// A call was entered; `depth` is its depth (0 = outermost).
    Enter {
        /// Function key (0 = unknown, entry lost).
        func: u64,
        /// Entry TSC.
        tsc: u64,
        /// Depth of the call.
        depth: usize,
    },
    /// The innermost open call returned.
    Exit {
        /// Exit TSC.
        tsc: u64,
        /// The exit was not recorded (lost in a gap or the stream ended).
        incomplete: bool,
    },
    /// Argument values of the innermost open call.
    Args(Vec<i64>),
    /// Return value of the innermost open call (its exit comes next).
    RetVal(i64),
    /// A marker event.
    Marker {
        /// TSC.
        tsc: u64,
        /// Marker name.
        name: String,
        /// Its arguments, formatted.
        text: String,
    },
    /// A user-level context switch (`swapcontext`, `setcontext`): the
    /// `calls` exits that follow suspend open calls, or (`resumed`) the
    /// `calls` entries that follow continue calls suspended earlier.
    Switch {
        /// Entries of resumed calls follow (else exits of suspended ones).
        resumed: bool,
        /// How many.
        calls: u64,
    },
}

/// A point of a thread walk to resume from: a stream position and the
/// call depth there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Resume {
    /// Position in the stream.
    pub pos: fntrace_format::StreamPos,
    /// Open calls at that point.
    pub depth: u32,
}

/// Iterator of one thread's [`Event`]s with bounded memory (one decoded
/// chunk and the open depth). Thread facts seen on the way accumulate in
/// [`Events::summary`].
pub struct Events<'t> {
    reader: ThreadReader<'t>,
    depth: usize,
    pending: std::collections::VecDeque<Event>,
    /// An item [`Events::step`] read but left to [`Iterator::next`].
    fetched: Option<Option<FastItem>>,
    done: bool,
    start_tsc: u64,
    sum: ThreadSummary,
}

impl<'t> Events<'t> {
    /// The events of thread `tid`.
    pub fn new(trace: &'t Trace, tid: u32) -> Events<'t> {
        Events {
            reader: trace.stream(tid),
            depth: 0,
            pending: Default::default(),
            fetched: None,
            done: false,
            start_tsc: trace.header().start_tsc,
            sum: ThreadSummary {
                tid,
                first_tsc: u64::MAX,
                ..Default::default()
            },
        }
    }

    /// The events of thread `tid` from a point [`Events::resume_point`]
    /// returned (or a chunk start with its depth): the same events a
    /// whole-stream walk yields after that point.
    pub fn resume(trace: &'t Trace, tid: u32, at: Resume) -> Events<'t> {
        let mut e = Events::new(trace, tid);
        e.reader = trace.stream_at(tid, at.pos);
        e.depth = at.depth as usize;
        // TSCs only grow along a stream: calls still open at its end
        // close at its last timed record, as in a whole-stream walk,
        // even when that record lies before `at`.
        e.sum.last_tsc = at.pos.tsc;
        // A point inside a gap (some of its synthetic exits or entries
        // already returned): the rest of them come first.
        if at.pos.offset == 0
            && let Some(&d) = trace.checked_chunk_depths(tid).get(at.pos.chunk as usize)
            && d != at.depth
        {
            e.other(StreamItem::Gap {
                tsc: at.pos.tsc,
                depth: d,
            });
        }
        e
    }

    /// Where this walk stands, to resume it later with [`Events::resume`];
    /// `None` at the end and while events other than a gap's synthetic
    /// exits and entries are queued.
    pub fn resume_point(&self) -> Option<Resume> {
        if self.fetched.is_some() || self.done {
            return None;
        }
        let mut pos = self.reader.position()?;
        let mut depth = self.depth;
        if !self.pending.is_empty() {
            // Inside a gap, which is always in front of a chunk's first
            // record: the depth the caller has seen, and the gap's TSC
            // (the chunk's own base TSC is read from its header).
            if pos.offset != 0 {
                return None;
            }
            for ev in &self.pending {
                match ev {
                    Event::Enter { tsc, .. } => {
                        depth -= 1;
                        pos.tsc = *tsc;
                    }
                    Event::Exit { tsc, .. } => {
                        depth += 1;
                        pos.tsc = *tsc;
                    }
                    _ => return None,
                }
            }
        }
        Some(Resume {
            pos,
            depth: u32::try_from(depth).ok()?,
        })
    }

    /// Chunks of the stream loaded so far (see
    /// [`ThreadReader::chunks_loaded`]).
    #[inline]
    pub fn chunks_loaded(&self) -> usize {
        self.reader.chunks_loaded()
    }

    /// The thread id.
    pub fn tid(&self) -> u32 {
        self.sum.tid
    }

    /// What was learnt about the thread so far (complete once the iterator
    /// is exhausted).
    pub fn summary(&self) -> &ThreadSummary {
        &self.sum
    }

    /// Consumes the iterator, returning the thread summary.
    pub fn into_summary(mut self) -> ThreadSummary {
        if self.sum.first_tsc == u64::MAX {
            self.sum.first_tsc = self.start_tsc;
            self.sum.last_tsc = self.sum.first_tsc;
        }
        self.sum.damage = self.reader.take_damage();
        self.sum
    }

    fn see(&mut self, tsc: u64) {
        self.sum.first_tsc = self.sum.first_tsc.min(tsc);
        self.sum.last_tsc = self.sum.last_tsc.max(tsc);
    }

    fn exit(&mut self, tsc: u64, incomplete: bool) -> Event {
        self.depth -= 1;
        if incomplete {
            self.sum.incomplete += 1;
        }
        Event::Exit { tsc, incomplete }
    }

    /// Handles an item that is not a plain entry or exit (gaps, thread
    /// records), queueing the events it implies.
    fn other(&mut self, item: StreamItem) {
        let rec = match item {
            StreamItem::Record(r) => r,
            StreamItem::Gap { tsc, depth } => {
                let depth = depth as usize;
                while self.depth > depth {
                    let e = self.exit(tsc, true);
                    self.pending.push_back(e);
                }
                while self.depth < depth {
                    self.pending.push_back(Event::Enter {
                        func: 0,
                        tsc,
                        depth: self.depth,
                    });
                    self.depth += 1;
                }
                return;
            }
        };
        match rec {
            Record::ThreadStart { tsc, name } => {
                self.see(tsc);
                if self.sum.name.is_empty() {
                    self.sum.name = name;
                }
            }
            Record::ThreadExit { tsc, name } => {
                self.see(tsc);
                self.sum.name = name;
                self.sum.exited = true;
            }
            Record::Lost { tsc, count } => {
                self.see(tsc);
                self.sum.lost += count;
            }
            Record::Args { values } if self.depth > 0 => {
                self.pending.push_back(Event::Args(values));
            }
            Record::RetVal { value } if self.depth > 0 => {
                self.pending.push_back(Event::RetVal(value));
            }
            Record::Marker { tsc, name, text } => {
                self.see(tsc);
                self.pending.push_back(Event::Marker { tsc, name, text });
            }
            Record::ContextSwitch { resumed, calls } => {
                if !resumed {
                    self.sum.switches += 1;
                }
                self.pending.push_back(Event::Switch { resumed, calls });
            }
            _ => {}
        }
    }
}

impl Events<'_> {
    /// Counts a recorded entry; returns its depth.
    fn entered(&mut self, tsc: u64) -> usize {
        self.see(tsc);
        self.sum.events += 1;
        self.depth += 1;
        self.depth - 1
    }

    fn enter(&mut self, func: u64, tsc: u64) -> Event {
        let depth = self.entered(tsc);
        Event::Enter { func, tsc, depth }
    }

    /// Everything but a plain entry or matched exit with nothing pending:
    /// queued events, the end of the stream, unmatched exits, records and
    /// gaps. `fetched` is an item [`Iterator::next`] already read (then
    /// nothing was pending).
    #[inline(never)]
    fn next_slow(&mut self, mut fetched: Option<Option<FastItem>>) -> Option<Event> {
        if fetched.is_none() {
            if let Some(e) = self.pending.pop_front() {
                return Some(e);
            }
            if self.done {
                return None;
            }
        }
        loop {
            let item = match fetched.take() {
                Some(item) => item,
                None => self.reader.next_fast(),
            };
            let Some(item) = item else {
                // Close what is still open at the last timestamp seen.
                let end = self.sum.last_tsc;
                while self.depth > 0 {
                    let e = self.exit(end, true);
                    self.pending.push_back(e);
                }
                self.done = true;
                return self.pending.pop_front();
            };
            match item {
                FastItem::Entry { func, tsc } => return Some(self.enter(func, tsc)),
                FastItem::Exit { tsc } => {
                    self.see(tsc);
                    self.sum.events += 1;
                    if self.depth == 0 {
                        self.sum.unmatched_exits += 1;
                        continue;
                    }
                    return Some(self.exit(tsc, false));
                }
                FastItem::Other(other) => {
                    self.other(*other);
                    if let Some(e) = self.pending.pop_front() {
                        return Some(e);
                    }
                }
            }
        }
    }
}

/// One step of [`Events::step`]: the two common events as plain values
/// (no [`Event`] moves through memory), or `Other` when the next event is
/// anything else (fetch it with [`Iterator::next`]).
#[derive(Debug, Clone, Copy)]
pub enum Step {
    /// A call was entered at `depth`.
    Enter {
        /// Function key.
        func: u64,
        /// Entry TSC.
        tsc: u64,
        /// Depth of the call.
        depth: usize,
    },
    /// The innermost open call returned (a recorded exit).
    Exit {
        /// Exit TSC.
        tsc: u64,
    },
    /// Call [`Iterator::next`] for the next event (or the end).
    Other,
}

impl Events<'_> {
    /// The next event if it is a plain entry or recorded exit; the same
    /// sequence as [`Iterator::next`], faster for loops that handle those
    /// two inline.
    #[inline]
    pub fn step(&mut self) -> Step {
        if self.pending.is_empty() && !self.done && self.fetched.is_none() {
            let item = self.reader.next_fast();
            match item {
                Some(FastItem::Entry { func, tsc }) => {
                    let depth = self.entered(tsc);
                    return Step::Enter { func, tsc, depth };
                }
                Some(FastItem::Exit { tsc }) if self.depth > 0 => {
                    self.see(tsc);
                    self.sum.events += 1;
                    self.depth -= 1;
                    return Step::Exit { tsc };
                }
                _ => self.fetched = Some(item),
            }
        }
        Step::Other
    }
}

impl Iterator for Events<'_> {
    type Item = Event;

    /// [`Events::step`]'s common case, inlined into the caller's loop;
    /// the rest is `Events::next_slow`.
    #[inline]
    fn next(&mut self) -> Option<Event> {
        match self.step() {
            Step::Enter { func, tsc, depth } => Some(Event::Enter { func, tsc, depth }),
            Step::Exit { tsc } => Some(Event::Exit {
                tsc,
                incomplete: false,
            }),
            Step::Other => {
                let fetched = self.fetched.take();
                self.next_slow(fetched)
            }
        }
    }
}

/// Converts TSC ticks to nanoseconds.
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    hz: u64,
    start: u64,
}

impl Clock {
    /// The clock of a trace.
    pub fn of(trace: &Trace) -> Clock {
        Clock {
            hz: trace.tsc_hz().max(1),
            start: trace.header().start_tsc,
        }
    }

    /// Ticks to nanoseconds.
    pub fn ns(&self, ticks: u64) -> u64 {
        (ticks as u128 * 1_000_000_000 / self.hz as u128).min(u64::MAX as u128) as u64
    }

    /// Nanoseconds since the start of the recording.
    pub fn since_start(&self, tsc: u64) -> u64 {
        self.ns(tsc.saturating_sub(self.start))
    }
}

/// Levels of a call tree drawn as indentation; deeper calls are drawn at
/// this indentation with their level in brackets, so that a line's length
/// stays bounded however deep the stack (a deep recursion, or a depth read
/// from a damaged file).
pub const MAX_INDENT: usize = 128;

/// The indentation of a call-tree line at `level` (two spaces a level, at
/// most [`MAX_INDENT`] levels; deeper levels end with `[LEVEL] `).
pub fn indent(level: usize) -> String {
    if level <= MAX_INDENT {
        "  ".repeat(level)
    } else {
        format!("{}[{level}] ", "  ".repeat(MAX_INDENT))
    }
}

/// Formats nanoseconds like `12.345 us`.
pub fn fmt_ns(ns: u64) -> String {
    let f = ns as f64;
    if ns < 1_000 {
        format!("{ns} ns")
    } else if ns < 1_000_000 {
        format!("{:.3} us", f / 1e3)
    } else if ns < 1_000_000_000 {
        format!("{:.3} ms", f / 1e6)
    } else {
        format!("{:.3}  s", f / 1e9)
    }
}

/// Parses a duration such as `10us`, `1.5ms`, `2s`, `300ns` (bare numbers
/// are nanoseconds).
pub fn parse_duration(s: &str) -> Option<u64> {
    fntrace_rt::config::parse_duration(s, 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Recursion as seen by the bounded scan plus the deep-frame counts
    /// equals a scan of the whole stack, for random walks that go well
    /// past `SCAN_DEPTH`.
    #[test]
    fn recursion_of_deep_stacks_matches_a_full_scan() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        // Exits answered "recursive" only by a frame beyond the scan, and
        // "not recursive" under a stack deeper than the scan.
        let (mut deep_only, mut plain_deep) = (0, 0);
        for funcs in [2u64, 40, 1000, 100_000] {
            let mut open = OpenCalls::default();
            let mut naive: Vec<u64> = vec![];
            for _ in 0..200_000 {
                // Drift towards a depth of about 300.
                let p = if naive.len() < 300 { 0.6 } else { 0.4 };
                if naive.is_empty() || rng.gen_bool(p) {
                    let func = rng.gen_range(0..funcs);
                    naive.push(func);
                    open.push(Open {
                        func,
                        start: 0,
                        children: 0,
                        continued: false,
                    });
                } else {
                    let func = naive.pop().unwrap();
                    let want = naive.contains(&func);
                    let (o, got) = open.pop().unwrap();
                    assert_eq!((o.func, got), (func, want), "depth {}", naive.len());
                    let n = naive.len();
                    if want && !naive[..n.min(SCAN_DEPTH)].contains(&func) {
                        deep_only += 1;
                    }
                    if !want && n > SCAN_DEPTH {
                        plain_deep += 1;
                    }
                }
                assert_eq!(open.stack.len(), naive.len());
            }
        }
        // Both cases the counts decide occurred, so the comparison meant
        // something.
        assert!(
            deep_only > 1000 && plain_deep > 1000,
            "{deep_only} {plain_deep}"
        );
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("10us"), Some(10_000));
        assert_eq!(parse_duration("1.5ms"), Some(1_500_000));
        assert_eq!(parse_duration("7"), Some(7));
        assert_eq!(parse_duration("3 weeks"), None);
    }

    #[test]
    fn off_cpu_clock_counts_whole_and_partial_intervals() {
        let mut c = OffCpuClock {
            iv: vec![(10, 20, false), (30, 35, true), (50, 100, false)],
            ..OffCpuClock::default()
        };
        assert_eq!(c.at(5), 0);
        assert_eq!(c.at(15), 5);
        assert_eq!(c.at(20), 10);
        assert_eq!(c.at(32), 12);
        assert_eq!(c.at(40), 15);
        // Earlier than the last read: reads as the last read.
        assert_eq!(c.at(1), 15);
        assert_eq!(c.at(75), 40);
        assert_eq!(c.at(1000), 65);
    }
}
