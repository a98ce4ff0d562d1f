//! `fntrace export --format gmon`: the `gmon.out` file of
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
//!
//! With a selection (`--tid`, `--filter`, ...), the arcs and histogram
//! are those of the selected calls only: an arc joins a selected call to
//! its selected caller (a selected call whose caller is not selected is
//! spontaneous), and the time of unselected callees counts as their
//! caller's self time, as in the folded stacks.

use rustc_hash::FxHashMap as HashMap;
use std::io::{self, Write};

use fntrace_format::Trace;
use object::{Object, ObjectSymbol};

use crate::analysis::{Clock, Event};
use crate::select::{SelectedEvents, Selection};

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

/// Collects the arcs and self times of the (selected) calls of one thread.
fn collect_arcs(
    events: SelectedEvents<'_, '_>,
    arcs: &mut HashMap<(u64, u64), u64>,
    self_ticks: &mut HashMap<u64, u64>,
) {
    // Open calls: (function, entry, ticks in children).
    let mut stack: Vec<(u64, u64, u64)> = vec![];
    for ev in events {
        match ev {
            Event::Enter { func, tsc, .. } => {
                let from = stack.last().map_or(0, |f| f.0);
                *arcs.entry((from, func)).or_default() += 1;
                stack.push((func, tsc, 0));
            }
            Event::Exit { tsc, .. } => {
                let Some((func, start, children)) = stack.pop() else {
                    continue;
                };
                let dur = tsc.saturating_sub(start);
                if let Some(p) = stack.last_mut() {
                    p.2 = p.2.saturating_add(dur);
                }
                let t = self_ticks.entry(func).or_default();
                *t = t.saturating_add(dur.saturating_sub(children));
            }
            _ => {}
        }
    }
}

/// Writes `gmon.out` for the trace's main executable, of the calls `sel`
/// selects (a `--count` trace has arcs, not calls: it takes no selection).
pub fn write_gmon(out: &mut dyn Write, trace: &Trace, sel: &Selection) -> io::Result<GmonSummary> {
    let meta = trace.metadata();
    let exe = super::main_module(meta)?;
    let mut arcs: HashMap<(u64, u64), u64> = HashMap::default();
    let mut self_ticks: HashMap<u64, u64> = HashMap::default();
    let counted = !meta.arcs.is_empty();
    if counted && !sel.is_all() {
        return Err(io::Error::other(
            "a --count trace holds call-graph arcs, not calls: --tid, --time-range, --filter, --depth and --threshold do not apply",
        ));
    }
    if counted {
        for &(from, to, n) in &meta.arcs {
            *arcs.entry((from, to)).or_default() += n;
        }
    } else {
        for tid in sel.threads(trace) {
            collect_arcs(
                SelectedEvents::new(trace, tid, sel),
                &mut arcs,
                &mut self_ticks,
            );
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
