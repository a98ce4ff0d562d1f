//! Keeps unwinding and backtraces working while return addresses are
//! hijacked, by interposing the unwinder's entry points (the definitions
//! here win over libgcc_s's: the preload library comes first in symbol
//! lookup, and a statically linked runtime is part of the executable).
//!
//! - Before an exception or panic starts unwinding
//!   (`_Unwind_RaiseException`, `_Unwind_ForcedUnwind` for `pthread_exit`
//!   and cancellation, `_Unwind_Resume` after a cleanup landing pad), the
//!   thread's hijacked slots get their original return addresses back, so
//!   the unwinder sees the real stack.
//! - When a landing pad is installed (`_Unwind_SetIP`, which every
//!   personality routine calls for it), the frames below it are gone: their
//!   exits are recorded then, for every mechanism (hijacked returns, call
//!   wrappers, XRay and cyg_profile frames), and the frames above are
//!   hijacked again (a cleanup pad resumes unwinding through
//!   `_Unwind_Resume`, which restores them once more). A function that
//!   catches and returns without another traced call in between thus
//!   still has its exit.
//! - `longjmp`, `_longjmp`, `siglongjmp` and `__longjmp_chk` close the
//!   frames below the stack pointer they jump to (read from glibc's
//!   `jmp_buf`, where it is mangled with the thread's pointer guard), also
//!   when they leave a signal handler's alternate stack.
//! - `_Unwind_Backtrace` and glibc's `backtrace` run with the original
//!   addresses and re-hijack right after.
//! - `sigaltstack` remembers the thread's alternate signal stack, so that
//!   stack marks are compared on the same stack only (the kernel reports
//!   an `SS_AUTODISARM` stack as disabled while its handler runs).
//! - `__cxa_begin_catch` (a C++ handler is entered) writes a marker
//!   `exception` with the caught type (`caught std::runtime_error`) into
//!   the thread's stream while a session records: `replay` shows it
//!   inside the function that caught, after the exits of the frames the
//!   exception left.
//!
//! The real functions are found with `dlsym(RTLD_NEXT)`.

use core::ffi::{c_int, c_void};
use core::sync::atomic::{AtomicBool, AtomicPtr, Ordering};

use super::tramp::exit_trampoline_addr;

/// A lazily resolved `RTLD_NEXT` symbol.
pub(super) struct Next {
    name: &'static [u8],
    ptr: AtomicPtr<c_void>,
}

impl Next {
    pub(super) const fn new(name: &'static [u8]) -> Next {
        Next {
            name,
            ptr: AtomicPtr::new(core::ptr::null_mut()),
        }
    }

    /// The next definition, or an abort naming the symbol if there is none
    /// (the program called an unwinder function that does not exist).
    pub(super) fn get(&self) -> *mut c_void {
        let p = self.ptr.load(Ordering::Acquire);
        if !p.is_null() {
            return p;
        }
        // SAFETY: `name` is NUL-terminated; dlsym is thread-safe.
        let p = unsafe { libc::dlsym(libc::RTLD_NEXT, self.name.as_ptr().cast()) };
        if p.is_null() {
            let msg = b"fntrace: unwinder function not found\n";
            // SAFETY: writes a static buffer to stderr, then aborts.
            unsafe {
                libc::write(2, msg.as_ptr().cast(), msg.len());
                libc::abort();
            }
        }
        self.ptr.store(p, Ordering::Release);
        p
    }
}

type UnwindException = c_void;
type UnwindContext = c_void;
type Reason = c_int;

static RAISE: Next = Next::new(b"_Unwind_RaiseException\0");
static RESUME: Next = Next::new(b"_Unwind_Resume\0");
static RESUME_OR_RETHROW: Next = Next::new(b"_Unwind_Resume_or_Rethrow\0");
static FORCED: Next = Next::new(b"_Unwind_ForcedUnwind\0");
static SET_IP: Next = Next::new(b"_Unwind_SetIP\0");
static GET_CFA: Next = Next::new(b"_Unwind_GetCFA\0");
static BACKTRACE_UW: Next = Next::new(b"_Unwind_Backtrace\0");
static BACKTRACE: Next = Next::new(b"backtrace\0");
static LONGJMP: Next = Next::new(b"longjmp\0");
static LONGJMP_UNDERSCORE: Next = Next::new(b"_longjmp\0");
static SIGLONGJMP: Next = Next::new(b"siglongjmp\0");
static LONGJMP_CHK: Next = Next::new(b"__longjmp_chk\0");
static BEGIN_CATCH: Next = Next::new(b"__cxa_begin_catch\0");
static SIGALTSTACK: Next = Next::new(b"sigaltstack\0");
/// `__cxa_current_exception_type` (libstdc++), looked up once; null when
/// not found.
static CURRENT_TYPE: AtomicPtr<c_void> = AtomicPtr::new(core::ptr::null_mut());
/// `CURRENT_TYPE` was looked up.
static CURRENT_TYPE_DONE: AtomicBool = AtomicBool::new(false);

