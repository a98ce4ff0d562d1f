//! `fntrace export --format chrome`: Chrome's Trace Event JSON, for
//! Perfetto UI and chrome://tracing.

use rustc_hash::FxHashMap as HashMap;
use std::io::{self, Write};

use fntrace_format::Trace;

use crate::analysis::{Clock, Event, Events, Step};
use crate::select::{Selected, Selection, Selector};
use crate::symbols::Symbolizer;

/// Flush the output buffer past this many bytes.
const FLUSH_AT: usize = 1 << 20;

/// `s` as a JSON string literal (quotes included).
fn json_string(s: &str) -> Vec<u8> {
    serde_json::to_vec(s).unwrap_or_else(|_| b"\"\"".to_vec())
}

/// Appends `ns` as microseconds with three decimals (exact: no float).
#[inline]
fn push_us(buf: &mut Vec<u8>, ns: u64) {
    let _ = write!(buf, "{}.{:03}", ns / 1000, ns % 1000);
}

/// Writes Chrome's Trace Event JSON (`{"traceEvents": [...]}`), which
/// Perfetto UI and chrome://tracing open: one `B` and one `E` event per
/// call on its thread (calls whose exit was lost end where their thread's
/// recording ends), timestamps in microseconds since the start of the
/// recording, markers as instant events (category `marker`, their
/// argument text as `args.text`), and process and thread names (a
/// thread's as recorded at exit, else at start) as metadata events; with
/// `record --sched`, each thread's off-CPU intervals on a track of their
/// own (`offcpu_slices`).
/// Written as it is read, one thread after another, with the JSON of each
/// function name escaped once: memory stays bounded. Only the calls and
/// markers `sel` selects are written.
pub fn write_chrome(out: &mut dyn Write, trace: &Trace, sel: &Selection) -> io::Result<u64> {
    let clock = Clock::of(trace);
    let meta = trace.metadata();
    let mut sym = Symbolizer::new(meta);
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
    let mut buf: Vec<u8> = Vec::with_capacity(FLUSH_AT + (64 << 10));
    buf.extend_from_slice(b"{\"displayTimeUnit\":\"ns\",\"traceEvents\":[\n");
    let _ = write!(
        buf,
        "{{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":{pid},\"tid\":0,\"args\":{{\"name\":"
    );
    buf.extend_from_slice(&json_string(&pname));
    buf.extend_from_slice(b"}}");
    // JSON string of each function's name.
    let mut names: HashMap<u64, Vec<u8>> = HashMap::default();
    let mut n = 0u64;
    for tid in sel.threads(trace) {
        // `,\n{"ph":"` and `","cat":"function","pid":P,"tid":T,"ts":`
        // around the phase letter; the name follows the timestamp.
        let ids = format!("\",\"cat\":\"function\",\"pid\":{pid},\"tid\":{tid},\"ts\":");
        let mut stack: Vec<u64> = vec![];
        let mut events = Events::new(trace, tid);
        let mut selector = (!sel.is_all()).then(|| Selector::new(sel, trace));
        let mut call =
            |buf: &mut Vec<u8>, sym: &mut Symbolizer<'_>, ph: u8, func: u64, tsc: u64| {
                buf.extend_from_slice(b",\n{\"ph\":\"");
                buf.push(ph);
                buf.extend_from_slice(ids.as_bytes());
                push_us(buf, clock.since_start(tsc));
                buf.extend_from_slice(b",\"name\":");
                let name = names
                    .entry(func)
                    .or_insert_with(|| json_string(sym.name(func)));
                buf.extend_from_slice(name);
                buf.push(b'}');
            };
        let marker = |buf: &mut Vec<u8>, tsc: u64, name: &str, text: &str| {
            // An instant event on the thread.
            buf.extend_from_slice(b",\n{\"ph\":\"i\",\"s\":\"t\",\"cat\":\"marker\",");
            let _ = write!(buf, "\"pid\":{pid},\"tid\":{tid},\"ts\":");
            push_us(buf, clock.since_start(tsc));
            buf.extend_from_slice(b",\"name\":");
            buf.extend_from_slice(&json_string(name));
            buf.extend_from_slice(b",\"args\":{\"text\":");
            buf.extend_from_slice(&json_string(text));
            buf.extend_from_slice(b"}}");
        };
        while let Some(selector) = &mut selector {
            if buf.len() >= FLUSH_AT {
                out.write_all(&buf)?;
                buf.clear();
            }
            let x = match events.next() {
                None => break,
                Some(Event::Enter { func, tsc, .. }) => selector.enter(func, tsc, &mut sym),
                Some(Event::Exit { tsc, .. }) => selector.exit(tsc),
                Some(Event::Marker { tsc, name, text }) => {
                    let (shown, x) = selector.marker(tsc);
                    for &x in x {
                        let Selected::Begin { func, tsc } = x else {
                            continue;
                        };
                        stack.push(func);
                        call(&mut buf, &mut sym, b'B', func, tsc);
                        n += 1;
                    }
                    if shown {
                        marker(&mut buf, tsc, &name, &text);
                        n += 1;
                    }
                    continue;
                }
                Some(Event::Args(_) | Event::RetVal(_) | Event::Switch { .. }) => continue,
            };
            for &x in x {
                match x {
                    Selected::Begin { func, tsc } => {
                        stack.push(func);
                        call(&mut buf, &mut sym, b'B', func, tsc);
                    }
                    Selected::End { tsc } => {
                        let func = stack.pop().unwrap_or(0);
                        call(&mut buf, &mut sym, b'E', func, tsc);
                    }
                }
                n += 1;
            }
        }
        while selector.is_none() {
            if buf.len() >= FLUSH_AT {
                out.write_all(&buf)?;
                buf.clear();
            }
            let (ph, func, tsc) = match events.step() {
                Step::Enter { func, tsc, .. } => {
                    stack.push(func);
                    (b'B', func, tsc)
                }
                Step::Exit { tsc } => (b'E', stack.pop().unwrap_or(0), tsc),
                Step::Other => match events.next() {
                    None => break,
                    Some(Event::Enter { func, tsc, .. }) => {
                        stack.push(func);
                        (b'B', func, tsc)
                    }
                    Some(Event::Exit { tsc, .. }) => (b'E', stack.pop().unwrap_or(0), tsc),
                    Some(Event::Marker { tsc, name, text }) => {
                        marker(&mut buf, tsc, &name, &text);
                        n += 1;
                        continue;
                    }
                    Some(Event::Args(_) | Event::RetVal(_) | Event::Switch { .. }) => continue,
                },
            };
            call(&mut buf, &mut sym, ph, func, tsc);
            n += 1;
        }
        let tname = events.into_summary().name;
        let _ = write!(
            buf,
            ",\n{{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":{pid},\"tid\":{tid},\"args\":{{\"name\":"
        );
        buf.extend_from_slice(&json_string(&tname));
        buf.extend_from_slice(b"}}");
        n += offcpu_slices(&mut buf, trace, sel, pid, tid, &tname);
    }
    buf.extend_from_slice(b"\n]}\n");
    out.write_all(&buf)?;
    Ok(n)
}

