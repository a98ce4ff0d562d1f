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
//! gprof adds up the records of one arc (in a 64-bit count), so an arc of
//! more than `u32::MAX` calls is written as several records, at most
//! [`MAX_ARC_RECORDS`]: a count beyond [`MAX_ARC_CALLS`] (68.7 billion
//! calls; a damaged or hostile trace can claim 2^62, which would take a
//! billion records) is written as that many, and the summary says which
//! arcs were capped.
//!
//! The histogram holds each function's self time in bins inside it (see
//! `Histogram`), at the finest rate at which every function's time fits
//! its 16-bit counts; the summary names a function whose time fits at no
//! rate.
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

/// Most histogram bins (2 bytes each in the file): bins are 2 bytes of
/// text (gprof's unit) each unless the timed functions span more.
const MAX_BINS: u64 = 1 << 24;
/// Most records one arc is written as (each holds a 32-bit count).
pub const MAX_ARC_RECORDS: u64 = 16;
/// Most calls one arc is written with: [`MAX_ARC_RECORDS`] full records.
pub const MAX_ARC_CALLS: u64 = MAX_ARC_RECORDS * u32::MAX as u64;

/// An arc whose count was more than gmon.out holds ([`MAX_ARC_CALLS`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CappedArc {
    /// The calling function (its symbol, else the call site's address).
    pub caller: String,
    /// The called function (its symbol, else its address).
    pub callee: String,
    /// The count in the trace.
    pub count: u64,
}

/// What went into a gmon export.
#[derive(Debug, Default)]
pub struct GmonSummary {
    /// Arcs written.
    pub arcs: usize,
    /// Calls along them.
    pub calls: u64,
    /// Whether the arcs came from a counting trace (else from timed calls).
    pub counted: bool,
    /// Arcs written with [`MAX_ARC_CALLS`] calls instead of their count.
    pub capped: Vec<CappedArc>,
    /// The histogram's counts per second (its time resolution).
    pub rate: u32,
    /// Functions whose self time did not fit in their histogram bins even
    /// at one count per second, and the nanoseconds they had (written as
    /// much as fits).
    pub capped_time: Vec<(String, u64)>,
}

/// The self-time histogram of a gmon.out: `bins` 16-bit counts of
/// `rate` per second over `low..high`.
///
/// gprof gives a bin's count to the functions the bin overlaps, in
/// proportion to the overlap, so a function's time goes only into bins
/// that lie inside it: with one-unit (2-byte) bins, the default, every
/// unit of it. The rate is the highest power of ten (up
/// to 10^9, nanoseconds) at which every function's time fits in its bins'
/// 16-bit counts, so that short calls still show and long ones are not
/// cut; time that fits at no rate is written as much as fits and listed.
struct Histogram {
    low: u64,
    high: u64,
    rate: u32,
    bins: Vec<u16>,
    /// (key, ns) of functions whose time did not fit.
    capped: Vec<(u64, u64)>,
}

impl Histogram {
    /// The histogram of `timed`: (from, end) link-time ranges with their
    /// self time in ns.
    fn of(timed: &HashMap<(u64, u64), u64>) -> Histogram {
        let mut ranges: Vec<(u64, u64, u64)> =
            timed.iter().map(|(&(a, e), &ns)| (a, e, ns)).collect();
        ranges.sort_unstable();
        let Some(lo) = ranges.iter().map(|r| r.0).min() else {
            return Histogram {
                low: 0,
                high: 1,
                rate: 1_000_000_000,
                bins: vec![0],
                capped: vec![],
            };
        };
        let hi = ranges.iter().map(|r| r.1).max().unwrap_or(lo + 1);
        // gprof works in 2-byte units (addresses halved, rounding down): a
        // bin is a whole number of units, and a function owns the units
        // from its halved start to its successor's. Bins are one unit
        // unless the timed functions span more than `MAX_BINS`.
        let mut bin = 2u64;
        while (hi - lo).div_ceil(bin) > MAX_BINS {
            bin *= 2;
        }
        let low = lo & !(bin - 1);
        let nbins = (hi - low).div_ceil(bin) + 1;
        let high = low + nbins * bin;
        let units = bin / 2;
        // The bins inside each range's units (the one holding its start
        // when none is: a function shorter than a bin).
        let inside = |a: u64, e: u64| -> (u64, u64) {
            let (au, eu) = ((a - low) / 2, (e - low) / 2);
            let first = au.div_ceil(units);
            let last = eu / units;
            if last > first {
                (first, last)
            } else {
                (au / units, au / units + 1)
            }
        };
        let mut rate: u64 = 1_000_000_000;
        for &(a, e, ns) in &ranges {
            let (f, l) = inside(a, e);
            let cap = (l - f) * u64::from(u16::MAX);
            // counts = ns * rate / 1e9 must be at most cap.
            while rate > 1 && (ns as u128) * (rate as u128) > (cap as u128) * 1_000_000_000 {
                rate /= 10;
            }
        }
        let mut bins = vec![0u16; nbins as usize];
        let mut capped = vec![];
        for &(a, e, ns) in &ranges {
            let (f, l) = inside(a, e);
            let want = ((ns as u128 * rate as u128 + 500_000_000) / 1_000_000_000) as u64;
            let n = l - f;
            let mut left = want;
            for k in 0..n {
                // Spread evenly; earlier bins take the remainder.
                let share = want / n + u64::from(k < want % n);
                let b = &mut bins[(f + k) as usize];
                let add = share.min(u64::from(u16::MAX - *b));
                *b += add as u16;
                left -= add;
            }
            if left > 0 {
                capped.push((a, ns));
            }
        }
        Histogram {
            low,
            high,
            rate: rate as u32,
            bins,
            capped,
        }
    }
}

