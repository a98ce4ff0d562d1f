//! The recorder: one trace file per session, mapped `MAP_SHARED`, carved
//! into fixed-size chunks that threads claim with one atomic add and fill
//! with compact events without locks, allocation or system calls.
//!
//! Crash safety: every byte an event writes lands directly in the page
//! cache of the trace file, so whatever was written before a crash or a
//! `SIGKILL` is in the file. Short events are written with a single 8-byte
//! store; longer records write their tail first and their first byte last,
//! so an interrupted record reads as the end of the stream (the file is
//! zero-filled). Chunks are sealed (length and CRC) when full, at thread
//! exit and at finish; unsealed chunks are read up to their first zero byte.
//!
//! Ordering of a session's life: [`start`] creates and maps the file,
//! writes the header and metadata, then publishes the session id in
//! `SESSION`. Threads attach lazily on their first event. [`finish`]
//! (explicit, or at `exit`) withdraws the id, seals what the finishing
//! thread owns, writes the final block and truncates the file to the chunks
//! handed out. Mappings are never unmapped, so a thread still finishing an
//! event of an old session writes into valid memory.

use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::ptr;
use std::sync::atomic::{
    AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering, compiler_fence,
};
use std::sync::{Mutex, Once};

use fntrace_format::event::{Compact, MAX_COMPACT_LEN, encode_compact};
use fntrace_format::event::{Framed, SliceSink, pack_entry_new, pack_entry_same, pack_exit};
use fntrace_format::layout::{
    CHUNK_FLAG_SEALED, CHUNK_HEADER_SIZE, CHUNK_SEAL_OFFSET, ChunkHeader, DEFAULT_CHUNK_SIZE,
    FINAL_FLAG_CLEAN, FINAL_OFFSET, Final, HDR_FLAG_TSC_INVARIANT, HEADER_SIZE, Header, META_TID,
    VERSION_MAJOR, VERSION_MINOR,
};

use crate::clock;
use crate::filter;
use crate::hooks::count;
use crate::hooks::shadow::{
    self, F_HIJACKED, F_NOTRACE, F_RECORDED, F_RETVAL, F_TRACE, Frame, Shadow,
};
use crate::procinfo;
use crate::site::Site;

/// Id of the active session; 0 when not recording, [`UNINIT`] before the
/// environment was looked at.
pub(crate) static SESSION: AtomicU32 = AtomicU32::new(UNINIT);
/// `SESSION` before the first look at `FNTRACE_OUTPUT`.
const UNINIT: u32 = u32::MAX;
/// The active session (null when none). Sessions are leaked on purpose.
static CURRENT: AtomicPtr<Session> = AtomicPtr::new(ptr::null_mut());
/// Serialises start and finish.
static LIFECYCLE: Mutex<()> = Mutex::new(());
static NEXT_ID: AtomicU32 = AtomicU32::new(1);
static ENV_INIT: Once = Once::new();
static PROCESS_HOOKS: Once = Once::new();

/// Room kept free at the end of every chunk payload so that any compact
/// event, and the 8-byte store that writes short ones, always fits.
const SLACK: usize = MAX_COMPACT_LEN + 8;
/// The file grows by this much at a time (a multiple of the chunk size).
const GROW_STEP: usize = 4 << 20;
/// The first growth (header, metadata and the first threads' chunks).
const FIRST_GROW: usize = 512 << 10;
/// Default maximum trace size.
const DEFAULT_MAX_SIZE: u64 = 16 << 30;
/// Calibration window at start.
const CALIBRATION_NS: u64 = 500_000;

/// How to record.
#[derive(Debug, Clone)]
pub struct Options {
    /// Output file.
    pub path: PathBuf,
    /// Largest file size; events past it are counted as lost.
    pub max_size: u64,
    /// Create the file exclusively; if it exists use `PATH.PID` (what
    /// `fntrace record` asks for, so that child processes that are also
    /// instrumented write their own files instead of overwriting).
    pub exclusive: bool,
    /// A child created by `fork` records into its own file, `PATH.PID`
    /// (what `fntrace record` asks for); otherwise children record nothing.
    pub follow_fork: bool,
}

impl Options {
    /// Recording into `path` with default limits.
    pub fn new(path: impl Into<PathBuf>) -> Options {
        Options {
            path: path.into(),
            max_size: DEFAULT_MAX_SIZE,
            exclusive: false,
            follow_fork: false,
        }
    }
}

/// What [`finish`] reports.
#[derive(Debug, Clone)]
pub struct Summary {
    /// The trace file.
    pub path: PathBuf,
    /// Bytes in the file.
    pub bytes: u64,
    /// Threads that recorded at least one event.
    pub threads: u32,
    /// Events dropped (no space, or reentrant events).
    pub lost_events: u64,
}

/// A position inside a chunk being filled (`repr(C)`: the assembly fast
/// path in `hooks::fast` uses its offsets).
#[repr(C)]
struct Cursor {
    /// Chunk header, null when none.
    chunk: *mut u8,
    /// Next byte to write.
    pos: *mut u8,
    /// Writes must start at or before this (payload end minus [`SLACK`]).
    limit: *mut u8,
    seq: u32,
    /// TSC of the last timed record (the chunk's base TSC at its start).
    last_tsc: u64,
    /// Function of the last entry in this chunk (0 at its start).
    last_func: u64,
}

impl Cursor {
    const EMPTY: Cursor = Cursor {
        chunk: ptr::null_mut(),
        pos: ptr::null_mut(),
        limit: ptr::null_mut(),
        seq: 0,
        last_tsc: 0,
        last_func: 0,
    };

    /// Delta from the last timed record to now, advancing the timeline.
    #[inline(always)]
    fn delta_now(&mut self) -> u64 {
        let d = clock::tsc().saturating_sub(self.last_tsc);
        self.last_tsc += d;
        d
    }

    fn payload(&self) -> *mut u8 {
        self.chunk.wrapping_add(CHUNK_HEADER_SIZE)
    }
}

struct Session {
    id: u32,
    path: PathBuf,
    fd: libc::c_int,
    base: *mut u8,
    reserved: usize,
    chunk_size: usize,
    max_chunks: u64,
    /// Bytes of the file that exist and are mapped.
    mapped: AtomicUsize,
    next_chunk: AtomicU64,
    grow_lock: Mutex<()>,
    finished: AtomicBool,
    lost: AtomicU64,
    threads: AtomicU32,
    header: Header,
    /// The options the session was started with (for forked children).
    opts: Options,
    meta: Mutex<Cursor>,
    /// Modules already described (start, size).
    modules: Mutex<Vec<(u64, u64)>>,
}

// SAFETY: the raw pointers in `Session` point into a mapping that lives as
// long as the process; shared mutable state is atomic or behind a Mutex.
unsafe impl Sync for Session {}
// SAFETY: as above; nothing in `Session` is tied to the creating thread.
unsafe impl Send for Session {}
// SAFETY: a Cursor is only used under the `meta` Mutex or by its thread.
unsafe impl Send for Cursor {}

/// Per-thread recorder state, in a zero-initialised TLS block (see
/// [`state_ptr`]); thread exit is observed through [`ExitHook`].
/// `repr(C)`: the assembly fast path in `hooks::fast` uses its offsets
/// (checked by [`fast_layout`]).
#[repr(C)]
struct ThreadState {
    /// Session this state writes to (0 = none).
    session: u32,
    /// Inside the recorder (reentrancy guard: a signal handler or a hook
    /// that runs instrumented code while an event is being written).
    busy: bool,
    /// The thread's TLS destructors ran; record nothing more.
    dead: bool,
    /// The session ran out of space for this thread.
    full: bool,
    cur: Cursor,
    depth: u32,
    tid: u32,
    /// Events dropped and not yet reported in a `Lost` record.
    lost: u64,
    session_ptr: *const Session,
    /// Calls of compiler-instrumented functions (return-address hijack
    /// and explicit exits).
    shadow: Shadow,
    /// Active `-F` frames (record only inside one when `-F` is given).
    trace_regions: u32,
    /// Active `-N` frames (record nothing inside one).
    notrace_regions: u32,
    /// This thread's arc table in counting mode (null until first use).
    arcs: *mut count::Table,
}

thread_local! {
    static EXIT_HOOK: ExitHook = const { ExitHook };
}

/// Its destructor runs when the thread exits and closes the thread's stream.
struct ExitHook;

