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
    let (s, path) = connect(pid)?;
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

/// Whether process `pid` exists (a process of another user counts).
fn exists(pid: u32) -> bool {
    let Ok(p) = libc::pid_t::try_from(pid) else {
        return false;
    };
    // SAFETY: signal 0 only checks that the process exists.
    let alive = unsafe { libc::kill(p, 0) } == 0;
    alive || io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
}

/// Connects to the control socket of process `pid`: its file in the
/// socket directory of its user, else its abstract socket (the runtime's
/// fallback when that directory cannot be used); checks that the server
/// is that process. Returns the stream and the socket's name.
fn connect(pid: u32) -> Result<(UnixStream, PathBuf)> {
    use std::os::unix::fs::MetadataExt;
    let mut path = fntrace_rt::control::socket_path(pid);
    if !exists(pid) {
        // A socket left by a process that was killed: remove it.
        let stale = std::fs::remove_file(&path).is_ok();
        return Err(Error::Invalid(format!(
            "no such traced process {pid}{}",
            if stale {
                format!(" (removed its stale socket {})", path.display())
            } else {
                String::new()
            }
        )));
    }
    // Another user's process keeps its socket in that user's directory.
    let owner = std::fs::metadata(format!("/proc/{pid}"))
        .map(|m| m.uid())
        .ok();
    // SAFETY: geteuid cannot fail.
    let me = unsafe { libc::geteuid() };
    if let Some(u) = owner.filter(|&u| u != me) {
        let run = PathBuf::from(format!("/run/user/{u}"));
        path = if run.is_dir() {
            run.join(format!("fntrace/{pid}.sock"))
        } else {
            PathBuf::from(format!("/tmp/fntrace-{u}/{pid}.sock"))
        };
    }
    let file = UnixStream::connect(&path);
    let (s, path) = match file {
        Ok(s) => (s, path),
        Err(e) if e.kind() == io::ErrorKind::PermissionDenied => {
            return Err(Error::Invalid(format!(
                "{}: refused: process {pid} belongs to another user (only its owner may control it)",
                path.display()
            )));
        }
        Err(file_err) => {
            use std::os::linux::net::SocketAddrExt;
            let name = fntrace_rt::control::abstract_socket_name(pid);
            let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes())?;
            match UnixStream::connect_addr(&addr) {
                Ok(s) => (s, PathBuf::from(format!("@{name}"))),
                Err(_) if file_err.kind() == io::ErrorKind::NotFound => {
                    return Err(Error::Invalid(format!(
                        "{}: process {pid} has no fntrace control socket (is it running under \
                         `fntrace record` without --no-control, and does it have patchable code: \
                         XRay sleds, patchable entries or NOP fentry sites?)",
                        path.display()
                    )));
                }
                Err(_) => {
                    return Err(Error::io_at(format!(
                        "{}: process {pid} does not answer on its control socket",
                        path.display()
                    ))(file_err));
                }
            }
        }
    };
    // Anyone can bind an abstract name (or a socket in a directory that is
    // not private): talk only to the process asked for, of its owner.
    match fntrace_rt::control::peer(&s) {
        Some((p, u)) if p as u32 == pid && owner.is_none_or(|o| o == u) => Ok((s, path)),
        Some((p, u)) => Err(Error::Invalid(format!(
            "{}: refused: the socket is held by process {p} (uid {u}), not by process {pid}",
            path.display()
        ))),
        None => Err(Error::Invalid(format!(
            "{}: cannot check who holds the socket",
            path.display()
        ))),
    }
}
