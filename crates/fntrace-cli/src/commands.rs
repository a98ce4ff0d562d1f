//! The `report`, `replay` and `info` views, writing to any `io::Write`.

use rustc_hash::FxHashMap as HashMap;
use std::io::{self, Write};

use fntrace_format::{Ending, Trace};
use serde::Serialize;

use crate::analysis::{
    Call, Clock, Event, Events, NamePattern, ThreadSummary, Visitor, fmt_ns, walk_thread,
};
use crate::symbols::Symbolizer;

/// One row of `fntrace report`.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    /// Demangled function name.
    pub function: String,
    /// Thread id (with `--threads`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tid: Option<u32>,
    /// Number of calls.
    pub calls: u64,
    /// Inclusive time; a recursive call inside another call of the same
    /// function is not counted again.
    pub total_ns: u64,
    /// Time in the function itself, children excluded.
    pub self_ns: u64,
    /// Average inclusive time per call.
    pub avg_ns: u64,
    /// Shortest call.
    pub min_ns: u64,
    /// Longest call.
    pub max_ns: u64,
}

#[derive(Default)]
struct Agg {
    calls: u64,
    total: u64,
    self_: u64,
    sum: u64,
    min: u64,
    max: u64,
}

struct ReportVisitor<'a> {
    map: &'a mut HashMap<(u64, u32), Agg>,
    tid: u32,
    markers: &'a mut HashMap<String, u64>,
}

impl Visitor for ReportVisitor<'_> {
    fn call(&mut self, c: &Call) {
        let dur = c.end - c.start;
        let a = self.map.entry((c.func, self.tid)).or_insert(Agg {
            min: u64::MAX,
            ..Agg::default()
        });
        a.calls += 1;
        a.sum += dur;
        if !c.recursive {
            a.total += dur;
        }
        a.self_ += dur.saturating_sub(c.children);
        a.min = a.min.min(dur);
        a.max = a.max.max(dur);
    }

    fn marker(&mut self, name: &str, _text: &str, _tsc: u64) {
        match self.markers.get_mut(name) {
            Some(n) => *n += 1,
            None => {
                self.markers.insert(name.to_string(), 1);
            }
        }
    }
}

/// Sort key of a report.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum SortKey {
    /// Inclusive time, largest first.
    Total,
    /// Self time, largest first.
    #[value(name = "self")]
    SelfTime,
    /// Calls, most first.
    Calls,
    /// Name.
    Name,
}

/// Computes the report rows of a trace.
pub fn report_rows(trace: &Trace, per_thread: bool, sort: SortKey) -> Vec<Row> {
    report_rows_and_markers(trace, per_thread, sort).0
}

