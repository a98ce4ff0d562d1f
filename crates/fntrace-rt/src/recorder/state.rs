//! The per-thread state of the event sink: `ThreadState` and its
//! `Cursor` into the chunk being filled, the TLS block that holds them
//! (initial-exec, one `%fs`-relative load), the thread-exit hook, and the
//! asm↔struct contract: the byte offsets the assembly fast path uses, as
//! macros next to the structures, with compile-time assertions.
//!
//! Layers above read and change the state through `state` /
//! `with_state` on their own thread only; the `busy` flag excludes
//! reentrant use (a signal handler interrupting the recorder).

// The offset macros are only used by the assembly of `compiler-hooks`.
#![cfg_attr(not(feature = "compiler-hooks"), allow(unused_macros))]

use std::ptr;

use fntrace_format::layout::CHUNK_HEADER_SIZE;

use super::attached;
use super::file::Session;
use super::pending::Pending;
use super::shadow::Shadow;
use super::write::close_thread;
use crate::clock;

/// A position inside a chunk being filled (`repr(C)`: the assembly fast
/// path in `calls::fast` uses its offsets).
#[repr(C)]
pub(crate) struct Cursor {
    /// Chunk header, null when none.
    pub(crate) chunk: *mut u8,
    /// Next byte to write.
    pub(crate) pos: *mut u8,
    /// Writes must start at or before this (payload end minus [`SLACK`]).
    pub(crate) limit: *mut u8,
    pub(crate) seq: u32,
    /// TSC of the last timed record (the chunk's base TSC at its start).
    pub(crate) last_tsc: u64,
    /// Function of the last entry in this chunk (0 at its start).
    pub(crate) last_func: u64,
}

impl Cursor {
    pub(crate) const EMPTY: Cursor = Cursor {
        chunk: ptr::null_mut(),
        pos: ptr::null_mut(),
        limit: ptr::null_mut(),
        seq: 0,
        last_tsc: 0,
        last_func: 0,
    };

    /// Delta from the last timed record to now, advancing the timeline.
    #[inline(always)]
    pub(crate) fn delta_now(&mut self) -> u64 {
        let d = clock::tsc().saturating_sub(self.last_tsc);
        self.last_tsc += d;
        d
    }

    pub(crate) fn payload(&self) -> *mut u8 {
        self.chunk.wrapping_add(CHUNK_HEADER_SIZE)
    }
}

/// Per-thread recorder state, in a zero-initialised TLS block (see
/// [`state_ptr`]); thread exit is observed through [`ExitHook`].
/// `repr(C)`: the assembly fast path in `calls::fast` uses its offsets
/// (checked by [`fast_layout`]).
#[repr(C)]
pub(crate) struct ThreadState {
    /// Session this state writes to (0 = none).
    pub(crate) session: u32,
    /// Inside the recorder (reentrancy guard: a signal handler or a hook
    /// that runs instrumented code while an event is being written).
    pub(crate) busy: bool,
    /// The thread's TLS destructors ran; record nothing more.
    pub(crate) dead: bool,
    /// The session ran out of space for this thread.
    pub(crate) full: bool,
    pub(crate) cur: Cursor,
    pub(crate) depth: u32,
    pub(crate) tid: u32,
    /// Events dropped and not yet reported in a `Lost` record.
    pub(crate) lost: u64,
    pub(crate) session_ptr: *const Session,
    /// Calls of compiler-instrumented functions (return-address hijack
    /// and explicit exits).
    pub(crate) shadow: Shadow,
    /// Active `-F` frames (record only inside one when `-F` is given).
    pub(crate) trace_regions: u32,
    /// Active `-N` frames (record nothing inside one).
    pub(crate) notrace_regions: u32,
    /// This thread's arc table in counting mode (null until first use).
    pub(crate) arcs: *mut core::ffi::c_void,
    /// Calls held back by the time filter (see `recorder::pending`).
    pub(crate) pend: Pending,
    /// Open calls an earlier session recorded (frames marked `F_BASE`):
    /// below this session's first call, they count for `--depth`, so
    /// that a forked child's depth goes on from its parent's.
    pub(crate) depth_base: u32,
}

