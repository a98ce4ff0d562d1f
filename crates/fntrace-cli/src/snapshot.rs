//! `fntrace live PID snapshot [-o PATH]`: copies the trace a running
//! process is writing (a flight recorder's current window) to a new trace
//! file without stopping it. The trace is found among the files the
//! process maps (the runtime maps its trace `MAP_SHARED`); the copy is
//! made through the file by `fntrace_format::snapshot`, which never takes
//! a chunk being overwritten for a valid one.

use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use fntrace_format::layout::{FINAL_OFFSET, Header};

use crate::{Error, Result};

/// The trace file process `pid` is writing: a mapped regular file with an
/// fntrace header naming `pid`.
pub fn trace_of(pid: u32) -> Result<PathBuf> {
    let maps_path = format!("/proc/{pid}/maps");
    let maps = std::fs::read_to_string(&maps_path).map_err(Error::io_at(format!(
        "{maps_path}: cannot read (no such process, or not yours)"
    )))?;
    let mut seen: Vec<&str> = vec![];
    for line in maps.lines() {
        let Some(p) = line.split_whitespace().nth(5) else {
            continue;
        };
        if !p.starts_with('/') || seen.contains(&p) {
            continue;
        }
        seen.push(p);
        let mut b = [0u8; FINAL_OFFSET];
        let ok = File::open(p).and_then(|mut f| f.read_exact(&mut b)).is_ok();
        if ok && Header::check(&b).is_ok() && Header::decode(&b).pid == pid {
            return Ok(PathBuf::from(p));
        }
    }
    Err(Error::Invalid(format!(
        "process {pid} is not recording a trace (no fntrace trace among its mapped files)"
    )))
}

/// `PATH.snapshot.N` with the first N that does not exist.
pub fn next_name(trace: &Path) -> PathBuf {
    (1u32..)
        .map(|n| {
            let mut s = trace.as_os_str().to_owned();
            s.push(format!(".snapshot.{n}"));
            PathBuf::from(s)
        })
        .find(|p| !p.exists())
        .expect("a free name")
}

/// Copies the current trace of `pid` to `output` (default
/// `TRACE.snapshot.N`) and says what it copied.
pub fn run(pid: u32, output: Option<&Path>) -> Result<ExitCode> {
    let trace = trace_of(pid)?;
    let out = output.map_or_else(|| next_name(&trace), Path::to_path_buf);
    let src =
        File::open(&trace).map_err(Error::io_at(format!("{}: cannot read", trace.display())))?;
    let dst =
        File::create(&out).map_err(Error::io_at(format!("{}: cannot write", out.display())))?;
    let st = fntrace_format::snapshot::snapshot(&src, &dst).map_err(Error::io_at(format!(
        "snapshot of {} into {}",
        trace.display(),
        out.display()
    )))?;
    eprintln!(
        "fntrace: snapshot of process {pid}'s trace {} written to {} ({} chunks, {} bytes{})",
        trace.display(),
        out.display(),
        st.chunks,
        st.bytes,
        if st.skipped > 0 {
            format!(", {} chunks left out: being overwritten", st.skipped)
        } else {
            String::new()
        }
    );
    Ok(ExitCode::SUCCESS)
}
