//! `exec` interposition, for the profiling timer of `gcc -pg` programs.
//! Part of `session`.
//!
//! A `-pg` image's `ITIMER_PROF` timer survives `exec`, its `SIGPROF`
//! handler does not: the kernel resets a handled signal to the default
//! action, and a tick that comes before the new image's runtime starts
//! (in the kernel's `exec`, in `ld.so` loading the preload library)
//! terminates the process — about 1 run in 400 under load with a 1 ms
//! timer. An *ignored* action survives `exec`, so every `exec` function
//! here first ignores `SIGPROF` when the timer is armed and a handler is
//! installed, and marks the environment with `config::ENV_PROF_EXEC`;
//! the new image's start-up (`prof::ProfTimerGuard`) reads the mark and
//! treats the inherited "ignored" as the default it stands for (kept
//! ignored until glibc's `__monstartup` installs its handler, or the
//! default restored in an image that does not). If the `exec` fails, the
//! handler and the environment are put back (for the variadic `execl`,
//! `execle` and `execlp`, which jump to the real function, a failed
//! `exec` leaves `SIGPROF` ignored: the program loses profiling ticks,
//! nothing else). `posix_spawn` and `fork` need nothing: a child starts
//! without the parent's interval timers.
//!
//! The real functions are found with `dlsym(RTLD_NEXT)`.

use core::ffi::{c_char, c_int, c_void};
use core::sync::atomic::{AtomicPtr, Ordering};
use std::ffi::CStr;

use crate::config::ENV_PROF_EXEC;

/// The marker's name, for `setenv`.
const NAME: &CStr = c"FNTRACE_PROF_EXEC";
/// The marker entry appended to an explicit environment.
const MARK: &CStr = c"FNTRACE_PROF_EXEC=1";
const _: () = {
    // NAME and MARK spell ENV_PROF_EXEC.
    let (n, m, e) = (NAME.to_bytes(), MARK.to_bytes(), ENV_PROF_EXEC.as_bytes());
    assert!(n.len() == e.len() && m.len() == e.len() + 2);
    let mut i = 0;
    while i < e.len() {
        assert!(n[i] == e[i] && m[i] == e[i]);
        i += 1;
    }
    assert!(m[e.len()] == b'=' && m[e.len() + 1] == b'1');
};

/// What [`prepare`] changed, to undo if the `exec` returns.
struct Prepared {
    old: libc::sigaction,
}

/// Before an `exec`: if the profiling timer is armed and `SIGPROF` has a
/// handler, ignores it and marks the environment.
fn prepare() -> Option<Prepared> {
    // SAFETY: getitimer and sigaction only read and write the structures
    // passed to them; setting SIG_IGN has no other effect.
    unsafe {
        let mut t: libc::itimerval = core::mem::zeroed();
        if libc::getitimer(libc::ITIMER_PROF, &mut t) != 0
            || (t.it_value.tv_sec == 0 && t.it_value.tv_usec == 0)
        {
            return None;
        }
        let mut old: libc::sigaction = core::mem::zeroed();
        if libc::sigaction(libc::SIGPROF, core::ptr::null(), &mut old) != 0
            || old.sa_sigaction == libc::SIG_DFL
            || old.sa_sigaction == libc::SIG_IGN
        {
            return None;
        }
        let mut ign: libc::sigaction = core::mem::zeroed();
        ign.sa_sigaction = libc::SIG_IGN;
        if libc::sigaction(libc::SIGPROF, &ign, core::ptr::null_mut()) != 0 {
            return None;
        }
        libc::setenv(NAME.as_ptr(), c"1".as_ptr(), 1);
        Some(Prepared { old })
    }
}

/// The `exec` failed: puts the handler and the environment back.
fn undo(p: Prepared) {
    // SAFETY: restores the action read in `prepare`; removes our marker.
    unsafe {
        libc::sigaction(libc::SIGPROF, &p.old, core::ptr::null_mut());
        libc::unsetenv(NAME.as_ptr());
    }
}

/// `envp` with the marker appended (`envp` itself when nothing was
/// prepared). The vector must live until the call.
///
/// # Safety
/// `envp` is null or a NULL-terminated array of C strings.
unsafe fn marked_env(envp: *const *const c_char) -> Vec<*const c_char> {
    let mut v = Vec::new();
    if !envp.is_null() {
        let mut i = 0;
        // SAFETY: the caller's contract: read up to the terminating NULL.
        unsafe {
            while !(*envp.add(i)).is_null() {
                v.push(*envp.add(i));
                i += 1;
            }
        }
    }
    v.push(MARK.as_ptr());
    v.push(core::ptr::null());
    v
}

/// The next definition of `name` (cached in `slot`), or null.
fn real(slot: &AtomicPtr<c_void>, name: &CStr) -> *mut c_void {
    let mut f = slot.load(Ordering::Acquire);
    if f.is_null() {
        // SAFETY: dlsym with a NUL-terminated name; thread-safe.
        f = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr()) };
        slot.store(f, Ordering::Release);
    }
    f
}

/// `-1` with `errno` `ENOSYS`: what an `exec` function whose real
/// definition cannot be found returns.
extern "C" fn unavailable() -> c_int {
    // SAFETY: writes this thread's errno.
    unsafe { *libc::__errno_location() = libc::ENOSYS };
    -1
}

type ExecArrays =
    unsafe extern "C" fn(*const c_char, *const *const c_char, *const *const c_char) -> c_int;
type ExecArgv = unsafe extern "C" fn(*const c_char, *const *const c_char) -> c_int;
type Fexecve = unsafe extern "C" fn(c_int, *const *const c_char, *const *const c_char) -> c_int;