impl Drop for ExitHook {
    fn drop(&mut self) {
        with_state(|t| {
            if t.busy {
                return;
            }
            t.busy = true;
            if let Some(s) = attached(t) {
                close_thread(s, t, true);
            }
            t.dead = true;
            t.busy = false;
        });
    }
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

/// Offsets the assembly fast path (`hooks::fast`) writes as literals,
/// checked against the structures at compile time.
#[cfg(feature = "compiler-hooks")]
mod fast_layout {
    use super::ThreadState;
    use crate::hooks::fast;
    use crate::hooks::shadow;
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
        assert!(num(fast::t_session!()) == offset_of!(ThreadState, session));
        assert!(num(fast::t_busy!()) == offset_of!(ThreadState, busy));
        assert!(num(fast::t_pos!()) == offset_of!(ThreadState, cur.pos));
        assert!(num(fast::t_limit!()) == offset_of!(ThreadState, cur.limit));
        assert!(num(fast::t_last_tsc!()) == offset_of!(ThreadState, cur.last_tsc));
        assert!(num(fast::t_last_func!()) == offset_of!(ThreadState, cur.last_func));
        assert!(num(fast::t_depth!()) == offset_of!(ThreadState, depth));
        assert!(num(fast::t_sh_base!()) == offset_of!(ThreadState, shadow.base));
        assert!(num(fast::t_sh_len!()) == offset_of!(ThreadState, shadow.len));
        assert!(num(fast::t_sh_overflow!()) == offset_of!(ThreadState, shadow.overflow));
        assert!(num(fast::t_sh_restored!()) == offset_of!(ThreadState, shadow.restored));
        assert!(num(fast::sh_capacity!()) == shadow::CAPACITY);
        // Frame: ret, slot, func, flags (the frame stores of the fast path).
        assert!(offset_of!(shadow::Frame, ret) == 0);
        assert!(offset_of!(shadow::Frame, slot) == 8);
        assert!(offset_of!(shadow::Frame, func) == 16);
        assert!(offset_of!(shadow::Frame, flags) == 24);
        assert!(core::mem::size_of::<shadow::Frame>() == 32);
        assert!(shadow::F_RECORDED == 1 && shadow::F_HIJACKED == 2);
        assert!(core::mem::size_of::<bool>() == 1);
    };
}

/// Called by the assembly fast path (through `hooks::fast::fntrace_fast_switch`)
/// when its event crossed the chunk's limit, with `busy` set: moves the
/// thread to a new chunk and clears `busy`.
#[cfg(feature = "compiler-hooks")]
pub(crate) extern "C" fn fast_chunk_switch() {
    let t = state();
    if t.session != 0 && t.cur.pos > t.cur.limit {
        next_chunk(t);
    }
    compiler_fence(Ordering::SeqCst);
    t.busy = false;
}

/// Address of the calling thread's state.
#[inline(always)]
fn state_ptr() -> *mut ThreadState {
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
fn state() -> &'static mut ThreadState {
    // SAFETY: as in `with_state`.
    unsafe { &mut *state_ptr() }
}

#[inline(always)]
fn with_state<R>(f: impl FnOnce(&mut ThreadState) -> R) -> R {
    // SAFETY: the state is only touched by its own thread. Reentrant
    // use (a signal handler interrupting the recorder) is excluded by
    // the `busy` flag, which every path checks before changing anything
    // else and which is only set and cleared by the code that owns the
    // state at that moment. All-zero memory is a valid `ThreadState`.
    f(unsafe { &mut *state_ptr() })
}

/// The session `t` is attached to, if it is still the current one.
fn attached(t: &ThreadState) -> Option<&'static Session> {
    if t.session != 0 && t.session == SESSION.load(Ordering::Acquire) {
        // SAFETY: sessions are leaked, so the pointer stays valid forever.
        Some(unsafe { &*t.session_ptr })
    } else {
        None
    }
}

/// Whether events may be recorded: true while a session is active and
/// before the environment has been checked.
#[inline(always)]
pub(crate) fn is_active() -> bool {
    SESSION.load(Ordering::Relaxed) != 0
}

/// Whether a session is active (after looking at the environment).
pub fn is_recording() -> bool {
    init_from_env();
    SESSION.load(Ordering::Acquire) != 0
}

/// The active session's output file.
pub fn output_path() -> Option<PathBuf> {
    init_from_env();
    let p = CURRENT.load(Ordering::Acquire);
    // SAFETY: sessions are leaked; a non-null pointer stays valid.
    (!p.is_null() && SESSION.load(Ordering::Acquire) != 0).then(|| unsafe { (*p).path.clone() })
}

// ---------------------------------------------------------------------------
// Hot path.

/// Writes a compact event already packed into `w` (`n` bytes).
///
/// # Safety
/// `t.cur.pos` must be at or before `t.cur.limit` of a live chunk.
#[inline(always)]
unsafe fn put_word(t: &mut ThreadState, w: u64, n: u32) {
    // SAFETY: by the caller's contract at least SLACK (> 8) bytes follow
    // `pos` inside the mapped chunk. One unaligned 8-byte store writes the
    // whole event; the bytes past the event are zero before and after.
    unsafe {
        (t.cur.pos as *mut u64).write_unaligned(w.to_le());
        t.cur.pos = t.cur.pos.add(n as usize);
    }
}

/// Writes a compact event that does not fit in 8 bytes: everything but the
/// first byte, then the first byte.
///
/// # Safety
/// As for [`put_word`].
#[cold]
unsafe fn put_long(t: &mut ThreadState, ev: Compact) {
    let mut buf = [0u8; MAX_COMPACT_LEN];
    let n = encode_compact(ev, &mut buf);
    // SAFETY: n <= MAX_COMPACT_LEN < SLACK bytes are free after `pos`.
    unsafe {
        ptr::copy_nonoverlapping(buf.as_ptr().add(1), t.cur.pos.add(1), n - 1);
        compiler_fence(Ordering::Release);
        t.cur.pos.write(buf[0]);
        t.cur.pos = t.cur.pos.add(n);
    }
}

/// What a source-instrumented call must undo at its exit (a bit set).
pub(crate) const G_RECORDED: u8 = 1;
/// The call opened a `-F` region.
pub(crate) const G_TRACE: u8 = 2;
/// The call opened a `-N` region.
pub(crate) const G_NOTRACE: u8 = 4;

/// Records the entry of a source-instrumented function; returns what its
/// exit must undo (`G_*` bits; 0: nothing was recorded).
#[inline]
pub(crate) fn record_site_entry(
    site: &'static Site,
    self_type: Option<fn() -> &'static str>,
) -> u8 {
    let t = state();
    let sid = SESSION.load(Ordering::Relaxed);
    // A thread that never attached has session 0, like "no session".
    if t.session != sid || sid == 0 || t.busy {
        return entry_slow(t, site, self_type);
    }
    let feat = filter::features();
    t.busy = true;
    compiler_fence(Ordering::SeqCst);
    if site.registered.load(Ordering::Relaxed) != sid {
        register_site(t, site, self_type, sid);
    }
    let mode = if feat == 0 {
        record_entry_inner(t, site.key());
        G_RECORDED
    } else {
        site_entry_filtered(t, site, feat)
    };
    compiler_fence(Ordering::SeqCst);
    t.busy = false;
    mode
}

/// A site entry while `-F`/`-N`/`--depth` are in force: the same region
/// rules as for compiler hooks, the site classified by its name once.
#[cold]
#[inline(never)]
fn site_entry_filtered(t: &mut ThreadState, site: &'static Site, feat: u32) -> u8 {
    let class = if feat & filter::FEAT_FILTERS != 0 {
        filter::site_class(site)
    } else {
        filter::NORMAL
    };
    let inside = !filter::has_trace_filters() || t.trace_regions > 0 || class == filter::TRACE;
    let record = inside
        && t.notrace_regions == 0
        && class != filter::NOTRACE
        && (feat & filter::FEAT_DEPTH == 0 || filter::depth_ok(t.depth));
    let mut mode = 0;
    if record {
        record_entry_inner(t, site.key());
        mode |= G_RECORDED;
    }
    if class == filter::TRACE {
        t.trace_regions += 1;
        mode |= G_TRACE;
    }
    if class == filter::NOTRACE {
        t.notrace_regions += 1;
        mode |= G_NOTRACE;
    }
    mode
}

/// The exit of a source-instrumented call whose entry returned `mode`.
#[inline]
pub(crate) fn site_exit(mode: u8) {
    if mode & (G_TRACE | G_NOTRACE) != 0 {
        let t = state();
        if mode & G_TRACE != 0 {
            t.trace_regions = t.trace_regions.saturating_sub(1);
        }
        if mode & G_NOTRACE != 0 {
            t.notrace_regions = t.notrace_regions.saturating_sub(1);
        }
    }
    if mode & G_RECORDED != 0 {
        record_exit();
    }
}

#[inline(always)]
fn record_entry_inner(t: &mut ThreadState, func: u64) {
    let d = t.cur.delta_now();
    let prev = t.cur.last_func;
    let packed = if func == prev {
        pack_entry_same(d)
    } else {
        pack_entry_new(d, func, prev)
    };
    // SAFETY: an attached thread always has `pos <= limit` between events
    // (chunk switches happen right after the write that crosses `limit`).
    unsafe {
        match packed {
            Some((w, n)) => put_word(t, w, n),
            None => put_long(t, Compact::Entry { d, func, prev }),
        }
    }
    t.cur.last_func = func;
    t.depth += 1;
    if t.cur.pos > t.cur.limit {
        next_chunk(t);
    }
}

