//! `fntrace report`: per-function totals (total, self, calls, avg, min,
//! max) of a trace, optionally per thread, with the marker event counts,
//! as a table, JSON or CSV. Also owns the [`Format`] the other tabular
//! views share.

use rustc_hash::FxHashMap as HashMap;
use std::io::{self, Write};
use std::path::Path;

use fntrace_format::Trace;
use serde::Serialize;

use crate::Result;
use crate::analysis::{Call, Clock, Visitor, fmt_ns, walk_thread};
use crate::diff::{diff_rows, write_diff};
use crate::select::{SelectArgs, SelectVisitor, Selection};
use crate::symbols::Symbolizer;
use crate::tracefile::{open_checked, with_progress};

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
    /// Time in the function itself, children excluded (and, with
    /// `record --sched`, time off CPU excluded: that is `wait_ns`).
    pub self_ns: u64,
    /// With `record --sched`: time the thread spent off CPU (blocked or
    /// preempted) in the function itself, children excluded.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wait_ns: Option<u64>,
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
    wait: u64,
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
        // A call suspended by a context switch is counted at its first
        // piece; its time is the sum of its pieces.
        if !c.continued {
            a.calls += 1;
        }
        a.sum = a.sum.saturating_add(dur);
        if !c.recursive {
            a.total = a.total.saturating_add(dur);
        }
        if c.wait == 0 {
            // No off-CPU time in the call (always without --sched).
            a.self_ = a.self_.saturating_add(dur.saturating_sub(c.children));
        } else {
            a.self_ = a.self_.saturating_add(c.self_cpu());
            a.wait = a.wait.saturating_add(c.self_wait());
        }
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
    report_rows_and_markers(trace, per_thread, sort, &Selection::default()).0
}

/// Computes the report rows of a trace and counts its marker events per
/// marker name (most first, then by name), of the calls and markers `sel`
/// selects.
pub fn report_rows_and_markers(
    trace: &Trace,
    per_thread: bool,
    sort: SortKey,
    sel: &Selection,
) -> (Vec<Row>, Vec<(String, u64)>) {
    let clock = Clock::of(trace);
    // Threads are decoded in parallel, one worker per core, each with its
    // own table; the tables are merged.
    let tids = sel.threads(trace);
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
                        if sel.is_all() {
                            walk_thread(trace, tid, &mut v);
                        } else {
                            walk_thread(trace, tid, &mut SelectVisitor::new(&mut v, sel, trace));
                        }
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
                    m.total = m.total.saturating_add(a.total);
                    m.self_ = m.self_.saturating_add(a.self_);
                    m.wait = m.wait.saturating_add(a.wait);
                    m.sum = m.sum.saturating_add(a.sum);
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
    let sched = !trace.metadata().offcpu.is_empty();
    let mut rows: Vec<Row> = map
        .into_iter()
        .map(|((func, tid), a)| Row {
            function: sym.name(func).to_string(),
            tid: per_thread.then_some(tid),
            calls: a.calls,
            total_ns: clock.ns(a.total),
            self_ns: clock.ns(a.self_),
            wait_ns: sched.then(|| clock.ns(a.wait)),
            avg_ns: clock.ns(a.sum / a.calls.max(1)),
            min_ns: clock.ns(a.min),
            max_ns: clock.ns(a.max),
        })
        .collect();
    sort_rows(&mut rows, sort);
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
pub(crate) fn csv_field(s: &str) -> String {
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
            let waitcol = rows.iter().any(|r| r.wait_ns.is_some());
            writeln!(
                out,
                "function,tid,calls,total_ns,self_ns,{}avg_ns,min_ns,max_ns",
                if waitcol { "wait_ns," } else { "" }
            )?;
            for r in rows {
                let f = csv_field(&r.function);
                writeln!(
                    out,
                    "{},{},{},{},{},{}{},{},{}",
                    f,
                    r.tid.map(|t| t.to_string()).unwrap_or_default(),
                    r.calls,
                    r.total_ns,
                    r.self_ns,
                    if waitcol {
                        format!("{},", r.wait_ns.unwrap_or(0))
                    } else {
                        String::new()
                    },
                    r.avg_ns,
                    r.min_ns,
                    r.max_ns
                )?;
            }
            Ok(())
        }
        Format::Table => {
            let tidcol = rows.iter().any(|r| r.tid.is_some());
            let waitcol = rows.iter().any(|r| r.wait_ns.is_some());
            write!(out, "  {:>12}  {:>12}  ", "Total time", "Self time")?;
            if waitcol {
                write!(out, "{:>12}  ", "Wait time")?;
            }
            write!(out, "{:>10}  ", "Calls")?;
            if tidcol {
                write!(out, "{:>7}  ", "TID")?;
            }
            writeln!(out, "Function")?;
            writeln!(
                out,
                "  {}",
                "=".repeat(51 + if tidcol { 9 } else { 0 } + if waitcol { 14 } else { 0 })
            )?;
            for r in rows {
                write!(
                    out,
                    "  {:>12}  {:>12}  ",
                    fmt_ns(r.total_ns),
                    fmt_ns(r.self_ns)
                )?;
                if waitcol {
                    write!(out, "{:>12}  ", fmt_ns(r.wait_ns.unwrap_or(0)))?;
                }
                write!(out, "{:>10}  ", r.calls)?;
                if let Some(t) = r.tid {
                    write!(out, "{t:>7}  ")?;
                }
                writeln!(out, "{}", r.function)?;
            }
            Ok(())
        }
    }
}

