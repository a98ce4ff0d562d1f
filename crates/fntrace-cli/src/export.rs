//! Exports to formats other tools read. `gmon`: the `gmon.out` file of
//! glibc's profiler, for `gprof BINARY gmon.out`.
//!
//! gmon.out layout (all little-endian): a 20-byte header (`gmon`, version
//! 1 as a 4-byte integer, 12 zero bytes), then tagged records: tag 0 is a
//! histogram (`low_pc`, `high_pc` as 8-byte addresses, bin count and
//! sampling rate as 4-byte integers, a 15-byte dimension name and its
//! 1-byte abbreviation, then one 2-byte count per bin); tag 1 is a
//! call-graph arc (`from_pc`, `self_pc` as 8-byte addresses, 4-byte count).
//! Addresses are link-time addresses of the main executable (what glibc
//! writes for PIE too); arcs outside it are dropped, as glibc does.

use rustc_hash::FxHashMap as HashMap;
use std::io::{self, Write};

use fntrace_format::Trace;
use object::{Object, ObjectSymbol};

use crate::analysis::{Call, Clock, Visitor, walk_thread};

/// Histogram bins cover this many bytes of text each.
const BIN_BYTES: u64 = 4;
/// Histogram counts are in these units per second (µs).
const PROF_RATE: u32 = 1_000_000;

/// What went into a gmon export.
#[derive(Debug, Default)]
pub struct GmonSummary {
    /// Arcs written.
    pub arcs: usize,
    /// Calls along them.
    pub calls: u64,
    /// Whether the arcs came from a counting trace (else from timed calls).
    pub counted: bool,
}

struct ArcCollector<'a> {
    arcs: &'a mut HashMap<(u64, u64), u64>,
    self_ticks: &'a mut HashMap<u64, u64>,
    parents: Vec<u64>,
}

impl Visitor for ArcCollector<'_> {
    fn enter(&mut self, func: u64, depth: usize, _tsc: u64) {
        self.parents.truncate(depth);
        let from = self.parents.last().copied().unwrap_or(0);
        *self.arcs.entry((from, func)).or_default() += 1;
        self.parents.push(func);
    }
    fn call(&mut self, c: &Call) {
        self.parents.truncate(c.depth);
        *self.self_ticks.entry(c.func).or_default() += (c.end - c.start).saturating_sub(c.children);
    }
}

/// Writes `gmon.out` for the trace's main executable.
pub fn write_gmon(out: &mut dyn Write, trace: &Trace) -> io::Result<GmonSummary> {
    let meta = trace.metadata();
    let exe = meta
        .process
        .as_ref()
        .and_then(|p| meta.modules.iter().find(|m| m.path == p.exe))
        .or_else(|| meta.modules.first())
        .ok_or_else(|| io::Error::other("the trace has no module map"))?;
    let mut arcs: HashMap<(u64, u64), u64> = HashMap::default();
    let mut self_ticks: HashMap<u64, u64> = HashMap::default();
    let counted = !meta.arcs.is_empty();
    if counted {
        for &(from, to, n) in &meta.arcs {
            *arcs.entry((from, to)).or_default() += n;
        }
    } else {
        for tid in trace.thread_ids() {
            let mut v = ArcCollector {
                arcs: &mut arcs,
                self_ticks: &mut self_ticks,
                parents: vec![],
            };
            walk_thread(trace, tid, &mut v);
        }
    }
    // Text range of the executable, link-time.
    let data = std::fs::read(&exe.path)?;
    let obj = object::File::parse(&*data).map_err(io::Error::other)?;
    let mut funcs: Vec<(u64, u64)> = obj
        .symbols()
        .filter(|s| s.kind() == object::SymbolKind::Text && s.address() != 0)
        .map(|s| (s.address(), s.size()))
        .collect();
    funcs.sort_unstable();
    let low = funcs.first().map(|f| f.0).unwrap_or(0) & !(BIN_BYTES - 1);
    let high = funcs.iter().map(|f| f.0 + f.1).max().unwrap_or(low) + BIN_BYTES;
    let in_exe = |a: u64| exe.contains(a);
    let link = |a: u64| a.wrapping_sub(exe.bias);
    let nbins = ((high - low) / BIN_BYTES) as usize;
    let mut bins = vec![0u16; nbins];
    let clock = Clock::of(trace);
    for (&func, &ticks) in &self_ticks {
        if !in_exe(func) {
            continue;
        }
        let a = link(func);
        let end = funcs
            .iter()
            .rev()
            .find(|f| f.0 <= a)
            .map(|f| f.0 + f.1.max(1))
            .unwrap_or(a + 1);
        let mut us = clock.ns(ticks) / 1_000;
        let mut b = ((a.saturating_sub(low)) / BIN_BYTES) as usize;
        while us > 0 && b < nbins && low + b as u64 * BIN_BYTES < end.max(a + 1) {
            let add = us.min(u64::from(u16::MAX - bins[b]));
            bins[b] += add as u16;
            us -= add;
            b += 1;
        }
    }
    out.write_all(b"gmon")?;
    out.write_all(&1u32.to_le_bytes())?;
    out.write_all(&[0u8; 12])?;
    out.write_all(&[0u8])?;
    out.write_all(&low.to_le_bytes())?;
    out.write_all(&high.to_le_bytes())?;
    out.write_all(&(nbins as u32).to_le_bytes())?;
    out.write_all(&PROF_RATE.to_le_bytes())?;
    let mut dimen = [0u8; 15];
    dimen[..7].copy_from_slice(b"seconds");
    out.write_all(&dimen)?;
    out.write_all(b"s")?;
    for b in &bins {
        out.write_all(&b.to_le_bytes())?;
    }
    let mut sum = GmonSummary {
        counted,
        ..Default::default()
    };
    let mut sorted: Vec<_> = arcs.into_iter().collect();
    sorted.sort_unstable();
    for ((from, to), n) in sorted {
        if !in_exe(from) || !in_exe(to) {
            continue;
        }
        let mut n = n;
        while n > 0 {
            let c = n.min(u64::from(u32::MAX));
            out.write_all(&[1u8])?;
            out.write_all(&link(from).to_le_bytes())?;
            out.write_all(&link(to).to_le_bytes())?;
            out.write_all(&(c as u32).to_le_bytes())?;
            n -= c;
            sum.arcs += 1;
            sum.calls += c;
        }
    }
    Ok(sum)
}