fn restore() {
    crate::calls::entry::restore_return_addresses(exit_trampoline_addr());
}

/// Interposed `_Unwind_RaiseException` (C++ `throw`, Rust panics).
///
/// # Safety
/// Called by language runtimes with a valid exception object.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn _Unwind_RaiseException(e: *mut UnwindException) -> Reason {
    restore();
    // SAFETY: the real function has this signature.
    unsafe {
        let f: unsafe extern "C" fn(*mut UnwindException) -> Reason =
            core::mem::transmute(RAISE.get());
        f(e)
    }
}

/// Interposed `_Unwind_Resume` (end of a cleanup landing pad).
///
/// # Safety
/// Called by landing pads with the exception being propagated.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn _Unwind_Resume(e: *mut UnwindException) -> ! {
    restore();
    // SAFETY: the real function has this signature and does not return.
    unsafe {
        let f: unsafe extern "C" fn(*mut UnwindException) -> ! = core::mem::transmute(RESUME.get());
        f(e)
    }
}

/// Interposed `_Unwind_Resume_or_Rethrow` (C++ `throw;`).
///
/// # Safety
/// Called by language runtimes with a valid exception object.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn _Unwind_Resume_or_Rethrow(e: *mut UnwindException) -> Reason {
    restore();
    // SAFETY: the real function has this signature.
    unsafe {
        let f: unsafe extern "C" fn(*mut UnwindException) -> Reason =
            core::mem::transmute(RESUME_OR_RETHROW.get());
        f(e)
    }
}

/// Interposed `_Unwind_ForcedUnwind` (`pthread_exit`, cancellation).
///
/// # Safety
/// Called by glibc with a valid exception object and stop function.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn _Unwind_ForcedUnwind(
    e: *mut UnwindException,
    stop: *mut c_void,
    arg: *mut c_void,
) -> Reason {
    restore();
    // SAFETY: the real function has this signature.
    unsafe {
        let f: unsafe extern "C" fn(*mut UnwindException, *mut c_void, *mut c_void) -> Reason =
            core::mem::transmute(FORCED.get());
        f(e, stop, arg)
    }
}

/// Interposed `_Unwind_SetIP`: a personality routine is installing a
/// landing pad in the frame of `ctx`. `_Unwind_GetCFA` of that context is
/// the landing frame's stack pointer (the CFA of the frame it called):
/// every shadow frame whose mark is below it was unwound.
///
/// # Safety
/// Called by personality routines with a valid unwind context.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn _Unwind_SetIP(ctx: *mut UnwindContext, ip: usize) {
    // SAFETY: the real functions have these signatures; `ctx` is valid.
    unsafe {
        let cfa: unsafe extern "C" fn(*mut UnwindContext) -> usize =
            core::mem::transmute(GET_CFA.get());
        crate::calls::entry::landing(cfa(ctx) as u64, exit_trampoline_addr());
        let f: unsafe extern "C" fn(*mut UnwindContext, usize) = core::mem::transmute(SET_IP.get());
        f(ctx, ip)
    }
}

/// The caller's callback, and whether our own frame was skipped yet.
struct WalkArg {
    trace: unsafe extern "C" fn(*mut UnwindContext, *mut c_void) -> Reason,
    arg: *mut c_void,
    skipped: bool,
}

/// Passes every frame but the first (this wrapper's) to the caller.
unsafe extern "C" fn skip_wrapper_frame(ctx: *mut UnwindContext, arg: *mut c_void) -> Reason {
    // SAFETY: `arg` is the `WalkArg` on `_Unwind_Backtrace`'s stack, live
    // for the whole walk.
    let w = unsafe { &mut *arg.cast::<WalkArg>() };
    if !w.skipped {
        w.skipped = true;
        return 0; // _URC_NO_REASON
    }
    // SAFETY: the caller's callback, with the caller's argument.
    unsafe { (w.trace)(ctx, w.arg) }
}

