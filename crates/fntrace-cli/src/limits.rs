//! What limited a recording, in words: the settings that shaped it
//! (`-t`, `--max-size`, `--depth`, `-F`/`-N`/`-P`, `--duration`), where it
//! stopped early, and how many events were dropped from when. Shared by
//! `fntrace info` and `record`'s end-of-run summary, so that nothing is
//! lost or cut without both saying so.

use fntrace_format::Trace;
use fntrace_format::event::{
    SETTING_DEPTH, SETTING_DURATION, SETTING_FILTER, SETTING_MAX_SIZE, SETTING_NOTRACE,
    SETTING_PATCH, SETTING_STOPPED,
};

use crate::analysis::{Clock, fmt_ns};

/// `bytes` as a short size (`512 KiB`, `1.5 GiB`).
fn fmt_size(bytes: u64) -> String {
    const UNITS: [&str; 4] = ["bytes", "KiB", "MiB", "GiB"];
    let mut v = bytes as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{bytes} bytes")
    } else if v.fract() == 0.0 {
        format!("{v:.0} {}", UNITS[u])
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

/// The options that shaped what was recorded, as `record` takes them
/// (`-t 10us --depth 4 -F main`); empty when every call was recorded.
pub fn settings_text(trace: &Trace) -> String {
    let m = trace.metadata();
    let mut parts = vec![];
    let tf = m.time_filter_ns();
    if tf > 0 {
        parts.push(format!("-t {}", fmt_ns(tf).trim()));
    }
    if let Some(d) = m.setting(SETTING_DEPTH) {
        parts.push(format!("--depth {d}"));
    }
    for (key, opt) in [
        (SETTING_FILTER, "-F"),
        (SETTING_NOTRACE, "-N"),
        (SETTING_PATCH, "-P"),
    ] {
        for (_, v) in m.settings.iter().filter(|(k, _)| k == key) {
            parts.push(format!("{opt} {v:?}"));
        }
    }
    if let Some(d) = m
        .setting(SETTING_DURATION)
        .and_then(|v| v.parse::<u64>().ok())
    {
        parts.push(format!("--duration {}", fmt_ns(d).trim()));
    }
    if let Some(s) = m
        .setting(SETTING_MAX_SIZE)
        .and_then(|v| v.parse::<u64>().ok())
        .filter(|&s| s != fntrace_rt::config::DEFAULT_MAX_SIZE)
    {
        parts.push(format!("--max-size {}", fmt_size(s)));
    }
    parts.join(" ")
}

/// One line per limit that cut the recording short or dropped events
/// (empty when none did): the size limit with when it was reached and how
/// many events were dropped, recording stopped by `--duration`, the time
/// filter, the functions whose `#[instrument_fn(threshold)]` was applied.
pub fn notes(trace: &Trace) -> Vec<String> {
    let m = trace.metadata();
    let clock = Clock::of(trace);
    let h = trace.header();
    let at = |tsc: u64| {
        format!(
            "+{}",
            fmt_ns(clock.ns(tsc.saturating_sub(h.start_tsc))).trim()
        )
    };
    let mut v = vec![];
    let tf = m.time_filter_ns();
    if tf > 0 {
        v.push(format!(
            "time filter: only calls that lasted at least {} (and the calls they happened in) \
             were recorded; counts and totals are of those calls",
            fmt_ns(tf).trim()
        ));
    }
    let fns = m.fn_thresholds();
    if !fns.is_empty() {
        let mut sym = crate::symbols::Symbolizer::new(m);
        let list: Vec<String> = fns
            .iter()
            .map(|&(f, ns)| format!("{} {}", sym.name(f), fmt_ns(ns).trim()))
            .collect();
        v.push(format!(
            "#[instrument_fn(threshold)]: calls of {} shorter than that were not recorded, nor \
             what they called; counts of those functions are of the kept calls (a call whose \
             events filled the 65,536-event buffer was kept whatever its length)",
            list.join(", ")
        ));
    }
    let max_size = m
        .setting(SETTING_MAX_SIZE)
        .and_then(|v| v.parse::<u64>().ok());
    if trace.final_block().is_none()
        && let Some(max) = max_size
        && trace.file_len() + u64::from(h.chunk_size) > max
    {
        v.push(format!(
            "the file reached --max-size {} before the process ended without finishing it: \
             events after that were dropped, how many is not known",
            fmt_size(max)
        ));
    }
    if let Some(f) = trace.final_block() {
        if m.setting(SETTING_STOPPED).is_some() {
            let why = match m
                .setting(SETTING_DURATION)
                .and_then(|v| v.parse::<u64>().ok())
            {
                Some(d) => format!("after --duration {}", fmt_ns(d).trim()),
                None => "early".to_string(),
            };
            v.push(format!(
                "recording stopped {why}, at {}; the program ran on untraced",
                at(f.end_tsc)
            ));
        }
        if f.full_tsc != 0
            && let Some(l) = m
                .setting(fntrace_format::event::SETTING_FSIZE_LIMIT)
                .and_then(|v| v.parse::<u64>().ok())
        {
            v.push(format!(
                "the process's file size limit (ulimit -f, {}) was reached at {}: {} later \
                 calls were not recorded (each thread recorded on until its chunk was full)",
                fmt_size(l),
                at(f.full_tsc),
                f.lost_events
            ));
        } else if f.full_tsc != 0 && h.flags & fntrace_format::layout::HDR_FLAG_RING != 0 {
            // A flight recorder never runs out of file: every chunk of the
            // ring was held by a thread writing to it at once, and the
            // threads that found none recorded nothing more.
            let chunks = trace.file_len().saturating_sub(u64::from(h.header_size))
                / u64::from(h.chunk_size.max(1));
            v.push(format!(
                "every chunk of the ring ({chunks} of {}) was held by a running thread at {}: \
                 {} later calls of threads that found none were not recorded (each thread \
                 writing at once needs a chunk: give --ring at least {} per thread)",
                fmt_size(u64::from(h.chunk_size)),
                at(f.full_tsc),
                f.lost_events,
                fmt_size(u64::from(h.chunk_size))
            ));
        } else if f.full_tsc != 0 {
            let limit = max_size.map_or("the size limit".to_string(), |s| {
                format!("--max-size {}", fmt_size(s))
            });
            v.push(format!(
                "{limit} (or the disk) was full at {}: {} later calls were not recorded \
                 (each thread recorded on until its chunk was full)",
                at(f.full_tsc),
                f.lost_events
            ));
        } else if f.lost_events > 0 {
            let deep = m
                .setting(fntrace_format::event::SETTING_TOO_DEEP)
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(0)
                .min(f.lost_events);
            if deep > 0 {
                v.push(format!(
                    "{deep} calls deeper than the shadow stack ({} frames per thread) were \
                     not recorded, nor what they called",
                    fntrace_rt::recorder::shadow::CAPACITY
                ));
            }
            if f.lost_events > deep {
                v.push(format!(
                    "{} events were dropped by the runtime (an event that came while the \
                     recorder was busy on its thread: a signal handler)",
                    f.lost_events - deep
                ));
            }
        }
    }
    v
}