/// What went into an llvm-xray export.
#[derive(Debug, Default)]
pub struct XraySummary {
    /// Records written.
    pub records: u64,
    /// Entries of functions without an XRay id (skipped, with their exits).
    pub skipped: u64,
}

/// Writes an llvm-xray basic-mode ("naive") log of the trace's main
/// executable, for `llvm-xray account|convert|stack -instr_map=BINARY`.
///
/// Layout (little-endian): a 32-byte header (u16 version 3, u16 type 0,
/// a byte of flags: bit 0 constant TSC, bit 1 non-stop TSC, padding to 8,
/// u64 cycle frequency, 16 free bytes), then 32-byte records (u16 record
/// type 0, u8 cpu, u8 type: 0 entry, 1 exit, 2 tail exit; i32 function
/// id; u64 TSC; u32 thread id; u32 process id; 8 padding bytes). Function
/// ids are LLVM's for the executable's `xray_instr_map`.
pub fn write_xray(out: &mut dyn Write, trace: &Trace) -> io::Result<XraySummary> {
    use object::ObjectSection;
    let meta = trace.metadata();
    let exe = meta
        .process
        .as_ref()
        .and_then(|p| meta.modules.iter().find(|m| m.path == p.exe))
        .or_else(|| meta.modules.first())
        .ok_or_else(|| io::Error::other("the trace has no module map"))?;
    let data = std::fs::read(&exe.path)?;
    let obj = object::File::parse(&*data).map_err(io::Error::other)?;
    let sec = obj.section_by_name("xray_instr_map").ok_or_else(|| {
        io::Error::other(format!(
            "{}: no xray_instr_map section (not built with XRay)",
            exe.path
        ))
    })?;
    let sd = sec.data().map_err(io::Error::other)?;
    let mut ids: HashMap<u64, i32> = HashMap::default();
    for s in fntrace_rt::xray::sleds::parse(sd, sec.address(), exe.bias) {
        ids.entry(s.func).or_insert(s.id as i32);
    }
    let h = trace.header();
    let invariant = h.flags & fntrace_format::layout::HDR_FLAG_TSC_INVARIANT != 0;
    let mut hdr = [0u8; 32];
    hdr[0..2].copy_from_slice(&3u16.to_le_bytes());
    hdr[4] = if invariant { 0b11 } else { 0 };
    hdr[8..16].copy_from_slice(&trace.tsc_hz().to_le_bytes());
    out.write_all(&hdr)?;
    let pid = meta.process.as_ref().map(|p| p.pid as u32).unwrap_or(h.pid);
    let mut sum = XraySummary::default();
    for tid in trace.thread_ids() {
        // Ids of the open calls (None: not an XRay function, skipped).
        let mut stack: Vec<Option<i32>> = vec![];
        for ev in crate::analysis::Events::new(trace, tid) {
            let (kind, id, tsc) = match ev {
                crate::analysis::Event::Enter { func, tsc, .. } => {
                    let id = ids.get(&func).copied();
                    stack.push(id);
                    if id.is_none() {
                        sum.skipped += 1;
                    }
                    (0u8, id, tsc)
                }
                crate::analysis::Event::Exit { tsc, .. } => (1u8, stack.pop().flatten(), tsc),
                _ => continue,
            };
            let Some(id) = id else { continue };
            let mut r = [0u8; 32];
            r[3] = kind;
            r[4..8].copy_from_slice(&id.to_le_bytes());
            r[8..16].copy_from_slice(&tsc.to_le_bytes());
            r[16..20].copy_from_slice(&tid.to_le_bytes());
            r[20..24].copy_from_slice(&pid.to_le_bytes());
            out.write_all(&r)?;
            sum.records += 1;
        }
    }
    Ok(sum)
}

