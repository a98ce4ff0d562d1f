//! `fntrace info`: a description of a trace (program, threads, events,
//! clock, damage).

use std::io::{self, Write};
use std::path::Path;

use fntrace_format::text::sanitize;
use fntrace_format::{Ending, Trace};

use crate::Result;
use crate::analysis::{Call, Clock, ThreadSummary, Visitor, fmt_ns, walk_thread};
use crate::tracefile::open;

/// `ns` since the epoch as `YYYY-MM-DD HH:MM:SS.mmm`.
fn utc(ns: u64) -> String {
    let secs = ns / 1_000_000_000;
    let (days, rem) = ((secs / 86_400) as i64, secs % 86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}.{:03}",
        rem / 3600,
        rem / 60 % 60,
        rem % 60,
        ns / 1_000_000 % 1000
    )
}

/// The window a flight-recorder trace (`record --ring`) holds.
#[derive(Debug, Clone)]
pub struct RingWindow {
    /// Chunks in the ring.
    pub ring_chunks: u64,
    /// Chunks overwritten (older thread chunks no longer in the file).
    pub overwritten_chunks: u64,
    /// Bytes of the ring (header excluded).
    pub ring_bytes: u64,
    /// Window start and end, ns since the recording started.
    pub start_ns: u64,
    /// See `start_ns`.
    pub end_ns: u64,
    /// Latest of the threads' window starts (every thread is complete
    /// from there on), ns since the recording started.
    pub all_from_ns: u64,
}

impl RingWindow {
    /// One line: window and what was overwritten.
    pub fn summary(&self) -> String {
        format!(
            "window {} to {} after the start ({}), {} chunks ({} bytes) overwritten{}",
            fmt_ns(self.start_ns),
            fmt_ns(self.end_ns),
            fmt_ns(self.end_ns.saturating_sub(self.start_ns)),
            self.overwritten_chunks,
            self.overwritten_chunks
                .saturating_mul(self.ring_bytes / self.ring_chunks.max(1)),
            if self.all_from_ns > self.start_ns {
                format!(", every thread from {}", fmt_ns(self.all_from_ns))
            } else {
                String::new()
            }
        )
    }
}

