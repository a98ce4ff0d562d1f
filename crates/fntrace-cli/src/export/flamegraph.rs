//! `fntrace export --format flamegraph`: a flame graph (SVG, drawn by
//! `inferno`) of the folded stacks.

use std::io::{self, Write};

use fntrace_format::Trace;

use super::folded::{Weight, folded_stacks_of};
use crate::select::Selection;

/// Writes a flame graph (SVG, with `inferno`) of the self time per stack
/// of the selected calls.
pub fn write_flamegraph(
    out: &mut dyn Write,
    trace: &Trace,
    title: &str,
    sel: &Selection,
) -> io::Result<usize> {
    write_flamegraph_of(out, trace, title, sel, Weight::Wall)
}

/// [`write_flamegraph`] of on-CPU or off-CPU self time (`weight`).
pub fn write_flamegraph_of(
    out: &mut dyn Write,
    trace: &Trace,
    title: &str,
    sel: &Selection,
    weight: Weight,
) -> io::Result<usize> {
    let lines = folded_stacks_of(trace, sel, weight);
    let mut opts = inferno::flamegraph::Options::default();
    opts.title = title.to_string();
    opts.count_name = "ns".to_string();
    inferno::flamegraph::from_lines(&mut opts, lines.iter().map(String::as_str), out)
        .map_err(io::Error::other)?;
    Ok(lines.len())
}
