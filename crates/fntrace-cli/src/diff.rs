//! `fntrace report --diff`: changes of total time and calls per function
//! between two traces, largest first.

use std::io::{self, Write};

use fntrace_format::Trace;
use serde::Serialize;

use crate::analysis::fmt_ns;
use crate::report::{Format, SortKey, csv_field, report_rows};

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