/// The window of a flight-recorder trace, from its chunk headers (no
/// decoding); `None` for other traces.
pub fn ring_window(trace: &Trace) -> Option<RingWindow> {
    let h = trace.header();
    if h.flags & fntrace_format::layout::HDR_FLAG_RING == 0 {
        return None;
    }
    let clock = Clock::of(trace);
    let mut over = 0u64;
    let (mut start, mut end, mut all_from) = (u64::MAX, h.start_tsc, h.start_tsc);
    for tid in trace.thread_ids() {
        let mut first = true;
        for c in trace.thread_chunks(tid) {
            if first {
                over = over.saturating_add(u64::from(c.header.seq));
                start = start.min(c.header.base_tsc);
                if c.header.seq > 0 {
                    all_from = all_from.max(c.header.base_tsc);
                }
                first = false;
            }
            end = end.max(c.header.base_tsc);
        }
    }
    if let Some(f) = trace.final_block() {
        end = end.max(f.end_tsc);
    }
    let start = if start == u64::MAX {
        h.start_tsc
    } else {
        start
    };
    let since = |t: u64| clock.ns(t.saturating_sub(h.start_tsc));
    Some(RingWindow {
        ring_chunks: h.ring_chunks,
        overwritten_chunks: over,
        ring_bytes: h.ring_chunks.saturating_mul(u64::from(h.chunk_size)),
        start_ns: since(start),
        end_ns: since(end),
        all_from_ns: since(all_from),
    })
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
        // Paths are kept raw (they must open their file): escaped here.
        writeln!(out, "# program       {}", sanitize(&p.exe))?;
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
    let settings = crate::limits::settings_text(trace);
    if !settings.is_empty() {
        writeln!(out, "# recorded with {settings}")?;
    }
    for n in crate::limits::notes(trace) {
        writeln!(out, "# limit         {n}")?;
    }
    if let Some((at, controller)) = meta.attach {
        let since_start = clock.ns(at.saturating_sub(h.start_tsc));
        writeln!(
            out,
            "# attached      at {} UTC by `fntrace record -p` (pid {controller}); calls already \
             running then have no entry, their exits are not recorded",
            utc(h.start_realtime_ns + since_start)
        )?;
        match meta.detach {
            Some((end, why)) => writeln!(
                out,
                "# detached      at {} UTC ({}); window {}",
                utc(h.start_realtime_ns + clock.ns(end.saturating_sub(h.start_tsc))),
                match why {
                    fntrace_format::DetachReason::Asked =>
                        "duration elapsed or stopped by the user",
                    fntrace_format::DetachReason::ControllerGone => {
                        "the controller went away; the runtime detached by itself"
                    }
                    fntrace_format::DetachReason::ProcessExit => "the process exited",
                    fntrace_format::DetachReason::Other(_) => "unknown reason",
                },
                fmt_ns(clock.ns(end.saturating_sub(at)))
            )?,
            None => writeln!(
                out,
                "# detached      no record of it: the process died (or exec'd) during the window"
            )?,
        }
    }
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
    // A trace that ended clean and whose writer counted its events is
    // described from those counts: every chunk is checked (checksums) but
    // only each thread's last chunk is decoded. Otherwise (unfinished,
    // a flight-recorder window, an older writer) every event is read.
    let counted = trace.ending() == Ending::Clean
        && trace.final_block().and_then(|f| f.events()).is_some()
        && h.flags & fntrace_format::layout::HDR_FLAG_RING == 0;
    let threads: Vec<ThreadSummary> = trace
        .thread_ids()
        .into_iter()
        .map(|tid| {
            if counted {
                thread_from_counts(trace, tid)
            } else {
                struct Nop;
                impl Visitor for Nop {
                    fn call(&mut self, _c: &Call) {}
                }
                walk_thread(trace, tid, &mut Nop)
            }
        })
        .collect();
    // The writer's counts (final block, chunk headers).
    let events = trace.event_count(None).events;
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
        "# counted       {}",
        if counted {
            "by the writer (final block, chunk headers); every chunk checked, each thread's last chunk decoded"
        } else {
            "from the events (the trace did not end clean, is a flight-recorder window, or has no writer counts)"
        }
    )?;
    if let Some(w) = ring_window(trace) {
        writeln!(
            out,
            "# ring          {} bytes ({} chunks); {}",
            w.ring_bytes,
            w.ring_chunks,
            w.summary()
        )?;
    }
    if events == 0 {
        writeln!(
            out,
            "# size          {} bytes (no events)",
            trace.file_len()
        )?;
    } else {
        writeln!(
            out,
            "# size          {} bytes ({:.2} bytes per event)",
            trace.file_len(),
            trace.file_len() as f64 / events as f64
        )?;
    }
    writeln!(out, "# modules       {}", meta.modules.len())?;
    for m in &meta.modules {
        writeln!(
            out,
            "#   {:#x} {:>10} {} {}",
            m.start,
            m.size,
            m.build_id_hex(),
            sanitize(&m.path)
        )?;
    }
    if !meta.libfuncs.is_empty() {
        writeln!(
            out,
            "# libcalls      {} library functions hooked (record --libcalls)",
            meta.libfuncs.len()
        )?;
    }
    if !meta.offcpu.is_empty() {
        // Of the traced threads (the runtime's own threads have intervals
        // but no stream).
        // Cut to the recording's window (what `duration` spans): an
        // interval reaching outside it is damage, not time off CPU.
        // Intervals are CLOCK_MONOTONIC ns; the window is the TSC span of
        // `duration` around the header's start.
        let lo = h
            .start_mono_ns
            .saturating_sub(clock.ns(h.start_tsc.saturating_sub(first)));
        let hi = h
            .start_mono_ns
            .saturating_add(clock.ns(last.saturating_sub(h.start_tsc)));
        let (mut n, mut ns, mut cut, mut on) = (0usize, 0u64, 0usize, 0usize);
        for v in threads.iter().filter_map(|t| meta.offcpu.get(&t.tid)) {
            on += 1;
            for o in v {
                n += 1;
                let (a, b) = (o.out_ns.clamp(lo, hi), o.in_ns.clamp(lo, hi));
                if (a, b) != (o.out_ns, o.in_ns) {
                    cut += 1;
                }
                ns = ns.saturating_add(b.saturating_sub(a));
            }
        }
        let cut = if cut > 0 {
            format!(", {cut} cut to the recording's window (damaged)")
        } else {
            String::new()
        };
        writeln!(
            out,
            "# off CPU       {n} intervals, {} in all{cut}, on {on} threads (record --sched)",
            crate::analysis::fmt_ns(ns).trim(),
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
    // Events dropped by the runtime: its own count when it finished (it
    // includes events no `Lost` record could be written for, after the
    // size limit), else the `Lost` records.
    let lost_events: u64 = threads
        .iter()
        .map(|t| t.lost)
        .sum::<u64>()
        .max(trace.final_block().map_or(0, |f| f.lost_events));
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

/// What `info` says of thread `tid` of a trace whose writer counted its
/// events: the counts from the chunk headers, every chunk checked as a
/// whole-stream read checks it (without decoding), and the last chunk
/// decoded for the thread's end (its exit record, calls still open, its
/// last time). Events lost are only the final block's total.
pub fn thread_from_counts(trace: &Trace, tid: u32) -> ThreadSummary {
    let n = trace.thread_chunks(tid).count();
    let mut r = trace.stream(tid);
    r.check_chunks(n.saturating_sub(1));
    let mut damage = r.take_damage();
    let mut sum = match trace.chunk_start(tid, n.saturating_sub(1)) {
        Some((pos, depth)) => {
            let mut ev =
                crate::analysis::Events::resume(trace, tid, crate::analysis::Resume { pos, depth });
            for _ in ev.by_ref() {}
            ev.into_summary()
        }
        None => ThreadSummary {
            tid,
            ..Default::default()
        },
    };
    damage.append(&mut sum.damage);
    sum.damage = damage;
    sum.events = trace.event_count(Some(tid)).events;
    sum.lost = 0;
    if let Some(c) = trace.thread_chunks(tid).next() {
        sum.first_tsc = sum.first_tsc.min(c.header.base_tsc);
    }
    if sum.name.is_empty() {
        // The thread's start record (its name then) opens its stream.
        let mut first = trace.stream(tid);
        for _ in 0..4 {
            match first.next_item() {
                Some(fntrace_format::StreamItem::Record(fntrace_format::Record::ThreadStart {
                    name,
                    ..
                })) => {
                    sum.name = name;
                    break;
                }
                Some(_) => {}
                None => break,
            }
        }
    }
    sum
}

/// `fntrace info`: describes the trace at `path`.
pub fn run(out: &mut dyn Write, path: &Path) -> Result<()> {
    write_info(out, &open(path)?)?;
    Ok(())
}
