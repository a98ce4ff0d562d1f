//! The record-time time filter (`fntrace record -t 10us`): only calls that
//! last at least the threshold are written, with every call they happened
//! in (their callers up the stack), so that a long run of a program with
//! billions of tiny calls leaves a small trace of what matters.
//!
//! While the filter is on ([`FEAT_TIME`]), an entry is not written: it is
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
//! Part of the sink: mechanisms call `record_entry_inner`/`exit_inner`
//! as always; the hot path without the filter pays one load of the
//! feature word, already in cache.

use std::ptr;
use std::sync::atomic::{AtomicU64, Ordering};

use fntrace_format::event::{Framed, MAX_COMPACT_LEN};

use super::state::ThreadState;
use super::write::{claim_chunk_at, entry_with_delta, exit_now, seal, write_record};
use crate::clock;
use crate::features::{FEAT_TIME, set_feature};

/// The threshold in TSC ticks (0: filter off).
static THRESHOLD: AtomicU64 = AtomicU64::new(0);

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
    tsc: u64,
    func: u64,
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

/// A thread's stack of calls open under the time filter. All-zero is the
/// empty, unreserved stack (it lives in the sink's zero-initialised TLS
/// block).
#[repr(C)]
pub(crate) struct Pending {
    base: *mut Held,
    /// Parallel to `base`: captured values (reserved with it).
    extra: *mut Extra,
    /// Some `extra` slot may hold values of an earlier call (cleared
    /// by `enter` while set).
    captured: bool,
    /// Open calls on the stack.
    len: u32,
    /// The oldest `written` of them are written (their entries are in the
    /// stream).
    written: u32,
    /// Calls opened past [`CAPACITY`], written at once.
    over: u32,
    /// The reservation failed; never try again.
    failed: bool,
}

impl Pending {
    /// Forgets every open call (a thread attaching to a new session).
    pub(crate) fn reset(&mut self) {
        self.len = 0;
        self.written = 0;
        self.over = 0;
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
        let bytes = CAPACITY * (core::mem::size_of::<Held>() + core::mem::size_of::<Extra>());
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
        true
    }
}

/// Turns the time filter on (calls shorter than `ns` nanoseconds, at
/// `tsc_hz` ticks per second, are not written) or off (`ns` 0). Set
/// before a session is published, so that no call's entry is written
/// without the filter and its exit decided with it.
pub(crate) fn set_threshold(ns: u64, tsc_hz: u64) {
    let ticks = (u128::from(ns) * u128::from(tsc_hz) / 1_000_000_000).min(u128::from(u64::MAX));
    let ticks = if ns == 0 { 0 } else { (ticks as u64).max(1) };
    THRESHOLD.store(ticks, Ordering::Relaxed);
    set_feature(FEAT_TIME, ticks != 0);
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
    if now.wrapping_sub(held.tsc) < THRESHOLD.load(Ordering::Relaxed) {
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

/// Writes every held-back entry (a record that needs the calls it
/// happened in).
pub(crate) fn flush(t: &mut ThreadState) {
    let upto = t.pend.len;
    write_held(t, upto);
}

/// Writes the held-back entries of the calls that already lasted at least
/// the threshold (at thread exit and at the end: calls without exit).
pub(crate) fn flush_long(t: &mut ThreadState) {
    let now = clock::tsc();
    let thr = THRESHOLD.load(Ordering::Relaxed);
    // Older calls lasted longer: the long ones are a prefix.
    let long = t
        .pend
        .frames()
        .iter()
        .take_while(|h| now.wrapping_sub(h.tsc) >= thr)
        .count() as u32;
    if long > t.pend.written {
        write_held(t, long);
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
            // SAFETY: only called by an attached thread; sessions are
            // leaked.
            let s = unsafe { &*t.session_ptr };
            seal(&t.cur);
            let (tid, depth) = (t.tid, t.depth);
            if !claim_chunk_at(s, &mut t.cur, tid, depth, Some(held.tsc)) {
                t.full = true;
                t.session = 0;
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
    t.pend.captured = true;
    let e = t.pend.extra(top);
    e.ret = value;
    e.has_ret = true;
    true
}