/// Collects the arcs and self times of the (selected) calls of one thread.
fn collect_arcs(
    events: SelectedEvents<'_, '_>,
    arcs: &mut HashMap<(u64, u64), u64>,
    self_ticks: &mut HashMap<u64, u64>,
) {
    // Open calls: (function, entry, ticks in children).
    let mut stack: Vec<(u64, u64, u64)> = vec![];
    // Entries still to come that continue calls a context switch
    // suspended (their arc was counted at the first piece).
    let mut continuing = 0u64;
    for ev in events {
        match ev {
            Event::Switch {
                resumed: true,
                calls,
            } => continuing = calls,
            Event::Enter { func, tsc, .. } => {
                let from = stack.last().map_or(0, |f| f.0);
                if continuing > 0 {
                    continuing -= 1;
                } else {
                    *arcs.entry((from, func)).or_default() += 1;
                }
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
            let a = arcs.entry((from, to)).or_default();
            *a = a.saturating_add(n);
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
    // A regular file only, of bounded size (a hostile trace may name a
    // device or a FIFO as its program).
    let data = fntrace_format::regular::read_regular(
        std::path::Path::new(&exe.path),
        fntrace_format::regular::MAX_READ_BYTES,
    )
    .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", exe.path)))?;
    let obj = object::File::parse(&*data).map_err(io::Error::other)?;
    let mut named: Vec<(u64, u64, &str)> = obj
        .symbols()
        .filter(|s| s.kind() == object::SymbolKind::Text && s.address() != 0)
        .map(|s| (s.address(), s.size(), s.name().unwrap_or("")))
        .collect();
    named.sort_unstable();
    let funcs: Vec<(u64, u64)> = named.iter().map(|&(a, n, _)| (a, n)).collect();
    // The function at a link-time address, for messages.
    let name_at = |a: u64| {
        let i = named.partition_point(|f| f.0 <= a);
        match i.checked_sub(1).map(|i| named[i]) {
            Some((start, size, name)) if !name.is_empty() && a < start + size.max(1) => {
                name.to_string()
            }
            _ => format!("{a:#x}"),
        }
    };
    let mut sum = GmonSummary {
        counted,
        ..Default::default()
    };
    let in_exe = |a: u64| exe.contains(a);
    let link = |a: u64| a.wrapping_sub(exe.bias);
    let clock = Clock::of(trace);
    // Self time per function of the executable: (start, end) -> ns (its
    // keys are addresses inside it).
    let mut timed: HashMap<(u64, u64), u64> = HashMap::default();
    for (&func, &ticks) in &self_ticks {
        if !in_exe(func) || ticks == 0 {
            continue;
        }
        let a = link(func);
        let i = funcs.partition_point(|f| f.0 <= a);
        let Some(&(start, size)) = i.checked_sub(1).map(|i| &funcs[i]) else {
            continue;
        };
        let end = start + size.max(1);
        if a >= end {
            continue;
        }
        let t = timed.entry((start, end)).or_default();
        *t = t.saturating_add(clock.ns(ticks));
    }
    let hist = Histogram::of(&timed);
    sum.rate = hist.rate;
    sum.capped_time = hist
        .capped
        .iter()
        .map(|&(a, ns)| (name_at(a), ns))
        .collect();
    out.write_all(b"gmon")?;
    out.write_all(&1u32.to_le_bytes())?;
    out.write_all(&[0u8; 12])?;
    out.write_all(&[0u8])?;
    out.write_all(&hist.low.to_le_bytes())?;
    out.write_all(&hist.high.to_le_bytes())?;
    out.write_all(&(hist.bins.len() as u32).to_le_bytes())?;
    out.write_all(&hist.rate.to_le_bytes())?;
    let mut dimen = [0u8; 15];
    dimen[..7].copy_from_slice(b"seconds");
    out.write_all(&dimen)?;
    out.write_all(b"s")?;
    for b in &hist.bins {
        out.write_all(&b.to_le_bytes())?;
    }
    let mut sorted: Vec<_> = arcs.into_iter().collect();
    sorted.sort_unstable();
    for ((from, to), n) in sorted {
        if !in_exe(from) || !in_exe(to) {
            continue;
        }
        if n > MAX_ARC_CALLS {
            sum.capped.push(CappedArc {
                caller: name_at(link(from)),
                callee: name_at(link(to)),
                count: n,
            });
        }
        let mut n = n.min(MAX_ARC_CALLS);
        while n > 0 {
            let c = n.min(u64::from(u32::MAX));
            out.write_all(&[1u8])?;
            out.write_all(&link(from).to_le_bytes())?;
            out.write_all(&link(to).to_le_bytes())?;
            out.write_all(&(c as u32).to_le_bytes())?;
            n -= c;
            sum.arcs += 1;
            sum.calls = sum.calls.saturating_add(c);
        }
    }
    Ok(sum)
}