/// Computes the report rows of a trace and counts its marker events per
/// marker name (most first, then by name).
pub fn report_rows_and_markers(
    trace: &Trace,
    per_thread: bool,
    sort: SortKey,
) -> (Vec<Row>, Vec<(String, u64)>) {
    let clock = Clock::of(trace);
    // Threads are decoded in parallel, one worker per core, each with its
    // own table; the tables are merged.
    let tids = trace.thread_ids();
    let workers = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .min(tids.len())
        .max(1);
    let next = std::sync::atomic::AtomicUsize::new(0);
    type Tables = (HashMap<(u64, u32), Agg>, HashMap<String, u64>);
    let tables: Vec<Tables> = std::thread::scope(|sc| {
        let hs: Vec<_> = (0..workers)
            .map(|_| {
                sc.spawn(|| {
                    let mut map = HashMap::default();
                    let mut markers = HashMap::default();
                    loop {
                        let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let Some(&tid) = tids.get(i) else { break };
                        let mut v = ReportVisitor {
                            map: &mut map,
                            tid: if per_thread { tid } else { 0 },
                            markers: &mut markers,
                        };
                        walk_thread(trace, tid, &mut v);
                    }
                    (map, markers)
                })
            })
            .collect();
        hs.into_iter()
            .map(|h| h.join().unwrap_or_default())
            .collect()
    });
    let mut map: HashMap<(u64, u32), Agg> = HashMap::default();
    let mut markers: HashMap<String, u64> = HashMap::default();
    for (t, m) in tables {
        for (name, n) in m {
            *markers.entry(name).or_insert(0) += n;
        }
        for (k, a) in t {
            match map.get_mut(&k) {
                None => {
                    map.insert(k, a);
                }
                Some(m) => {
                    m.calls += a.calls;
                    m.total += a.total;
                    m.self_ += a.self_;
                    m.sum += a.sum;
                    m.min = m.min.min(a.min);
                    m.max = m.max.max(a.max);
                }
            }
        }
    }
    // A counting trace: calls per callee from its arcs, no times.
    for &(_, to, n) in &trace.metadata().arcs {
        let a = map.entry((to, 0)).or_insert(Agg {
            min: 0,
            ..Agg::default()
        });
        a.calls += n;
    }
    let mut sym = Symbolizer::new(trace.metadata());
    let mut rows: Vec<Row> = map
        .into_iter()
        .map(|((func, tid), a)| Row {
            function: sym.name(func).to_string(),
            tid: per_thread.then_some(tid),
            calls: a.calls,
            total_ns: clock.ns(a.total),
            self_ns: clock.ns(a.self_),
            avg_ns: clock.ns(a.sum / a.calls.max(1)),
            min_ns: clock.ns(a.min),
            max_ns: clock.ns(a.max),
        })
        .collect();
    rows.sort_by(|a, b| {
        match sort {
            SortKey::Total => b.total_ns.cmp(&a.total_ns),
            SortKey::SelfTime => b.self_ns.cmp(&a.self_ns),
            SortKey::Calls => b.calls.cmp(&a.calls),
            SortKey::Name => a.function.cmp(&b.function),
        }
        .then_with(|| a.function.cmp(&b.function))
    });
    let mut markers: Vec<(String, u64)> = markers.into_iter().collect();
    markers.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    (rows, markers)
}

/// Writes the marker counts of a report (table format): nothing when the
/// trace has no marker events.
pub fn write_marker_counts(out: &mut dyn Write, markers: &[(String, u64)]) -> io::Result<()> {
    if markers.is_empty() {
        return Ok(());
    }
    writeln!(out)?;
    writeln!(out, "  {:>10}  Marker", "Events")?;
    writeln!(out, "  {}", "=".repeat(24))?;
    for (name, n) in markers {
        writeln!(out, "  {n:>10}  {name}")?;
    }
    Ok(())
}

/// Output format of a report.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// Aligned text table.
    Table,
    /// JSON array of objects.
    Json,
    /// Comma-separated values with a header line.
    Csv,
}

