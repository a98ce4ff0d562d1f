//! The record-time time filter (`fntrace record -t 10us`): only calls that
//! last at least the threshold are written, with every call they happened
//! in (their callers up the stack), so that a long run of a program with
//! billions of tiny calls leaves a small trace of what matters.
//!
//! While the filter is on (`FEAT_TIME`), an entry is not written: it is
//! held back on the thread's stack of pending calls with its TSC (and its
//! `-A` arguments or `-R` return value, if captured). At the call's exit,
//! a call that lasted at least the threshold is written: the held-back
//! entries below it (its callers not written yet), oldest first, each with
//! its own time, then its exit. A shorter call is dropped without a
//! trace. Written calls are a prefix of the stack: a caller is written
//! before, and lasts longer than, any callee that made it be written.
//!
//! Times stay in order in the stream: everything written so far happened
//! before the oldest held-back entry (a call that ended after it would
//! have been its callee, and would have written it). Chunk switches during
//! the write start the new chunk at the time of the entry about to be
//! written. A marker or any other record on the thread writes the calls
//! it happened in first; at thread exit and at the end of the session,
//! calls still open that already lasted long enough are written (without
//! exit). Calls still open when the process is killed are lost: they are
//! not in the file yet.
//!
//! Per-function thresholds (`#[instrument_fn(threshold = "10us")]`) use
//! the same stack: a call of such a function is undecided until it ends,
//! so everything that happens inside it is kept in a per-thread log of raw
//! events (entries, exits, captured values) instead of being written. At
//! its end, a call shorter than its threshold is dropped with everything
//! it called (the log is cut back to where it began); a longer one is
//! written with its callers and the logged events, each with its own time.
//! A call inside an undecided one is logged, and decided the same way
//! against its own threshold (and `-t`'s) when it ends. A full log
//! (`LOG_CAPACITY` events) is written at once, keeping the calls it
//! holds; so is anything a marker or other record happens inside.
//!
//! Part of the sink: mechanisms call `record_entry_inner`/`exit_inner`
//! as always; the hot path without the filter pays one load of the
//! feature word, already in cache. Which functions have a threshold comes
//! from above (`Options::fn_threshold`, a lookup the session passes in).

use std::ptr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

use fntrace_format::event::{Framed, MAX_COMPACT_LEN};

use super::state::ThreadState;
use super::write::{entry_with_delta, exit_now, exit_with_delta, next_chunk_at, write_record};
use crate::clock;
use crate::features::{FEAT_TIME, set_feature};

/// The threshold in TSC ticks (0: filter off).
static THRESHOLD: AtomicU64 = AtomicU64::new(0);

/// Some function has a threshold of its own (then [`FN_LOOKUP`] is set).
static FN_ON: AtomicBool = AtomicBool::new(false);

/// The `fn(u64) -> u64` giving a call key's threshold in nanoseconds.
static FN_LOOKUP: AtomicUsize = AtomicUsize::new(0);

/// The session's TSC ticks per second (for [`FN_LOOKUP`]'s thresholds).
static TSC_HZ: AtomicU64 = AtomicU64::new(0);

/// Events the log of undecided calls holds (16 bytes each).
pub(crate) const LOG_CAPACITY: usize = 1 << 16;

/// Held-back calls a thread can have open (deeper calls are written at
/// once, as if they were long).
pub(crate) const CAPACITY: usize = 1 << 16;

/// Room a held-back entry with its arguments needs before the chunk's
/// limit: the entry and an `Args` record of six values.
const ROOM: usize = MAX_COMPACT_LEN + 64;

/// One held-back call (16 bytes: the hot path writes only this).
#[derive(Clone, Copy)]
#[repr(C)]
pub(crate) struct Held {
    pub(crate) tsc: u64,
    pub(crate) func: u64,
}

/// What `-A`/`-R` captured for a held-back call, in a parallel array
/// touched only when something is captured (`nargs`/`has_ret` are reset
/// by `enter` only when the slot was used: `used`).
#[derive(Clone, Copy)]
#[repr(C)]
struct Extra {
    args: [i64; 6],
    ret: i64,
    nargs: u8,
    has_ret: bool,
}

/// Per-function threshold bookkeeping of a held call, in a parallel
/// array touched only while some function has a threshold.
#[derive(Clone, Copy)]
#[repr(C)]
struct Aux {
    /// The call's own threshold in ticks (0: none).
    thr: u64,
    /// Length of the log when the call began (its own entry is there when
    /// it is `logged`).
    mark: u32,
    /// Entered inside an undecided call: its events are in the log.
    logged: bool,
}