/// Other traces a report reads besides its own.
#[derive(Debug, Clone, Copy, Default)]
pub struct With<'a> {
    /// Compare with this trace instead (`--diff`).
    pub diff: Option<&'a Path>,
    /// Merge the traces of the recording's other processes (`--children`).
    pub children: bool,
}

/// `fntrace report`: the report of the trace at `path` (with the marker
/// counts under a table), or with `diff` the changes from it to that
/// trace. With `children`, the traces of the recording's other processes
/// (forked children and `exec`'d images, [`crate::tracefile::child_traces`])
/// are read too and their rows merged by function (and thread).
pub fn run(
    out: &mut dyn Write,
    path: &Path,
    sort: SortKey,
    format: Format,
    threads: bool,
    with: With<'_>,
    select: &SelectArgs,
) -> Result<()> {
    let With { diff, children } = with;
    let sel = select.parse()?;
    let t = open_checked(path)?;
    if let Some(other) = diff {
        if !sel.is_all() {
            return Err(crate::Error::Invalid(
                "--diff compares whole traces: --tid, --time-range, --filter, --depth and --threshold do not apply".into(),
            ));
        }
        let o = open_checked(other)?;
        write_diff(out, &diff_rows(&t, &o), format)?;
        return Ok(());
    }
    // What the counts are of, when the recording did not keep every call
    // (on standard error: the table, JSON and CSV stay as they are).
    for n in crate::limits::notes(&t) {
        eprintln!("fntrace: note: {}: {n}", path.display());
    }
    let (mut rows, mut markers) = with_progress(&t, 1, "reading", || {
        report_rows_and_markers(&t, threads, sort, &sel)
    });
    if children {
        for p in crate::tracefile::child_traces(path) {
            let c = open_checked(&p)?;
            let (r, m) = with_progress(&c, 1, "reading", || {
                report_rows_and_markers(&c, threads, sort, &sel)
            });
            rows = merge_rows(rows, r, sort);
            for (name, n) in m {
                match markers.iter_mut().find(|x| x.0 == name) {
                    Some(x) => x.1 += n,
                    None => markers.push((name, n)),
                }
            }
        }
        markers.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    }
    // A selection that matches nothing is an error, as in `graph` (an
    // empty table would look like an empty trace).
    if rows.is_empty() && markers.is_empty() && !sel.is_all() {
        return Err(crate::Error::Invalid(format!(
            "{}: no calls in the selection ({})",
            path.display(),
            describe(select)
        )));
    }
    write_report(out, &rows, format)?;
    if format == Format::Table {
        write_marker_counts(out, &markers)?;
    }
    Ok(())
}

/// The selection options given, as typed: `--filter "x" --tid 7`.
fn describe(s: &SelectArgs) -> String {
    let mut v = vec![];
    if let Some(t) = s.tid {
        v.push(format!("--tid {t}"));
    }
    let texts = [
        ("--time-range", &s.time_range),
        ("--filter", &s.filter),
        ("--threshold", &s.threshold),
    ];
    for (opt, val) in texts {
        if let Some(x) = val {
            v.push(format!("{opt} {x:?}"));
        }
    }
    if let Some(d) = s.depth {
        v.push(format!("--depth {d}"));
    }
    v.join(" ")
}

/// Merges the rows of two traces by function name (and thread), sorted by
/// `sort` again.
pub fn merge_rows(a: Vec<Row>, b: Vec<Row>, sort: SortKey) -> Vec<Row> {
    let mut map: HashMap<(String, Option<u32>), Row> = HashMap::default();
    for r in a.into_iter().chain(b) {
        match map.get_mut(&(r.function.clone(), r.tid)) {
            None => {
                map.insert((r.function.clone(), r.tid), r);
            }
            Some(m) => {
                let calls = m.calls + r.calls;
                let sum = (m.avg_ns as u128 * m.calls as u128 + r.avg_ns as u128 * r.calls as u128)
                    / calls.max(1) as u128;
                m.avg_ns = sum.min(u64::MAX as u128) as u64;
                m.calls = calls;
                m.total_ns = m.total_ns.saturating_add(r.total_ns);
                m.self_ns = m.self_ns.saturating_add(r.self_ns);
                m.wait_ns = match (m.wait_ns, r.wait_ns) {
                    (None, None) => None,
                    (a, b) => Some(a.unwrap_or(0).saturating_add(b.unwrap_or(0))),
                };
                m.min_ns = m.min_ns.min(r.min_ns);
                m.max_ns = m.max_ns.max(r.max_ns);
            }
        }
    }
    let mut rows: Vec<Row> = map.into_values().collect();
    sort_rows(&mut rows, sort);
    rows
}

/// Sorts report rows by `sort`, ties by name.
pub fn sort_rows(rows: &mut [Row], sort: SortKey) {
    rows.sort_by(|a, b| {
        match sort {
            SortKey::Total => b.total_ns.cmp(&a.total_ns),
            SortKey::SelfTime => b.self_ns.cmp(&a.self_ns),
            SortKey::Calls => b.calls.cmp(&a.calls),
            SortKey::Name => a.function.cmp(&b.function),
        }
        .then_with(|| a.function.cmp(&b.function))
    });
}