/// A CSV field, quoted when it holds a comma or a quote.
fn csv_field(s: &str) -> String {
    if s.contains([',', '"']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

/// Writes a report.
pub fn write_report(out: &mut dyn Write, rows: &[Row], format: Format) -> io::Result<()> {
    match format {
        Format::Json => {
            serde_json::to_writer_pretty(&mut *out, rows)?;
            writeln!(out)
        }
        Format::Csv => {
            writeln!(
                out,
                "function,tid,calls,total_ns,self_ns,avg_ns,min_ns,max_ns"
            )?;
            for r in rows {
                let f = csv_field(&r.function);
                writeln!(
                    out,
                    "{},{},{},{},{},{},{},{}",
                    f,
                    r.tid.map(|t| t.to_string()).unwrap_or_default(),
                    r.calls,
                    r.total_ns,
                    r.self_ns,
                    r.avg_ns,
                    r.min_ns,
                    r.max_ns
                )?;
            }
            Ok(())
        }
        Format::Table => {
            let tidcol = rows.iter().any(|r| r.tid.is_some());
            write!(
                out,
                "  {:>12}  {:>12}  {:>10}  ",
                "Total time", "Self time", "Calls"
            )?;
            if tidcol {
                write!(out, "{:>7}  ", "TID")?;
            }
            writeln!(out, "Function")?;
            writeln!(out, "  {}", "=".repeat(if tidcol { 60 } else { 51 }))?;
            for r in rows {
                write!(
                    out,
                    "  {:>12}  {:>12}  {:>10}  ",
                    fmt_ns(r.total_ns),
                    fmt_ns(r.self_ns),
                    r.calls
                )?;
                if let Some(t) = r.tid {
                    write!(out, "{t:>7}  ")?;
                }
                writeln!(out, "{}", r.function)?;
            }
            Ok(())
        }
    }
}

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

    /// Prints the opening lines of the shown frames of `stack` not printed yet.
    fn open_ancestors(&mut self, tid: u32, stack: &mut [Frame]) -> io::Result<()> {
        for f in stack.iter_mut() {
            if f.eligible && !f.opened {
                f.opened = true;
                let indent = "  ".repeat(f.rel.unwrap_or(0));
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
                    self.open_ancestors(t.tid, &mut t.stack)?;
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
                let in_time = self.o.time_range.is_none_or(|(a, b)| {
                    let at = self.clock.since_start(tsc);
                    at >= a && at <= b
                });
                // Shown where the calls around it are shown (or at the top
                // when no filter hides the outer level).
                let (shown, rel) = match t.stack.last() {
                    Some(f) => (f.eligible, f.rel.map_or(0, |r| r + 1)),
                    None => (self.o.filter.is_none(), 0),
                };
                if in_time && shown && self.o.depth.is_none_or(|d| rel <= d) {
                    self.open_ancestors(t.tid, &mut t.stack)?;
                    let indent = "  ".repeat(rel);
                    let sep = if text.is_empty() { "" } else { " " };
                    writeln!(
                        self.out,
                        "{:>12} [{:>6}] | {indent}/* marker {name}{sep}{text} */",
                        "", t.tid
                    )?;
                }
            }
            Event::Exit { tsc, incomplete } => {
                let Some(f) = t.stack.pop() else {
                    return Ok(());
                };
                let dur = self.clock.ns(tsc.saturating_sub(f.start));
                if !f.eligible || dur < self.o.threshold_ns {
                    return Ok(());
                }
                self.open_ancestors(t.tid, &mut t.stack)?;
                let tid = t.tid;
                let d = format!("{:>12}", fmt_ns(dur));
                let d = match (self.o.color, dur) {
                    (true, 1_000_000..) => format!("\x1b[31m{d}\x1b[0m"),
                    (true, 10_000..) => format!("\x1b[33m{d}\x1b[0m"),
                    _ => d,
                };
                let indent = "  ".repeat(f.rel.unwrap_or(0));
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
        // Attached to the call before them: due at once.
        Event::Args(_) | Event::RetVal(_) => 0,
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
        })
        .collect();
    // Min-heap of (next timestamp, thread index).
    let mut heap = std::collections::BinaryHeap::new();
    for (i, t) in threads.iter_mut().enumerate() {
        if let Some(ev) = t.events.peek() {
            heap.push(std::cmp::Reverse((event_tsc(ev), i)));
        }
    }
    while let Some(std::cmp::Reverse((_, i))) = heap.pop() {
        let t = &mut threads[i];
        let Some(ev) = t.events.next() else { continue };
        r.event(t, ev)?;
        if let Some(ev) = t.events.peek() {
            heap.push(std::cmp::Reverse((event_tsc(ev), i)));
        }
    }
    Ok(())
}

/// Writes `fntrace info`.
pub fn write_info(out: &mut dyn Write, trace: &Trace) -> io::Result<()> {
    let h = trace.header();
    let clock = Clock::of(trace);
    let meta = trace.metadata();
    writeln!(out, "# trace         {}", trace.path().display())?;
    writeln!(
        out,
        "# format        {}.{}",
        h.version_major, h.version_minor
    )?;
    if let Some(p) = &meta.process {
        writeln!(out, "# program       {}", p.exe)?;
        writeln!(out, "# command line  {}", p.args.join(" "))?;
        writeln!(out, "# pid           {} (parent {})", p.pid, p.ppid)?;
    } else {
        writeln!(out, "# pid           {}", h.pid)?;
    }
    writeln!(
        out,
        "# ending        {}",
        match trace.ending() {
            Ending::Clean => "clean",
            Ending::Unfinished => "unfinished (the process died or is still running)",
        }
    )?;
    writeln!(
        out,
        "# tsc           {} Hz{}",
        trace.tsc_hz(),
        if h.flags & fntrace_format::layout::HDR_FLAG_TSC_INVARIANT != 0 {
            " (invariant)"
        } else {
            " (not invariant)"
        }
    )?;
    let mut threads: Vec<ThreadSummary> = vec![];
    struct Nop;
    impl Visitor for Nop {
        fn call(&mut self, _c: &Call) {}
    }
    for tid in trace.thread_ids() {
        threads.push(walk_thread(trace, tid, &mut Nop));
    }
    let events: u64 = threads.iter().map(|t| t.events).sum();
    let first = threads
        .iter()
        .map(|t| t.first_tsc)
        .min()
        .unwrap_or(h.start_tsc);
    let last = threads
        .iter()
        .map(|t| t.last_tsc)
        .max()
        .unwrap_or(h.start_tsc)
        .max(trace.final_block().map(|f| f.end_tsc).unwrap_or(0));
    writeln!(
        out,
        "# duration      {}",
        fmt_ns(clock.ns(last.saturating_sub(first.min(h.start_tsc))))
    )?;
    writeln!(out, "# events        {events}")?;
    writeln!(
        out,
        "# size          {} bytes ({:.2} bytes per event)",
        trace.file_len(),
        trace.file_len() as f64 / events.max(1) as f64
    )?;
    writeln!(out, "# modules       {}", meta.modules.len())?;
    for m in &meta.modules {
        writeln!(
            out,
            "#   {:#x} {:>10} {} {}",
            m.start,
            m.size,
            m.build_id_hex(),
            m.path
        )?;
    }
    writeln!(out, "# threads       {}", threads.len())?;
    for t in &threads {
        writeln!(
            out,
            "#   {:>7} {:<16} {:>10} events{}{}{}",
            t.tid,
            t.name,
            t.events,
            if t.exited { "" } else { ", no exit recorded" },
            if t.incomplete > 0 {
                format!(", {} calls without exit", t.incomplete)
            } else {
                String::new()
            },
            if t.lost > 0 {
                format!(", {} events lost", t.lost)
            } else {
                String::new()
            },
        )?;
    }
    let mut damage: Vec<_> = trace.damage().to_vec();
    for t in &threads {
        damage.extend(t.damage.iter().cloned());
    }
    let lost_bytes: u64 = damage.iter().map(|d| d.lost_bytes).sum();
    let lost_events: u64 = threads.iter().map(|t| t.lost).sum();
    if damage.is_empty() && lost_events == 0 {
        writeln!(out, "# damage        none")?;
    } else {
        writeln!(
            out,
            "# damage        {} problems, {} bytes of trace data lost, {} events dropped by the runtime",
            damage.len(),
            lost_bytes,
            lost_events
        )?;
        for d in &damage {
            writeln!(out, "#   {d}")?;
        }
    }
    Ok(())
}

/// Output format of `fntrace graph`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum GraphFormat {
    /// Backtraces and an indented callee tree.
    Text,
    /// Graphviz `dot`: caller → callee edges labelled with call counts.
    Dot,
}

struct GraphNode {
    func: u64,
    calls: u64,
    total: u64,
    children: HashMap<u64, usize>,
}

/// A caller context of matched calls: a node of the trie of call paths
/// (node 0 is its root, above every thread's outermost call).
struct Context {
    parent: u32,
    func: u64,
    /// Matched calls whose backtrace ends here, and their time.
    hits: u64,
    ticks: u64,
}

/// An open call while the graph is built.
struct GraphFrame {
    func: u64,
    start: u64,
    /// Node inside a matched subtree.
    node: Option<usize>,
    /// Whether this call is the root of a matched subtree.
    root: bool,
    /// Its caller context, once a matched call below needed it.
    ctx: Option<u32>,
}

/// The callers and callees of the functions `pattern` selects, aggregated
/// over every outermost call of them on every thread.
pub struct CallGraph {
    nodes: Vec<GraphNode>,
    /// The backtraces of matched calls as a trie (a parent always comes
    /// before its children), so memory grows with the distinct paths, not
    /// with their depth.
    contexts: Vec<Context>,
    context_index: HashMap<(u32, u64), u32>,
}

impl CallGraph {
    /// Builds the graph.
    pub fn build(trace: &Trace, pattern: &NamePattern) -> CallGraph {
        let mut sym = Symbolizer::new(trace.metadata());
        let mut matches: HashMap<u64, bool> = HashMap::default();
        let mut g = CallGraph {
            nodes: vec![],
            contexts: vec![Context {
                parent: 0,
                func: 0,
                hits: 0,
                ticks: 0,
            }],
            context_index: HashMap::default(),
        };
        // Root nodes per matched function.
        let mut roots: HashMap<u64, usize> = HashMap::default();
        for tid in trace.thread_ids() {
            let mut stack: Vec<GraphFrame> = vec![];
            for ev in Events::new(trace, tid) {
                match ev {
                    Event::Enter { func, tsc, .. } => {
                        let parent = stack.last().and_then(|f| f.node);
                        let (node, root) = match parent {
                            Some(p) => {
                                let n = match g.nodes[p].children.get(&func) {
                                    Some(&n) => n,
                                    None => {
                                        g.nodes.push(GraphNode {
                                            func,
                                            calls: 0,
                                            total: 0,
                                            children: HashMap::default(),
                                        });
                                        let n = g.nodes.len() - 1;
                                        g.nodes[p].children.insert(func, n);
                                        n
                                    }
                                };
                                (Some(n), false)
                            }
                            None => {
                                let m = *matches
                                    .entry(func)
                                    .or_insert_with(|| pattern.matches(sym.name(func)));
                                if m {
                                    let n = *roots.entry(func).or_insert_with(|| {
                                        g.nodes.push(GraphNode {
                                            func,
                                            calls: 0,
                                            total: 0,
                                            children: HashMap::default(),
                                        });
                                        g.nodes.len() - 1
                                    });
                                    (Some(n), true)
                                } else {
                                    (None, false)
                                }
                            }
                        };
                        stack.push(GraphFrame {
                            func,
                            start: tsc,
                            node,
                            root,
                            ctx: None,
                        });
                    }
                    Event::Exit { tsc, .. } => {
                        let Some(f) = stack.pop() else {
                            continue;
                        };
                        let dur = tsc.saturating_sub(f.start);
                        if let Some(n) = f.node {
                            g.nodes[n].calls += 1;
                            g.nodes[n].total += dur;
                        }
                        if f.root {
                            let caller = g.context_of(&mut stack);
                            let c = g.child_context(caller, f.func) as usize;
                            g.contexts[c].hits += 1;
                            g.contexts[c].ticks += dur;
                        }
                    }
                    Event::Args(_) | Event::RetVal(_) | Event::Marker { .. } => {}
                }
            }
        }
        g
    }

    /// The context node of `func` called from context `parent`.
    fn child_context(&mut self, parent: u32, func: u64) -> u32 {
        let contexts = &mut self.contexts;
        *self.context_index.entry((parent, func)).or_insert_with(|| {
            contexts.push(Context {
                parent,
                func,
                hits: 0,
                ticks: 0,
            });
            (contexts.len() - 1) as u32
        })
    }

    /// The context of the innermost open call of `stack` (the root if
    /// none), computed from the innermost frame that knows its own and
    /// remembered in every frame above it: each frame is resolved once,
    /// however deep the stack.
    fn context_of(&mut self, stack: &mut [GraphFrame]) -> u32 {
        let known = stack.iter().rposition(|f| f.ctx.is_some());
        let (mut c, from) = match known {
            Some(i) => (stack[i].ctx.unwrap_or(0), i + 1),
            None => (0, 0),
        };
        for f in &mut stack[from..] {
            c = self.child_context(c, f.func);
            f.ctx = Some(c);
        }
        c
    }

    /// The functions of context `c`, outermost first.
    fn context_path(&self, mut c: u32) -> Vec<u64> {
        let mut path = vec![];
        while c != 0 {
            let x = &self.contexts[c as usize];
            path.push(x.func);
            c = x.parent;
        }
        path.reverse();
        path
    }

    /// Whether anything matched.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    fn roots(&self) -> Vec<usize> {
        let mut children = vec![false; self.nodes.len()];
        for n in &self.nodes {
            for &c in n.children.values() {
                children[c] = true;
            }
        }
        let mut r: Vec<usize> = (0..self.nodes.len()).filter(|&i| !children[i]).collect();
        r.sort_by_key(|&i| std::cmp::Reverse(self.nodes[i].total));
        r
    }
}

