//! Counting mode (`fntrace record --count`): instead of timed events, each
//! thread counts gprof-style call-graph arcs (call site, callee) in an
//! open-addressing table of its own, without atomics or timestamps. The
//! tables are linked into a global list when created and written to the
//! trace's metadata when the session finishes. Policy: the mechanisms
//! count through it; the thread state holds each thread's table as an
//! opaque pointer.

#![cfg_attr(not(feature = "compiler-hooks"), allow(dead_code))]

use core::ptr;
use core::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, Ordering};

/// Slots of a thread's first table (96 KiB of slots: it stays in the
/// caches and touches few pages); a table grows 4× when half full.
const FIRST_SLOTS: usize = 1 << 14;
/// Slots of the largest table (16 M arcs per thread).
const MAX_SLOTS: usize = 1 << 24;
/// Probes before an arc is given up as lost (the largest table is
/// nearly full).
const MAX_PROBES: usize = 64;

pub(crate) static COUNT_MODE: AtomicBool = AtomicBool::new(false);
static TABLES: AtomicPtr<Table> = AtomicPtr::new(ptr::null_mut());
/// Arcs that found no slot.
pub(crate) static LOST_ARCS: AtomicU64 = AtomicU64::new(0);

/// One arc slot (`count == 0`: free). 24 bytes: `from`, `to`, `count`.
#[repr(C)]
struct Slot {
    from: u64,
    to: u64,
    count: u64,
}

/// A thread's arc table: this header, then (at [`SLOTS_OFFSET`]) its
/// slots, then the indices of the slots in use, in one anonymous mapping.
#[repr(C)]
pub(crate) struct Table {
    next: *mut Table,
    /// Slots in use, listed in `used` (so finishing reads only those).
    nused: usize,
    /// Slots - 1 (a power of two minus one).
    mask: u64,
    /// Replaced by a larger table holding the same arcs.
    retired: AtomicBool,
    used: *mut u32,
    /// The end of the slots (for the assembly fast path, which probes
    /// until a match, an empty slot or this end).
    end: *mut u8,
}

/// Byte offset of the slots after a [`Table`] header (for the assembly
/// fast path in the trampolines).
pub(crate) const SLOTS_OFFSET: usize = 64;
/// Byte offset of the mask in a [`Table`] (for the assembly fast path).
pub(crate) const MASK_OFFSET: usize = core::mem::offset_of!(Table, mask);
/// Byte offset of the end of the slots in a [`Table`] (for the assembly
/// fast path).
pub(crate) const END_OFFSET: usize = core::mem::offset_of!(Table, end);
const _: () = assert!(core::mem::size_of::<Table>() <= SLOTS_OFFSET);
/// The multiplier of the arc hash (shared with the assembly fast path,
/// where it is an `imul` immediate: below 2^31).
pub(crate) const HASH_K: u64 = 0x7FEB_352D;

/// Turns counting mode on or off (before recording starts).
pub fn set_count_mode(on: bool) {
    COUNT_MODE.store(on, Ordering::Relaxed);
    crate::features::set_feature(crate::features::FEAT_COUNT, on);
}

/// The first probe of arc (`from`, `to`) (the assembly fast path hashes
/// the same way; probing is linear).
#[inline(always)]
fn hash(from: u64, to: u64) -> usize {
    // Multiplicative hashing: bits 32.. of the product depend on every
    // bit of both addresses (a small table's mask keeps only low bits).
    ((from ^ to.rotate_left(29)).wrapping_mul(HASH_K) >> 32) as usize
}

/// Slot `i` of table `t`.
///
/// # Safety
/// `t` is a live table and `i <= mask`.
#[inline(always)]
unsafe fn slot(t: *mut Table, i: usize) -> *mut Slot {
    // SAFETY: the caller's contract; the slots follow the header.
    unsafe { t.cast::<u8>().add(SLOTS_OFFSET).cast::<Slot>().add(i) }
}

/// Adds `n` calls of (`from`, `to`) to table `t`; false if no slot was
/// found within [`MAX_PROBES`].
///
/// # Safety
/// `t` is a live table owned by the calling thread.
unsafe fn add(t: *mut Table, from: u64, to: u64, n: u64) -> bool {
    // SAFETY: the caller's contract.
    let t = unsafe { &mut *t };
    let mut i = hash(from, to);
    for _ in 0..MAX_PROBES {
        i &= t.mask as usize;
        // SAFETY: `i <= mask`.
        let s = unsafe { &mut *slot(t, i) };
        if s.count != 0 && s.from == from && s.to == to {
            s.count += n;
            return true;
        }
        if s.count == 0 {
            s.from = from;
            s.to = to;
            // Written last: a reader at finish sees complete slots only.
            core::sync::atomic::compiler_fence(Ordering::Release);
            s.count = n;
            // SAFETY: fewer than `mask + 1` slots are ever in use.
            unsafe { t.used.add(t.nused).write(i as u32) };
            core::sync::atomic::compiler_fence(Ordering::Release);
            t.nused += 1;
            return true;
        }
        i += 1;
    }
    false
}

