//! Descriptors the runtime keeps open inside a program that owns every
//! descriptor number: the trace file ([`OwnFd`]) and the helper
//! descriptors of other modules ([`park`], [`close_if_same`]).
//!
//! A traced program may close descriptors it did not open (daemons close
//! everything above stderr at start-up; `closefrom`, `close_range`, Python's
//! `close_fds`) and then get the same numbers back from its own `open`, or
//! `dup2` onto a fixed number (a shell's `exec 3>file`). A runtime that
//! kept using its number would then grow, map, truncate or close the
//! program's file. So:
//! - descriptors are moved high ([`park`]: the lowest free number at or
//!   above [`PARK_AT`], or below the soft `RLIMIT_NOFILE` when that is
//!   lower), out of the way of `open`'s lowest-free rule and of fixed
//!   small numbers;
//! - before every use the trace file's descriptor is checked to still be
//!   the file it was (device and inode, one `fstat`); when it is not, the
//!   file is opened again by its path (never created) and used only if it
//!   is still the same file; the number in the program's hands is never
//!   touched again;
//! - descriptors are closed only while they are still ours.
//!
//! A leaf: it imports nothing else of the runtime. Nothing here runs on
//! the event path (growing the file, writeback and the end of a session
//! are the only users).

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicI32, Ordering};

/// What a descriptor is open on: (device, inode).
pub type FdId = (u64, u64);

/// Descriptors are moved to this number or above (when the soft
/// `RLIMIT_NOFILE` leaves room).
pub const PARK_AT: libc::c_int = 900;

/// The (device, inode) of `fd`, or `None` when it is not open.
fn identity(fd: libc::c_int) -> Option<FdId> {
    if fd < 0 {
        return None;
    }
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: fstat writes a `stat` into the buffer we own.
    let r = unsafe { libc::fstat(fd, st.as_mut_ptr()) };
    if r != 0 {
        return None;
    }
    // SAFETY: fstat succeeded and filled it in.
    let st = unsafe { st.assume_init() };
    Some((st.st_dev, st.st_ino))
}

/// Moves `fd` to a high number (close-on-exec), closing the original;
/// returns the descriptor to use (`fd` itself when no higher number is
/// free).
pub fn park(fd: libc::c_int) -> libc::c_int {
    if !(0..PARK_AT).contains(&fd) {
        return fd;
    }
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes the struct we own.
    let soft = if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } == 0 {
        lim.rlim_cur.min(libc::c_int::MAX as libc::rlim_t) as libc::c_int
    } else {
        1024
    };
    // Leave the top of the range to the program too.
    let at = PARK_AT.min(soft.saturating_sub(soft / 8 + 1));
    if at <= fd {
        return fd;
    }
    // SAFETY: duplicating our own descriptor.
    let high = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, at) };
    if high < 0 {
        return fd;
    }
    // SAFETY: the original is ours and no longer used.
    unsafe { libc::close(fd) };
    high
}

/// Closes `fd` only if it is still the file or socket `id` names
/// ([`identity_of`] when it was opened).
pub fn close_if_same(fd: libc::c_int, id: Option<FdId>) {
    if id.is_some() && identity(fd) == id {
        // SAFETY: the descriptor is still the one we opened.
        unsafe { libc::close(fd) };
    }
}

/// The (device, inode) identity of an open descriptor, for
/// [`close_if_same`].
pub fn identity_of(fd: libc::c_int) -> Option<FdId> {
    identity(fd)
}

/// A descriptor of a file the runtime opened by path, checked before each
/// use and opened again when the program took its number.
pub struct OwnFd {
    fd: AtomicI32,
    id: Option<FdId>,
    path: PathBuf,
    /// Serialises reopening (rare; never on the event path).
    reopen: Mutex<()>,
}

impl OwnFd {
    /// Takes `fd`, open on `path`, parking it high.
    pub fn new(fd: libc::c_int, path: &Path) -> OwnFd {
        let fd = park(fd);
        OwnFd {
            fd: AtomicI32::new(fd),
            id: identity(fd),
            path: path.to_path_buf(),
            reopen: Mutex::new(()),
        }
    }

    /// The descriptor, if it is still the file it was opened on (else the
    /// file opened again by its path, if that still is the same file);
    /// `None` when the file cannot be reached any more.
    pub fn get(&self) -> Option<libc::c_int> {
        let fd = self.fd.load(Ordering::Acquire);
        let id = self.id?;
        if identity(fd) == Some(id) {
            return Some(fd);
        }
        let _g = self.reopen.lock().unwrap_or_else(|e| e.into_inner());
        // Another thread may have reopened it meanwhile.
        let fd = self.fd.load(Ordering::Acquire);
        if identity(fd) == Some(id) {
            return Some(fd);
        }
        let c = CString::new(self.path.as_os_str().as_bytes()).ok()?;
        // SAFETY: a valid NUL-terminated path; never creates a file.
        let new = unsafe { libc::open(c.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
        if new < 0 {
            return None;
        }
        if identity(new) != Some(id) {
            // SAFETY: just opened by us; another file now has the path.
            unsafe { libc::close(new) };
            return None;
        }
        let new = park(new);
        self.fd.store(new, Ordering::Release);
        Some(new)
    }

    /// Closes the descriptor if it is still ours.
    pub fn close(&self) {
        close_if_same(self.fd.load(Ordering::Acquire), self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_closed_and_reused_number_is_never_used_and_the_file_is_reopened() {
        let dir = tempfile::tempdir().unwrap();
        let ours = dir.path().join("ours");
        let c = CString::new(ours.as_os_str().as_bytes()).unwrap();
        // SAFETY: plain open of a test file.
        let fd = unsafe { libc::open(c.as_ptr(), libc::O_RDWR | libc::O_CREAT, 0o644) };
        let own = OwnFd::new(fd, &ours);
        let n = own.get().unwrap();
        assert!(n >= fd);
        // The program closes it and opens its own file, which gets the
        // same number.
        // SAFETY: test code playing the program.
        unsafe { libc::close(n) };
        let theirs = dir.path().join("theirs");
        let t = std::fs::File::create(&theirs).unwrap();
        use std::os::fd::AsRawFd;
        // SAFETY: as above.
        let theirs_fd = unsafe { libc::dup2(t.as_raw_fd(), n) };
        assert_eq!(theirs_fd, n);
        let again = own.get().expect("reopened by path");
        assert_ne!(again, n, "the program's descriptor is not ours");
        assert_eq!(identity(again), own.id);
        own.close();
        // Their descriptor is still open; ours is closed.
        assert!(identity(n).is_some());
        assert!(identity(again).is_none());
        // A file replaced at the path is not taken for ours.
        // SAFETY: as above.
        unsafe { libc::close(n) };
        let own2 = OwnFd::new(
            // SAFETY: as above.
            unsafe { libc::open(c.as_ptr(), libc::O_RDWR) },
            &ours,
        );
        let m = own2.get().unwrap();
        // SAFETY: as above.
        unsafe { libc::close(m) };
        // (Renamed, not removed: a removed file's inode number can be
        // given to the next file at once.)
        std::fs::rename(&ours, dir.path().join("ours.old")).unwrap();
        std::fs::write(&ours, b"another file").unwrap();
        assert_eq!(own2.get(), None);
    }
}