thread_local! {
    pub(crate) static EXIT_HOOK: ExitHook = const { ExitHook };
}

/// Its destructor runs when the thread exits (a TLS destructor) and ends
/// the thread's recording, unless the key below took that over.
pub(crate) struct ExitHook;

impl Drop for ExitHook {
    fn drop(&mut self) {
        if EXIT_KEY.load(core::sync::atomic::Ordering::Acquire) == 0 {
            thread_ended();
        }
    }
}

/// A pthread key (its number plus one; 0: none) whose destructor ends a
/// thread's recording as late as glibc lets it: key destructors run
/// after the TLS destructors (C++ `thread_local`), and this one re-arms
/// itself until the last of glibc's `PTHREAD_DESTRUCTOR_ITERATIONS`
/// rounds, so that the calls other keys' destructors make are recorded.
static EXIT_KEY: core::sync::atomic::AtomicU32 = core::sync::atomic::AtomicU32::new(0);

/// glibc's `PTHREAD_DESTRUCTOR_ITERATIONS`.
const DESTRUCTOR_ROUNDS: usize = 4;

extern "C" fn exit_key_destructor(v: *mut libc::c_void) {
    let round = v as usize;
    let key = EXIT_KEY.load(core::sync::atomic::Ordering::Acquire);
    if round < DESTRUCTOR_ROUNDS && key != 0 {
        // SAFETY: our own key; the value is a round number, not a pointer.
        unsafe { libc::pthread_setspecific(key - 1, core::ptr::without_provenance(round + 1)) };
        return;
    }
    thread_ended();
}

/// Makes sure the calling thread's exit is seen: the exit key is armed
/// (created at the first use), else the TLS destructor is registered.
pub(crate) fn watch_thread_exit() {
    use core::sync::atomic::Ordering;
    let mut key = EXIT_KEY.load(Ordering::Acquire);
    if key == 0 {
        let mut k: libc::pthread_key_t = 0;
        // SAFETY: creates a key with a destructor that only touches this
        // thread's state.
        if unsafe { libc::pthread_key_create(&mut k, Some(exit_key_destructor)) } == 0 {
            match EXIT_KEY.compare_exchange(0, k + 1, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => key = k + 1,
                Err(other) => {
                    // Another thread made one first.
                    // SAFETY: our own key, not used by anyone.
                    unsafe { libc::pthread_key_delete(k) };
                    key = other;
                }
            }
        }
    }
    if key != 0 {
        // SAFETY: our key; the value (round 1) is not a pointer.
        unsafe { libc::pthread_setspecific(key - 1, core::ptr::without_provenance(1)) };
    } else {
        EXIT_HOOK.with(|_| {});
    }
}

/// The calling thread is ending: its stream is closed and its shadow
/// stack given back (the thread runs no traced code after this that could
/// return through it; calls made after this are not recorded).
fn thread_ended() {
    // The main thread's TLS destructors run inside `exit`, before the
    // program's `atexit` handlers, C++ static destructors and ELF
    // destructors, whose calls are still to be recorded: its stream is
    // closed when the session ends (the runtime's own `atexit`
    // handler, registered before any of the program's, runs last).
    // SAFETY: plain system calls.
    if unsafe { libc::gettid() == libc::getpid() } {
        return;
    }
    with_state(|t| {
        if t.busy {
            return;
        }
        t.busy = true;
        if let Some(s) = attached(t) {
            close_thread(s, t, true);
        }
        t.dead = true;
        t.shadow.release();
        t.busy = false;
    });
}

// The per-thread state lives in a TLS block of our own, reached with the
// initial-exec model (`%fs`-relative through one GOT slot). Rust's
// `thread_local!` would use the general-dynamic model in the `LD_PRELOAD`
// library, a `__tls_get_addr` call on every event. The block is
// zero-initialised, and all-zero is a valid empty `ThreadState`.
core::arch::global_asm!(
    ".section .tbss,\"awT\",@nobits",
    ".balign 64",
    ".globl fntrace_thread_state",
    ".hidden fntrace_thread_state",
    ".type fntrace_thread_state, @object",
    ".size fntrace_thread_state, {size}",
    "fntrace_thread_state:",
    ".zero {size}",
    ".text",
    size = const core::mem::size_of::<ThreadState>(),
);