/// Counts one call along (`from`, `to`) in the table `*slot` (the
/// thread state's opaque arc-table pointer: created on first use, grown
/// when a quarter full).
#[inline(always)]
pub(crate) fn count(slot: &mut *mut core::ffi::c_void, from: u64, to: u64) {
    // SAFETY: the thread state's `arcs` slot holds null or a `Table` this
    // module created; a pointer to a pointer has the same layout whatever
    // it points to.
    let table = unsafe { &mut *(slot as *mut *mut core::ffi::c_void).cast::<*mut Table>() };
    if table.is_null() && !create(table, FIRST_SLOTS) {
        LOST_ARCS.fetch_add(1, Ordering::Relaxed);
        return;
    }
    // SAFETY: `*table` is this thread's live table.
    unsafe {
        let t = *table;
        let added = add(t, from, to, 1) || (grow(table) && add(*table, from, to, 1));
        if !added {
            LOST_ARCS.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let t = *table;
        if (*t).nused * 4 > (*t).mask as usize + 1 {
            grow(table);
        }
    }
}

/// Replaces `*table` by a table 4× larger holding the same arcs; false
/// (the table kept) at the largest size or when memory is refused.
#[cold]
#[inline(never)]
fn grow(table: &mut *mut Table) -> bool {
    let old = *table;
    // SAFETY: `old` is this thread's live table.
    let slots = unsafe { (*old).mask as usize + 1 };
    if slots >= MAX_SLOTS {
        return false;
    }
    let mut new = ptr::null_mut();
    if !alloc(&mut new, slots * 4) {
        return false;
    }
    // SAFETY: both tables are live; `old` is only read, `new` is not yet
    // visible to any reader.
    unsafe {
        let o = &*old;
        for k in 0..o.nused {
            let s = &*slot(old, o.used.add(k).read() as usize);
            add(new, s.from, s.to, s.count);
        }
        // Finishing skips retired tables; the new one is listed after.
        o.retired.store(true, Ordering::Release);
    }
    publish(new);
    *table = new;
    true
}

/// Maps an empty table of `slots` slots into `*t` (not yet listed).
fn alloc(t: &mut *mut Table, slots: usize) -> bool {
    let len = SLOTS_OFFSET + slots * core::mem::size_of::<Slot>() + slots * 4;
    // SAFETY: a fresh anonymous mapping; zero pages are empty slots.
    let p = unsafe {
        libc::mmap(
            ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return false;
    }
    let n = p.cast::<Table>();
    // SAFETY: the header lies at the start of our new mapping, and the
    // index array after the slots, inside it.
    unsafe {
        (*n).mask = slots as u64 - 1;
        (*n).end = p
            .cast::<u8>()
            .add(SLOTS_OFFSET + slots * core::mem::size_of::<Slot>());
        (*n).used = p
            .cast::<u8>()
            .add(SLOTS_OFFSET + slots * core::mem::size_of::<Slot>())
            .cast();
    }
    *t = n;
    true
}

/// Lists table `t` for [`for_each_arc`].
fn publish(t: *mut Table) {
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
}

#[cold]
#[inline(never)]
fn create(table: &mut *mut Table, slots: usize) -> bool {
    let mut t = ptr::null_mut();
    if !alloc(&mut t, slots) {
        return false;
    }
    publish(t);
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
            if !(*t).retired.load(Ordering::Acquire) {
                let n = ptr::read_volatile(&(*t).nused).min((*t).mask as usize + 1);
                for k in 0..n {
                    let s = &*slot(t, (*t).used.add(k).read() as usize);
                    let c = ptr::read_volatile(&s.count);
                    if c != 0 {
                        f(s.from, s.to, c);
                    }
                }
            }
            t = (*t).next;
        }
    }
}

/// In a forked child: every table (the forking thread's, and the copies
/// of the other threads' that the child inherited) holds the parent's
/// counts, which the parent's trace has; the child's trace starts from
/// none, so that `report --children` does not count them twice. Only the
/// forking thread runs, and tables are only written by their own thread.
pub(crate) fn forget_counts_after_fork() {
    let mut t = TABLES.load(Ordering::Acquire);
    while !t.is_null() {
        // SAFETY: tables are never freed; in the child no other thread
        // exists to write them. Every slot in use is cleared whole (an
        // empty table has no probe chains to keep).
        unsafe {
            let n = (*t).nused.min((*t).mask as usize + 1);
            for k in 0..n {
                let s = slot(t, (*t).used.add(k).read() as usize);
                ptr::write_bytes(s, 0, 1);
            }
            (*t).nused = 0;
            t = (*t).next;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_grow_and_keep_every_arc() {
        // 100,000 arcs (far past the first table's 4,096 slots), some from
        // one call site to many callees, counted 1 to 3 times each.
        let mut t: *mut core::ffi::c_void = ptr::null_mut();
        let base = 0x7f00_0000_0000u64;
        let arc = |k: u64| (base + (k % 5000) * 5, 0x40_0000 + k * 16);
        for round in 0..3u64 {
            for k in 0..100_000u64 {
                if k % 3 >= round {
                    let (from, to) = arc(k);
                    count(&mut t, from, to);
                }
            }
        }
        // SAFETY: the table is ours and live.
        let slots = unsafe { (*t.cast::<Table>()).mask + 1 };
        assert!(slots >= 4 * 100_000, "{slots}");
        let mut seen = std::collections::HashMap::new();
        for_each_arc(|from, to, c| {
            if (base..base + 5000 * 5).contains(&from) {
                assert!(seen.insert((from, to), c).is_none(), "arc listed twice");
            }
        });
        assert_eq!(seen.len(), 100_000);
        for k in 0..100_000u64 {
            assert_eq!(seen[&arc(k)], 1 + k % 3, "{k}");
        }
        assert_eq!(LOST_ARCS.load(Ordering::Relaxed), 0);
    }
}
