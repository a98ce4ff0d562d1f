//! `fntrace live PID`: the client of a traced process's control socket
//! (opened by the runtime under `fntrace record`): sends `enable`,
//! `disable`, `list` and `status` commands and prints the answers.

use std::io::{self, BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::process::ExitCode;

use crate::{Error, Result};

/// `fntrace live PID ...`: sends commands to the control socket of a
/// traced process and prints the answers.
pub fn run(
    pid: u32,
    command: &[String],
    enable: &[String],
    disable: &[String],
) -> Result<ExitCode> {
    let mut lines: Vec<String> = vec![];
    for p in enable {
        lines.push(format!("enable {p}"));
    }
    for p in disable {
        lines.push(format!("disable {p}"));
    }
    if !command.is_empty() {
        lines.push(command.join(" "));
    }
    for l in &lines {
        if let Some(p) = l
            .strip_prefix("enable ")
            .or_else(|| l.strip_prefix("disable "))
        {
            regex::Regex::new(p.trim())
                .map_err(Error::pattern(format!("bad function pattern {p:?}")))?;
        }
    }
    let mut path = fntrace_rt::control::socket_path(pid);
    // Another user's process keeps its socket in that user's directory.
    if !path.exists() {
        use std::os::unix::fs::MetadataExt;
        if let Ok(m) = std::fs::metadata(format!("/proc/{pid}")) {
            // SAFETY: geteuid cannot fail.
            if m.uid() != unsafe { libc::geteuid() } {
                let u = m.uid();
                let run = PathBuf::from(format!("/run/user/{u}"));
                path = if run.is_dir() {
                    run.join(format!("fntrace/{pid}.sock"))
                } else {
                    PathBuf::from(format!("/tmp/fntrace-{u}/{pid}.sock"))
                };
            }
        } else {
            return Err(Error::Invalid(format!("no process {pid}")));
        }
    }
    let s = match UnixStream::connect(&path) {
        Ok(s) => s,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(Error::Invalid(format!(
                "{}: process {pid} has no fntrace control socket (is it running under \
             `fntrace record` without --no-control, and does it have patchable code: \
             XRay sleds, patchable entries or NOP fentry sites?)",
                path.display()
            )));
        }
        Err(e) if e.kind() == io::ErrorKind::PermissionDenied => {
            return Err(Error::Invalid(format!(
                "{}: refused: process {pid} belongs to another user (only its owner may control it)",
                path.display()
            )));
        }
        Err(e) => {
            return Err(Error::io_at(format!("{}: cannot connect", path.display()))(
                e,
            ));
        }
    };
    let mut w = s.try_clone()?;
    let mut r = BufReader::new(s);
    let mut hello = String::new();
    r.read_line(&mut hello)
        .map_err(Error::io_at(format!("{}: no answer", path.display())))?;
    if let Some(e) = hello.trim_end().strip_prefix("error: ") {
        eprintln!("fntrace: process {pid}: {e}");
        return Ok(ExitCode::from(2));
    }
    if !hello.starts_with("ok") {
        return Err(Error::Invalid(format!(
            "{}: not an fntrace control socket",
            path.display()
        )));
    }
    let interactive = lines.is_empty();
    let mut failed = false;
    let stdin = io::stdin();
    let mut input = lines.into_iter();
    loop {
        let line = if interactive {
            let mut l = String::new();
            if stdin.lock().read_line(&mut l)? == 0 {
                break;
            }
            l.trim().to_string()
        } else {
            match input.next() {
                Some(l) => l,
                None => break,
            }
        };
        if line.is_empty() {
            continue;
        }
        writeln!(w, "{line}")?;
        loop {
            let mut a = String::new();
            if r.read_line(&mut a)? == 0 {
                return Err(Error::Invalid(format!(
                    "{}: process {pid} closed the connection",
                    path.display()
                )));
            }
            let a = a.trim_end();
            if let Some(e) = a.strip_prefix("error: ") {
                eprintln!("fntrace: process {pid}: {e}");
                failed = true;
                break;
            }
            println!("{a}");
            if a == "ok" || a.starts_with("ok ") {
                break;
            }
        }
    }
    Ok(if failed {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}
