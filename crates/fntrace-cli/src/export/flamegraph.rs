//! `fntrace export --format flamegraph`: a flame graph (SVG, drawn by
//! `inferno`) of the folded stacks.

use std::io::{self, Write};

use fntrace_format::Trace;

use super::folded::folded_stacks;
use crate::select::Selection;

/// Writes a flame graph (SVG, with `inferno`) of the self time per stack
/// of the selected calls.
pub fn write_flamegraph(
    out: &mut dyn Write,
    trace: &Trace,
    title: &str,
    sel: &Selection,
) -> io::Result<usize> {
    let lines = folded_stacks(trace, sel);
    let mut opts = inferno::flamegraph::Options::default();
    opts.title = title.to_string();
    opts.count_name = "ns".to_string();
    inferno::flamegraph::from_lines(&mut opts, lines.iter().map(String::as_str), out)
        .map_err(io::Error::other)?;
    Ok(lines.len())
}
