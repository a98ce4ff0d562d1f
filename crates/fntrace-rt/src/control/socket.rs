//! The control socket: `fntrace live PID` changes what a running, traced
//! process has switched on.
//!
//! The socket is `DIR/PID.sock`, where DIR is `$XDG_RUNTIME_DIR/fntrace`
//! or `/tmp/fntrace-UID`, a directory created with mode 0700 and checked
//! before use (owned by us, not a symlink, no access for group or others),
//! so only the same user can reach the socket; each connection is checked
//! again with `SO_PEERCRED` (the peer's effective uid must be ours) and
//! refused with a message otherwise. When DIR cannot be used (another
//! user created `/tmp/fntrace-UID` first, or it is not private) the socket
//! is the abstract name [`super::abstract_socket_name`] instead, which no
//! one can take away for good: the same `SO_PEERCRED` check guards it, and
//! `fntrace live` checks that the server is the process it asked for.
//! Sockets of processes that no longer exist (killed before they could
//! remove theirs) are removed from DIR when a runtime starts.
//!
//! Protocol: the server greets with one line (`ok fntrace control, pid
//! N`, or `error: refused: ...` before it closes); then one command per
//! line, each answered by lines ending in one line that starts with `ok`
//! or `error:`.
//! - `enable REGEX`, `disable REGEX`: switch functions on or off (patchable
//!   sites and XRay sleds);
//! - `list`: the functions switched on;
//! - `status`: pid, functions enabled, patchable sites (and unusable
//!   ones), XRay functions, whether recording.

use crate::ownfd::FdId;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::sync::Mutex;

use super::socket_dir;

/// Creates (or checks) the private socket directory.
fn private_dir() -> std::io::Result<PathBuf> {
    let d = socket_dir();
    match std::fs::DirBuilder::new().mode(0o700).create(&d) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => {
            return Err(std::io::Error::new(
                e.kind(),
                format!("{}: {e}", d.display()),
            ));
        }
    }
    let m = std::fs::symlink_metadata(&d)
        .map_err(|e| std::io::Error::new(e.kind(), format!("{}: {e}", d.display())))?;
    // SAFETY: geteuid cannot fail.
    let me = unsafe { libc::geteuid() };
    if !m.is_dir() || m.uid() != me || m.permissions().mode() & 0o077 != 0 {
        return Err(std::io::Error::other(format!(
            "{}: not a private directory of uid {me} (mode {:o}, owner {})",
            d.display(),
            m.permissions().mode() & 0o7777,
            m.uid()
        )));
    }
    Ok(d)
}

/// The socket this process listens on: its path (`None` for an abstract
/// socket, nothing to remove) and the listening descriptor; removed at
/// exit or when an attached recording detaches.
static LISTENING: Mutex<ListenSlot> = Mutex::new(None);

/// Removes the sockets in `dir` of processes that no longer exist.
fn remove_stale(dir: &std::path::Path) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for e in rd.flatten() {
        let name = e.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_suffix(".sock"))
            .and_then(|n| n.parse::<libc::pid_t>().ok())
            .filter(|&p| p > 0)
        else {
            continue;
        };
        // SAFETY: signal 0 only checks that the process exists.
        let gone = unsafe { libc::kill(pid, 0) } != 0
            && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH);
        if gone {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

/// Listens on the abstract socket name of this process.
fn bind_abstract(pid: u32) -> std::io::Result<UnixListener> {
    use std::os::linux::net::SocketAddrExt;
    let name = super::abstract_socket_name(pid);
    let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes())?;
    UnixListener::bind_addr(&addr)
        .map_err(|e| std::io::Error::new(e.kind(), format!("abstract socket @{name}: {e}")))
}

/// Binds this process's socket (a file in the private directory, else an
/// abstract name), with its descriptor moved out of the way of the
/// program's own numbers: the listener, its path (`@NAME` for an abstract
/// socket) and the descriptor's identity.
fn bind() -> std::io::Result<Bound> {
    use std::os::fd::{AsRawFd, FromRawFd, IntoRawFd};
    let pid = std::process::id();
    let (l, path) = match private_dir() {
        Ok(dir) => {
            remove_stale(&dir);
            let path = dir.join(format!("{pid}.sock"));
            let _ = std::fs::remove_file(&path);
            let l = UnixListener::bind(&path)
                .map_err(|e| std::io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
            let _ = std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600));
            (l, path)
        }
        // The directory is squatted or unusable: an abstract socket.
        Err(dir_err) => {
            let l = bind_abstract(pid)
                .map_err(|e| std::io::Error::new(e.kind(), format!("{dir_err}; {e}")))?;
            (
                l,
                PathBuf::from(format!("@{}", super::abstract_socket_name(pid))),
            )
        }
    };
    // SAFETY: the parked descriptor is the listener's, now owned here.
    let l = unsafe { UnixListener::from_raw_fd(crate::ownfd::park(l.into_raw_fd())) };
    let id = crate::ownfd::identity_of(l.as_raw_fd());
    Ok((l, path, id))
}

/// Records the listener in [`LISTENING`].
fn publish(l: &UnixListener, path: &std::path::Path, id: Option<FdId>) -> ListenSlot {
    use std::os::fd::AsRawFd;
    let file = (!path.as_os_str().as_encoded_bytes().starts_with(b"@")).then(|| path.to_path_buf());
    Some((file, l.as_raw_fd(), id))
}