static REAL_EXECVE: AtomicPtr<c_void> = AtomicPtr::new(core::ptr::null_mut());
static REAL_EXECVPE: AtomicPtr<c_void> = AtomicPtr::new(core::ptr::null_mut());
static REAL_FEXECVE: AtomicPtr<c_void> = AtomicPtr::new(core::ptr::null_mut());
static REAL_EXECV: AtomicPtr<c_void> = AtomicPtr::new(core::ptr::null_mut());
static REAL_EXECVP: AtomicPtr<c_void> = AtomicPtr::new(core::ptr::null_mut());

/// An `exec` with an explicit environment: the marker goes into a copy.
///
/// # Safety
/// As for `execve`; `f` is that function's next definition.
unsafe fn with_env(
    f: *mut c_void,
    call: impl FnOnce(*const *const c_char) -> c_int,
    envp: *const *const c_char,
) -> c_int {
    if f.is_null() {
        return unavailable();
    }
    let Some(p) = prepare() else {
        return call(envp);
    };
    // SAFETY: the caller's contract on `envp`.
    let env = unsafe { marked_env(envp) };
    let r = call(env.as_ptr());
    undo(p);
    r
}

/// Interposed `execve` (see the module documentation).
///
/// # Safety
/// As for `execve`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn execve(
    path: *const c_char,
    argv: *const *const c_char,
    envp: *const *const c_char,
) -> c_int {
    let f = real(&REAL_EXECVE, c"execve");
    // SAFETY: `f` is the next `execve`, with this signature; the caller's
    // arguments are passed on (the environment possibly extended).
    unsafe {
        with_env(
            f,
            |e| core::mem::transmute::<*mut c_void, ExecArrays>(f)(path, argv, e),
            envp,
        )
    }
}

/// Interposed `execvpe` (see the module documentation).
///
/// # Safety
/// As for `execvpe`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn execvpe(
    file: *const c_char,
    argv: *const *const c_char,
    envp: *const *const c_char,
) -> c_int {
    let f = real(&REAL_EXECVPE, c"execvpe");
    // SAFETY: as in `execve`.
    unsafe {
        with_env(
            f,
            |e| core::mem::transmute::<*mut c_void, ExecArrays>(f)(file, argv, e),
            envp,
        )
    }
}

/// Interposed `fexecve` (see the module documentation).
///
/// # Safety
/// As for `fexecve`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fexecve(
    fd: c_int,
    argv: *const *const c_char,
    envp: *const *const c_char,
) -> c_int {
    let f = real(&REAL_FEXECVE, c"fexecve");
    // SAFETY: as in `execve`.
    unsafe {
        with_env(
            f,
            |e| core::mem::transmute::<*mut c_void, Fexecve>(f)(fd, argv, e),
            envp,
        )
    }
}

/// An `exec` that takes the process environment (marked by `prepare`).
///
/// # Safety
/// As for `execv`; `f` is that function's next definition.
unsafe fn with_environ(f: *mut c_void, path: *const c_char, argv: *const *const c_char) -> c_int {
    if f.is_null() {
        return unavailable();
    }
    let p = prepare();
    // SAFETY: `f` is the next `execv`/`execvp`, with this signature.
    let r = unsafe { core::mem::transmute::<*mut c_void, ExecArgv>(f)(path, argv) };
    if let Some(p) = p {
        undo(p);
    }
    r
}

/// Interposed `execv` (see the module documentation).
///
/// # Safety
/// As for `execv`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn execv(path: *const c_char, argv: *const *const c_char) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { with_environ(real(&REAL_EXECV, c"execv"), path, argv) }
}

/// Interposed `execvp` (see the module documentation).
///
/// # Safety
/// As for `execvp`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn execvp(file: *const c_char, argv: *const *const c_char) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { with_environ(real(&REAL_EXECVP, c"execvp"), file, argv) }
}

// The variadic `execl`, `execle` and `execlp` cannot be written in stable
// Rust: each is a naked trampoline that saves the argument registers
// (rdi, rsi, rdx, rcx, r8, r9, and rax, the vector-register count of a
// variadic call), calls its `prepare_*` function, which runs `prepare`
// and stores the real function's address, restores them and jumps there
// with the stack as the caller left it (the arguments past the sixth are
// on it). Seven pushes keep the call aligned (rsp ≡ 8 mod 16 on entry).
macro_rules! variadic_exec {
    ($name:ident, $prep:ident, $slot:ident, $cname:literal) => {
        static $slot: AtomicPtr<c_void> = AtomicPtr::new(core::ptr::null_mut());

        /// Runs [`prepare`] and returns the real function (or
        /// [`unavailable`]) for the trampoline to jump to.
        extern "C" fn $prep() -> *mut c_void {
            let f = real(&$slot, $cname);
            if f.is_null() {
                return unavailable as *mut c_void;
            }
            // Not undone: a failed exec returns straight to the caller.
            let _ = prepare();
            f
        }

        /// Interposed variadic `exec` (see the module documentation).
        ///
        /// # Safety
        /// As for the libc function of this name.
        #[unsafe(naked)]
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name() {
            core::arch::naked_asm!(
                "push rdi",
                "push rsi",
                "push rdx",
                "push rcx",
                "push r8",
                "push r9",
                "push rax",
                "call {prep}",
                "mov r11, rax",
                "pop rax",
                "pop r9",
                "pop r8",
                "pop rcx",
                "pop rdx",
                "pop rsi",
                "pop rdi",
                "jmp r11",
                prep = sym $prep,
            )
        }
    };
}

variadic_exec!(execl, prepare_execl, REAL_EXECL, c"execl");
variadic_exec!(execle, prepare_execle, REAL_EXECLE, c"execle");
variadic_exec!(execlp, prepare_execlp, REAL_EXECLP, c"execlp");