/// Thread names of a trace (as recorded at exit, else at start).
fn thread_names(trace: &Trace) -> HashMap<u32, String> {
    let mut names = HashMap::default();
    for tid in trace.thread_ids() {
        for r in trace.stream(tid) {
            match r {
                fntrace_format::Record::ThreadStart { name, .. } => {
                    names.entry(tid).or_insert(name);
                }
                fntrace_format::Record::ThreadExit { name, .. } => {
                    names.insert(tid, name);
                }
                _ => {}
            }
        }
    }
    names
}

/// Writes Chrome's Trace Event JSON (`{"traceEvents": [...]}`), which
/// Perfetto UI and chrome://tracing open: one `B` and one `E` event per
/// call on its thread (calls whose exit was lost end where their thread's
/// recording ends), timestamps in microseconds since the start of the
/// recording, and process and thread names as metadata events. Written as
/// it is read: memory stays bounded.
pub fn write_chrome(out: &mut dyn Write, trace: &Trace) -> io::Result<u64> {
    use crate::analysis::{Event, Events};
    let clock = Clock::of(trace);
    let meta = trace.metadata();
    let mut sym = crate::symbols::Symbolizer::new(meta);
    let pid = meta
        .process
        .as_ref()
        .map(|p| p.pid)
        .unwrap_or(u64::from(trace.header().pid));
    let pname = meta
        .process
        .as_ref()
        .map(|p| p.exe.rsplit('/').next().unwrap_or(&p.exe).to_string())
        .unwrap_or_default();
    let names = thread_names(trace);
    out.write_all(b"{\"displayTimeUnit\":\"ns\",\"traceEvents\":[\n")?;
    let mut first = true;
    let mut sep = |out: &mut dyn Write| -> io::Result<()> {
        if !first {
            out.write_all(b",\n")?;
        }
        first = false;
        Ok(())
    };
    sep(out)?;
    serde_json::to_writer(
        &mut *out,
        &serde_json::json!({"ph":"M","name":"process_name","pid":pid,"tid":0,"args":{"name":pname}}),
    )?;
    let mut n = 0u64;
    for tid in trace.thread_ids() {
        sep(out)?;
        let tname = names.get(&tid).cloned().unwrap_or_default();
        serde_json::to_writer(
            &mut *out,
            &serde_json::json!({"ph":"M","name":"thread_name","pid":pid,"tid":tid,"args":{"name":tname}}),
        )?;
        let mut stack: Vec<u64> = vec![];
        for ev in Events::new(trace, tid) {
            let (ph, func, tsc) = match ev {
                Event::Enter { func, tsc, .. } => {
                    stack.push(func);
                    ("B", func, tsc)
                }
                Event::Exit { tsc, .. } => ("E", stack.pop().unwrap_or(0), tsc),
                Event::Marker { tsc, name, text } => {
                    // An instant event on the thread.
                    sep(out)?;
                    let ts = clock.since_start(tsc) as f64 / 1000.0;
                    serde_json::to_writer(
                        &mut *out,
                        &serde_json::json!({"ph":"i","s":"t","name":name,"pid":pid,"tid":tid,
                            "ts":ts,"cat":"marker","args":{"text":text}}),
                    )?;
                    n += 1;
                    continue;
                }
                Event::Args(_) | Event::RetVal(_) => continue,
            };
            let ts = clock.since_start(tsc) as f64 / 1000.0;
            sep(out)?;
            let name = sym.name(func);
            serde_json::to_writer(
                &mut *out,
                &serde_json::json!({"ph":ph,"name":name,"pid":pid,"tid":tid,"ts":ts,"cat":"function"}),
            )?;
            n += 1;
        }
    }
    out.write_all(b"\n]}\n")?;
    Ok(n)
}

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
                        p.2 += dur;
                    }
                    nodes[node as usize].2 += dur.saturating_sub(children);
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

