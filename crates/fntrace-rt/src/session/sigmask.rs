//! `sigprocmask`/`pthread_sigmask` interposition: while a session records,
//! the program cannot block `SIGTRAP`. Code changed while the program runs
//! (`call __fentry__` sites converted at start-up, `fntrace live`, markers)
//! goes through the `int3` protocol, and the kernel kills a thread that
//! hits an `int3` with `SIGTRAP` blocked instead of running the runtime's
//! handler. Programs that block every signal (`sigfillset` and
//! `pthread_sigmask(SIG_BLOCK)` before starting their threads, to take
//! signals on one thread with `sigwait`) were killed that way. Every other
//! signal is blocked as asked; the mask reported back simply never holds
//! `SIGTRAP`. Part of `session`: what a process-wide call must not undo.

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

/// The next definition of `name` (glibc's), looked up once.
fn next(slot: &AtomicPtr<c_void>, name: &core::ffi::CStr) -> Option<MaskFn> {
    let mut f = slot.load(Ordering::Acquire);
    if f.is_null() {
        // SAFETY: the name is NUL-terminated; dlsym is thread-safe.
        f = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr()) };
        slot.store(f, Ordering::Release);
    }
    // SAFETY: both names are glibc functions with this signature.
    (!f.is_null()).then(|| unsafe { core::mem::transmute::<*mut c_void, MaskFn>(f) })
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
    unsafe { call(next(&REAL_PROC, c"sigprocmask"), how, set, old) }
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
    let f = next(&REAL_PTHREAD, c"pthread_sigmask");
    if f.is_none() {
        return libc::ENOSYS;
    }
    // SAFETY: the caller's arguments, passed on.
    unsafe { call(f, how, set, old) }
}