/// A listener, its path and its descriptor's identity.
type Bound = (UnixListener, PathBuf, Option<FdId>);

/// What [`LISTENING`] holds.
type ListenSlot = Option<(Option<PathBuf>, i32, Option<FdId>)>;

/// Starts the control thread (once per process; again in a forked child).
/// Returns the socket's path (`@NAME` for an abstract socket).
pub fn start() -> std::io::Result<PathBuf> {
    let (l, path, id) = bind()?;
    *LISTENING.lock().unwrap_or_else(|e| e.into_inner()) = publish(&l, &path, id);
    crate::procinfo::with_async_signals_blocked(|| {
        std::thread::Builder::new()
            .name("fntrace-ctl".into())
            .spawn(move || serve(l, id))
    })
    .map_err(|e| std::io::Error::new(e.kind(), format!("cannot start the control thread: {e}")))?;
    Ok(path)
}

/// After the program closed the listener's descriptor: a new listener in
/// its place, unless [`stop`] has run meanwhile.
fn rebind() -> Option<(UnixListener, Option<FdId>)> {
    let mut g = LISTENING.lock().unwrap_or_else(|e| e.into_inner());
    g.as_ref()?;
    let (l, path, id) = bind().ok()?;
    *g = publish(&l, &path, id);
    Some((l, id))
}

/// Removes this process's socket and ends its control thread (at exit,
/// or when an attached recording detaches).
pub fn stop() {
    if let Some((p, fd, id)) = LISTENING.lock().unwrap_or_else(|e| e.into_inner()).take() {
        if let Some(p) = p {
            let _ = std::fs::remove_file(p);
        }
        if id.is_some() && crate::ownfd::identity_of(fd) == id {
            // SAFETY: `fd` is still the listener the control thread owns
            // (it is closed only when that thread ends, after this wakes
            // it): shutting it down makes its `accept` fail, and the
            // thread ends.
            unsafe { libc::shutdown(fd, libc::SHUT_RDWR) };
        }
    }
}

/// In a forked child: forgets the parent's socket (without removing it);
/// returns whether the parent had one.
pub fn forget() -> bool {
    LISTENING
        .try_lock()
        .map(|mut l| l.take().is_some())
        .unwrap_or(false)
}

/// Serves connections until `stop`. When the program closed (and perhaps
/// reused) the listener's descriptor number, the number is left alone
/// (never accepted on or closed again) and a new listener takes its place.
fn serve(mut l: UnixListener, mut id: Option<FdId>) {
    use std::os::fd::AsRawFd;
    // This thread's own calls are never traced.
    crate::recorder::guarded(|| {
        loop {
            if id.is_none() || crate::ownfd::identity_of(l.as_raw_fd()) != id {
                std::mem::forget(l);
                match rebind() {
                    Some((nl, nid)) => (l, id) = (nl, nid),
                    None => return,
                }
                continue;
            }
            let mut s = match l.accept() {
                Ok((s, _)) => s,
                // Shut down by `stop`: this listener is no longer ours.
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) => break,
                Err(_) => continue,
            };
            // SAFETY: geteuid cannot fail.
            let me = unsafe { libc::geteuid() };
            match super::peer(&s).map(|p| p.1) {
                Some(u) if u == me => {}
                u => {
                    let _ = writeln!(
                        s,
                        "error: refused: peer uid {} is not the traced process's uid {me}",
                        u.map_or("unknown".into(), |u| u.to_string())
                    );
                    continue;
                }
            }
            if writeln!(s, "ok fntrace control, pid {}", std::process::id()).is_ok() {
                let _ = session(s);
            }
        }
    });
}

fn session(s: UnixStream) -> std::io::Result<()> {
    let mut w = s.try_clone()?;
    for line in BufReader::new(s).lines() {
        let line = line?;
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let (cmd, arg) = line.split_once(' ').unwrap_or((line, ""));
        let arg = arg.trim();
        // Every request sees every site: hook calls start-up left to the
        // runtime thread are converted first if it has not yet.
        crate::dynamic::settle();
        match (cmd, arg) {
            ("enable" | "disable", "") => writeln!(w, "error: {cmd} needs a pattern")?,
            ("enable" | "disable", p) => match super::switch_functions(p, cmd == "enable") {
                Ok(n) => writeln!(w, "ok {n} functions {cmd}d")?,
                Err(e) => writeln!(w, "error: {e}")?,
            },
            ("list", _) => {
                let v = super::enabled_functions();
                for f in &v {
                    writeln!(w, "{f}")?;
                }
                writeln!(w, "ok {} functions enabled", v.len())?;
            }
            ("status", _) => {
                let (total, _, bad) = crate::dynamic::site_counts();
                let on = super::enabled_functions().len();
                writeln!(
                    w,
                    "ok pid {} enabled {on} patchable-sites {total} unusable {bad} \
                     xray-functions {} recording {}",
                    std::process::id(),
                    crate::xray::patch::max_function_id(),
                    crate::recorder::is_recording()
                )?;
            }
            ("quit", _) => return Ok(()),
            _ => writeln!(
                w,
                "error: unknown command {cmd:?} (enable REGEX, disable REGEX, list, status)"
            )?,
        }
    }
    Ok(())
}