/// Interposed `_Unwind_Backtrace` (Rust backtraces, C++ libraries). The
/// walk sees the original return addresses, and starts at the caller (this
/// wrapper's frame is left out).
///
/// # Safety
/// Called with a valid trace callback.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn _Unwind_Backtrace(
    trace: unsafe extern "C" fn(*mut UnwindContext, *mut c_void) -> Reason,
    arg: *mut c_void,
) -> Reason {
    crate::calls::entry::begin_walk(exit_trampoline_addr());
    let mut w = WalkArg {
        trace,
        arg,
        skipped: false,
    };
    // SAFETY: the real function has this signature; `w` outlives the walk.
    let r = unsafe {
        let f: unsafe extern "C" fn(
            unsafe extern "C" fn(*mut UnwindContext, *mut c_void) -> Reason,
            *mut c_void,
        ) -> Reason = core::mem::transmute(BACKTRACE_UW.get());
        f(skip_wrapper_frame, (&mut w as *mut WalkArg).cast())
    };
    crate::calls::entry::end_walk(exit_trampoline_addr());
    r
}

/// Interposed glibc `backtrace`: glibc calls libgcc's unwinder through a
/// private handle, so it is wrapped as a whole. The wrapper's own frame is
/// removed from the result.
///
/// # Safety
/// `buf` must have room for `size` pointers.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn backtrace(buf: *mut *mut c_void, size: c_int) -> c_int {
    if size <= 0 {
        return 0;
    }
    const MAX: usize = 256;
    let mut tmp = [core::ptr::null_mut::<c_void>(); MAX + 1];
    let want = (size as usize).min(MAX) + 1;
    crate::calls::entry::begin_walk(exit_trampoline_addr());
    // SAFETY: the real function has this signature; `tmp` holds `want`.
    let n = unsafe {
        let f: unsafe extern "C" fn(*mut *mut c_void, c_int) -> c_int =
            core::mem::transmute(BACKTRACE.get());
        f(tmp.as_mut_ptr(), want as c_int)
    };
    crate::calls::entry::end_walk(exit_trampoline_addr());
    let n = (n.max(1) as usize - 1).min(size as usize);
    // SAFETY: `buf` has room for `size >= n` pointers (caller contract).
    unsafe { core::ptr::copy_nonoverlapping(tmp.as_ptr().add(1), buf, n) };
    n as c_int
}

/// Index of the stack pointer in glibc's x86_64 `__jmp_buf` (`JB_RSP`).
const JB_RSP: usize = 6;

/// The stack pointer a glibc `jmp_buf` returns to. glibc stores it
/// mangled (`PTR_MANGLE`: xor with the pointer guard of the thread control
/// block, `%fs:0x30` on x86_64, then rotate left by 17 bits).
///
/// # Safety
/// `env` must point at a `jmp_buf` filled by `setjmp`/`sigsetjmp`.
unsafe fn jmp_target(env: *const u64) -> u64 {
    let guard: u64;
    // SAFETY: reads the pointer guard from the thread control block, which
    // glibc sets up for every thread before any user code runs.
    unsafe {
        core::arch::asm!(
            "mov {g}, qword ptr fs:[0x30]",
            g = out(reg) guard,
            options(nostack, readonly, preserves_flags),
        );
    }
    // SAFETY: the caller's contract: `env` holds at least 8 words.
    let mangled = unsafe { env.add(JB_RSP).read() };
    mangled.rotate_right(17) ^ guard
}

/// Closes the frames a `longjmp` to `env` leaves, then jumps with the
/// real function `next`.
///
/// # Safety
/// `env` must be a `jmp_buf` filled by `setjmp`/`sigsetjmp`; `next` one of
/// glibc's longjmp functions.
unsafe fn jump(next: &Next, env: *mut c_void, val: c_int) -> ! {
    // SAFETY: the caller's contract on `env`.
    crate::calls::entry::jumping_to(unsafe { jmp_target(env.cast()) });
    // SAFETY: the real function has this signature and does not return.
    unsafe {
        let f: unsafe extern "C" fn(*mut c_void, c_int) -> ! = core::mem::transmute(next.get());
        f(env, val)
    }
}

/// Interposed `longjmp`.
///
/// # Safety
/// As `longjmp`: `env` was filled by `setjmp` in a frame still live.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn longjmp(env: *mut c_void, val: c_int) -> ! {
    // SAFETY: forwarded contract.
    unsafe { jump(&LONGJMP, env, val) }
}