/// Records the exit of the innermost recorded call.
#[inline]
pub(crate) fn record_exit() {
    let t = state();
    let sid = SESSION.load(Ordering::Relaxed);
    if t.session != sid || t.busy || t.depth == 0 {
        return;
    }
    t.busy = true;
    compiler_fence(Ordering::SeqCst);
    exit_inner(t);
    compiler_fence(Ordering::SeqCst);
    t.busy = false;
}

/// Writes an exit record; the caller holds `busy` on an attached thread.
#[inline(always)]
fn exit_inner(t: &mut ThreadState) {
    if t.depth == 0 || t.session == 0 {
        return;
    }
    let d = t.cur.delta_now();
    // SAFETY: as in `record_entry_inner`.
    unsafe {
        match pack_exit(d) {
            Some((w, n)) => put_word(t, w, n),
            None => put_long(t, Compact::Exit { d }),
        }
    }
    t.depth -= 1;
    if t.cur.pos > t.cur.limit {
        next_chunk(t);
    }
}

// ---------------------------------------------------------------------------
// Compiler hooks (mcount, fentry, cyg_profile): entries with a shadow
// frame, exits through the hijacked return address or explicit calls.

/// Whether a call of `func` is recorded given the thread's filter regions,
/// and the filter flags its shadow frame gets.
#[inline(always)]
fn hook_decision(t: &ThreadState, func: u64, feat: u32) -> (bool, u32) {
    if feat & filter::FEAT_FILTERS == 0 {
        return (
            feat & filter::FEAT_DEPTH == 0 || filter::depth_ok(t.depth),
            0,
        );
    }
    let class = filter::classify(func);
    let mut flags = 0;
    if class == filter::NOTRACE {
        flags |= F_NOTRACE;
    }
    if class == filter::TRACE {
        flags |= F_TRACE;
    }
    let inside = !filter::has_trace_filters() || t.trace_regions > 0 || class == filter::TRACE;
    let record = inside && t.notrace_regions == 0 && class != filter::NOTRACE;
    (record && filter::depth_ok(t.depth), flags)
}

/// Entry of a function whose exit is observed by replacing the return
/// address in `slot` with `tramp` (mcount, fentry, patchable entries).
/// `regs` points at the trampoline's saved registers (rdi, rsi, rdx, rcx,
/// r8, r9 at word offsets [`REG_ARGS`]..+6) where the arguments are
/// intact (fentry-style entries), or is null.
///
/// # Safety
/// `slot` must be the address of the live return-address slot of the
/// function being entered, `tramp` an exit trampoline that ends in
/// [`hook_exit`], and `regs` null or valid for reads of the save area.
#[inline(always)]
pub unsafe fn hook_entry(func: u64, slot: *mut u64, tramp: u64, regs: *const u64) {
    #[cfg(test)]
    fast_tests::RUST_ENTRIES.fetch_add(1, Ordering::Relaxed);
    let t = state();
    let feat = filter::features();
    if feat & filter::FEAT_COUNT != 0 {
        if !t.busy {
            t.busy = true;
            // SAFETY: as below, `slot` is the live return-address slot.
            count::count(&mut t.arcs, unsafe { slot.read() }, func);
            t.busy = false;
        }
        return;
    }
    let sid = SESSION.load(Ordering::Relaxed);
    // A thread that never attached has session 0, like "no session".
    if (t.session != sid || sid == 0 || t.busy) && !attach_slow(t) {
        return;
    }
    t.busy = true;
    compiler_fence(Ordering::SeqCst);
    if t.shadow.restored && t.shadow.walking == 0 {
        resync(t, tramp);
    }
    let (record, flags) = hook_decision(t, func, feat);
    if (record || flags != 0) && t.shadow.has_room() {
        // SAFETY: by the caller's contract `slot` is the live return
        // slot of the function being entered, on this thread's stack.
        let ret = unsafe { slot.read() };
        let mut flags = flags;
        if record {
            record_entry_inner(t, func);
            if feat & filter::FEAT_ARGS != 0 {
                // SAFETY: the caller's contract on `regs`.
                flags |= unsafe { capture_args(t, func, regs) };
            }
        }
        if flags & F_TRACE != 0 {
            t.trace_regions += 1;
        }
        if flags & F_NOTRACE != 0 {
            t.notrace_regions += 1;
        }
        let rec = if record { F_RECORDED } else { 0 };
        t.shadow
            .push(Frame::new(ret, slot as u64, func, flags | rec | F_HIJACKED));
        // SAFETY: as above; the original is kept in the shadow frame.
        unsafe { slot.write(tramp) };
    } else if record {
        // Too deep for the shadow stack: not recorded, counted.
        t.lost += 1;
    }
    compiler_fence(Ordering::SeqCst);
    t.busy = false;
}

/// Word offset of the saved rdi in a trampoline's save area (rsi, rdx,
/// rcx, r8, r9 follow).
pub const REG_ARGS: usize = 17;

/// Writes the `-A` arguments of a just-recorded entry; returns
/// [`F_RETVAL`] if its return value is to be recorded.
///
/// # Safety
/// `regs` is null or valid for reads of 6 words at [`REG_ARGS`].
#[cold]
unsafe fn capture_args(t: &mut ThreadState, func: u64, regs: *const u64) -> u32 {
    let m = crate::args::mask(func);
    if m & 0x3f != 0 && !regs.is_null() {
        let mut vals = [0i64; 6];
        let mut n = 0;
        for (i, v) in vals.iter_mut().enumerate() {
            if m & (1 << i) != 0 {
                // SAFETY: the caller's contract.
                *v = unsafe { regs.add(REG_ARGS + i).read() } as i64;
                n = i + 1;
            }
        }
        // Arguments up to the highest one asked for (the record holds a
        // prefix of the argument list).
        // SAFETY: only called by an attached thread.
        let s = unsafe { &*t.session_ptr };
        write_framed(s, &mut t.cur, t.tid, t.depth, false, |_| Framed::Args {
            values: &vals[..n],
        });
    }
    if m & crate::args::RETVAL != 0 {
        F_RETVAL
    } else {
        0
    }
}

/// Pops shadow frames `from..` (newest first), recording the exits of the
/// recorded ones (if `record`) and leaving their filter regions.
#[inline(always)]
fn pop_frames(t: &mut ThreadState, from: usize, record: bool) {
    while t.shadow.len > from {
        let top = t.shadow.len - 1;
        let f = t.shadow.frames()[top];
        t.shadow.len = top;
        if f.flags & F_TRACE != 0 {
            t.trace_regions = t.trace_regions.saturating_sub(1);
        }
        if f.flags & F_NOTRACE != 0 {
            t.notrace_regions = t.notrace_regions.saturating_sub(1);
        }
        if record && f.flags & F_RECORDED != 0 {
            exit_inner(t);
        }
    }
}

/// Exit through a hijacked return address: `slot` is the stack slot the
/// trampoline was returned from. Pops the matching shadow frame (and any
/// newer ones, skipped by `longjmp`) and returns the original return
/// address. `rax` is the function's return value (recorded for `-R`). A
/// slot without a frame aborts with a message: there is no address to
/// return to.
#[inline(always)]
pub fn hook_exit(slot: u64, rax: u64) -> u64 {
    let t = state();
    let Some(i) = t.shadow.find_slot(slot) else {
        lost_return_address(slot)
    };
    let f = t.shadow.frames()[i];
    let ret = f.ret;
    let record = !t.busy && t.session == SESSION.load(Ordering::Relaxed);
    let was_busy = t.busy;
    t.busy = true;
    compiler_fence(Ordering::SeqCst);
    if record && f.flags & (F_RETVAL | F_RECORDED) == F_RETVAL | F_RECORDED {
        pop_frames(t, i + 1, record);
        // SAFETY: only an attached thread records (`record`).
        let s = unsafe { &*t.session_ptr };
        write_framed(s, &mut t.cur, t.tid, t.depth, false, |_| Framed::RetVal {
            value: rax as i64,
        });
    }
    pop_frames(t, i, record);
    compiler_fence(Ordering::SeqCst);
    t.busy = was_busy;
    ret
}

#[cold]
fn lost_return_address(slot: u64) -> ! {
    let mut msg = *b"fntrace: no shadow frame for return slot 0x0000000000000000; aborting\n";
    let hex = b"0123456789abcdef";
    for i in 0..16 {
        msg[43 + i] = hex[((slot >> (60 - 4 * i)) & 15) as usize];
    }
    // SAFETY: writes a stack buffer to stderr, then aborts.
    unsafe {
        libc::write(2, msg.as_ptr().cast(), msg.len());
        libc::abort()
    }
}