/// The pseudo-thread id of thread `tid`'s off-CPU track.
pub fn offcpu_tid(tid: u32) -> u64 {
    (1 << 32) | u64::from(tid)
}

/// Writes thread `tid`'s off-CPU intervals (`record --sched`) as complete
/// (`X`) events, category `sched`, named `off CPU (blocked)` or `off CPU
/// (preempted)`, on a track of their own next to the thread's (tid
/// [`offcpu_tid`], named `NAME off CPU`): on the thread's own track they
/// would have to nest exactly inside the calls, which two clocks a few
/// microseconds apart cannot promise. With `--time-range`, the intervals
/// that start inside it. Returns the events written.
fn offcpu_slices(
    buf: &mut Vec<u8>,
    trace: &Trace,
    sel: &Selection,
    pid: u64,
    tid: u32,
    tname: &str,
) -> u64 {
    let iv = trace.offcpu_tsc(tid);
    if iv.is_empty() {
        return 0;
    }
    let clock = Clock::of(trace);
    let otid = offcpu_tid(tid);
    let _ = write!(
        buf,
        ",\n{{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":{pid},\"tid\":{otid},\"args\":{{\"name\":"
    );
    buf.extend_from_slice(&json_string(format!("{tname} off CPU").trim_start()));
    buf.extend_from_slice(b"}}");
    let mut n = 0;
    for (out, back, preempted) in iv {
        let at = clock.since_start(out);
        if sel.time_range.is_some_and(|(a, b)| at < a || at > b) {
            continue;
        }
        let why = if preempted { "preempted" } else { "blocked" };
        let _ = write!(
            buf,
            ",\n{{\"ph\":\"X\",\"cat\":\"sched\",\"name\":\"off CPU ({why})\",\"pid\":{pid},\"tid\":{otid},\"ts\":"
        );
        push_us(buf, at);
        buf.extend_from_slice(b",\"dur\":");
        push_us(buf, clock.ns(back.saturating_sub(out)));
        buf.push(b'}');
        n += 1;
    }
    n
}