/// Byte offset of the arc-table pointer in the thread state (for the
/// assembly fast path of counting mode).
#[cfg_attr(not(feature = "compiler-hooks"), allow(dead_code))]
pub(crate) const ARCS_OFFSET: usize = core::mem::offset_of!(ThreadState, arcs);

// ---------------------------------------------------------------------------
// The asm↔struct contract: the offsets the assembly fast path
// (`calls::fast`, `hooks::tramp`, `xray::tramp`) writes as literals (an
// assembly template cannot take `const` operands from a macro), next to
// the structures and checked against them at compile time.

/// Offset of `ThreadState::session` (u32).
macro_rules! t_session {
    () => {
        "0"
    };
}
/// Offset of `ThreadState::busy` (bool).
macro_rules! t_busy {
    () => {
        "4"
    };
}
/// Offset of `ThreadState::cur.pos`.
macro_rules! t_pos {
    () => {
        "16"
    };
}
/// Offset of `ThreadState::cur.limit`.
macro_rules! t_limit {
    () => {
        "24"
    };
}
/// Offset of `ThreadState::cur.last_tsc`.
macro_rules! t_last_tsc {
    () => {
        "40"
    };
}
/// Offset of `ThreadState::cur.last_func`.
macro_rules! t_last_func {
    () => {
        "48"
    };
}
/// Offset of `ThreadState::depth` (u32).
macro_rules! t_depth {
    () => {
        "56"
    };
}
/// Offset of `ThreadState::shadow.base`.
macro_rules! t_sh_base {
    () => {
        "80"
    };
}
/// Offset of `ThreadState::shadow.len`.
macro_rules! t_sh_len {
    () => {
        "88"
    };
}
/// Offset of `ThreadState::shadow.overflow`.
macro_rules! t_sh_overflow {
    () => {
        "96"
    };
}
/// Offset of `ThreadState::shadow.restored` (bool).
macro_rules! t_sh_restored {
    () => {
        "104"
    };
}
/// Offset of `ThreadState::pend.base` (the held calls of the time filter,
/// 16 bytes each: TSC, function).
macro_rules! t_pend_base {
    () => {
        "160"
    };
}
/// Offset of `ThreadState::pend.len` (u32).
macro_rules! t_pend_len {
    () => {
        "168"
    };
}
/// Offset of `ThreadState::pend.written` (u32).
macro_rules! t_pend_written {
    () => {
        "172"
    };
}
/// Offset of `ThreadState::pend.over` (u32).
macro_rules! t_pend_over {
    () => {
        "176"
    };
}
/// Offset of `ThreadState::pend.captured` (bool).
macro_rules! t_pend_captured {
    () => {
        "180"
    };
}
/// Offset of `ThreadState::pend.fast` (u64).
macro_rules! t_pend_fast {
    () => {
        "184"
    };
}
/// Offset of `ThreadState::trace_regions` (u32).
macro_rules! t_trace_regions {
    () => {
        "144"
    };
}
/// Offset of `ThreadState::notrace_regions` (u32).
macro_rules! t_notrace_regions {
    () => {
        "148"
    };
}
/// `pending::CAPACITY`.
macro_rules! pend_capacity {
    () => {
        "65536"
    };
}
/// `shadow::CAPACITY`.
macro_rules! sh_capacity {
    () => {
        "131072"
    };
}

#[cfg(feature = "compiler-hooks")]
pub(crate) use {
    pend_capacity, sh_capacity, t_busy, t_depth, t_last_func, t_last_tsc, t_limit,
    t_notrace_regions, t_pend_base, t_pend_captured, t_pend_fast, t_pend_len, t_pend_over,
    t_pend_written, t_pos, t_session, t_sh_base, t_sh_len, t_sh_overflow, t_sh_restored,
    t_trace_regions,
};

/// The offsets above checked against `offset_of!`.
#[cfg(feature = "compiler-hooks")]
mod fast_layout {
    use super::super::{pending, shadow};
    use super::ThreadState;
    use core::mem::offset_of;

    const fn num(s: &str) -> usize {
        let b = s.as_bytes();
        let mut i = 0;
        let mut v = 0;
        while i < b.len() {
            v = v * 10 + (b[i] - b'0') as usize;
            i += 1;
        }
        v
    }