/// Entry of a function that announces its exit explicitly
/// (`__cyg_profile_func_enter`).
#[inline(always)]
pub fn explicit_entry(func: u64, call_site: u64) {
    let t = state();
    let feat = filter::features();
    // Fast path: no filters, depth limit or counting; attached, not busy,
    // room on the shadow stack.
    if feat == 0
        && !t.busy
        && t.session != 0
        && t.session == SESSION.load(Ordering::Relaxed)
        && t.shadow.len < shadow::CAPACITY
        && t.shadow.is_reserved()
    {
        t.busy = true;
        compiler_fence(Ordering::SeqCst);
        record_entry_inner(t, func);
        t.shadow.push(Frame::new(0, 0, func, F_RECORDED));
        compiler_fence(Ordering::SeqCst);
        t.busy = false;
        return;
    }
    explicit_entry_slow(t, func, call_site, feat)
}

#[inline(never)]
fn explicit_entry_slow(t: &mut ThreadState, func: u64, call_site: u64, feat: u32) {
    if feat & filter::FEAT_COUNT != 0 {
        if !t.busy {
            t.busy = true;
            count::count(&mut t.arcs, call_site, func);
            t.busy = false;
        }
        return;
    }
    let sid = SESSION.load(Ordering::Relaxed);
    // A thread that never attached has session 0, like "no session".
    if (t.session != sid || sid == 0 || t.busy) && !attach_slow(t) {
        return;
    }
    t.busy = true;
    compiler_fence(Ordering::SeqCst);
    let (record, flags) = hook_decision(t, func, feat);
    if t.shadow.has_room() {
        if record {
            record_entry_inner(t, func);
        }
        if flags & F_TRACE != 0 {
            t.trace_regions += 1;
        }
        if flags & F_NOTRACE != 0 {
            t.notrace_regions += 1;
        }
        let rec = if record { F_RECORDED } else { 0 };
        t.shadow.push(Frame::new(0, 0, func, flags | rec));
    } else {
        t.shadow.overflow += 1;
        if record {
            t.lost += 1;
        }
    }
    compiler_fence(Ordering::SeqCst);
    t.busy = false;
}

/// Exit announced explicitly (`__cyg_profile_func_exit`): pops to the
/// newest frame of `func` (newer ones were skipped by `longjmp`).
#[inline(always)]
pub fn explicit_exit(func: u64) {
    let t = state();
    // Fast path: the newest frame is this function's, recorded, nothing
    // else to undo.
    let n = t.shadow.len;
    if n > 0 && !t.busy && t.shadow.overflow == 0 && filter::features() == 0 {
        let f = t.shadow.frames()[n - 1];
        if f.func == func && f.slot == 0 && f.flags == F_RECORDED {
            t.shadow.len = n - 1;
            if t.session == SESSION.load(Ordering::Relaxed) {
                t.busy = true;
                compiler_fence(Ordering::SeqCst);
                exit_inner(t);
                compiler_fence(Ordering::SeqCst);
                t.busy = false;
            }
            return;
        }
    }
    explicit_exit_slow(t, func)
}

#[inline(never)]
fn explicit_exit_slow(t: &mut ThreadState, func: u64) {
    if filter::features() & filter::FEAT_COUNT != 0 {
        return;
    }
    if t.busy {
        return;
    }
    if t.shadow.overflow > 0 {
        t.shadow.overflow -= 1;
        return;
    }
    let Some(i) = t
        .shadow
        .frames()
        .iter()
        .rposition(|f| f.func == func && f.slot == 0)
    else {
        return;
    };
    let record = t.session == SESSION.load(Ordering::Relaxed);
    t.busy = true;
    compiler_fence(Ordering::SeqCst);
    pop_frames(t, i, record);
    compiler_fence(Ordering::SeqCst);
    t.busy = false;
}

/// Puts the original return addresses back into every hijacked slot of
/// the calling thread, for an unwinder or a backtrace that reads them.
/// Slots that no longer hold `tramp` belong to dead frames and are left.
pub fn restore_return_addresses(tramp: u64) {
    with_state(|t| {
        if t.busy {
            return;
        }
        for f in t.shadow.frames().iter_mut().rev() {
            if f.flags & F_HIJACKED == 0 {
                continue;
            }
            f.flags &= !F_HIJACKED;
            let slot = f.slot as *mut u64;
            // SAFETY: the slot was a return-address slot of this thread's
            // stack. It is only written if it still holds the trampoline
            // (the frame is live, or nobody reused the memory), newest
            // frames first, so a reused slot is restored by its newest owner
            // and then no longer matches for older, dead frames.
            unsafe {
                if held_by_us(slot.read(), f, tramp) {
                    slot.write(f.ret);
                }
            }
        }
        t.shadow.restored = true;
    })
}

/// A landing pad is being installed in the frame whose CFA is `cfa`:
/// every shadow frame below that frame is gone (its exit is recorded now).
pub fn unwound_to(cfa: u64) {
    with_state(|t| {
        if t.busy {
            return;
        }
        let floor = cfa.wrapping_sub(8);
        let keep = t
            .shadow
            .frames()
            .iter()
            .position(|f| f.slot != 0 && f.slot < floor)
            .unwrap_or(t.shadow.len);
        let record = t.session == SESSION.load(Ordering::Relaxed);
        t.busy = true;
        compiler_fence(Ordering::SeqCst);
        pop_frames(t, keep, record);
        t.shadow.resync_floor = floor;
        compiler_fence(Ordering::SeqCst);
        t.busy = false;
    })
}

/// Starts a stack walk (a backtrace): original return addresses are put
/// back and stay there, even while code called by the walker runs, until
/// [`end_walk`].
pub fn begin_walk(tramp: u64) {
    restore_return_addresses(tramp);
    with_state(|t| t.shadow.walking += 1);
}

/// Ends a stack walk begun with [`begin_walk`] and re-hijacks the frames.
pub fn end_walk(tramp: u64) {
    with_state(|t| {
        t.shadow.walking = t.shadow.walking.saturating_sub(1);
        if !t.busy && t.shadow.restored && t.shadow.walking == 0 {
            t.busy = true;
            resync(t, tramp);
            t.busy = false;
        }
    })
}

/// Whether a return-address slot holding `v` is taken over by frame `f`:
/// it holds the exit trampoline, or (a patched site's call wrapper called
/// the body) the return point of `f`'s wrapper.
fn held_by_us(v: u64, f: &Frame, tramp: u64) -> bool {
    if v == tramp {
        return true;
    }
    #[cfg(feature = "compiler-hooks")]
    if crate::dynamic::wrapper::is_return_point(v, f.func) {
        return true;
    }
    let _ = f;
    false
}

/// Re-hijacks frames restored for an unwinder whose slots still hold
/// their original return address.
#[cold]
#[inline(never)]
fn resync(t: &mut ThreadState, tramp: u64) {
    let floor = t.shadow.resync_floor;
    for f in t.shadow.frames().iter_mut() {
        if f.flags & F_HIJACKED != 0 || f.slot == 0 || f.slot < floor {
            continue;
        }
        let slot = f.slot as *mut u64;
        // SAFETY: frames at or above the last landing pad's frame are live
        // (the unwinder stopped there); a live frame's slot holds `ret`,
        // and a slot holding anything else is left alone.
        unsafe {
            if slot.read() == f.ret {
                slot.write(tramp);
                f.flags |= F_HIJACKED;
            }
        }
    }
    t.shadow.restored = false;
    t.shadow.resync_floor = 0;
}

/// Runs `f` unless the calling thread is already inside the recorder or a
/// guarded handler (a handler that runs instrumented code would otherwise
/// recurse without end). Returns whether `f` ran.
pub fn guarded(f: impl FnOnce()) -> bool {
    let t = state();
    if t.busy {
        return false;
    }
    t.busy = true;
    f();
    state().busy = false;
    true
}

// ---------------------------------------------------------------------------
// Slow paths.

#[cold]
#[inline(never)]
fn entry_slow(
    t: &mut ThreadState,
    site: &'static Site,
    self_type: Option<fn() -> &'static str>,
) -> u8 {
    if !attach_slow(t) {
        return 0;
    }
    record_site_entry(site, self_type)
}

/// The slow path of an entry on a thread that is busy or not attached to
/// the current session: counts a reentrant event as lost, looks at the
/// environment once, attaches. Returns whether the thread is now attached
/// and not busy.
#[cold]
#[inline(never)]
fn attach_slow(t: &mut ThreadState) -> bool {
    if t.busy {
        t.lost += 1;
        return false;
    }
    if SESSION.load(Ordering::Acquire) == UNINIT {
        init_from_env();
    }
    let sid = SESSION.load(Ordering::Acquire);
    if sid == 0 || t.dead {
        return false;
    }
    if t.session != sid {
        t.busy = true;
        let ok = attach(t, sid);
        t.busy = false;
        if !ok {
            return false;
        }
    }
    true
}

