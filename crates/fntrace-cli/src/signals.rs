//! Signals of `fntrace record`: SIGINT, SIGTERM, SIGHUP and SIGQUIT sent to
//! the recorder are forwarded to the traced program (as `timeout` does), so
//! that the program ends and the recorder reports what it recorded; a
//! program killed by a signal is passed through by dying of the same signal
//! without dumping the recorder's core (the program's core is the one that
//! matters).

use std::sync::atomic::{AtomicI32, Ordering};

/// The signals forwarded to the child.
pub const FORWARDED: [libc::c_int; 4] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGQUIT];

/// The child's pid (0 before it runs).
static CHILD: AtomicI32 = AtomicI32::new(0);
/// A signal that arrived before the child ran (0: none).
static PENDING: AtomicI32 = AtomicI32::new(0);

/// The signal handler: sends the signal on to the child. Signals the
/// kernel generated for the terminal's foreground process group
/// (`SI_KERNEL`: Ctrl-C, Ctrl-\, hang-up) reached the child already and
/// are not sent twice.
extern "C" fn forward(sig: libc::c_int, info: *mut libc::siginfo_t, _ctx: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo to an SA_SIGINFO handler.
    let code = unsafe { (*info).si_code };
    if code == libc::SI_KERNEL {
        return;
    }
    match CHILD.load(Ordering::SeqCst) {
        0 => PENDING.store(sig, Ordering::SeqCst),
        // SAFETY: kill is async-signal-safe; the pid is our unreaped child.
        pid => unsafe {
            libc::kill(pid, sig);
        },
    }
}

/// Installs the forwarding handlers (before the child is spawned: the
/// child's exec resets handled signals to their default action).
pub fn install() {
    for sig in FORWARDED {
        // SAFETY: a zeroed sigaction is valid; the handler only uses
        // async-signal-safe calls and atomics.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = forward as *const () as usize;
            sa.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(sig, &sa, std::ptr::null_mut());
        }
    }
}

/// Starts forwarding to `pid`; a signal that came while it was being
/// spawned is delivered now.
pub fn set_child(pid: u32) {
    CHILD.store(pid as i32, Ordering::SeqCst);
    let sig = PENDING.swap(0, Ordering::SeqCst);
    if sig != 0 {
        // SAFETY: sends a signal to our own child.
        unsafe {
            libc::kill(pid as i32, sig);
        }
    }
}

/// Waits until child `pid` has ended, without reaping it (so that its pid
/// cannot be reused while signals are still forwarded to it).
pub fn wait_exited(pid: u32) {
    loop {
        // SAFETY: an all-zero siginfo is valid for waitid to fill.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: waits for our own child, leaving it waitable (WNOWAIT).
        let r = unsafe {
            libc::waitid(
                libc::P_PID,
                pid as libc::id_t,
                &mut info,
                libc::WEXITED | libc::WNOWAIT,
            )
        };
        if r == 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            return;
        }
    }
}

/// Restores the default actions once the child is gone.
pub fn restore() {
    CHILD.store(0, Ordering::SeqCst);
    for sig in FORWARDED {
        // SAFETY: resetting a signal's disposition has no preconditions.
        unsafe {
            libc::signal(sig, libc::SIG_DFL);
        }
    }
}

/// Ends this process with signal `sig`, as the child ended, without a core
/// dump of the recorder; returns only if the signal does not kill (then
/// the caller exits with 128 + `sig`).
pub fn die_like(sig: libc::c_int) {
    let none = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: these calls change only this process's own core-dump
    // settings, disposition and mask for `sig`, then raise it.
    unsafe {
        // A core limit of 0 is ignored when core_pattern is a pipe; a
        // process that is not dumpable is never dumped.
        libc::setrlimit(libc::RLIMIT_CORE, &none);
        libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0);
        libc::signal(sig, libc::SIG_DFL);
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, sig);
        libc::sigprocmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
        libc::raise(sig);
    }
}