/// One logged event: an entry (`b`: the function), an exit, or a
/// captured value (`b`'s top two bits say which; `a` is the time or the
/// value).
#[derive(Clone, Copy)]
#[repr(C)]
struct Logged {
    a: u64,
    b: u64,
}

const LOG_KIND: u64 = 3 << 62;
const LOG_ENTRY: u64 = 0;
const LOG_EXIT: u64 = 1 << 62;
/// An argument value: bits 0–7 its index, 8–15 how many there are.
const LOG_ARG: u64 = 2 << 62;
const LOG_RET: u64 = 3 << 62;

/// A thread's stack of calls open under the time filter. All-zero is the
/// empty, unreserved stack (it lives in the sink's zero-initialised TLS
/// block). `repr(C)`: the assembly fast path (`calls::fast`) pushes and
/// pops held calls itself; the fields it uses come first, at the offsets
/// `recorder::state` states and checks.
#[repr(C)]
pub(crate) struct Pending {
    pub(crate) base: *mut Held,
    /// Open calls on the stack.
    pub(crate) len: u32,
    /// The oldest `written` of them are written (their entries are in the
    /// stream).
    pub(crate) written: u32,
    /// Calls opened past [`CAPACITY`], written at once.
    pub(crate) over: u32,
    /// Some `extra` slot may hold values of an earlier call (cleared
    /// by `enter` while set).
    pub(crate) captured: bool,
    /// The reservation failed; never try again.
    failed: bool,
    /// The threshold in ticks the assembly fast path decides with, 0 when
    /// it must take the Rust path: set by [`enter`] once `base` is
    /// reserved, while no function has a threshold of its own; cleared by
    /// [`Pending::reset`] (a new session may have another threshold).
    pub(crate) fast: u64,
    /// Parallel to `base`: captured values (reserved with it).
    extra: *mut Extra,
    /// Parallel to `base`: per-function threshold bookkeeping.
    aux: *mut Aux,
    /// The log of events inside undecided calls ([`LOG_CAPACITY`]).
    log: *mut Logged,
    /// Events in the log.
    log_len: u32,
    /// Open calls with a threshold of their own, not written yet.
    defer: u32,
}

impl Pending {
    /// Forgets every open call (a thread attaching to a new session).
    pub(crate) fn reset(&mut self) {
        self.len = 0;
        self.written = 0;
        self.over = 0;
        self.log_len = 0;
        self.defer = 0;
        self.fast = 0;
    }

    fn aux(&mut self, i: usize) -> &mut Aux {
        // SAFETY: `i < len <= CAPACITY`; `aux` was reserved with `base`
        // (zero at first: a valid `Aux`); only this thread touches it.
        unsafe { &mut *self.aux.add(i) }
    }

    /// Appends to the log; false when it is full.
    fn log_push(&mut self, ev: Logged) -> bool {
        if self.log_len as usize >= LOG_CAPACITY {
            return false;
        }
        // SAFETY: `log_len < LOG_CAPACITY`: inside the reserved log; only
        // this thread touches it.
        unsafe { self.log.add(self.log_len as usize).write(ev) };
        self.log_len += 1;
        true
    }

    /// Index of the first logged call on the stack (`len` if none).
    fn first_logged(&mut self) -> u32 {
        if !FN_ON.load(Ordering::Relaxed) {
            return self.len;
        }
        let mut i = self.written;
        while i < self.len && !self.aux(i as usize).logged {
            i += 1;
        }
        i
    }

    fn extra(&mut self, i: usize) -> &mut Extra {
        // SAFETY: `i < len <= CAPACITY`; `extra` was reserved with `base`
        // (all zero at first, a valid `Extra`); only this thread touches
        // it.
        unsafe { &mut *self.extra.add(i) }
    }

    fn frames(&mut self) -> &mut [Held] {
        if self.base.is_null() {
            return &mut [];
        }
        // SAFETY: `len` frames from `base` were written by `enter`, inside
        // the mapping, and only this thread accesses them.
        unsafe { core::slice::from_raw_parts_mut(self.base, self.len as usize) }
    }