/// Writes a flame graph (SVG, with `inferno`) of the self time per stack.
pub fn write_flamegraph(out: &mut dyn Write, trace: &Trace, title: &str) -> io::Result<usize> {
    let lines = folded_stacks(trace);
    let mut opts = inferno::flamegraph::Options::default();
    opts.title = title.to_string();
    opts.count_name = "ns".to_string();
    inferno::flamegraph::from_lines(&mut opts, lines.iter().map(String::as_str), out)
        .map_err(io::Error::other)?;
    Ok(lines.len())
}

/// Standard base64 (for embedding the flame graph in the HTML page).
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

/// Writes one self-contained offline HTML page: summary, the top functions
/// table, the flame graph, and an expandable call tree.
pub fn write_html(out: &mut dyn Write, trace: &Trace) -> io::Result<()> {
    use crate::commands::{CallGraph, SortKey, report_rows};
    let meta = trace.metadata();
    let clock = Clock::of(trace);
    let rows = report_rows(trace, false, SortKey::Total);
    let calls: u64 = rows.iter().map(|r| r.calls).sum();
    let title = meta
        .process
        .as_ref()
        .map(|p| p.args.join(" "))
        .unwrap_or_else(|| trace.path().display().to_string());
    let mut svg = Vec::new();
    write_flamegraph(&mut svg, trace, &title)?;
    let h = trace.header();
    let duration = trace
        .final_block()
        .map(|f| clock.ns(f.end_tsc.saturating_sub(h.start_tsc)))
        .unwrap_or(0);
    writeln!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <title>fntrace: {}</title><style>\
         body{{font-family:system-ui,sans-serif;margin:1.5em;color:#222}}\
         table{{border-collapse:collapse;font-size:13px}}\
         td,th{{padding:2px 10px;text-align:right;border-bottom:1px solid #eee}}\
         td:last-child,th:last-child{{text-align:left;font-family:monospace}}\
         details{{margin-left:1.2em;font-family:monospace;font-size:13px}}\
         summary{{cursor:pointer}} .dim{{color:#888}} img{{max-width:100%}}\
         </style></head><body>",
        esc(&title)
    )?;
    writeln!(out, "<h1>fntrace: {}</h1>", esc(&title))?;
    writeln!(out, "<h2>Summary</h2><table>")?;
    if let Some(p) = &meta.process {
        writeln!(out, "<tr><th>program</th><td>{}</td></tr>", esc(&p.exe))?;
        writeln!(out, "<tr><th>pid</th><td>{}</td></tr>", p.pid)?;
    }
    writeln!(
        out,
        "<tr><th>threads</th><td>{}</td></tr><tr><th>calls</th><td>{calls}</td></tr>\
         <tr><th>functions</th><td>{}</td></tr><tr><th>duration</th><td>{}</td></tr></table>",
        trace.thread_ids().len(),
        rows.len(),
        crate::analysis::fmt_ns(duration)
    )?;
    writeln!(out, "<h2>Flame graph</h2>")?;
    writeln!(
        out,
        "<img id=\"flamegraph\" alt=\"flame graph\" src=\"data:image/svg+xml;base64,{}\">",
        base64(&svg)
    )?;
    writeln!(
        out,
        "<h2>Top functions</h2><table><tr><th>total</th><th>self</th><th>calls</th>\
         <th>avg</th><th>function</th></tr>"
    )?;
    for r in rows.iter().take(50) {
        writeln!(
            out,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            crate::analysis::fmt_ns(r.total_ns),
            crate::analysis::fmt_ns(r.self_ns),
            r.calls,
            crate::analysis::fmt_ns(r.avg_ns),
            esc(&r.function)
        )?;
    }
    writeln!(out, "</table><h2>Call tree</h2>")?;
    let g = CallGraph::build(
        trace,
        &crate::analysis::NamePattern::new(".*").expect("valid"),
    );
    g.write_html_tree(out, trace, 40)?;
    writeln!(
        out,
        "<p class=\"dim\">written by fntrace {}</p></body></html>",
        env!("CARGO_PKG_VERSION")
    )?;
    Ok(())
}
