//! Call reconstruction: walks a thread stream with a stack, pairing entries
//! with exits, and hands every completed call (with its children's time) to
//! a visitor. Streams that end with open calls (process exit inside them,
//! crash, stop) close them at the thread's last timestamp; gaps from damage
//! resynchronise the stack to the depth the writer recorded.

use fntrace_format::{Record, StreamItem, Trace};

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
}

/// Receives calls of one thread.
pub trait Visitor {
    /// A call was entered (its exit is not known yet).
    fn enter(&mut self, _func: u64, _depth: usize, _tsc: u64) {}
    /// A call completed.
    fn call(&mut self, call: &Call);
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
}

struct Open {
    func: u64,
    start: u64,
    children: u64,
}

/// Walks one thread's stream.
pub fn walk_thread(trace: &Trace, tid: u32, v: &mut dyn Visitor) -> ThreadSummary {
    let mut sum = ThreadSummary {
        tid,
        first_tsc: u64::MAX,
        ..Default::default()
    };
    let mut stack: Vec<Open> = Vec::new();
    let mut reader = trace.stream(tid);
    let close = |stack: &mut Vec<Open>, v: &mut dyn Visitor, end: u64, incomplete: bool| {
        let o = stack.pop().expect("non-empty");
        let dur = end.saturating_sub(o.start);
        let recursive = stack.iter().any(|p| p.func == o.func);
        if let Some(p) = stack.last_mut() {
            p.children += dur;
        }
        v.call(&Call {
            func: o.func,
            depth: stack.len(),
            start: o.start,
            end: end.max(o.start),
            children: o.children,
            recursive,
            incomplete,
        });
    };
    while let Some(item) = reader.next_item() {
        let rec = match item {
            StreamItem::Record(r) => r,
            StreamItem::Gap { tsc, depth } => {
                while stack.len() > depth as usize {
                    close(&mut stack, v, tsc, true);
                    sum.incomplete += 1;
                }
                while stack.len() < depth as usize {
                    // Calls whose entry was lost: unknown function 0.
                    stack.push(Open {
                        func: 0,
                        start: tsc,
                        children: 0,
                    });
                }
                continue;
            }
        };
        let tsc = match &rec {
            Record::Entry { tsc, .. }
            | Record::Exit { tsc }
            | Record::TailExit { tsc }
            | Record::ThreadStart { tsc, .. }
            | Record::ThreadExit { tsc, .. }
            | Record::Lost { tsc, .. } => *tsc,
            _ => continue,
        };
        sum.first_tsc = sum.first_tsc.min(tsc);
        sum.last_tsc = sum.last_tsc.max(tsc);
        match rec {
            Record::Entry { func, tsc } => {
                sum.events += 1;
                v.enter(func, stack.len(), tsc);
                stack.push(Open {
                    func,
                    start: tsc,
                    children: 0,
                });
            }
            Record::Exit { tsc } | Record::TailExit { tsc } => {
                sum.events += 1;
                if stack.is_empty() {
                    sum.unmatched_exits += 1;
                } else {
                    close(&mut stack, v, tsc, false);
                }
            }
            Record::ThreadStart { name, .. } if sum.name.is_empty() => sum.name = name,
            Record::ThreadExit { name, .. } => {
                sum.name = name;
                sum.exited = true;
            }
            Record::Lost { count, .. } => sum.lost += count,
            _ => {}
        }
    }
    let end = sum.last_tsc;
    while !stack.is_empty() {
        close(&mut stack, v, end, true);
        sum.incomplete += 1;
    }
    if sum.first_tsc == u64::MAX {
        sum.first_tsc = trace.header().start_tsc;
        sum.last_tsc = sum.first_tsc;
    }
    sum.damage = reader.take_damage();
    sum
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
        (ticks as u128 * 1_000_000_000 / self.hz as u128) as u64
    }

    /// Nanoseconds since the start of the recording.
    pub fn since_start(&self, tsc: u64) -> u64 {
        self.ns(tsc.saturating_sub(self.start))
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
    let s = s.trim();
    let i = s.find(|c: char| c.is_ascii_alphabetic()).unwrap_or(s.len());
    let (num, unit) = s.split_at(i);
    let v: f64 = num.trim().parse().ok()?;
    let mult = match unit.trim() {
        "" | "ns" => 1.0,
        "us" => 1e3,
        "ms" => 1e6,
        "s" => 1e9,
        _ => return None,
    };
    (v >= 0.0).then_some((v * mult) as u64)
}