/// Writes `fntrace graph`.
pub fn write_graph(
    out: &mut dyn Write,
    trace: &Trace,
    g: &CallGraph,
    format: GraphFormat,
    depth: Option<usize>,
) -> io::Result<()> {
    let clock = Clock::of(trace);
    let mut sym = Symbolizer::new(trace.metadata());
    match format {
        GraphFormat::Text => {
            // By time, then in the order first seen.
            let mut bts: Vec<u32> = (1..g.contexts.len() as u32)
                .filter(|&c| g.contexts[c as usize].hits > 0)
                .collect();
            bts.sort_by_key(|&c| std::cmp::Reverse(g.contexts[c as usize].ticks));
            writeln!(out, "========== BACKTRACE ==========")?;
            for (i, &c) in bts.iter().enumerate().take(20) {
                let x = &g.contexts[c as usize];
                writeln!(
                    out,
                    " backtrace #{i}: hit {}, time {}",
                    x.hits,
                    fmt_ns(clock.ns(x.ticks))
                )?;
                // A run of the same function (recursion) is one line.
                let path = g.context_path(c);
                let mut k = 0;
                while k < path.len() {
                    let run = path[k..].iter().take_while(|&&f| f == path[k]).count();
                    let name = sym.name(path[k]);
                    if run == 1 {
                        writeln!(out, "   [{k}] {name}")?;
                    } else {
                        writeln!(out, "   [{k}-{}] {name} (x{run})", k + run - 1)?;
                    }
                    k += run;
                }
            }
            if bts.len() > 20 {
                writeln!(out, " ... {} more backtraces", bts.len() - 20)?;
            }
            writeln!(out, "\n========== CALL GRAPH ==========")?;
            writeln!(out, "# {:>12}  {:>10}  FUNCTION", "TOTAL TIME", "CALLS")?;
            // Depth first, children by total time; iterative, since a
            // recursion can be as deep as the trace.
            let mut todo: Vec<(usize, usize)> =
                g.roots().into_iter().rev().map(|r| (r, 0)).collect();
            while let Some((n, level)) = todo.pop() {
                let node = &g.nodes[n];
                let prefix = if level == 0 {
                    String::new()
                } else {
                    format!("{}+-", "  ".repeat(level - 1))
                };
                writeln!(
                    out,
                    "  {:>12}  {:>10}  {prefix}{}",
                    fmt_ns(clock.ns(node.total)),
                    node.calls,
                    sym.name(node.func)
                )?;
                if depth.is_some_and(|d| level + 1 >= d) {
                    continue;
                }
                let mut kids: Vec<usize> = node.children.values().copied().collect();
                kids.sort_by_key(|&c| std::cmp::Reverse(g.nodes[c].total));
                todo.extend(kids.into_iter().rev().map(|c| (c, level + 1)));
            }
        }
        GraphFormat::Dot => {
            let mut edges: HashMap<(u64, u64), u64> = HashMap::default();
            for n in &g.nodes {
                for &c in n.children.values() {
                    *edges.entry((n.func, g.nodes[c].func)).or_default() += g.nodes[c].calls;
                }
            }
            // Caller edges: every backtrace through a context counts once
            // on the edge into it (children come after their parents, so
            // one backward pass sums them).
            let mut through: Vec<u64> = g.contexts.iter().map(|c| c.hits).collect();
            for c in (1..g.contexts.len()).rev() {
                let x = &g.contexts[c];
                let p = x.parent as usize;
                through[p] += through[c];
                if p != 0 {
                    *edges.entry((g.contexts[p].func, x.func)).or_default() += through[c];
                }
            }
            let mut edges: Vec<_> = edges.into_iter().collect();
            edges.sort();
            writeln!(out, "digraph calls {{")?;
            writeln!(out, "  node [shape=box];")?;
            for ((a, b), n) in edges {
                let (a, b) = (sym.name(a).to_string(), sym.name(b).to_string());
                writeln!(out, "  {:?} -> {:?} [label=\"{n}\"];", a, b)?;
            }
            writeln!(out, "}}")?;
        }
    }
    Ok(())
}