    const _: () = {
        assert!(num(t_session!()) == offset_of!(ThreadState, session));
        assert!(num(t_busy!()) == offset_of!(ThreadState, busy));
        assert!(num(t_pos!()) == offset_of!(ThreadState, cur.pos));
        assert!(num(t_limit!()) == offset_of!(ThreadState, cur.limit));
        assert!(num(t_last_tsc!()) == offset_of!(ThreadState, cur.last_tsc));
        assert!(num(t_last_func!()) == offset_of!(ThreadState, cur.last_func));
        assert!(num(t_depth!()) == offset_of!(ThreadState, depth));
        assert!(num(t_sh_base!()) == offset_of!(ThreadState, shadow.base));
        assert!(num(t_sh_len!()) == offset_of!(ThreadState, shadow.len));
        assert!(num(t_sh_overflow!()) == offset_of!(ThreadState, shadow.overflow));
        assert!(num(t_sh_restored!()) == offset_of!(ThreadState, shadow.restored));
        assert!(num(sh_capacity!()) == shadow::CAPACITY);
        assert!(num(t_pend_base!()) == offset_of!(ThreadState, pend.base));
        assert!(num(t_pend_len!()) == offset_of!(ThreadState, pend.len));
        assert!(num(t_pend_written!()) == offset_of!(ThreadState, pend.written));
        assert!(num(t_pend_over!()) == offset_of!(ThreadState, pend.over));
        assert!(num(t_pend_captured!()) == offset_of!(ThreadState, pend.captured));
        assert!(num(t_pend_fast!()) == offset_of!(ThreadState, pend.fast));
        assert!(num(pend_capacity!()) == pending::CAPACITY);
        assert!(num(t_trace_regions!()) == offset_of!(ThreadState, trace_regions));
        assert!(num(t_notrace_regions!()) == offset_of!(ThreadState, notrace_regions));
        // Held: tsc, func (the stores and the load of the fast path).
        assert!(offset_of!(pending::Held, tsc) == 0);
        assert!(offset_of!(pending::Held, func) == 8);
        assert!(core::mem::size_of::<pending::Held>() == 16);
        // Frame: ret, slot, func, flags (the frame stores of the fast path).
        assert!(offset_of!(shadow::Frame, ret) == 0);
        assert!(offset_of!(shadow::Frame, slot) == 8);
        assert!(offset_of!(shadow::Frame, func) == 16);
        assert!(offset_of!(shadow::Frame, flags) == 24);
        assert!(core::mem::size_of::<shadow::Frame>() == 32);
        assert!(shadow::F_RECORDED == 1 && shadow::F_HIJACKED == 2 && shadow::F_SLOT == 32);
        assert!(core::mem::size_of::<bool>() == 1);
    };
}

/// Address of the calling thread's state.
#[inline(always)]
pub(crate) fn state_ptr() -> *mut ThreadState {
    let p: *mut ThreadState;
    // SAFETY: reads the thread pointer and adds the TLS offset of
    // `fntrace_thread_state` from the GOT; touches no other state.
    unsafe {
        core::arch::asm!(
            "mov {p}, qword ptr fs:[0]",
            "add {p}, qword ptr [rip + fntrace_thread_state@GOTTPOFF]",
            p = out(reg) p,
            options(pure, nomem, nostack, preserves_flags),
        );
    }
    p
}

/// The calling thread's state (see [`with_state`] for the aliasing rule).
#[inline(always)]
#[allow(clippy::mut_from_ref)]
pub(crate) fn state() -> &'static mut ThreadState {
    // SAFETY: as in `with_state`.
    unsafe { &mut *state_ptr() }
}

#[inline(always)]
pub(crate) fn with_state<R>(f: impl FnOnce(&mut ThreadState) -> R) -> R {
    // SAFETY: the state is only touched by its own thread. Reentrant
    // use (a signal handler interrupting the recorder) is excluded by
    // the `busy` flag, which every path checks before changing anything
    // else and which is only set and cleared by the code that owns the
    // state at that moment. All-zero memory is a valid `ThreadState`.
    f(unsafe { &mut *state_ptr() })
}
