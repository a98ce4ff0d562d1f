//! The event sink: one trace file per session, mapped `MAP_SHARED`, carved
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
//! The bottom of the runtime's layers above the leaves: it knows nothing
//! of mechanisms, filters or start-up. Mechanisms record through
//! [`write`](mod@write)'s entry, exit and record writers on the calling thread's
//! [`state`]; `session` starts and finishes trace files here.
//!
//! - [`state`]: the per-thread state, its TLS block and the offsets the
//!   assembly fast path uses (the asm↔struct contract, with assertions);
//! - [`shadow`]: the per-thread shadow stack of open calls;
//! - [`pending`]: the record-time time filter (entries held back until
//!   their call proves long enough);
//! - [`write`](mod@write): attaching threads, chunk claiming, event and record
//!   writing, sealing;
//! - [`file`](mod@file): the trace file of a session, its header and metadata,
//!   finishing;
//! - [`helper`]: the helper thread of a session, the chunk life cycle off
//!   the traced threads: it maps and pre-faults the file ahead of the
//!   writers (acquire), and retires full chunks: counts their events into
//!   their header, hands them to writeback and drops them from memory.
//!
//! Ordering of a session's life: `start` creates and maps the file,
//! writes the header and metadata, then publishes the session id in
//! `SESSION`. Threads attach lazily on their first event. `finish`
//! (explicit, or at `exit`) withdraws the id, seals what the finishing
//! thread owns, writes the final block and truncates the file to the chunks
//! handed out. Mappings are never unmapped, so a thread still finishing an
//! event of an old session writes into valid memory.

pub mod file;
pub mod helper;
pub mod pending;
pub mod shadow;
pub mod state;
pub mod write;

use std::path::PathBuf;
use std::ptr;
use std::sync::Mutex;
use std::sync::atomic::{AtomicPtr, AtomicU32, Ordering};

use fntrace_format::event::MAX_COMPACT_LEN;

pub use file::flush;
#[cfg(feature = "compiler-hooks")]
pub(crate) use file::{Ended, complete, end};
pub(crate) use file::{
    finish, forget_after_fork, note_meta, note_modules, start, start_after_fork, start_helper,
};

/// Marks the active session as recorded by attaching to a running
/// process (controller pid `controller`), now. Returns whether a session
/// is active.
pub fn note_attach(controller: u64) -> bool {
    file::note_meta(&fntrace_format::event::Framed::Attach {
        tsc: crate::clock::tsc(),
        controller,
    })
}

/// Describes library function `key` (`symbol` defined in `library`, see
/// `libcalls`) in the active session's metadata. Returns whether a
/// session is active.
pub fn note_libfunc(key: u64, symbol: &[u8], library: &[u8]) -> bool {
    file::note_meta(&fntrace_format::event::Framed::LibFunc {
        key,
        symbol,
        library,
    })
}

/// Writes an off-CPU interval of thread `tid` (CLOCK_MONOTONIC ns; `flags`
/// bit 0: preempted) into the active session's metadata (see `sched`).
/// Returns whether a session is active.
pub fn note_offcpu(tid: u32, out_ns: u64, in_ns: u64, flags: u64) -> bool {
    file::note_meta(&fntrace_format::event::Framed::OffCpu {
        tid: u64::from(tid),
        out_ns,
        len_ns: in_ns.saturating_sub(out_ns),
        flags,
    })
}

/// Marks the end of an attached recording, now, with the reason's code
/// ([`fntrace_format::event::DetachReason::code`]).
pub fn note_detach(reason: u64) -> bool {
    file::note_meta(&fntrace_format::event::Framed::Detach {
        tsc: crate::clock::tsc(),
        reason,
    })
}
#[cfg(feature = "compiler-hooks")]
pub(crate) use state::ARCS_OFFSET;
pub(crate) use state::{ThreadState, state, with_state};
#[cfg(feature = "compiler-hooks")]
pub(crate) use state::{
    pend_capacity, sh_capacity, t_busy, t_depth, t_last_func, t_last_tsc, t_limit,
    t_notrace_regions, t_pend_base, t_pend_captured, t_pend_fast, t_pend_len, t_pend_over,
    t_pend_written, t_pos, t_session, t_sh_base, t_sh_len, t_sh_overflow, t_sh_restored,
    t_trace_regions,
};
#[cfg(feature = "compiler-hooks")]
pub(crate) use write::fast_chunk_switch;
pub use write::record_marker;
pub(crate) use write::{abandoned, resync_cursor};
pub(crate) use write::{
    attach_slow, exit_inner, record_entry_inner, record_exit, write_record, write_thread_meta,
};