/// One row of `fntrace report --diff`: a function in the base trace (a)
/// and the other trace (b).
#[derive(Debug, Clone, Serialize)]
pub struct DiffRow {
    /// Demangled function name.
    pub function: String,
    /// Calls in the base trace.
    pub calls_a: u64,
    /// Calls in the other trace.
    pub calls_b: u64,
    /// Inclusive time in the base trace.
    pub total_ns_a: u64,
    /// Inclusive time in the other trace.
    pub total_ns_b: u64,
    /// Self time in the base trace.
    pub self_ns_a: u64,
    /// Self time in the other trace.
    pub self_ns_b: u64,
    /// `total_ns_b - total_ns_a`.
    pub delta_total_ns: i64,
}

/// Compares two traces function by function, largest change of total
/// time first (then of calls).
pub fn diff_rows(a: &Trace, b: &Trace) -> Vec<DiffRow> {
    let ra = report_rows(a, false, SortKey::Name);
    let rb = report_rows(b, false, SortKey::Name);
    let mut map: std::collections::BTreeMap<String, DiffRow> = Default::default();
    let blank = |f: &str| DiffRow {
        function: f.to_string(),
        calls_a: 0,
        calls_b: 0,
        total_ns_a: 0,
        total_ns_b: 0,
        self_ns_a: 0,
        self_ns_b: 0,
        delta_total_ns: 0,
    };
    for r in ra {
        let d = map
            .entry(r.function.clone())
            .or_insert_with(|| blank(&r.function));
        d.calls_a += r.calls;
        d.total_ns_a += r.total_ns;
        d.self_ns_a += r.self_ns;
    }
    for r in rb {
        let d = map
            .entry(r.function.clone())
            .or_insert_with(|| blank(&r.function));
        d.calls_b += r.calls;
        d.total_ns_b += r.total_ns;
        d.self_ns_b += r.self_ns;
    }
    let mut rows: Vec<DiffRow> = map
        .into_values()
        .map(|mut d| {
            d.delta_total_ns = d.total_ns_b as i64 - d.total_ns_a as i64;
            d
        })
        .collect();
    rows.sort_by(|x, y| {
        y.delta_total_ns
            .unsigned_abs()
            .cmp(&x.delta_total_ns.unsigned_abs())
            .then_with(|| {
                (y.calls_b as i64 - y.calls_a as i64)
                    .unsigned_abs()
                    .cmp(&(x.calls_b as i64 - x.calls_a as i64).unsigned_abs())
            })
            .then_with(|| x.function.cmp(&y.function))
    });
    rows
}

