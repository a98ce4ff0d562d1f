//! `fntrace export --format html`: one self-contained offline HTML page of
//! the selected calls: summary, a per-thread timeline (zoomable and
//! pannable, one lane per thread with its call slices by depth and its
//! markers), a flame graph per thread with a thread selector (all threads
//! merged as one choice), the top functions and the call tree. The page's
//! script and style are the assets next to this file (`html/page.js`,
//! `html/page.css`), inlined; the data is embedded as JSON with the
//! numeric arrays in base64 (little-endian typed arrays), so nothing is
//! fetched.
//!
//! What is embedded is bounded, and the page says what was left out: the
//! timeline keeps at most [`MAX_SLICES`] calls, the longest ones (a
//! duration cut-off chosen while streaming; a caller always lasts at least
//! as long as its callees, so every kept call has its callers), calls
//! deeper than [`MAX_ROWS`] levels, at most [`MAX_MARKERS`] markers, and
//! flame-graph paths under 1/[`FLAME_MIN_PART`] of their thread's time
//! (they would be far below a pixel wide), and at most [`MAX_OFFCPU`]
//! off-CPU intervals.
//!
//! With off-CPU records (`record --sched`), each interval a thread spent
//! off CPU inside a selected call is drawn as its own slice, one row below
//! the innermost call it happened in (grey when the thread blocked, amber
//! when it was preempted), and the flame graph can be weighted by wall,
//! on-CPU or off-CPU time (each node carries the off-CPU time inside its
//! calls, as `--weight` does for the folded stacks).

use rustc_hash::FxHashMap as HashMap;
use std::borrow::Cow;
use std::io::{self, Write};

use fntrace_format::Trace;

use crate::analysis::{Clock, Event, fmt_ns};
use crate::select::{SelectedEvents, Selection};
use crate::symbols::Symbolizer;

/// Most calls drawn on the timeline (the longest are kept).
pub const MAX_SLICES: usize = 1 << 20;
/// Deepest level drawn on the timeline (levels 0 to `MAX_ROWS - 1`).
pub const MAX_ROWS: usize = 64;
/// Most markers shown on the timeline.
pub const MAX_MARKERS: usize = 100_000;
/// Most off-CPU intervals shown on the timeline (the first ones).
pub const MAX_OFFCPU: usize = 200_000;
/// Flame-graph paths with less than 1/this of their thread's time are left out.
pub const FLAME_MIN_PART: u64 = 200_000;
/// Deepest flame-graph path (as for the folded stacks).
const MAX_FLAME_DEPTH: usize = super::MAX_FOLDED_DEPTH;

const PAGE_JS: &str = include_str!("html/page.js");
const PAGE_CSS: &str = include_str!("html/page.css");