    #[cold]
    fn reserve(&mut self) -> bool {
        if !self.base.is_null() {
            return true;
        }
        if self.failed {
            return false;
        }
        let bytes = CAPACITY
            * (core::mem::size_of::<Held>()
                + core::mem::size_of::<Extra>()
                + core::mem::size_of::<Aux>())
            + LOG_CAPACITY * core::mem::size_of::<Logged>();
        // SAFETY: an anonymous private mapping at a kernel-chosen address
        // touches no existing memory; only touched pages cost memory.
        let p = unsafe {
            libc::mmap(
                ptr::null_mut(),
                bytes,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            self.failed = true;
            return false;
        }
        self.base = p.cast();
        // SAFETY: the `Extra` array follows the `Held` array inside the
        // mapping just made (both 8-byte aligned sizes).
        self.extra = unsafe { self.base.add(CAPACITY).cast() };
        // SAFETY: likewise the `Aux` array after it, and the log last.
        unsafe {
            self.aux = self.extra.add(CAPACITY).cast();
            self.log = self.aux.add(CAPACITY).cast();
        }
        true
    }
}

/// Turns the time filter on (calls shorter than `ns` nanoseconds, at
/// `tsc_hz` ticks per second, are not written) or off (`ns` 0), and the
/// per-function thresholds `fn_threshold` gives. Set before a session is
/// published, so that no call's entry is written without the filter and
/// its exit decided with it.
pub(crate) fn set_threshold(ns: u64, tsc_hz: u64, fn_threshold: Option<fn(u64) -> u64>) {
    let ticks = (u128::from(ns) * u128::from(tsc_hz) / 1_000_000_000).min(u128::from(u64::MAX));
    let ticks = if ns == 0 { 0 } else { (ticks as u64).max(1) };
    THRESHOLD.store(ticks, Ordering::Relaxed);
    TSC_HZ.store(tsc_hz, Ordering::Relaxed);
    FN_LOOKUP.store(fn_threshold.map_or(0, |f| f as usize), Ordering::Relaxed);
    FN_ON.store(fn_threshold.is_some(), Ordering::Release);
    set_feature(FEAT_TIME, ticks != 0 || fn_threshold.is_some());
}

/// The threshold in ticks of the function `func` belongs to (0: none).
fn fn_ticks(func: u64) -> u64 {
    let f = FN_LOOKUP.load(Ordering::Relaxed);
    if f == 0 {
        return 0;
    }
    // SAFETY: a non-zero value is a `fn(u64) -> u64` stored by
    // `set_threshold`.
    let f: fn(u64) -> u64 = unsafe { core::mem::transmute::<usize, fn(u64) -> u64>(f) };
    let ns = f(func);
    if ns == 0 {
        return 0;
    }
    let hz = TSC_HZ.load(Ordering::Relaxed);
    ((u128::from(ns) * u128::from(hz) / 1_000_000_000).min(u128::from(u64::MAX)) as u64).max(1)
}

/// Whether the thread has calls held back or opened past the capacity.
#[inline(always)]
pub(crate) fn any(t: &ThreadState) -> bool {
    t.pend.len != 0 || t.pend.over != 0
}

/// Open calls not written yet (they count for `--depth`).
#[inline(always)]
pub(crate) fn unwritten(t: &ThreadState) -> u32 {
    t.pend.len - t.pend.written
}

/// An entry of `func`, now: held back.
pub(crate) fn enter(t: &mut ThreadState, func: u64) {
    let now = clock::tsc();
    if t.pend.over != 0 || t.pend.len as usize >= CAPACITY || !t.pend.reserve() {
        // Too deep to hold: write what is held and this entry at once.
        flush(t);
        let d = now.saturating_sub(t.cur.last_tsc);
        t.cur.last_tsc += d;
        entry_with_delta(t, func, d);
        t.pend.over += 1;
        return;
    }
    let i = t.pend.len as usize;
    // SAFETY: `reserve` succeeded and `i < CAPACITY`: the slot is inside
    // the mapping; only this thread touches it.
    unsafe { t.pend.base.add(i).write(Held { tsc: now, func }) };
    t.pend.len += 1;
    if t.pend.captured {
        let e = t.pend.extra(i);
        e.nargs = 0;
        e.has_ret = false;
    }
    if FN_ON.load(Ordering::Relaxed) {
        fn_enter(t, i, func, now);
    } else {
        // The assembly fast path may hold and drop this thread's calls
        // from now on (`base` is reserved).
        t.pend.fast = THRESHOLD.load(Ordering::Relaxed);
    }
}

/// The per-function threshold part of an entry (call `i` of the stack,
/// just pushed): logged if inside an undecided call, undecided itself if
/// its function has a threshold.
#[cold]
fn fn_enter(t: &mut ThreadState, i: usize, func: u64, now: u64) {
    let thr = fn_ticks(func);
    let mark = t.pend.log_len;
    *t.pend.aux(i) = Aux {
        thr,
        mark,
        logged: false,
    };
    if t.pend.defer > 0 {
        if t.pend.log_push(Logged { a: now, b: func }) {
            t.pend.aux(i).logged = true;
        } else {
            // The log is full: what it holds is kept (written now, this
            // entry with it).
            flush(t);
        }
    }
    if thr > 0 && (i as u32) >= t.pend.written {
        t.pend.defer += 1;
    }
}

/// The exit of the innermost open call, now: written if the call was
/// written or lasted at least the threshold, dropped otherwise.
pub(crate) fn exit(t: &mut ThreadState) {
    if t.pend.over != 0 {
        t.pend.over -= 1;
        exit_now(t);
        return;
    }
    if t.pend.len == 0 {
        // A call opened before the filter (or the thread's attach): its
        // exit has no entry to pair with.
        return;
    }
    let top = t.pend.len as usize - 1;
    let held = t.pend.frames()[top];
    if top < t.pend.written as usize {
        t.pend.len -= 1;
        t.pend.written = t.pend.len;
        exit_now(t);
        return;
    }
    let now = clock::tsc();
    if FN_ON.load(Ordering::Relaxed) {
        let a = *t.pend.aux(top);
        if a.thr > 0 {
            t.pend.defer = t.pend.defer.saturating_sub(1);
        }
        if now.wrapping_sub(held.tsc) < a.thr.max(THRESHOLD.load(Ordering::Relaxed)) {
            // Dropped, with everything logged inside it.
            t.pend.log_len = a.mark;
            t.pend.len -= 1;
            return;
        }
        if a.logged {
            if t.pend.log_push(Logged {
                a: now,
                b: LOG_EXIT,
            }) {
                t.pend.len -= 1;
                return;
            }
            // The log is full: written now, this call's exit after it.
            flush(t);
            t.pend.len -= 1;
            t.pend.written = t.pend.len;
            exit_now(t);
            return;
        }
    } else if now.wrapping_sub(held.tsc) < THRESHOLD.load(Ordering::Relaxed) {
        t.pend.len -= 1;
        return;
    }
    flush(t);
    t.pend.len -= 1;
    t.pend.written = t.pend.len;
    if t.pend.captured {
        let e = *t.pend.extra(top);
        if e.has_ret {
            write_record(t, false, |_| Framed::RetVal { value: e.ret });
        }
    }
    exit_now(t);
}

/// Writes every held-back entry and the log of undecided calls (a record
/// that needs the calls it happened in).
pub(crate) fn flush(t: &mut ThreadState) {
    let upto = t.pend.first_logged();
    write_held(t, upto);
    if t.session == 0 {
        return;
    }
    if t.pend.log_len > 0 {
        replay_log(t);
    }
    t.pend.written = t.pend.len;
    t.pend.defer = 0;
}

/// Makes room for a record of time `tsc` in the thread's chunk (a new
/// chunk starts at that time); false when the session is full.
fn room_at(t: &mut ThreadState, tsc: u64) -> bool {
    if t.cur.pos as usize + ROOM <= t.cur.limit as usize {
        return true;
    }
    next_chunk_at(t, tsc)
}

/// Writes the logged events, each at its own time, and empties the log.
fn replay_log(t: &mut ThreadState) {
    let n = t.pend.log_len as usize;
    t.pend.log_len = 0;
    let mut args = [0i64; 6];
    for k in 0..n {
        // SAFETY: `k < n <= LOG_CAPACITY`, written by `log_push`; only
        // this thread touches the log.
        let ev = unsafe { t.pend.log.add(k).read() };
        match ev.b & LOG_KIND {
            LOG_ENTRY | LOG_EXIT => {
                if !room_at(t, ev.a) {
                    return;
                }
                let d = ev.a.saturating_sub(t.cur.last_tsc);
                t.cur.last_tsc += d;
                if ev.b & LOG_KIND == LOG_ENTRY {
                    entry_with_delta(t, ev.b, d);
                } else {
                    exit_with_delta(t, d);
                }
            }
            LOG_ARG => {
                let (i, count) = ((ev.b & 0xff) as usize, ((ev.b >> 8) & 0xff) as usize);
                args[i.min(5)] = ev.a as i64;
                if i + 1 == count {
                    // SAFETY: as above.
                    let s = unsafe { &*t.session_ptr };
                    super::write::write_framed(s, &mut t.cur, t.tid, t.depth, false, |_| {
                        Framed::Args {
                            values: &args[..count.min(6)],
                        }
                    });
                }
            }
            _ => {
                // SAFETY: as above.
                let s = unsafe { &*t.session_ptr };
                let value = ev.a as i64;
                super::write::write_framed(s, &mut t.cur, t.tid, t.depth, false, |_| {
                    Framed::RetVal { value }
                });
            }
        }
        if t.session == 0 {
            return;
        }
    }
}

/// Writes the held-back entries of the calls that already lasted at least
/// the threshold (at thread exit and at the end: calls without exit).
pub(crate) fn flush_long(t: &mut ThreadState) {
    let now = clock::tsc();
    let thr = THRESHOLD.load(Ordering::Relaxed);
    let logged = t.pend.first_logged();
    let fn_on = FN_ON.load(Ordering::Relaxed);
    // Older calls lasted longer: the long ones are a prefix (with
    // thresholds of their own: up to the first call not long enough for
    // its own).
    let mut long = 0u32;
    while long < logged {
        let h = t.pend.frames()[long as usize];
        let own = if fn_on {
            t.pend.aux(long as usize).thr
        } else {
            0
        };
        if now.wrapping_sub(h.tsc) < thr.max(own) {
            break;
        }
        long += 1;
    }
    if long == logged && t.pend.log_len > 0 {
        // Every undecided call is long enough: what it logged is kept.
        flush(t);
    } else if long > t.pend.written {
        write_held(t, long);
        // Calls with thresholds of their own that are written now are
        // decided.
        if fn_on {
            let w = t.pend.written as usize;
            let open = (w..t.pend.len as usize)
                .filter(|&i| t.pend.aux(i).thr > 0)
                .count();
            t.pend.defer = open as u32;
        }
    }
}

/// Writes the held-back entries `written..upto`, oldest first, each with
/// its own time and arguments.
fn write_held(t: &mut ThreadState, upto: u32) {
    while t.pend.written < upto {
        let i = t.pend.written as usize;
        let held = t.pend.frames()[i];
        // Marked written first: a record the write causes (a chunk switch
        // reporting lost events) must not write it again.
        t.pend.written += 1;
        if t.cur.pos as usize + ROOM > t.cur.limit as usize {
            // The new chunk starts at this entry's time, not now.
            if !next_chunk_at(t, held.tsc) {
                return;
            }
        }
        let d = held.tsc.saturating_sub(t.cur.last_tsc);
        t.cur.last_tsc += d;
        entry_with_delta(t, held.func, d);
        if t.pend.captured && t.pend.extra(i).nargs > 0 {
            let e = *t.pend.extra(i);
            // SAFETY: as above.
            let s = unsafe { &*t.session_ptr };
            super::write::write_framed(s, &mut t.cur, t.tid, t.depth, false, |_| Framed::Args {
                values: &e.args[..e.nargs as usize],
            });
        }
        if t.session == 0 {
            return;
        }
    }
}

/// Keeps `-A` argument values with the innermost held-back call; false
/// when that call is written already (then they are written now).
pub(crate) fn keep_args(t: &mut ThreadState, values: &[i64]) -> bool {
    if t.pend.len == t.pend.written {
        return false;
    }
    let top = t.pend.len as usize - 1;
    if FN_ON.load(Ordering::Relaxed) && t.pend.aux(top).logged {
        let n = values.len().min(6);
        if t.pend.log_len as usize + n > LOG_CAPACITY {
            flush(t);
            return false;
        }
        for (i, &v) in values[..n].iter().enumerate() {
            t.pend.log_push(Logged {
                a: v as u64,
                b: LOG_ARG | ((n as u64) << 8) | i as u64,
            });
        }
        return true;
    }
    t.pend.captured = true;
    let e = t.pend.extra(top);
    let n = values.len().min(6);
    e.args[..n].copy_from_slice(&values[..n]);
    e.nargs = n as u8;
    true
}

/// Keeps a `-R` return value with the innermost held-back call (its exit
/// follows and decides); false when that call is written already.
pub(crate) fn keep_retval(t: &mut ThreadState, value: i64) -> bool {
    if t.pend.len == t.pend.written {
        return false;
    }
    let top = t.pend.len as usize - 1;
    if FN_ON.load(Ordering::Relaxed) && t.pend.aux(top).logged {
        if t.pend.log_push(Logged {
            a: value as u64,
            b: LOG_RET,
        }) {
            return true;
        }
        flush(t);
        return false;
    }
    t.pend.captured = true;
    let e = t.pend.extra(top);
    e.ret = value;
    e.has_ret = true;
    true
}