/// Interposed `_longjmp`.
///
/// # Safety
/// As `_longjmp`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn _longjmp(env: *mut c_void, val: c_int) -> ! {
    // SAFETY: forwarded contract.
    unsafe { jump(&LONGJMP_UNDERSCORE, env, val) }
}

/// Interposed `siglongjmp` (also out of signal handlers, alternate stacks
/// included).
///
/// # Safety
/// As `siglongjmp`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn siglongjmp(env: *mut c_void, val: c_int) -> ! {
    // SAFETY: forwarded contract.
    unsafe { jump(&SIGLONGJMP, env, val) }
}

/// Interposed `__longjmp_chk` (what `longjmp` becomes with
/// `_FORTIFY_SOURCE`).
///
/// # Safety
/// As `longjmp`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __longjmp_chk(env: *mut c_void, val: c_int) -> ! {
    // SAFETY: forwarded contract.
    unsafe { jump(&LONGJMP_CHK, env, val) }
}

/// Interposed `__cxa_begin_catch`: a C++ handler is being entered. While
/// a session records, a marker `exception` with the caught type goes into
/// the thread's stream (the frames the exception left were closed when
/// its landing pad was installed).
///
/// # Safety
/// Called by C++ landing pads with the exception being caught.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __cxa_begin_catch(e: *mut c_void) -> *mut c_void {
    // SAFETY: the real function has this signature.
    let r = unsafe {
        let f: unsafe extern "C" fn(*mut c_void) -> *mut c_void =
            core::mem::transmute(BEGIN_CATCH.get());
        f(e)
    };
    if crate::recorder::is_active() {
        caught();
    }
    r
}

/// Writes the `exception` marker of the exception just caught.
#[cold]
#[inline(never)]
fn caught() {
    if !CURRENT_TYPE_DONE.load(Ordering::Acquire) {
        // SAFETY: NUL-terminated name; dlsym is thread-safe.
        let p = unsafe { libc::dlsym(libc::RTLD_NEXT, c"__cxa_current_exception_type".as_ptr()) };
        CURRENT_TYPE.store(p, Ordering::Release);
        CURRENT_TYPE_DONE.store(true, Ordering::Release);
    }
    let p = CURRENT_TYPE.load(Ordering::Acquire);
    let mut text = String::from("caught ");
    if p.is_null() {
        text.push_str("an exception");
    } else {
        // SAFETY: `std::type_info *__cxa_current_exception_type()`, null for
        // a foreign exception; a `type_info` is a vtable pointer followed by
        // its NUL-terminated mangled name.
        let name = unsafe {
            let f: unsafe extern "C" fn() -> *const *const core::ffi::c_char =
                core::mem::transmute(p);
            let ti = f();
            if ti.is_null() {
                None
            } else {
                Some(core::ffi::CStr::from_ptr(ti.add(1).read()))
            }
        };
        match name.and_then(|n| n.to_str().ok()) {
            Some(n) => {
                // `*` marks a type local to its translation unit.
                let n = n.trim_start_matches('*');
                let d = crate::procinfo::demangle(&format!("_ZTS{n}"));
                text.push_str(d.strip_prefix("typeinfo name for ").unwrap_or(n));
            }
            None => text.push_str("a foreign exception"),
        }
    }
    crate::recorder::record_marker("exception", &text);
}

/// Interposed `sigaltstack`: the new alternate stack of the thread is
/// remembered for comparing stack marks (see `calls::entry`).
///
/// # Safety
/// As `sigaltstack`: `ss` and `old` are null or valid.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sigaltstack(ss: *const libc::stack_t, old: *mut libc::stack_t) -> c_int {
    // SAFETY: the real function has this signature; the caller's pointers.
    let r = unsafe {
        let f: unsafe extern "C" fn(*const libc::stack_t, *mut libc::stack_t) -> c_int =
            core::mem::transmute(SIGALTSTACK.get());
        f(ss, old)
    };
    if r == 0 && !ss.is_null() {
        // SAFETY: `ss` is valid (the call succeeded with it).
        let s = unsafe { &*ss };
        let stack = (s.ss_flags & libc::SS_DISABLE == 0 && s.ss_size > 0)
            .then_some((s.ss_sp as u64, s.ss_size as u64));
        crate::calls::entry::set_altstack(stack);
    }
    r
}