use file::Session;

/// Id of the active session; 0 when not recording, [`UNINIT`] before
/// `session` looked at its start-up configuration.
pub(crate) static SESSION: AtomicU32 = AtomicU32::new(UNINIT);
/// `SESSION` before start-up configuration was looked at.
pub(crate) const UNINIT: u32 = u32::MAX;
/// The active session (null when none). Sessions are leaked on purpose.
static CURRENT: AtomicPtr<Session> = AtomicPtr::new(ptr::null_mut());
/// Serialises start and finish.
static LIFECYCLE: Mutex<()> = Mutex::new(());
static NEXT_ID: AtomicU32 = AtomicU32::new(1);

/// Room kept free at the end of every chunk payload so that any compact
/// event, and the 8-byte store that writes short ones, always fits.
const SLACK: usize = MAX_COMPACT_LEN + 8;
/// The file grows by at most this much at a time (by its size so far
/// until then: 512 KiB, 1 MiB, 2 MiB, ...; multiples of the chunk size).
const GROW_STEP: usize = 4 << 20;
/// The first growth (header, metadata and the first threads' chunks).
const FIRST_GROW: usize = 512 << 10;
/// Calibration window at start (busy waiting, on every process's
/// critical path: short). Error: the width of a clock pair's bracket
/// (tens of ns) over the window, a few parts in 10,000; a run of at least
/// [`REFINE_AFTER_NS`] gets the frequency measured over its whole length
/// in its final block instead.
const CALIBRATION_NS: u64 = 100_000;
/// Runs at least this long measure the TSC frequency over their length.
const REFINE_AFTER_NS: u64 = 10_000_000;

/// The one hook from the sink to the layer above it: what a thread runs
/// when it meets `SESSION == UNINIT` (its first event before start-up
/// looked at the configuration). `session` installs its lazy start-up
/// here; until then such events are not recorded.
static START_HOOK: AtomicPtr<()> = AtomicPtr::new(ptr::null_mut());

/// Installs the lazy start hook (see [`START_HOOK`]).
pub(crate) fn set_start_hook(f: fn()) {
    START_HOOK.store(f as *mut (), Ordering::Release);
}

/// Runs the lazy start hook, if one is installed and start-up has not
/// happened yet.
pub(crate) fn lazy_start() {
    if SESSION.load(Ordering::Acquire) != UNINIT {
        return;
    }
    let p = START_HOOK.load(Ordering::Acquire);
    if !p.is_null() {
        // SAFETY: only `set_start_hook` stores here, always a `fn()`.
        let f: fn() = unsafe { core::mem::transmute::<*mut (), fn()>(p) };
        f();
    }
}

/// Whether a session is recording now (not "not yet looked").
pub(crate) fn session_active() -> bool {
    let s = SESSION.load(Ordering::Acquire);
    s != 0 && s != UNINIT
}

