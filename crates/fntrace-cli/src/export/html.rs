//! `fntrace export --format html`: one self-contained offline HTML page
//! (summary, flame graph, top functions, call tree).

use std::io::{self, Write};

use fntrace_format::Trace;

use super::flamegraph::write_flamegraph;
use crate::analysis::Clock;

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
pub fn write_html(
    out: &mut dyn Write,
    trace: &Trace,
    sel: &crate::select::Selection,
) -> io::Result<()> {
    use crate::graph::CallGraph;
    use crate::report::SortKey;
    let meta = trace.metadata();
    let clock = Clock::of(trace);
    let rows = crate::report::report_rows_and_markers(trace, false, SortKey::Total, sel).0;
    let calls: u64 = rows.iter().map(|r| r.calls).sum();
    let title = meta
        .process
        .as_ref()
        .map(|p| p.args.join(" "))
        .unwrap_or_else(|| trace.path().display().to_string());
    let mut svg = Vec::new();
    write_flamegraph(&mut svg, trace, &title, sel)?;
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
        sel,
    );
    g.write_html_tree(out, trace, 40)?;
    writeln!(
        out,
        "<p class=\"dim\">written by fntrace {}</p></body></html>",
        env!("CARGO_PKG_VERSION")
    )?;
    Ok(())
}