/// Attaches the calling thread to session `sid`: claims its first chunk
/// and writes the thread-start record.
fn attach(t: &mut ThreadState, sid: u32) -> bool {
    let p = CURRENT.load(Ordering::Acquire);
    if p.is_null() {
        return false;
    }
    // SAFETY: sessions are leaked; `CURRENT` is published after the session
    // is fully initialised.
    let s: &'static Session = unsafe { &*p };
    if s.id != sid {
        return false;
    }
    if t.full && ptr::eq(t.session_ptr, s) {
        t.lost += 1;
        s.lost.fetch_add(1, Ordering::Relaxed);
        return false;
    }
    t.tid = procinfo::gettid();
    t.cur = Cursor::EMPTY;
    t.depth = 0;
    t.full = false;
    t.lost = 0;
    t.session_ptr = s;
    if !claim_chunk(s, &mut t.cur, t.tid, 0) {
        t.full = true;
        s.lost.fetch_add(1, Ordering::Relaxed);
        return false;
    }
    let mut nb = [0u8; 16];
    let name = procinfo::thread_name(&mut nb);
    write_framed(s, &mut t.cur, t.tid, 0, true, |d| Framed::ThreadStart {
        d,
        name,
    });
    s.threads.fetch_add(1, Ordering::Relaxed);
    t.session = sid;
    // Make sure the thread's exit is seen.
    EXIT_HOOK.with(|_| {});
    true
}

/// Moves a thread to a fresh chunk after sealing the full one.
#[cold]
#[inline(never)]
fn next_chunk(t: &mut ThreadState) {
    // SAFETY: only called by an attached thread.
    let s = unsafe { &*t.session_ptr };
    seal(&t.cur);
    if !claim_chunk(s, &mut t.cur, t.tid, t.depth) {
        // Out of space: detach; later events of this thread count as lost.
        t.full = true;
        t.session = 0;
        return;
    }
    flush_lost(s, t);
}

/// Reports events dropped so far in a `Lost` record.
fn flush_lost(s: &Session, t: &mut ThreadState) {
    if t.lost > 0 {
        let count = std::mem::take(&mut t.lost);
        s.lost.fetch_add(count, Ordering::Relaxed);
        write_framed(s, &mut t.cur, t.tid, t.depth, true, |d| Framed::Lost {
            d,
            count,
        });
    }
}

/// Writes the thread's exit record (if `exiting`) and seals its chunk.
fn close_thread(s: &Session, t: &mut ThreadState, exiting: bool) {
    if t.cur.chunk.is_null() {
        return;
    }
    flush_lost(s, t);
    if exiting {
        let mut nb = [0u8; 16];
        let name = procinfo::thread_name(&mut nb);
        write_framed(s, &mut t.cur, t.tid, t.depth, true, |d| {
            Framed::ThreadExit { d, name }
        });
    }
    seal(&t.cur);
    t.session = 0;
}

/// Records a marker event (its name and formatted arguments) on the
/// calling thread; false when nothing records or the event was dropped.
pub fn record_marker(name: &str, text: &str) -> bool {
    let t = state();
    if (t.busy || t.session == 0 || t.session != SESSION.load(Ordering::Relaxed)) && !attach_slow(t)
    {
        return false;
    }
    t.busy = true;
    compiler_fence(Ordering::SeqCst);
    // SAFETY: the thread is attached (checked above), so its session
    // pointer is set; sessions are leaked.
    let s = unsafe { &*t.session_ptr };
    let ok = write_framed(s, &mut t.cur, t.tid, t.depth, true, |d| Framed::Marker {
        d,
        name: name.as_bytes(),
        text: text.as_bytes(),
    });
    compiler_fence(Ordering::SeqCst);
    t.busy = false;
    ok
}

/// Writes the framed record `make(delta)` at the cursor (delta 0 unless
/// `timed`), moving to a new chunk first when it does not fit before the
/// cursor's limit. Records larger than a chunk are dropped.
fn write_framed<'a>(
    s: &Session,
    cur: &mut Cursor,
    tid: u32,
    depth: u32,
    timed: bool,
    make: impl Fn(u64) -> Framed<'a>,
) -> bool {
    if cur.chunk.is_null() {
        return false;
    }
    let max_len = make(u64::MAX).framed_len();
    if max_len + SLACK > s.chunk_size - CHUNK_HEADER_SIZE {
        return false;
    }
    if cur.pos as usize + max_len > cur.limit as usize {
        seal(cur);
        if !claim_chunk(s, cur, tid, depth) {
            return false;
        }
    }
    let rec = make(if timed { cur.delta_now() } else { 0 });
    let len = rec.framed_len();
    // SAFETY: `len <= max_len` bytes fit before the cursor's limit (checked
    // above), inside the mapped chunk; the body goes in first and the tag
    // byte last, so an interrupted record reads as the end of the stream.
    unsafe {
        let body = core::slice::from_raw_parts_mut(cur.pos.add(1), len - 1);
        let mut sink = SliceSink { buf: body, pos: 0 };
        rec.write_body(&mut sink);
        compiler_fence(Ordering::Release);
        cur.pos.write(rec.first_byte());
        cur.pos = cur.pos.add(len);
    }
    true
}

/// Claims a new chunk for stream `tid` (the cursor's next one) and writes
/// its header; the cursor's timeline restarts at the chunk's base TSC.
fn claim_chunk(s: &Session, cur: &mut Cursor, tid: u32, depth: u32) -> bool {
    if s.finished.load(Ordering::Acquire) {
        return false;
    }
    let idx = s.next_chunk.fetch_add(1, Ordering::Relaxed);
    if idx >= s.max_chunks {
        return false;
    }
    let end = HEADER_SIZE as usize + (idx as usize + 1) * s.chunk_size;
    if end > s.mapped.load(Ordering::Acquire) && !grow(s, end) {
        return false;
    }
    let chunk = s
        .base
        .wrapping_add(HEADER_SIZE as usize + idx as usize * s.chunk_size);
    let (base_tsc, base_mono_ns) = (clock::tsc(), clock::monotonic_ns());
    let seq = if cur.chunk.is_null() { 0 } else { cur.seq + 1 };
    let h = ChunkHeader {
        tid,
        seq,
        depth,
        base_tsc,
        base_mono_ns,
        ..ChunkHeader::default()
    };
    let bytes = h.encode_static();
    // SAFETY: the chunk lies inside the mapped, file-backed part of the
    // reservation (checked against `mapped` above) and was handed to this
    // caller alone by the atomic `next_chunk`. The magic (bytes 0..4) is
    // written last so a half-written header reads as unused.
    unsafe {
        ptr::copy_nonoverlapping(bytes.as_ptr().add(4), chunk.add(4), bytes.len() - 4);
        compiler_fence(Ordering::Release);
        ptr::copy_nonoverlapping(bytes.as_ptr(), chunk, 4);
    }
    *cur = Cursor {
        chunk,
        pos: chunk.wrapping_add(CHUNK_HEADER_SIZE),
        limit: chunk.wrapping_add(s.chunk_size - SLACK),
        seq,
        last_tsc: base_tsc,
        last_func: 0,
    };
    true
}

/// Makes at least `end` bytes of the file exist and be mapped.
fn grow(s: &Session, end: usize) -> bool {
    let _g = s.grow_lock.lock().unwrap_or_else(|e| e.into_inner());
    let mapped = s.mapped.load(Ordering::Acquire);
    if end <= mapped {
        return true;
    }
    if s.finished.load(Ordering::Acquire) {
        return false;
    }
    // Start small (short runs should not pay for populating megabytes),
    // then grow in large steps.
    let step = if mapped < FIRST_GROW {
        FIRST_GROW
    } else {
        GROW_STEP
    };
    let new_len = (end.max(mapped + step)).min(s.reserved);
    if new_len < end {
        return false;
    }
    // SAFETY: plain system calls on our own descriptor; the mapping goes
    // exactly over the reserved, not yet file-backed range
    // [base+mapped, base+new_len), which no one else uses.
    unsafe {
        // Reserve disk blocks first: a store into a hole of a full disk
        // would be SIGBUS, an error here is just "no space".
        let r = libc::fallocate(s.fd, 0, mapped as i64, (new_len - mapped) as i64);
        if r != 0 {
            let e = io::Error::last_os_error().raw_os_error();
            if e != Some(libc::EOPNOTSUPP) || libc::ftruncate(s.fd, new_len as i64) != 0 {
                return false;
            }
        }
        let p = libc::mmap(
            s.base.add(mapped) as *mut libc::c_void,
            new_len - mapped,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED | libc::MAP_FIXED | libc::MAP_POPULATE,
            s.fd,
            mapped as i64,
        );
        if p == libc::MAP_FAILED {
            return false;
        }
    }
    s.mapped.store(new_len, Ordering::Release);
    true
}

