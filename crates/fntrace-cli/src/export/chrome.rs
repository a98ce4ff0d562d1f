//! `fntrace export --format chrome`: Chrome's Trace Event JSON, for
//! Perfetto UI and chrome://tracing.

use rustc_hash::FxHashMap as HashMap;
use std::io::{self, Write};

use fntrace_format::Trace;

use crate::analysis::Clock;

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