/// Writes a diff report.
pub fn write_diff(out: &mut dyn Write, rows: &[DiffRow], format: Format) -> io::Result<()> {
    match format {
        Format::Json => {
            serde_json::to_writer_pretty(&mut *out, rows)?;
            writeln!(out)
        }
        Format::Csv => {
            writeln!(
                out,
                "function,calls_a,calls_b,total_ns_a,total_ns_b,self_ns_a,self_ns_b,delta_total_ns"
            )?;
            for r in rows {
                let f = csv_field(&r.function);
                writeln!(
                    out,
                    "{f},{},{},{},{},{},{},{}",
                    r.calls_a,
                    r.calls_b,
                    r.total_ns_a,
                    r.total_ns_b,
                    r.self_ns_a,
                    r.self_ns_b,
                    r.delta_total_ns
                )?;
            }
            Ok(())
        }
        Format::Table => {
            writeln!(
                out,
                "  {:>12}  {:>12}  {:>9}  {:>10}  {:>10}  Function",
                "Total (a)", "Total (b)", "Change", "Calls (a)", "Calls (b)"
            )?;
            writeln!(out, "  {}", "=".repeat(78))?;
            for r in rows {
                let pct = if r.total_ns_a == 0 {
                    if r.total_ns_b == 0 {
                        "0%".to_string()
                    } else {
                        "new".to_string()
                    }
                } else {
                    format!(
                        "{:+.1}%",
                        r.delta_total_ns as f64 * 100.0 / r.total_ns_a as f64
                    )
                };
                writeln!(
                    out,
                    "  {:>12}  {:>12}  {:>9}  {:>10}  {:>10}  {}",
                    fmt_ns(r.total_ns_a),
                    fmt_ns(r.total_ns_b),
                    pct,
                    r.calls_a,
                    r.calls_b,
                    r.function
                )?;
            }
            Ok(())
        }
    }
}

