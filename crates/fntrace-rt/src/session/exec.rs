//! `exec` and `_exit` interposition: the session is finished before an
//! image is replaced or the process ends without running exit handlers
//! (`_exit`, what shells such as dash and most forked children end with:
//! no `atexit` handler runs, see `super::finish_before_exec` and
//! [`_exit`]), and the profiling timer of `gcc -pg` programs is kept from
//! killing the next image. Part of `session`.
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

/// Whether `target` names an executable regular file (searched in the
/// `PATH` directories when `search` and it has no slash), i.e. whether an
/// `exec` of it will most likely replace the image.
pub(crate) fn executable(target: &CStr, search: bool) -> bool {
    let ok = |p: &CStr| {
        // SAFETY: stat writes the struct we own; access only reads the path.
        unsafe {
            let mut st: libc::stat = core::mem::zeroed();
            libc::stat(p.as_ptr(), &mut st) == 0
                && st.st_mode & libc::S_IFMT == libc::S_IFREG
                && libc::access(p.as_ptr(), libc::X_OK) == 0
        }
    };
    let b = target.to_bytes();
    if b.is_empty() {
        return false;
    }
    if !search || b.contains(&b'/') {
        return ok(target);
    }
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/bin:/usr/bin".into());
    use std::os::unix::ffi::OsStrExt;
    path.as_bytes().split(|&c| c == b':').any(|dir| {
        let mut full = if dir.is_empty() {
            b".".to_vec()
        } else {
            dir.to_vec()
        };
        full.push(b'/');
        full.extend_from_slice(b);
        std::ffi::CString::new(full).is_ok_and(|c| ok(&c))
    })
}

/// Finishes the session before an `exec` of `target` (see
/// [`super::finish_before_exec`]), runs `call`, and records again if it
/// returns (the `exec` failed).
///
/// # Safety
/// `target` is null or a NUL-terminated string.
unsafe fn finishing(target: *const c_char, search: bool, call: impl FnOnce() -> c_int) -> c_int {
    let t = if target.is_null() {
        None
    } else {
        // SAFETY: the caller's contract.
        Some(unsafe { CStr::from_ptr(target) })
    };
    let resume = super::finish_before_exec(t, search);
    let r = call();
    if let Some(o) = resume {
        super::resume_after_failed_exec(o);
    }
    r
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
        finishing(path, false, || {
            with_env(
                f,
                |e| core::mem::transmute::<*mut c_void, ExecArrays>(f)(path, argv, e),
                envp,
            )
        })
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
        finishing(file, true, || {
            with_env(
                f,
                |e| core::mem::transmute::<*mut c_void, ExecArrays>(f)(file, argv, e),
                envp,
            )
        })
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
        finishing(core::ptr::null(), false, || {
            with_env(
                f,
                |e| core::mem::transmute::<*mut c_void, Fexecve>(f)(fd, argv, e),
                envp,
            )
        })
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
    unsafe {
        finishing(path, false, || {
            with_environ(real(&REAL_EXECV, c"execv"), path, argv)
        })
    }
}

/// Interposed `execvp` (see the module documentation).
///
/// # Safety
/// As for `execvp`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn execvp(file: *const c_char, argv: *const *const c_char) -> c_int {
    // SAFETY: the caller's contract.
    unsafe {
        finishing(file, true, || {
            with_environ(real(&REAL_EXECVP, c"execvp"), file, argv)
        })
    }
}

// The variadic `execl`, `execle` and `execlp` cannot be written in stable
// Rust: each is a naked trampoline that saves the argument registers
// (rdi, rsi, rdx, rcx, r8, r9, and rax, the vector-register count of a
// variadic call), calls its `prepare_*` function, which runs `prepare`
// and stores the real function's address, restores them and jumps there
// with the stack as the caller left it (the arguments past the sixth are
// on it). Seven pushes keep the call aligned (rsp ≡ 8 mod 16 on entry);
// rdi, the path, is still the first argument when `prepare_*` is called.
macro_rules! variadic_exec {
    ($name:ident, $prep:ident, $slot:ident, $cname:literal, $search:literal) => {
        static $slot: AtomicPtr<c_void> = AtomicPtr::new(core::ptr::null_mut());

        /// Finishes the session if the `exec` of `target` (the caller's
        /// first argument, still in rdi) will most likely succeed, runs
        /// [`prepare`] and returns the real function (or [`unavailable`])
        /// for the trampoline to jump to.
        extern "C" fn $prep(target: *const c_char) -> *mut c_void {
            let f = real(&$slot, $cname);
            if f.is_null() {
                return unavailable as *mut c_void;
            }
            let t = (!target.is_null())
                // SAFETY: the caller passed a NUL-terminated path.
                .then(|| unsafe { CStr::from_ptr(target) });
            // A failed exec returns straight to the caller: nothing here
            // runs again (no new trace; the profiling timer stays
            // ignored).
            let _ = super::finish_before_exec(t, $search);
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

variadic_exec!(execl, prepare_execl, REAL_EXECL, c"execl", false);
variadic_exec!(execle, prepare_execle, REAL_EXECLE, c"execle", false);
variadic_exec!(execlp, prepare_execlp, REAL_EXECLP, c"execlp", true);

static REAL_EXIT: AtomicPtr<c_void> = AtomicPtr::new(core::ptr::null_mut());
static REAL_UPPER_EXIT: AtomicPtr<c_void> = AtomicPtr::new(core::ptr::null_mut());

/// Ends the process with `status` through `f` (the next `_exit` or
/// `_Exit`), or the system call when there is none.
fn end(f: *mut c_void, status: c_int) -> ! {
    if !f.is_null() {
        // SAFETY: `f` is the next `_exit`/`_Exit`, with this signature; it
        // does not return.
        unsafe { core::mem::transmute::<*mut c_void, extern "C" fn(c_int) -> !>(f)(status) }
    }
    // SAFETY: ends the process.
    unsafe { libc::syscall(libc::SYS_exit_group, status) };
    unreachable!("exit_group returned")
}

/// Interposed `_exit`: finishes the session (as at a normal exit, whose
/// `atexit` handler `_exit` skips) so that the trace ends clean, then
/// ends the process. In a `vfork` child (which shares the parent's
/// session) nothing is finished.
///
/// # Safety
/// As for `_exit`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn _exit(status: c_int) -> ! {
    super::finish_at_exit();
    end(real(&REAL_EXIT, c"_exit"), status)
}

/// Interposed `_Exit` (as [`_exit`]).
///
/// # Safety
/// As for `_Exit`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn _Exit(status: c_int) -> ! {
    super::finish_at_exit();
    end(real(&REAL_UPPER_EXIT, c"_Exit"), status)
}