/// Standard base64.
fn base64(data: &[u8]) -> String {
    const T: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(data.len().div_ceil(3) * 4);
    for c in data.chunks(3) {
        let b = [c[0], *c.get(1).unwrap_or(&0), *c.get(2).unwrap_or(&0)];
        let n = u32::from(b[0]) << 16 | u32::from(b[1]) << 8 | u32::from(b[2]);
        for i in 0..4 {
            if i <= c.len() {
                out.push(T[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// Escapes text for HTML.
fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// A long C++ or Rust name shortened for display: template and generic
/// arguments elided (`Vec<…>`), C++ parameter lists elided (`f(…)`), and
/// in a Rust qualified path (`<a::B<T> as c::D>::f`) the type and trait
/// reduced to their last path component (`<B<…> as D>::f`). Operators
/// (`operator<<`, `operator()`, `->`) are kept. The full name is shown on
/// hover.
pub fn short_name(name: &str) -> Cow<'_, str> {
    if !name.contains(['<', '(']) {
        return Cow::Borrowed(name);
    }
    let b = name.as_bytes();
    let mut out = String::with_capacity(name.len());
    let mut i = 0;
    // The index after the bracket matching the one at `i` (or the end).
    let close = |i: usize, open: u8, shut: u8| {
        let mut d = 0usize;
        let mut j = i;
        while j < b.len() {
            if b[j] == open {
                d += 1;
            } else if b[j] == shut && !(shut == b'>' && j > 0 && b[j - 1] == b'-') {
                d -= 1;
                if d == 0 {
                    return j + 1;
                }
            }
            j += 1;
        }
        b.len()
    };
    while i < b.len() {
        let c = b[i];
        if out.ends_with("operator") {
            // The operator's own characters, verbatim.
            let n = name[i..]
                .find(|ch: char| !"<>=!+-*/%^&|~[]".contains(ch))
                .unwrap_or(name.len() - i);
            let n = if name[i..].starts_with("()") { 2 } else { n };
            out.push_str(&name[i..i + n.max(1)]);
            i += n.max(1);
            continue;
        }
        match c {
            b'<' => {
                let end = close(i, b'<', b'>');
                let qualified = out.is_empty() || out.ends_with("::");
                let inner = &name[i + 1..end.saturating_sub(1).max(i + 1)];
                if qualified && let Some((ty, tr)) = inner.split_once(" as ") {
                    let last = |s: &str| {
                        let s = short_name(s).into_owned();
                        match s.rsplit_once("::") {
                            Some((_, l)) if !s.contains(' ') => l.to_string(),
                            _ => s,
                        }
                    };
                    out.push('<');
                    out.push_str(&last(ty));
                    out.push_str(" as ");
                    out.push_str(&last(tr));
                    out.push('>');
                } else if qualified {
                    out.push('<');
                    out.push_str(&short_name(inner));
                    out.push('>');
                } else {
                    out.push_str("<…>");
                }
                i = end;
            }
            // A parameter list follows a name, `>` or an operator.
            b'(' if out.chars().last().is_some_and(|p| !" (,:{*&".contains(p)) => {
                let end = close(i, b'(', b')');
                out.push_str(if end == i + 2 { "()" } else { "(…)" });
                i = end;
            }
            _ => {
                let ch = name[i..].chars().next().unwrap_or(' ');
                out.push(ch);
                i += ch.len_utf8();
            }
        }
    }
    Cow::Owned(out)
}

/// A call on the timeline.
#[derive(Clone, Copy)]
struct Slice {
    start: u64,
    dur: u64,
    name: u32,
    depth: u16,
}

/// An interval a thread spent off CPU, inside the call `func` at depth
/// `depth - 1` (drawn at `depth`).
struct OffSlice {
    start: u64,
    dur: u64,
    depth: u16,
    func: u32,
    preempted: bool,
}

/// A node of a thread's calling-context tree (its flame graph).
struct FlameNode {
    parent: u32,
    name: u32,
    total: u64,
    calls: u64,
    /// Off-CPU ticks inside the node's calls (children included).
    wait: u64,
}

/// What the page shows of one thread.
struct ThreadData {
    tid: u32,
    name: String,
    calls: u64,
    slices: Vec<Slice>,
    markers: Vec<(u64, u32, String)>,
    /// Off-CPU intervals inside selected calls, in time order.
    off: Vec<OffSlice>,
    /// Node 0 is the root (the thread).
    flame: Vec<FlameNode>,
}

/// Buckets of durations: four per power of two (a quarter-octave
/// cut-off keeps at least 80% of the cap), growing with the duration.
const BUCKETS: usize = 256;

/// The bucket of a duration in ticks.
fn bucket(ticks: u64) -> usize {
    if ticks < 4 {
        return ticks as usize;
    }
    let l = 63 - ticks.leading_zeros() as usize;
    4 * (l - 1) + ((ticks >> (l - 2)) & 3) as usize
}

/// The shortest duration in ticks of bucket `b` (and of every later one).
fn bucket_start(b: usize) -> u64 {
    if b < 4 {
        return b as u64;
    }
    let (l, f) = (b / 4 + 1, (b % 4) as u64);
    (4 + f) << (l - 2)
}

/// Collects the page's data of the selected calls, keeping at most
/// [`MAX_SLICES`] slices (the longest).
struct Collector<'t> {
    sym: Symbolizer<'t>,
    names: Vec<String>,
    name_of: HashMap<u64, u32>,
    marker_names: HashMap<String, u32>,
    /// Slices kept per bucket of their duration.
    hist: [usize; BUCKETS],
    kept: usize,
    /// Slices shorter than `bucket_start(min_bucket)` ticks are left out.
    min_bucket: usize,
    markers: usize,
    dropped_markers: u64,
    deep: u64,
    /// Off-CPU intervals kept, and left out past [`MAX_OFFCPU`].
    offcpu: usize,
    dropped_offcpu: u64,
    threads: Vec<ThreadData>,
}

impl Collector<'_> {
    fn name(&mut self, func: u64) -> u32 {
        if let Some(&n) = self.name_of.get(&func) {
            return n;
        }
        let n = self.names.len() as u32;
        self.names.push(self.sym.name(func).to_string());
        self.name_of.insert(func, n);
        n
    }

    /// Raises the cut-off until at most [`MAX_SLICES`] slices are kept.
    fn bound(&mut self) {
        if self.kept <= MAX_SLICES {
            return;
        }
        while self.kept > MAX_SLICES {
            self.kept -= self.hist[self.min_bucket];
            self.hist[self.min_bucket] = 0;
            self.min_bucket += 1;
        }
        let m = self.min_bucket;
        for t in &mut self.threads {
            t.slices.retain(|s| bucket(s.dur) >= m);
        }
    }

    fn thread(&mut self, trace: &Trace, tid: u32, sel: &Selection) {
        let mut t = ThreadData {
            tid,
            name: String::new(),
            calls: 0,
            slices: vec![],
            markers: vec![],
            off: vec![],
            flame: vec![FlameNode {
                parent: 0,
                name: u32::MAX,
                total: 0,
                calls: 0,
                wait: 0,
            }],
        };
        let mut child: HashMap<(u32, u32), u32> = HashMap::default();
        // Open calls: (name, entry, flame node).
        let mut stack: Vec<(u32, u64, u32)> = vec![];
        let mut events = SelectedEvents::new(trace, tid, sel);
        // Off-CPU intervals (TSC), in time order, each given to the call
        // open when it began.
        let offcpu = trace.offcpu_tsc(tid);
        let mut next_off = 0;
        for ev in events.by_ref() {
            let now = match &ev {
                Event::Enter { tsc, .. } | Event::Exit { tsc, .. } | Event::Marker { tsc, .. } => {
                    Some(*tsc)
                }
                Event::Args(_) | Event::RetVal(_) | Event::Switch { .. } => None,
            };
            while let Some(&(out, back, preempted)) = offcpu.get(next_off)
                && now.is_some_and(|now| out <= now)
            {
                next_off += 1;
                flame_wait(&mut t.flame, &stack, back.saturating_sub(out));
                self.off_slice(
                    &mut t,
                    stack.last().map(|f| f.0),
                    stack.len(),
                    out,
                    back,
                    preempted,
                );
            }
            match ev {
                Event::Enter { func, tsc, .. } => {
                    let name = self.name(func);
                    let parent = stack.last().map_or(0, |f| f.2);
                    let node = if stack.len() >= MAX_FLAME_DEPTH {
                        parent
                    } else {
                        let flame = &mut t.flame;
                        *child.entry((parent, name)).or_insert_with(|| {
                            flame.push(FlameNode {
                                parent,
                                name,
                                total: 0,
                                calls: 0,
                                wait: 0,
                            });
                            (flame.len() - 1) as u32
                        })
                    };
                    stack.push((name, tsc, node));
                }
                Event::Exit { tsc, .. } => {
                    let Some((name, start, node)) = stack.pop() else {
                        continue;
                    };
                    let dur = tsc.saturating_sub(start);
                    t.calls += 1;
                    let n = &mut t.flame[node as usize];
                    // A call cut at the flame depth counts in its ancestor.
                    if stack.len() < MAX_FLAME_DEPTH {
                        n.total = n.total.saturating_add(dur);
                        n.calls += 1;
                    }
                    if stack.is_empty() {
                        t.flame[0].total = t.flame[0].total.saturating_add(dur);
                        t.flame[0].calls += 1;
                    }
                    let depth = stack.len();
                    if depth >= MAX_ROWS {
                        self.deep += 1;
                    } else if bucket(dur) >= self.min_bucket {
                        t.slices.push(Slice {
                            start,
                            dur,
                            name,
                            depth: depth as u16,
                        });
                        self.hist[bucket(dur)] += 1;
                        self.kept += 1;
                        if self.kept > MAX_SLICES {
                            self.threads.push(t);
                            self.bound();
                            t = self.threads.pop().expect("pushed");
                        }
                    }
                }
                Event::Marker { tsc, name, text } => {
                    if self.markers >= MAX_MARKERS {
                        self.dropped_markers += 1;
                        continue;
                    }
                    self.markers += 1;
                    let n = match self.marker_names.get(&name) {
                        Some(&n) => n,
                        None => {
                            let n = self.names.len() as u32;
                            self.names.push(name.clone());
                            self.marker_names.insert(name, n);
                            n
                        }
                    };
                    t.markers.push((tsc, n, text));
                }
                Event::Args(_) | Event::RetVal(_) | Event::Switch { .. } => {}
            }
        }
        // Intervals after the last event: inside the calls still open.
        for &(out, back, preempted) in &offcpu[next_off.min(offcpu.len())..] {
            flame_wait(&mut t.flame, &stack, back.saturating_sub(out));
            self.off_slice(
                &mut t,
                stack.last().map(|f| f.0),
                stack.len(),
                out,
                back,
                preempted,
            );
        }
        t.name = events.into_summary().name;
        self.threads.push(t);
    }

    /// Keeps an off-CPU interval `[out, back)` of `t` that began inside
    /// call `func` at `depth - 1` (none: outside every selected call, not
    /// shown).
    fn off_slice(
        &mut self,
        t: &mut ThreadData,
        func: Option<u32>,
        depth: usize,
        out: u64,
        back: u64,
        preempted: bool,
    ) {
        let Some(func) = func else { return };
        if depth >= MAX_ROWS {
            self.deep += 1;
        } else if self.offcpu >= MAX_OFFCPU {
            self.dropped_offcpu += 1;
        } else {
            self.offcpu += 1;
            t.off.push(OffSlice {
                start: out,
                dur: back.saturating_sub(out),
                depth: depth as u16,
                func,
                preempted,
            });
        }
    }
}

/// Adds an off-CPU interval of `ticks` to the flame nodes of the open
/// calls `stack` (name, entry, node) and to the thread's root; nothing
/// outside every selected call. A call cut at the flame depth shares its
/// ancestor's node, which counts the interval once.
fn flame_wait(flame: &mut [FlameNode], stack: &[(u32, u64, u32)], ticks: u64) {
    if stack.is_empty() {
        return;
    }
    flame[0].wait = flame[0].wait.saturating_add(ticks);
    let mut last = u32::MAX;
    for &(_, _, node) in stack {
        if node != last {
            let n = &mut flame[node as usize];
            n.wait = n.wait.saturating_add(ticks);
            last = node;
        }
    }
}

/// Little-endian bytes of a slice of numbers, base64.
fn b64_f64(v: impl Iterator<Item = f64>) -> String {
    let mut b = vec![];
    for x in v {
        b.extend_from_slice(&x.to_le_bytes());
    }
    base64(&b)
}

fn b64_u32(v: impl Iterator<Item = u32>) -> String {
    let mut b = vec![];
    for x in v {
        b.extend_from_slice(&x.to_le_bytes());
    }
    base64(&b)
}

/// The embedded data of one thread, as JSON.
fn thread_json(t: &mut ThreadData, clock: &Clock) -> serde_json::Value {
    // Timeline: by depth, then by start (calls at one depth never overlap).
    t.slices.sort_unstable_by_key(|s| (s.depth, s.start));
    let rows = t.slices.last().map_or(0, |s| s.depth as usize + 1);
    let mut offsets = vec![0usize; rows + 1];
    for s in &t.slices {
        offsets[s.depth as usize + 1] += 1;
    }
    for i in 1..offsets.len() {
        offsets[i] += offsets[i - 1];
    }
    // Flame graph: paths above the threshold (parents come before their
    // children, and a child never has more time than its parent).
    let min = t.flame[0].total / FLAME_MIN_PART;
    let mut map = vec![u32::MAX; t.flame.len()];
    let mut kept: Vec<usize> = vec![];
    map[0] = 0;
    kept.push(0);
    let mut pruned = 0u64;
    for (i, n) in t.flame.iter().enumerate().skip(1) {
        if map[n.parent as usize] != u32::MAX && n.total >= min.max(1) {
            map[i] = kept.len() as u32;
            kept.push(i);
        } else {
            pruned += 1;
        }
    }
    let f = &t.flame;
    serde_json::json!({
        "tid": t.tid,
        "name": t.name,
        "calls": t.calls,
        "rows": offsets,
        "start": b64_f64(t.slices.iter().map(|s| clock.since_start(s.start) as f64)),
        "dur": b64_f64(t.slices.iter().map(|s| clock.ns(s.dur) as f64)),
        "fn": b64_u32(t.slices.iter().map(|s| s.name)),
        "off": {
            "start": b64_f64(t.off.iter().map(|o| clock.since_start(o.start) as f64)),
            "dur": b64_f64(t.off.iter().map(|o| clock.ns(o.dur) as f64)),
            "depth": b64_u32(t.off.iter().map(|o| u32::from(o.depth))),
            "fn": b64_u32(t.off.iter().map(|o| o.func)),
            "pre": b64_u32(t.off.iter().map(|o| u32::from(o.preempted))),
        },
        "markers": t.markers.iter().map(|(tsc, n, text)| {
            serde_json::json!([clock.since_start(*tsc), n, text])
        }).collect::<Vec<_>>(),
        "flame": {
            "parent": b64_u32(kept.iter().map(|&i| map[f[i].parent as usize])),
            "fn": b64_u32(kept.iter().map(|&i| f[i].name)),
            "total": b64_f64(kept.iter().map(|&i| clock.ns(f[i].total) as f64)),
            "calls": b64_f64(kept.iter().map(|&i| f[i].calls as f64)),
            // Within the node's wall time (the two clocks agree to
            // microseconds, an interval may overhang its call by that).
            "wait": b64_f64(kept.iter().map(|&i| clock.ns(f[i].wait.min(f[i].total)) as f64)),
            "pruned": pruned,
        },
    })
}

/// Writes one self-contained offline HTML page of the calls `sel`
/// selects: summary, timeline, flame graph per thread, top functions and
/// call tree.
pub fn write_html(out: &mut dyn Write, trace: &Trace, sel: &Selection) -> io::Result<()> {
    use crate::graph::CallGraph;
    use crate::report::SortKey;
    let meta = trace.metadata();
    let clock = Clock::of(trace);
    let rows = crate::report::report_rows_and_markers(trace, false, SortKey::Total, sel).0;
    let calls: u64 = rows.iter().map(|r| r.calls).sum();
    let waits = rows.iter().any(|r| r.wait_ns.is_some());
    let title = meta
        .process
        .as_ref()
        .map(|p| p.args.join(" "))
        .unwrap_or_else(|| trace.path().display().to_string());
    let h = trace.header();
    let end_tsc = trace.final_block().map(|f| f.end_tsc);
    let mut c = Collector {
        sym: Symbolizer::new(meta),
        names: vec![],
        name_of: HashMap::default(),
        marker_names: HashMap::default(),
        hist: [0; BUCKETS],
        kept: 0,
        min_bucket: 0,
        markers: 0,
        dropped_markers: 0,
        deep: 0,
        offcpu: 0,
        dropped_offcpu: 0,
        threads: vec![],
    };
    for tid in sel.threads(trace) {
        c.thread(trace, tid, sel);
    }
    let duration = end_tsc
        .map(|e| clock.ns(e.saturating_sub(h.start_tsc)))
        .unwrap_or(0);
    // The timeline spans the recording, or the calls when it has no end.
    let mut span = duration;
    for t in &c.threads {
        for s in &t.slices {
            span = span.max(clock.since_start(s.start + s.dur));
        }
        for m in &t.markers {
            span = span.max(clock.since_start(m.0));
        }
        for o in &t.off {
            span = span.max(clock.since_start(o.start + o.dur));
        }
    }
    let mut notes: Vec<String> = vec![];
    let selected_calls: u64 = c.threads.iter().map(|t| t.calls).sum();
    if c.min_bucket > 0 {
        let cut = bucket_start(c.min_bucket);
        notes.push(format!(
            "The timeline shows the {} longest of {} calls: those of at least {} \
             (shorter calls are in the flame graph and the tables; select fewer calls, \
             e.g. with --tid, --time-range or --filter, to see them all).",
            c.kept,
            selected_calls,
            fmt_ns(clock.ns(cut))
        ));
    }
    if c.deep > 0 {
        notes.push(format!(
            "{} calls deeper than {MAX_ROWS} levels are not drawn on the timeline \
             (use --filter to start lower).",
            c.deep
        ));
    }
    if c.dropped_markers > 0 {
        notes.push(format!(
            "The timeline shows the first {MAX_MARKERS} markers; {} later ones are left out.",
            c.dropped_markers
        ));
    }
    if c.offcpu > 0 {
        notes.push(format!(
            "{} off-CPU interval(s) (record --sched) are drawn one row below the call they \
             happened in: grey where the thread blocked, amber where it was preempted.",
            c.offcpu
        ));
    }
    if c.dropped_offcpu > 0 {
        notes.push(format!(
            "The timeline shows the first {MAX_OFFCPU} off-CPU intervals; {} later ones are left out.",
            c.dropped_offcpu
        ));
    }
    let clock_ = clock;
    let threads: Vec<serde_json::Value> = c
        .threads
        .iter_mut()
        .map(|t| thread_json(t, &clock_))
        .collect();
    let pruned: u64 = threads
        .iter()
        .map(|t| t["flame"]["pruned"].as_u64().unwrap_or(0))
        .sum();
    if pruned > 0 {
        notes.push(format!(
            "The flame graphs leave out {pruned} call path(s) with less than 1/{FLAME_MIN_PART} \
             of their thread's time."
        ));
    }
    let short: Vec<String> = c
        .names
        .iter()
        .map(|n| match short_name(n) {
            Cow::Borrowed(_) => String::new(),
            Cow::Owned(s) if s == *n => String::new(),
            Cow::Owned(s) => s,
        })
        .collect();
    let data = serde_json::json!({
        "title": title,
        "span": span,
        "names": c.names,
        "short": short,
        "threads": threads,
        "notes": notes,
    });
    // `</` escaped: the JSON sits in a <script> element.
    let data = serde_json::to_string(&data)
        .map_err(io::Error::other)?
        .replace("</", "<\\/");
    write!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <title>fntrace: {}</title><style>{PAGE_CSS}</style></head><body>\n",
        esc(&title)
    )?;
    writeln!(out, "<h1>fntrace: {}</h1>", esc(&title))?;
    writeln!(out, "<h2>Summary</h2><table class=\"summary\">")?;
    if let Some(p) = &meta.process {
        writeln!(out, "<tr><th>program</th><td>{}</td></tr>", esc(&p.exe))?;
        writeln!(out, "<tr><th>pid</th><td class=\"n\">{}</td></tr>", p.pid)?;
    }
    writeln!(
        out,
        "<tr><th>threads</th><td class=\"n\">{}</td></tr><tr><th>calls</th><td class=\"n\">{calls}</td></tr>\
         <tr><th>functions</th><td class=\"n\">{}</td></tr><tr><th>duration</th><td class=\"n\">{}</td></tr>",
        c.threads.len(),
        rows.len(),
        fmt_ns(duration)
    )?;
    if !sel.is_all() {
        writeln!(
            out,
            "<tr><th>selection</th><td>{}</td></tr>",
            esc(&describe(sel))
        )?;
    }
    writeln!(out, "</table>")?;
    writeln!(
        out,
        "<h2>Timeline</h2><ul id=\"notes\" class=\"notes\"></ul>\
         <div class=\"help\">wheel or W/S: zoom · drag or A/D: pan · double-click a call: zoom to it · \
         <button id=\"tl-reset\">all calls</button> <span id=\"tl-range\" class=\"n\"></span></div>\
         <div id=\"timeline\"><div id=\"tl-inner\"><canvas id=\"tl-canvas\"></canvas>\
         <div id=\"tl-labels\"></div></div></div>"
    )?;
    writeln!(
        out,
        "<h2>Flame graph</h2><div class=\"help\">thread: <select id=\"fg-thread\"></select> \
         <span id=\"fg-weight-box\">· time: <select id=\"fg-weight\"><option value=\"wall\">wall</option>\
         <option value=\"on\">on CPU</option><option value=\"off\">off CPU</option></select></span> \
         · click: zoom in · <button id=\"fg-reset\">reset</button></div>\
         <div id=\"flame\"><canvas id=\"fg-canvas\"></canvas></div>\
         <div id=\"tip\" class=\"tip\"></div>"
    )?;
    writeln!(
        out,
        "<h2>Top functions</h2><table class=\"top\"><colgroup><col class=\"n\"><col class=\"n\">{}\
         <col class=\"n\"><col class=\"n\"><col></colgroup>\
         <tr><th>total</th><th>self</th>{}<th>calls</th><th>avg</th><th class=\"f\">function</th></tr>",
        if waits { "<col class=\"n\">" } else { "" },
        // With off-CPU records, as in `report`: Self is time on CPU, Wait
        // time off CPU, both in the function itself.
        if waits {
            "<th title=\"time off CPU in the function itself\">wait</th>"
        } else {
            ""
        }
    )?;
    for r in rows.iter().take(50) {
        let wait = match r.wait_ns {
            Some(w) if waits => format!("<td class=\"n\">{}</td>", fmt_ns(w)),
            _ => String::new(),
        };
        writeln!(
            out,
            "<tr><td class=\"n\">{}</td><td class=\"n\">{}</td>{wait}<td class=\"n\">{}</td>\
             <td class=\"n\">{}</td><td class=\"f\" title=\"{}\">{}</td></tr>",
            fmt_ns(r.total_ns),
            fmt_ns(r.self_ns),
            r.calls,
            fmt_ns(r.avg_ns),
            esc(&r.function),
            esc(&short_name(&r.function))
        )?;
    }
    writeln!(out, "</table><h2>Call tree</h2><div class=\"tree\">")?;
    let g = CallGraph::build(
        trace,
        &crate::pattern::NamePattern::new(".*").expect("valid"),
        sel,
    );
    g.write_html_tree(out, trace, 40)?;
    writeln!(
        out,
        "</div><p class=\"dim\">written by fntrace {}</p>\n\
         <script id=\"data\" type=\"application/json\">{data}</script>\n<script>{PAGE_JS}</script>\
         </body></html>",
        env!("CARGO_PKG_VERSION")
    )?;
    Ok(())
}

/// The selection in words, for the summary.
fn describe(sel: &Selection) -> String {
    let mut parts = vec![];
    if let Some(t) = sel.tid {
        parts.push(format!("thread {t}"));
    }
    if let Some((a, b)) = sel.time_range {
        parts.push(format!("entered {}~{}", fmt_ns(a), fmt_ns(b)));
    }
    if let Some(f) = &sel.filter {
        parts.push(format!("under {}", f.text()));
    }
    if let Some(d) = sel.depth {
        parts.push(format!("{d} levels"));
    }
    if sel.threshold_ns > 0 {
        parts.push(format!("at least {}", fmt_ns(sel.threshold_ns)));
    }
    parts.join(", ")
}

#[cfg(test)]
mod tests {
    use super::short_name;

    #[test]
    fn buckets_grow_with_the_duration_and_start_where_they_say() {
        let mut last = 0;
        for t in 0..100_000u64 {
            let b = super::bucket(t);
            assert!(b >= last && b <= last + 1, "{t}");
            assert!(super::bucket_start(b) <= t && super::bucket(super::bucket_start(b)) == b);
            last = b;
        }
        assert!(super::bucket(u64::MAX) < super::BUCKETS);
    }

    #[test]
    fn short_names() {
        let cases = [
            ("fib", "fib"),
            (
                "std::vector<int, std::allocator<int> >::push_back(int const&)",
                "std::vector<…>::push_back(…)",
            ),
            ("void foo<std::map<int, int> >(int)", "void foo<…>(…)"),
            ("operator<<(std::ostream&, X const&)", "operator<<(…)"),
            ("A::operator()(int)", "A::operator()(…)"),
            ("A::operator<(A const&) const", "A::operator<(…) const"),
            ("(anonymous namespace)::f()", "(anonymous namespace)::f()"),
            (
                "<alloc::vec::Vec<u8> as core::fmt::Debug>::fmt",
                "<Vec<…> as Debug>::fmt",
            ),
            (
                "core::ptr::drop_in_place<regex::Regex>",
                "core::ptr::drop_in_place<…>",
            ),
            ("<T>::f", "<T>::f"),
            ("app::run::{{closure}}", "app::run::{{closure}}"),
            ("f(int (*)(int))", "f(…)"),
        ];
        for (n, want) in cases {
            assert_eq!(short_name(n), want, "{n}");
        }
    }
}
