//! The `report`, `replay` and `info` views, writing to any `io::Write`.

use std::collections::HashMap;
use std::io::{self, Write};

use fntrace_format::{Ending, Trace};
use serde::Serialize;

use crate::analysis::{Call, Clock, ThreadSummary, Visitor, fmt_ns, walk_thread};
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
    let clock = Clock::of(trace);
    let mut map = HashMap::new();
    for tid in trace.thread_ids() {
        let mut v = ReportVisitor {
            map: &mut map,
            tid: if per_thread { tid } else { 0 },
        };
        walk_thread(trace, tid, &mut v);
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
    rows
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
                let f = if r.function.contains([',', '"']) {
                    format!("\"{}\"", r.function.replace('"', "\"\""))
                } else {
                    r.function.clone()
                };
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
    pub filter: Option<String>,
    /// Hide calls shorter than this (ns).
    pub threshold_ns: u64,
    /// Only this thread.
    pub tid: Option<u32>,
    /// Show source locations.
    pub srcline: bool,
}

struct Collect {
    calls: Vec<Call>,
    open: Vec<usize>,
}

impl Visitor for Collect {
    fn enter(&mut self, func: u64, depth: usize, tsc: u64) {
        self.open.push(self.calls.len());
        self.calls.push(Call {
            func,
            depth,
            start: tsc,
            end: 0,
            children: 0,
            recursive: false,
            incomplete: true,
        });
    }
    fn call(&mut self, c: &Call) {
        // No open entry: a call whose entry was lost in a gap.
        if let Some(i) = self.open.pop() {
            self.calls[i] = *c;
        }
    }
}

/// Writes the call tree of every thread, uftrace style.
pub fn write_replay(out: &mut dyn Write, trace: &Trace, o: &ReplayOptions) -> io::Result<()> {
    let clock = Clock::of(trace);
    let mut sym = Symbolizer::new(trace.metadata());
    writeln!(out, "# DURATION     TID     FUNCTION")?;
    for tid in trace.thread_ids() {
        if o.tid.is_some_and(|t| t != tid) {
            continue;
        }
        let mut c = Collect {
            calls: vec![],
            open: vec![],
        };
        walk_thread(trace, tid, &mut c);
        let calls = c.calls;
        // Indices of calls to show, with their displayed depth.
        let mut shown: Vec<(usize, usize)> = vec![];
        let mut root_depth: Option<usize> = None;
        let mut skip_below: Option<usize> = None;
        for (i, call) in calls.iter().enumerate() {
            if let Some(d) = skip_below {
                if call.depth > d {
                    continue;
                }
                skip_below = None;
            }
            if let Some(r) = root_depth {
                if call.depth <= r && i > 0 {
                    root_depth = None;
                }
            }
            if root_depth.is_none() {
                match &o.filter {
                    Some(f) if !sym.name(call.func).contains(f.as_str()) => continue,
                    _ => root_depth = Some(call.depth),
                }
            }
            let rel = call.depth - root_depth.unwrap_or(0);
            if o.depth.is_some_and(|d| rel >= d) {
                continue;
            }
            if clock.ns(call.end - call.start) < o.threshold_ns {
                skip_below = Some(call.depth);
                continue;
            }
            shown.push((i, rel));
        }
        let mut open: Vec<(usize, usize)> = vec![];
        let close = |out: &mut dyn Write, sym: &mut Symbolizer, i: usize, rel: usize| {
            let a = &calls[i];
            let d = fmt_ns(clock.ns(a.end - a.start));
            let n = sym.name(a.func).to_string();
            writeln!(out, "{d:>12} [{tid:>6}] | {}}} /* {n} */", "  ".repeat(rel))
        };
        for (k, &(i, rel)) in shown.iter().enumerate() {
            while let Some(&(oi, orel)) = open.last() {
                if orel < rel {
                    break;
                }
                close(out, &mut sym, oi, orel)?;
                open.pop();
            }
            let call = &calls[i];
            let has_children = shown.get(k + 1).is_some_and(|&(_, r)| r > rel);
            let indent = "  ".repeat(rel);
            let name = sym.name(call.func).to_string();
            let src = if o.srcline {
                sym.srcline(call.func)
                    .map(|s| format!(" /* {s} */"))
                    .unwrap_or_default()
            } else {
                String::new()
            };
            if has_children {
                writeln!(out, "{:>12} [{tid:>6}] | {indent}{name}() {{{src}", "")?;
                open.push((i, rel));
            } else {
                let dur = fmt_ns(clock.ns(call.end - call.start));
                writeln!(out, "{dur:>12} [{tid:>6}] | {indent}{name}();{src}")?;
            }
        }
        while let Some((oi, orel)) = open.pop() {
            close(out, &mut sym, oi, orel)?;
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
