//! Counting mode (`fntrace record --count`): instead of timed events, each
//! thread counts gprof-style call-graph arcs (call site, callee) in an
//! open-addressing table of its own, without atomics or timestamps. The
//! tables are linked into a global list when created and written to the
//! trace's metadata when the session finishes.

#![cfg_attr(not(feature = "compiler-hooks"), allow(dead_code))]

use core::ptr;
use core::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, Ordering};

/// Slots per thread table (reserved, not committed: 24 MiB of address
/// space, pages touched only as arcs land in them).
pub(crate) const SLOTS: usize = 1 << 20;
/// Probes before an arc is given up as lost (the table is nearly full).
const MAX_PROBES: usize = 64;

pub(crate) static COUNT_MODE: AtomicBool = AtomicBool::new(false);
static TABLES: AtomicPtr<Table> = AtomicPtr::new(ptr::null_mut());
/// Arcs that found no slot.
pub(crate) static LOST_ARCS: AtomicU64 = AtomicU64::new(0);

/// Environment variable that selects counting mode.
pub const ENV_COUNT: &str = "FNTRACE_COUNT";

/// One arc slot (`count == 0`: free). 24 bytes: `from`, `to`, `count`.
#[repr(C)]
struct Slot {
    from: u64,
    to: u64,
    count: u64,
}

/// A thread's arc table.
#[repr(C)]
pub(crate) struct Table {
    next: *mut Table,
    /// Slots in use, listed in `used` (so finishing reads only those).
    nused: usize,
    used: [u32; SLOTS],
    slots: [Slot; SLOTS],
}

/// Byte offset of the slot array in a [`Table`] (for the assembly fast
/// path in the trampolines).
pub(crate) const SLOTS_OFFSET: usize = core::mem::offset_of!(Table, slots);
/// The multiplier of the arc hash (shared with the assembly fast path).
pub(crate) const HASH_K: u64 = 0x9E37_79B9_7F4A_7C15;

/// Turns counting mode on or off (before recording starts).
pub fn set_count_mode(on: bool) {
    COUNT_MODE.store(on, Ordering::Relaxed);
    crate::filter::set_feature(crate::filter::FEAT_COUNT, on);
}

/// Reads `FNTRACE_COUNT`.
pub(crate) fn init_from_env() {
    if std::env::var_os(ENV_COUNT).is_some_and(|v| v == "1") {
        set_count_mode(true);
    }
}

/// Counts one call along (`from`, `to`) in the table `*table` (created on
/// first use).
#[inline(always)]
pub(crate) fn count(table: &mut *mut Table, from: u64, to: u64) {
    if table.is_null() && !create(table) {
        LOST_ARCS.fetch_add(1, Ordering::Relaxed);
        return;
    }
    let mut i = (from.wrapping_mul(HASH_K) ^ to.rotate_left(17)) as usize >> 4;
    for _ in 0..MAX_PROBES {
        i &= SLOTS - 1;
        // SAFETY: `*table` is a live table created by `create` and owned
        // by this thread; `i < SLOTS`.
        let s = unsafe { &mut (*(*table)).slots[i] };
        if s.count != 0 && s.from == from && s.to == to {
            s.count += 1;
            return;
        }
        if s.count == 0 {
            s.from = from;
            s.to = to;
            // Written last: a reader at finish sees complete slots only.
            core::sync::atomic::compiler_fence(Ordering::Release);
            s.count = 1;
            // SAFETY: as above; at most SLOTS slots are ever taken.
            unsafe {
                let t = &mut *(*table);
                t.used[t.nused] = i as u32;
                core::sync::atomic::compiler_fence(Ordering::Release);
                t.nused += 1;
            }
            return;
        }
        i += 1;
    }
    LOST_ARCS.fetch_add(1, Ordering::Relaxed);
}

#[cold]
#[inline(never)]
fn create(table: &mut *mut Table) -> bool {
    // SAFETY: a fresh anonymous mapping; zero pages are empty slots.
    let p = unsafe {
        libc::mmap(
            ptr::null_mut(),
            core::mem::size_of::<Table>(),
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return false;
    }
    let t = p.cast::<Table>();
    let mut head = TABLES.load(Ordering::Acquire);
    loop {
        // SAFETY: `t` is our new table; only this thread writes `next`
        // before it is published.
        unsafe { (*t).next = head };
        match TABLES.compare_exchange_weak(head, t, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => break,
            Err(h) => head = h,
        }
    }
    *table = t;
    true
}

/// Calls `f(from, to, count)` for every arc of every thread.
pub(crate) fn for_each_arc(mut f: impl FnMut(u64, u64, u64)) {
    let mut t = TABLES.load(Ordering::Acquire);
    while !t.is_null() {
        // SAFETY: tables are never freed; slots are read racily with their
        // owners, and a slot's count is only set after its key.
        unsafe {
            let n = ptr::read_volatile(&(*t).nused).min(SLOTS);
            for k in 0..n {
                let s = &(*t).slots[(*t).used[k] as usize];
                let c = ptr::read_volatile(&s.count);
                if c != 0 {
                    f(s.from, s.to, c);
                }
            }
            t = (*t).next;
        }
    }
}