impl CallGraph {
    /// Writes the callee trees as nested `<details>` elements (children by
    /// total time, at most `depth` levels).
    pub fn write_html_tree(
        &self,
        out: &mut dyn Write,
        trace: &Trace,
        depth: usize,
    ) -> io::Result<()> {
        let clock = Clock::of(trace);
        let mut sym = Symbolizer::new(trace.metadata());
        fn node(
            g: &CallGraph,
            out: &mut dyn Write,
            sym: &mut Symbolizer,
            clock: &Clock,
            n: usize,
            left: usize,
        ) -> io::Result<()> {
            let x = &g.nodes[n];
            let name = sym
                .name(x.func)
                .replace('&', "&amp;")
                .replace('<', "&lt;")
                .replace('>', "&gt;");
            let label = format!(
                "{name} <span class=\"dim\">{} in {} calls</span>",
                fmt_ns(clock.ns(x.total)),
                x.calls
            );
            if x.children.is_empty() || left == 0 {
                return writeln!(out, "<div style=\"margin-left:1.2em\">{label}</div>");
            }
            writeln!(out, "<details open><summary>{label}</summary>")?;
            let mut kids: Vec<usize> = x.children.values().copied().collect();
            kids.sort_by_key(|&c| std::cmp::Reverse(g.nodes[c].total));
            for c in kids.into_iter().take(50) {
                node(g, out, sym, clock, c, left - 1)?;
            }
            writeln!(out, "</details>")
        }
        for r in self.roots() {
            node(self, out, &mut sym, &clock, r, depth)?;
        }
        Ok(())
    }
}
