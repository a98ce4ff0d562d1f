//! Keeping `SIGTRAP` working for the `int3` protocol while the program
//! runs: code changed while the program runs (`call __fentry__` sites
//! converted at start-up, `fntrace live`, markers) relies on a thread that
//! hits a half-written site trapping into the runtime's handler.
//!
//! - `sigprocmask`/`pthread_sigmask` are interposed so that, while a
//!   session records, the program cannot block `SIGTRAP`: the kernel
//!   kills a thread that hits an `int3` with `SIGTRAP` blocked instead of
//!   running the handler. Programs that block every signal
//!   (`sigfillset` and `pthread_sigmask(SIG_BLOCK)` before starting their
//!   threads, to take signals on one thread with `sigwait`) were killed
//!   that way. Every other signal is blocked as asked; the mask reported
//!   back simply never holds `SIGTRAP`.
//! - `sigaction`/`signal` are interposed so that, once the runtime's
//!   handler is installed, a program that sets its own `SIGTRAP` action
//!   does not replace it: the program's action is kept as the one traps
//!   that are not the runtime's go to (`patch::int3::program_action`),
//!   and reported back as the current one.
//!
//! Part of `session`: what a process-wide call must not undo.

use core::ffi::{c_int, c_void};
use core::sync::atomic::{AtomicBool, AtomicPtr, Ordering};

static REAL_PROC: AtomicPtr<c_void> = AtomicPtr::new(core::ptr::null_mut());
static REAL_PTHREAD: AtomicPtr<c_void> = AtomicPtr::new(core::ptr::null_mut());

/// Whether `SIGTRAP` is kept unblocked (set when a session starts).
static KEEP_TRAP: AtomicBool = AtomicBool::new(false);

/// From now on, the program's masks never block `SIGTRAP`.
pub(crate) fn keep_trap_unblocked() {
    KEEP_TRAP.store(true, Ordering::Release);
}

type MaskFn = unsafe extern "C" fn(c_int, *const libc::sigset_t, *mut libc::sigset_t) -> c_int;

/// The next definition of `name` (glibc's), looked up once and kept in
/// `slot`; `None` if there is none.
fn next(slot: &AtomicPtr<c_void>, name: &core::ffi::CStr) -> Option<*mut c_void> {
    let mut f = slot.load(Ordering::Acquire);
    if f.is_null() {
        // SAFETY: the name is NUL-terminated; dlsym is thread-safe.
        f = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr()) };
        slot.store(f, Ordering::Release);
    }
    (!f.is_null()).then_some(f)
}

/// [`next`] for the two mask functions.
fn next_mask(slot: &AtomicPtr<c_void>, name: &core::ffi::CStr) -> Option<MaskFn> {
    // SAFETY: both names are glibc functions with this signature.
    next(slot, name).map(|f| unsafe { core::mem::transmute::<*mut c_void, MaskFn>(f) })
}

/// Calls `f` with `set` minus `SIGTRAP` when it would block it.
///
/// # Safety
/// As for `sigprocmask`: `set` and `old` are null or valid.
unsafe fn call(
    f: Option<MaskFn>,
    how: c_int,
    set: *const libc::sigset_t,
    old: *mut libc::sigset_t,
) -> c_int {
    let Some(f) = f else {
        // SAFETY: errno of the calling thread.
        unsafe { *libc::__errno_location() = libc::ENOSYS };
        return -1;
    };
    // SAFETY: `set` is null or a valid set (the caller's contract); the
    // copy is passed on instead of it.
    unsafe {
        if KEEP_TRAP.load(Ordering::Acquire)
            && !set.is_null()
            && how != libc::SIG_UNBLOCK
            && libc::sigismember(set, libc::SIGTRAP) == 1
        {
            let mut copy = *set;
            libc::sigdelset(&mut copy, libc::SIGTRAP);
            return f(how, &copy, old);
        }
        f(how, set, old)
    }
}

/// Interposed `sigprocmask` (see the module documentation).
///
/// # Safety
/// As for `sigprocmask`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sigprocmask(
    how: c_int,
    set: *const libc::sigset_t,
    old: *mut libc::sigset_t,
) -> c_int {
    // SAFETY: the caller's arguments, passed on.
    unsafe { call(next_mask(&REAL_PROC, c"sigprocmask"), how, set, old) }
}

/// Interposed `pthread_sigmask` (see the module documentation). Returns
/// an error number, as `pthread_sigmask` does.
///
/// # Safety
/// As for `pthread_sigmask`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pthread_sigmask(
    how: c_int,
    set: *const libc::sigset_t,
    old: *mut libc::sigset_t,
) -> c_int {
    let f = next_mask(&REAL_PTHREAD, c"pthread_sigmask");
    if f.is_none() {
        return libc::ENOSYS;
    }
    // SAFETY: the caller's arguments, passed on.
    unsafe { call(f, how, set, old) }
}

type ActionFn = unsafe extern "C" fn(c_int, *const libc::sigaction, *mut libc::sigaction) -> c_int;

static REAL_ACTION: AtomicPtr<c_void> = AtomicPtr::new(core::ptr::null_mut());

/// Interposed `sigaction` (see the module documentation).
///
/// # Safety
/// As for `sigaction`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sigaction(
    sig: c_int,
    act: *const libc::sigaction,
    old: *mut libc::sigaction,
) -> c_int {
    // SAFETY: `act` and `old` are null or valid (the caller's contract).
    let (new, prev) = unsafe { (act.as_ref(), old.as_mut()) };
    if sig == libc::SIGTRAP && crate::patch::int3::program_action(new, prev) {
        return 0;
    }
    let Some(f) = next(&REAL_ACTION, c"sigaction") else {
        // SAFETY: errno of the calling thread.
        unsafe { *libc::__errno_location() = libc::ENOSYS };
        return -1;
    };
    // SAFETY: glibc's `sigaction`, with the caller's arguments.
    unsafe { core::mem::transmute::<*mut c_void, ActionFn>(f)(sig, act, old) }
}

/// Interposed `signal` (see the module documentation): for `SIGTRAP`
/// once the runtime's handler is installed, the program's handler is kept
/// as `sigaction` keeps it (with `signal`'s BSD semantics: `SA_RESTART`);
/// every other call goes to glibc's.
///
/// # Safety
/// As for `signal`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn signal(sig: c_int, handler: libc::sighandler_t) -> libc::sighandler_t {
    if sig == libc::SIGTRAP {
        // SAFETY: a zeroed sigaction is valid; filled in below.
        let mut new: libc::sigaction = unsafe { core::mem::zeroed() };
        new.sa_sigaction = handler;
        new.sa_flags = libc::SA_RESTART;
        // SAFETY: zeroed, as above.
        let mut old: libc::sigaction = unsafe { core::mem::zeroed() };
        if crate::patch::int3::program_action(Some(&new), Some(&mut old)) {
            return old.sa_sigaction;
        }
    }
    let Some(f) = next(&REAL_SIGNAL, c"signal") else {
        return libc::SIG_ERR;
    };
    // SAFETY: glibc's `signal`, with the caller's arguments.
    unsafe {
        core::mem::transmute::<
            *mut c_void,
            unsafe extern "C" fn(c_int, libc::sighandler_t) -> libc::sighandler_t,
        >(f)(sig, handler)
    }
}

static REAL_SIGNAL: AtomicPtr<c_void> = AtomicPtr::new(core::ptr::null_mut());