/// Seals a chunk: payload length, CRC, then the sealed flag.
fn seal(cur: &Cursor) {
    if cur.chunk.is_null() {
        return;
    }
    let len = cur.pos as usize - cur.payload() as usize;
    // SAFETY: the payload [payload, pos) was written by the owner of this
    // cursor, which is the caller; the seal fields lie in the chunk header.
    unsafe {
        let payload = core::slice::from_raw_parts(cur.payload(), len);
        let crc = crc32fast::hash(payload);
        let h = ChunkHeader {
            flags: CHUNK_FLAG_SEALED,
            payload_len: len as u32,
            payload_crc: crc,
            ..ChunkHeader::default()
        };
        let b = h.encode_seal();
        let at = cur.chunk.add(CHUNK_SEAL_OFFSET);
        ptr::copy_nonoverlapping(b.as_ptr().add(4), at.add(4), 8);
        compiler_fence(Ordering::Release);
        ptr::copy_nonoverlapping(b.as_ptr(), at, 4);
    }
}

/// Writes the description of a site to the metadata stream, once per
/// session.
#[cold]
#[inline(never)]
fn register_site(
    t: &ThreadState,
    site: &'static Site,
    self_type: Option<fn() -> &'static str>,
    sid: u32,
) {
    let old = site.registered.load(Ordering::Relaxed);
    if site
        .registered
        .compare_exchange(old, sid, Ordering::Relaxed, Ordering::Relaxed)
        .is_err()
    {
        return;
    }
    // SAFETY: only called by an attached thread.
    let s = unsafe { &*t.session_ptr };
    let prefix = self_type.map(|f| f()).unwrap_or("");
    write_meta(
        s,
        &Framed::Site {
            key: site.key(),
            prefix: prefix.as_bytes(),
            name: site.name.as_bytes(),
            file: site.file.as_bytes(),
            line: u64::from(site.line),
        },
    );
}

fn write_meta(s: &Session, rec: &Framed<'_>) {
    let mut m = s.meta.lock().unwrap_or_else(|e| e.into_inner());
    if m.chunk.is_null() && !claim_chunk(s, &mut m, META_TID, 0) {
        return;
    }
    write_framed(s, &mut m, META_TID, 0, false, |_| *rec);
}

// ---------------------------------------------------------------------------
// Session life cycle.

/// Starts recording into a new trace file. Fails if a session is already
/// active or the file cannot be created and mapped.
pub fn start(opts: &Options) -> io::Result<PathBuf> {
    // Looking at the environment later must not start a second session.
    ENV_INIT.call_once(|| {
        let _ = SESSION.compare_exchange(UNINIT, 0, Ordering::AcqRel, Ordering::Acquire);
    });
    let _l = LIFECYCLE.lock().unwrap_or_else(|e| e.into_inner());
    start_locked(opts)
}

/// Creates, describes and publishes a session; the caller holds
/// `LIFECYCLE`.
fn start_locked(opts: &Options) -> io::Result<PathBuf> {
    let cur = SESSION.load(Ordering::Acquire);
    if cur != 0 && cur != UNINIT {
        return Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            "fntrace: a recording is already active",
        ));
    }
    let s: &'static Session = Box::leak(Box::new(create_session(opts)?));
    write_process_metadata(s);
    install_process_hooks();
    CURRENT.store(s as *const Session as *mut Session, Ordering::Release);
    SESSION.store(s.id, Ordering::Release);
    Ok(s.path.clone())
}

fn open_trace(path: &Path, exclusive: bool) -> io::Result<(libc::c_int, PathBuf)> {
    let open = |p: &Path, excl: bool| -> io::Result<libc::c_int> {
        let c = CString::new(p.as_os_str().as_bytes())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains NUL"))?;
        let flags = libc::O_RDWR
            | libc::O_CREAT
            | libc::O_CLOEXEC
            | if excl { libc::O_EXCL } else { libc::O_TRUNC };
        // SAFETY: `c` is a valid NUL-terminated path.
        let fd = unsafe { libc::open(c.as_ptr(), flags, 0o644) };
        if fd < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(fd)
        }
    };
    if !exclusive {
        return open(path, false).map(|fd| (fd, path.to_path_buf()));
    }
    match open(path, true) {
        Ok(fd) => Ok((fd, path.to_path_buf())),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
            let mut p = path.as_os_str().to_owned();
            p.push(format!(".{}", std::process::id()));
            let p = PathBuf::from(p);
            open(&p, false).map(|fd| (fd, p))
        }
        Err(e) => Err(e),
    }
}