/// Marks start-up as done with no session (leaves an active one alone).
pub(crate) fn no_session() {
    let _ = SESSION.compare_exchange(UNINIT, 0, Ordering::AcqRel, Ordering::Acquire);
}

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
    /// Record-time time filter in nanoseconds: calls shorter than this
    /// are not written, except as callers of longer ones (0: off).
    pub time_filter_ns: u64,
    /// The settings the recording runs with, written into the trace as
    /// `Setting` records (key, value; see `fntrace_format::event::SETTING_*`).
    pub settings: Vec<(String, String)>,
    /// Trace memory kept ready ahead of the writers by the helper thread
    /// (`config::ENV_BUFFER`); 0: no helper thread.
    pub buffer: u64,
    /// Flight recorder: the file is a ring of this many bytes whose oldest
    /// chunks are overwritten (`config::ENV_RING`); 0: off.
    pub ring: u64,
    /// Signal on which the helper thread writes a snapshot of the trace
    /// to `PATH.snapshot.N` (`config::ENV_SNAPSHOT_SIGNAL`); 0: none.
    pub snapshot_signal: i32,
    /// Per-function thresholds (`#[instrument_fn(threshold = ...)]`): the
    /// threshold in nanoseconds of the function a call key belongs to (0:
    /// none); `None` when no function has one. A call of such a function
    /// that ends sooner is dropped with everything it called.
    pub fn_threshold: Option<fn(u64) -> u64>,
}

impl Options {
    /// Recording into `path` with default limits.
    pub fn new(path: impl Into<PathBuf>) -> Options {
        Options {
            path: path.into(),
            max_size: crate::config::DEFAULT_MAX_SIZE,
            exclusive: false,
            follow_fork: false,
            time_filter_ns: 0,
            settings: Vec::new(),
            buffer: crate::config::DEFAULT_BUFFER,
            ring: 0,
            snapshot_signal: 0,
            fn_threshold: None,
        }
    }
}

/// What `finish` reports.
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
    /// TSC at which the size limit first refused a chunk (0: never).
    pub full_tsc: u64,
    /// Entry and exit events in the file, counted by the helper thread
    /// (`None` without one).
    pub events: Option<u64>,
    /// Flight recorder: chunks overwritten.
    pub overwritten: u64,
}

/// The session `t` is attached to, if it is still the current one.
/// A source-instrumented function was called in this process (its
/// calls are open in the trace without shadow frames).
static ANY_SITE: core::sync::atomic::AtomicBool = core::sync::atomic::AtomicBool::new(false);

/// Notes that a source-instrumented function was called (its site
/// registered): from then on the trace's open calls are not all shadow
/// frames.
pub(crate) fn note_source_site() {
    ANY_SITE.store(true, Ordering::Relaxed);
}

/// Whether a source-instrumented function was ever called here.
pub(crate) fn any_source_site() -> bool {
    ANY_SITE.load(Ordering::Relaxed)
}

/// An entry of the calling thread was not recorded because its shadow
/// stack is full (counted lost by the caller, and apart, for the end of
/// the session).
pub(crate) fn too_deep(t: &ThreadState) {
    if let Some(s) = attached(t) {
        s.too_deep.fetch_add(1, Ordering::Relaxed);
    }
}

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

/// The calling thread's open recorded calls, written or held back by the
/// time filter, and those an earlier session recorded (what `--depth`
/// limits).
#[inline(always)]
pub(crate) fn open_depth(t: &ThreadState) -> u32 {
    t.depth + pending::unwritten(t) + t.depth_base
}

/// Whether a session is active (after looking at the environment).
pub fn is_recording() -> bool {
    lazy_start();
    SESSION.load(Ordering::Acquire) != 0
}

/// The options the active session was started with, if it was started in
/// this process (not in the parent of a `vfork` child that shares its
/// memory).
#[cfg_attr(not(feature = "compiler-hooks"), allow(dead_code))]
pub(crate) fn session_options() -> Option<Options> {
    let p = CURRENT.load(Ordering::Acquire);
    if p.is_null() || SESSION.load(Ordering::Acquire) == 0 {
        return None;
    }
    // SAFETY: sessions are leaked; a non-null pointer stays valid.
    let s = unsafe { &*p };
    (s.header.pid == std::process::id()).then(|| s.opts.clone())
}

/// The active session's output file.
pub fn output_path() -> Option<PathBuf> {
    lazy_start();
    let p = CURRENT.load(Ordering::Acquire);
    // SAFETY: sessions are leaked; a non-null pointer stays valid.
    (!p.is_null() && SESSION.load(Ordering::Acquire) != 0).then(|| unsafe { (*p).path.clone() })
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