fn create_session(opts: &Options) -> io::Result<Session> {
    let with_path =
        |e: io::Error| io::Error::new(e.kind(), format!("{}: {e}", opts.path.display()));
    let (fd, path) = open_trace(&opts.path, opts.exclusive).map_err(with_path)?;
    let chunk_size = DEFAULT_CHUNK_SIZE as usize;
    let max = opts
        .max_size
        .max(HEADER_SIZE as u64 + 2 * chunk_size as u64);
    let max_chunks = (max - HEADER_SIZE as u64) / chunk_size as u64;
    let reserved = HEADER_SIZE as usize + max_chunks as usize * chunk_size;
    // SAFETY: an anonymous PROT_NONE reservation; nothing else refers to it.
    let base = unsafe {
        libc::mmap(
            ptr::null_mut(),
            reserved,
            libc::PROT_NONE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    if base == libc::MAP_FAILED {
        let e = io::Error::last_os_error();
        // SAFETY: closing our own descriptor.
        unsafe { libc::close(fd) };
        return Err(with_path(e));
    }
    let tsc_hz = clock::calibrate(CALIBRATION_NS);
    let (start_tsc, start_mono_ns) = clock::clock_pair();
    let header = Header {
        version_major: VERSION_MAJOR,
        version_minor: VERSION_MINOR,
        header_size: HEADER_SIZE,
        chunk_size: chunk_size as u32,
        flags: if clock::tsc_invariant() {
            HDR_FLAG_TSC_INVARIANT
        } else {
            0
        },
        tsc_hz,
        start_tsc,
        start_mono_ns,
        start_realtime_ns: clock::realtime_ns(),
        pid: std::process::id(),
    };
    let s = Session {
        id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
        path,
        fd,
        base: base as *mut u8,
        reserved,
        chunk_size,
        max_chunks,
        mapped: AtomicUsize::new(0),
        next_chunk: AtomicU64::new(0),
        grow_lock: Mutex::new(()),
        finished: AtomicBool::new(false),
        lost: AtomicU64::new(0),
        threads: AtomicU32::new(0),
        header,
        opts: opts.clone(),
        meta: Mutex::new(Cursor::EMPTY),
        modules: Mutex::new(Vec::new()),
    };
    if !grow(&s, HEADER_SIZE as usize) {
        let e = io::Error::last_os_error();
        // SAFETY: closing our own descriptor.
        unsafe { libc::close(fd) };
        return Err(with_path(e));
    }
    let hb = s.header.encode();
    // SAFETY: the header page is mapped and file-backed (grow above).
    unsafe { ptr::copy_nonoverlapping(hb.as_ptr(), s.base, hb.len()) };
    Ok(s)
}

fn write_process_metadata(s: &Session) {
    let exe = procinfo::exe_path();
    let cmdline = procinfo::cmdline(16 << 10);
    // SAFETY: getppid cannot fail.
    let ppid = unsafe { libc::getppid() } as u64;
    write_meta(
        s,
        &Framed::Process {
            pid: u64::from(std::process::id()),
            ppid,
            exe: &exe,
            cmdline: &cmdline,
        },
    );
    write_modules(s);
}

fn write_modules(s: &Session) {
    let mut known = s.modules.lock().unwrap_or_else(|e| e.into_inner());
    procinfo::for_each_module(|m| {
        if known.contains(&(m.start, m.size)) {
            return;
        }
        known.push((m.start, m.size));
        write_meta(
            s,
            &Framed::Module {
                bias: m.bias,
                start: m.start,
                size: m.size,
                build_id: m.build_id,
                path: m.path,
            },
        );
    });
}

/// Describes modules loaded since the session started (after `dlopen`).
pub fn note_modules_changed() {
    let _l = LIFECYCLE.lock().unwrap_or_else(|e| e.into_inner());
    let p = CURRENT.load(Ordering::Acquire);
    let sid = SESSION.load(Ordering::Acquire);
    if p.is_null() || sid == 0 || sid == UNINIT {
        return;
    }
    // SAFETY: sessions are leaked.
    write_modules(unsafe { &*p });
    drop(_l);
    filter::scan_new_modules();
    crate::args::scan_new_modules();
    #[cfg(feature = "compiler-hooks")]
    {
        if crate::xray::tramp::RECORD.load(Ordering::Acquire) {
            crate::xray::api::start_recording();
        }
        crate::dynamic::scan();
    }
}

/// Finishes the active session: closes the calling thread's stream, writes
/// the final block and truncates the file. Other threads stop recording at
/// their next event; their last chunks stay unsealed (readers handle that).
pub fn finish() -> Option<Summary> {
    finish_session(false)
}

fn finish_session(process_exit: bool) -> Option<Summary> {
    let _l = LIFECYCLE.lock().unwrap_or_else(|e| e.into_inner());
    let p = CURRENT.load(Ordering::Acquire);
    let sid = SESSION.load(Ordering::Acquire);
    if p.is_null() || sid == 0 || sid == UNINIT {
        return None;
    }
    // SAFETY: sessions are leaked.
    let s: &'static Session = unsafe { &*p };
    // Modules loaded since the start (dlopen) become known too.
    write_modules(s);
    count::for_each_arc(|from, to, count| {
        write_meta(s, &Framed::Arc { from, to, count });
    });
    with_state(|t| {
        if !t.busy && t.session == sid {
            t.busy = true;
            close_thread(s, t, process_exit);
            t.busy = false;
        }
    });
    SESSION.store(0, Ordering::Release);
    {
        let m = s.meta.lock().unwrap_or_else(|e| e.into_inner());
        seal(&m);
    }
    let (end_tsc, end_mono_ns) = clock::clock_pair();
    let h = &s.header;
    let measured = clock::hz_between((h.start_tsc, h.start_mono_ns), (end_tsc, end_mono_ns))
        .filter(|_| end_mono_ns - h.start_mono_ns >= 50_000_000);
    let chunks = {
        let _g = s.grow_lock.lock().unwrap_or_else(|e| e.into_inner());
        s.finished.store(true, Ordering::Release);
        s.next_chunk.load(Ordering::Acquire).min(s.max_chunks)
    };
    let fin = Final {
        flags: FINAL_FLAG_CLEAN,
        end_tsc,
        end_mono_ns,
        tsc_hz: measured.unwrap_or(h.tsc_hz),
        chunks,
        lost_events: s.lost.load(Ordering::Relaxed),
    };
    let fb = fin.encode();
    let len = HEADER_SIZE as u64 + chunks * s.chunk_size as u64;
    // SAFETY: the header page is mapped; truncating to the chunks handed
    // out keeps every page a thread may still write to inside the file.
    unsafe {
        ptr::copy_nonoverlapping(fb.as_ptr(), s.base.add(FINAL_OFFSET), fb.len());
        libc::ftruncate(s.fd, len as i64);
        libc::close(s.fd);
    }
    Some(Summary {
        path: s.path.clone(),
        bytes: len,
        threads: s.threads.load(Ordering::Relaxed),
        lost_events: fin.lost_events,
    })
}

/// Forces what was recorded so far to stable storage (`msync`). Not
/// needed for crash safety against process death (the page cache already
/// holds every event), only against a machine crash.
pub fn flush() -> io::Result<()> {
    let p = CURRENT.load(Ordering::Acquire);
    if p.is_null() || SESSION.load(Ordering::Acquire) == 0 {
        return Ok(());
    }
    // SAFETY: sessions are leaked; the range is mapped.
    let r = unsafe {
        let s = &*p;
        libc::msync(
            s.base as *mut libc::c_void,
            s.mapped.load(Ordering::Acquire),
            libc::MS_SYNC,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

extern "C" fn at_exit() {
    #[cfg(feature = "compiler-hooks")]
    crate::dynamic::control::stop();
    finish_session(true);
}

extern "C" fn after_fork_child() {
    // The child shares the parent's MAP_SHARED mapping: it must never write
    // to it. It records nothing unless it starts a session of its own.
    let p = CURRENT.load(Ordering::Acquire);
    let was = SESSION.load(Ordering::Acquire);
    SESSION.store(0, Ordering::Release);
    CURRENT.store(ptr::null_mut(), Ordering::Release);
    if p.is_null() || was == 0 || was == UNINIT {
        return;
    }
    // SAFETY: sessions are leaked.
    let s: &'static Session = unsafe { &*p };
    // SAFETY: closing the parent's descriptor in the child only.
    unsafe { libc::close(s.fd) };
    if !s.opts.follow_fork {
        return;
    }
    // A thread of the parent may have held the lock; it does not exist here.
    let Ok(_l) = LIFECYCLE.try_lock() else {
        return;
    };
    let mut o = s.opts.clone();
    let mut name = o.path.clone().into_os_string();
    name.push(format!(".{}", std::process::id()));
    o.path = name.into();
    o.exclusive = true;
    if let Err(e) = start_locked(&o) {
        eprintln!("fntrace: child {}: cannot record: {e}", std::process::id());
    }
    #[cfg(feature = "compiler-hooks")]
    if crate::dynamic::control::forget() {
        let _ = crate::dynamic::control::start();
    }
}

fn install_process_hooks() {
    PROCESS_HOOKS.call_once(|| {
        // SAFETY: registering plain `extern "C"` functions without state.
        unsafe {
            libc::atexit(at_exit);
            libc::pthread_atfork(None, None, Some(after_fork_child));
        }
    });
}

/// Environment variable naming the output file; setting it makes any
/// instrumented program record from its first instrumented call.
pub const ENV_OUTPUT: &str = "FNTRACE_OUTPUT";
/// Environment variable with the maximum trace size (bytes, or with a
/// `K`, `M` or `G` suffix).
pub const ENV_MAX_SIZE: &str = "FNTRACE_MAX_SIZE";
/// Set by `fntrace record`: create the output exclusively (children that
/// are instrumented too write `PATH.PID`).
pub const ENV_EXCLUSIVE: &str = "FNTRACE_EXCLUSIVE";

/// Parses a size such as `512M`.
pub fn parse_size(s: &str) -> Option<u64> {
    let s = s.trim();
    let (num, mult) = match s.as_bytes().last()? {
        b'k' | b'K' => (&s[..s.len() - 1], 1u64 << 10),
        b'm' | b'M' => (&s[..s.len() - 1], 1 << 20),
        b'g' | b'G' => (&s[..s.len() - 1], 1 << 30),
        _ => (s, 1),
    };
    num.trim().parse::<u64>().ok()?.checked_mul(mult)
}

/// Starts a session if `FNTRACE_OUTPUT` is set (once per process).
pub(crate) fn init_from_env() {
    if ENV_INIT.is_completed() {
        return;
    }
    // Instrumented code that runs while we initialise (a dependency built
    // with instrumentation, a hook in a library we call) must not start
    // initialising again on this thread: it would wait for itself.
    let t = state();
    if t.busy {
        return;
    }
    t.busy = true;
    init_from_env_once();
    state().busy = false;
}

/// Whether the `LD_PRELOAD` runtime is in the process besides this one
/// (then it records; this copy, linked into the program without
/// `compiler-hooks`, stays idle instead of writing a second trace).
fn preload_runtime_present() -> bool {
    if cfg!(feature = "compiler-hooks") {
        return false;
    }
    // SAFETY: dlsym with a NUL-terminated name.
    !unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"fntrace_preload_marker".as_ptr()) }.is_null()
}

/// Keeps an inherited profiling timer from killing the process while the
/// runtime starts. A `gcc -pg` program that `exec`s keeps its
/// `ITIMER_PROF` timer running into the new image, whose `SIGPROF`
/// handler glibc installs only in the program's own start-up code
/// (`__monstartup`, called from the executable's `_init`), after ours: a
/// tick during our start-up, or between its end and `__monstartup`, would
/// find the default action and terminate the process. While the timer is
/// armed and the action is the default, `SIGPROF` is ignored. If the new
/// image calls `__monstartup` itself, it stays ignored until glibc
/// replaces the action with its own handler (a lost tick only loses one
/// histogram sample); otherwise the default comes back when the guard is
/// dropped, so a program that would have died of the signal still does.
struct ProfTimerGuard(bool);

impl ProfTimerGuard {
    fn new() -> ProfTimerGuard {
        // SAFETY: getitimer and sigaction only read and write the local
        // structures passed to them.
        unsafe {
            let mut t: libc::itimerval = core::mem::zeroed();
            if libc::getitimer(libc::ITIMER_PROF, &mut t) != 0
                || (t.it_value.tv_sec == 0 && t.it_value.tv_usec == 0)
            {
                return ProfTimerGuard(false);
            }
            let mut old: libc::sigaction = core::mem::zeroed();
            if libc::sigaction(libc::SIGPROF, core::ptr::null(), &mut old) != 0
                || old.sa_sigaction != libc::SIG_DFL
            {
                return ProfTimerGuard(false);
            }
            libc::signal(libc::SIGPROF, libc::SIG_IGN);
        }
        ProfTimerGuard(!main_image_starts_gmon())
    }
}

impl Drop for ProfTimerGuard {
    fn drop(&mut self) {
        if self.0 {
            // SAFETY: restores the default action we replaced.
            unsafe { libc::signal(libc::SIGPROF, libc::SIG_DFL) };
        }
    }
}

/// Whether the main executable imports `__monstartup` (it was linked with
/// `-pg`, and its start-up code installs glibc's `SIGPROF` handler).
fn main_image_starts_gmon() -> bool {
    use object::{Object as _, ObjectSymbol as _};
    let Some(map) = crate::procinfo::FileMap::open(std::path::Path::new("/proc/self/exe")) else {
        return false;
    };
    let Ok(obj) = object::File::parse(map.as_slice()) else {
        return false;
    };
    obj.dynamic_symbols()
        .any(|s| s.is_undefined() && s.name() == Ok("__monstartup"))
}

fn init_from_env_once() {
    ENV_INIT.call_once(|| {
        let Some(path) = std::env::var_os(ENV_OUTPUT).filter(|p| !p.is_empty()) else {
            let _ = SESSION.compare_exchange(UNINIT, 0, Ordering::AcqRel, Ordering::Acquire);
            return;
        };
        if preload_runtime_present() {
            let _ = SESSION.compare_exchange(UNINIT, 0, Ordering::AcqRel, Ordering::Acquire);
            crate::markers::record::init_forwarded_from_env();
            return;
        }
        let _prof = ProfTimerGuard::new();
        let mut opts = Options::new(PathBuf::from(path));
        if let Some(m) = std::env::var(ENV_MAX_SIZE)
            .ok()
            .and_then(|v| parse_size(&v))
        {
            opts.max_size = m;
        }
        opts.exclusive = std::env::var_os(ENV_EXCLUSIVE).is_some_and(|v| v == "1");
        opts.follow_fork = opts.exclusive;
        crate::filter::init_from_env();
        crate::args::init_from_env();
        count::init_from_env();
        crate::markers::record::init_from_env();
        let _l = LIFECYCLE.lock().unwrap_or_else(|e| e.into_inner());
        if let Err(e) = start_locked(&opts) {
            eprintln!("fntrace: cannot record: {e}");
            SESSION.store(0, Ordering::Release);
        } else {
            #[cfg(feature = "compiler-hooks")]
            {
                crate::xray::api::start_recording();
                start_dynamic();
            }
        }
    });
}

/// `FNTRACE_KEEP_CALLS=1`: keep the `call mcount` (`gcc -pg`, `rustc
/// -Zinstrument-mcount`) and `call __fentry__` (`gcc -pg -mfentry`) of
/// instrumented functions (exits by return-address hijacking) instead of
/// rewriting them into patchable sites with call wrappers.
#[cfg(feature = "compiler-hooks")]
pub const ENV_KEEP_CALLS: &str = "FNTRACE_KEEP_CALLS";

/// Switches on the patchable sites `-F`/`-N` select (all without `-F`)
/// and starts the control socket if asked. With patchable sites the
/// selection is what is patched, so the recording-time region filters
/// are cleared (a function switched on later with `fntrace live` must be
/// recorded wherever it is called).
#[cfg(feature = "compiler-hooks")]
fn start_dynamic() {
    let lines = |v: &str| -> Vec<String> {
        std::env::var(v)
            .unwrap_or_default()
            .lines()
            .filter(|l| !l.is_empty())
            .map(str::to_string)
            .collect()
    };
    let mut trace = lines(filter::ENV_FILTER);
    trace.extend(lines(crate::xray::api::ENV_PATCH));
    let notrace = lines(filter::ENV_NOTRACE);
    // `call mcount`/`call __fentry__` become patchable sites (call
    // wrappers instead of a hijacked return) unless `-F`/`-N` ask for
    // their region semantics,
    // counting mode wants its own fast path, or `FNTRACE_KEEP_CALLS=1`.
    crate::dynamic::set_convert_calls(
        trace.is_empty()
            && notrace.is_empty()
            && filter::features() & filter::FEAT_COUNT == 0
            && std::env::var_os(ENV_KEEP_CALLS).is_none_or(|v| v != "1"),
    );
    match crate::dynamic::start(&trace, &notrace) {
        Ok(_) => {
            if crate::dynamic::site_counts().0 > 0 {
                let _ = filter::set_filters(&[], &[]);
            }
        }
        Err(e) => eprintln!("fntrace: {e}"),
    }
    if std::env::var_os(crate::dynamic::control::ENV_CONTROL).is_some_and(|v| v == "1") {
        if let Err(e) = crate::dynamic::control::start() {
            eprintln!("fntrace: control socket: {e}");
        }
    }
}

/// Runs at program start (before `main`) so that recording requested
/// through the environment starts with the process, not at the first
/// instrumented call. The first instrumented call does the same if this
/// constructor was not linked in.
#[used]
#[unsafe(link_section = ".init_array")]
static INIT_FROM_ENV: extern "C" fn() = {
    extern "C" fn init() {
        init_from_env();
    }
    init
};

/// The assembly fast path (`hooks::fast`) against the format's decoder:
/// calls of a function that starts with `call __fentry__` (what
/// `gcc -pg -mfentry` emits), with the thread's last timestamp and last
/// function set so that the deltas and function deltas take every
/// encoded length.
#[cfg(all(test, feature = "compiler-hooks"))]
mod fast_tests {
    use super::*;
    use fntrace_format::event::Decoder;
    use std::sync::atomic::AtomicU64;

    /// Entries that took the Rust path.
    pub(super) static RUST_ENTRIES: AtomicU64 = AtomicU64::new(0);

    /// A function instrumented like `gcc -pg -mfentry` output.
    #[unsafe(naked)]
    extern "C" fn probe() {
        core::arch::naked_asm!(
            "call {f}",
            "ret",
            f = sym crate::hooks::tramp::__fentry__,
        )
    }

    #[test]
    fn fast_path_events_decode() {
        let path = std::env::temp_dir().join(format!("fntrace-fast-{}.data", std::process::id()));
        start(&Options {
            path: path.clone(),
            max_size: 1 << 30,
            exclusive: false,
            follow_fork: false,
        })
        .unwrap();
        let func = probe as *const () as u64;
        // Attach (the first event takes the Rust path).
        probe();
        let deltas = [
            0u64,
            1,
            31,
            32,
            63,
            64,
            127,
            128,
            4095,
            4096,
            8191,
            8192,
            1 << 20,
            1 << 27,
            1 << 34,
            1 << 41,
            1 << 48,
            1 << 55,
        ];
        let prevs = [
            func,
            func - 1,
            func + 1,
            func - 100,
            func + 20_000,
            func - (1 << 27) + 1,
            func + (1 << 27),
            func - (1 << 20),
            func + (1 << 33),
            0,
            func ^ (1 << 46),
        ];
        let mut fast = 0;
        for &d in &deltas {
            for &prev in &prevs {
                let t = state();
                assert_eq!(t.session, SESSION.load(Ordering::Relaxed));
                let now = clock::tsc();
                let base = now.saturating_sub(d);
                t.cur.last_tsc = base;
                t.cur.last_func = prev;
                let pos = t.cur.pos;
                let before = RUST_ENTRIES.load(Ordering::Relaxed);
                probe();
                let t = state();
                let rust = RUST_ENTRIES.load(Ordering::Relaxed) != before;
                // SAFETY: the bytes between the two positions were just
                // written by this thread into the mapped chunk (no chunk
                // switch: asserted below).
                let bytes = unsafe {
                    core::slice::from_raw_parts(pos, t.cur.pos.offset_from(pos) as usize)
                };
                assert!(t.cur.pos > pos && bytes.len() <= 2 * MAX_COMPACT_LEN);
                let mut dec = Decoder::resume(bytes, 0, base, prev);
                let entry = dec.next_compact().unwrap().unwrap();
                let exit = dec.next_compact().unwrap().unwrap();
                assert_eq!(dec.position(), bytes.len(), "{d} {prev:#x} {bytes:x?}");
                assert_eq!((entry.0, entry.1), (0, func), "{d} {prev:#x} {bytes:x?}");
                assert!(entry.2 >= now && entry.2 <= exit.2, "{d} {prev:#x}");
                assert_eq!(exit.0, 1);
                assert_eq!(exit.2, t.cur.last_tsc);
                assert_eq!(t.cur.last_func, func);
                assert_eq!(t.depth, 0);
                assert_eq!(t.shadow.len, 0);
                // The assembly handles exactly the entries that fit in one
                // word (`pack_*` say which); longer ones take the Rust path.
                let d_entry = entry.2 - base;
                let word = if prev == func {
                    fntrace_format::event::pack_entry_same(d_entry)
                } else {
                    fntrace_format::event::pack_entry_new(d_entry, func, prev)
                };
                assert_eq!(!rust, word.is_some(), "{d} {prev:#x} {bytes:x?}");
                fast += usize::from(!rust);
            }
        }
        assert!(fast > deltas.len() * prevs.len() / 2, "{fast}");
        finish();
        let _ = std::fs::remove_file(&path);
        // With no session, a thread that never attached (session 0, like
        // the current one) must not take the fast path: it has no chunk.
        std::thread::spawn(move || {
            // SAFETY: the hooks take any function address.
            unsafe {
                crate::hooks::tramp::__cyg_profile_func_enter(func as *mut u8, ptr::null_mut());
                crate::hooks::tramp::__cyg_profile_func_exit(func as *mut u8, ptr::null_mut());
            }
            probe();
        })
        .join()
        .unwrap();
    }
}
