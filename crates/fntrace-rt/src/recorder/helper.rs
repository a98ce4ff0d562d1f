//! The helper thread of a session: the chunk life cycle off the traced
//! threads, so that they neither fault nor make system calls in the
//! steady state and the process's resident memory stays bounded.
//!
//! - **Acquire**: it keeps the next [`Options::buffer`] bytes of chunks
//!   (less at first: as many as were written so far, from 8 chunks up)
//!   mapped and pre-faulted for writing (`MADV_POPULATE_WRITE`, the same
//!   shared file pages the writers use: crash safety is unchanged) ahead of
//!   the chunk counter. A thread that outruns it maps and faults chunks
//!   itself, as without a helper.
//! - **Retire**: every chunk sealed since its last pass gets its event
//!   count written into its header (bytes 48..56, checked against the
//!   seal), is dropped from the mapping (`MADV_DONTNEED`: its dirty pages
//!   stay in the page cache, so a `SIGKILL` loses nothing) and handed to
//!   writeback (`sync_file_range`); chunks retired long enough ago are
//!   dropped from the page cache once clean (`POSIX_FADV_DONTNEED`).
//! - **Counters**: the live block of the header page (events, chunks,
//!   lost events, resident bytes) for `fntrace record`'s progress line.
//!
//! The thread polls (1 ms while chunks are being claimed, 10 ms when idle):
//! the writers never wake it, so their chunk switch stays one atomic add.
//! It records nothing (its own calls run [`guarded`](super::guarded)), and
//! it only exists in the process that started the session: a forked child
//! forgets the session and starts its own (with its own helper).
//!
//! [`Options::buffer`]: super::Options::buffer

use std::collections::VecDeque;
use std::ptr;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU32, Ordering};
use std::time::Duration;

use fntrace_format::event::count_events;
use fntrace_format::layout::{
    CHUNK_COUNT_OFFSET, CHUNK_FLAG_SEALED, CHUNK_HEADER_SIZE, CHUNK_MAGIC, ChunkHeader,
    LIVE_OFFSET, Live,
};

use super::file::Session;
use super::write::grow;
use crate::clock;

/// `MADV_POPULATE_WRITE` (Linux 5.14; not in every libc crate version).
const MADV_POPULATE_WRITE: libc::c_int = 23;
/// Chunks pre-faulted ahead at first (the buffer is reached by doubling;
/// the first growth of the file, populated at start, covers them).
const RAMP_CHUNKS: u64 = 4;
/// Ring slots the sweep looks at per pass.
const SWEEP_PER_PASS: u64 = 16;
/// Chunks looked at in one pass at most.
const MAX_PER_PASS: u64 = 64;
/// Chunks retired this many chunks ago are dropped from the page cache.
const FADVISE_LAG: u64 = 64;

/// Owner states of a ring slot ([`Session::owner`]).
pub(crate) const SLOT_FREE: u8 = 0;
/// A thread is filling the chunk in the slot.
pub(crate) const SLOT_OPEN: u8 = 1;
/// The helper is retiring the chunk in the slot.
pub(crate) const SLOT_RETIRING: u8 = 2;
/// The slot holds metadata, never overwritten.
pub(crate) const SLOT_PINNED: u8 = 3;

/// The helper's bookkeeping, under [`Session::life`].
#[derive(Default)]
pub(crate) struct Life {
    /// Chunk counter value up to which chunks are mapped and pre-faulted.
    pub(crate) ready: u64,
    /// Chunk counter value below which every chunk was looked at.
    pub(crate) lo: u64,
    /// Chunks looked at but not sealed yet (slots).
    pub(crate) pending: Vec<u64>,
    /// Events in the chunks counted so far.
    pub(crate) events: u64,
    /// Chunks dropped from the mapping and not yet reused.
    pub(crate) dropped: u64,
    /// Retired chunks (slots) whose page cache is dropped later.
    pub(crate) written: VecDeque<u64>,
    /// The helper thread has stopped (or never ran).
    pub(crate) stopped: bool,
    /// Ring: per slot, the chunk counter when its chunk was dropped
    /// (`u64::MAX`: not dropped), so that the sweep skips slots not reused
    /// since without touching them.
    pub(crate) dropped_at: Vec<u64>,
    /// Ring: where the sweep over all slots continues.
    pub(crate) sweep: u64,
}

/// A snapshot was asked for (by the snapshot signal).
static SNAPSHOT: AtomicBool = AtomicBool::new(false);

extern "C" fn on_snapshot_signal(_sig: libc::c_int) {
    SNAPSHOT.store(true, Ordering::Release);
}

/// Installs the handler of the snapshot signal `sig` (it only sets a flag
/// the helper thread looks at).
fn install_snapshot_signal(sig: libc::c_int) {
    // SAFETY: a zeroed sigaction with a handler that only stores to an
    // atomic (async-signal-safe); SA_RESTART keeps interrupted calls going.
    unsafe {
        let mut sa: libc::sigaction = core::mem::zeroed();
        sa.sa_sigaction = on_snapshot_signal as *const () as usize;
        sa.sa_flags = libc::SA_RESTART;
        libc::sigemptyset(&mut sa.sa_mask);
        libc::sigaction(sig, &sa, ptr::null_mut());
    }
}

/// Writes a snapshot of the session's trace to `PATH.snapshot.N`.
fn write_snapshot(s: &Session) {
    use std::os::fd::FromRawFd;
    let Some(fd) = s.fd.get() else { return };
    // SAFETY: borrowing the session's descriptor without owning it
    // (ManuallyDrop: it is not closed here).
    let src = std::mem::ManuallyDrop::new(unsafe { std::fs::File::from_raw_fd(fd) });
    let Some(out) = (1u32..10_000)
        .map(|n| {
            let mut p = s.path.as_os_str().to_owned();
            p.push(format!(".snapshot.{n}"));
            std::path::PathBuf::from(p)
        })
        .find(|p| !p.exists())
    else {
        return;
    };
    let r = std::fs::File::create(&out).and_then(|f| fntrace_format::snapshot::snapshot(&src, &f));
    match r {
        Ok(st) => crate::diag::diag!(
            "fntrace: snapshot written to {} ({} chunks)",
            out.display(),
            st.chunks
        ),
        Err(e) => crate::diag::diag!("fntrace: snapshot to {} failed: {e}", out.display()),
    }
}

/// Starts the helper thread of `s` (when the session has a buffer).
pub(crate) fn spawn(s: &'static Session) {
    if s.buffer_chunks == 0 {
        return;
    }
    if s.opts.snapshot_signal != 0 {
        install_snapshot_signal(s.opts.snapshot_signal);
    }
    // The thread registers as the runtime's own first thing: code
    // rewriting (which needs no other thread running the program's code)
    // waits for that if it comes first; the start does not wait.
    let r = crate::procinfo::spawn_runtime_thread("fntrace-helper", move || {
        super::guarded(|| run(s));
    });
    if let Err(e) = r {
        crate::diag::diag!(
            "fntrace: cannot start the helper thread ({e}); trace memory is faulted in by the traced threads"
        );
        s.life.lock().unwrap_or_else(|e| e.into_inner()).stopped = true;
    }
}

fn run(s: &'static Session) {
    let mut idle = 0u32;
    loop {
        let before = s.next_chunk.load(Ordering::Acquire);
        {
            let mut l = s.life.lock().unwrap_or_else(|e| e.into_inner());
            if s.finished.load(Ordering::Acquire) {
                l.stopped = true;
                return;
            }
            pass(s, &mut l);
            if SNAPSHOT.swap(false, Ordering::AcqRel) {
                write_snapshot(s);
            }
        }
        idle = if s.next_chunk.load(Ordering::Acquire) == before {
            idle.saturating_add(1)
        } else {
            0
        };
        std::thread::sleep(Duration::from_millis(if idle > 20 { 10 } else { 1 }));
    }
}

/// One pass: acquire ahead, retire what was sealed, publish the counters.
pub(crate) fn pass(s: &Session, l: &mut Life) {
    let next = s.next_chunk.load(Ordering::Acquire);
    acquire(s, l, next);
    retire(s, l, next, false);
    publish(s, l, next);
}

/// The file slot of the `g`-th chunk handed out.
pub(crate) fn slot_of(s: &Session, g: u64) -> u64 {
    if s.ring_chunks > 0 {
        g % s.ring_chunks
    } else {
        g
    }
}

fn chunk_ptr(s: &Session, slot: u64) -> *mut u8 {
    s.base
        .wrapping_add(s.header.header_size as usize + slot as usize * s.chunk_size)
}

/// Maps and pre-faults the chunks the next `buffer_chunks` claims will
/// take.
fn acquire(s: &Session, l: &mut Life, next: u64) {
    let limit = if s.ring_chunks > 0 {
        u64::MAX
    } else {
        s.max_chunks
    };
    // Ramp up: as far ahead as has been written so far (a short run does
    // not pay for megabytes it never uses), at most the buffer.
    let ahead = s.buffer_chunks.min(next.max(RAMP_CHUNKS));
    let target = next.saturating_add(ahead).min(limit);
    let from = l.ready.max(next);
    if from >= target {
        return;
    }
    let mut g = from;
    while g < target {
        let slot = slot_of(s, g);
        // A contiguous run of slots (a ring wraps once at most per run).
        let run = if s.ring_chunks > 0 {
            (target - g).min(s.ring_chunks - slot)
        } else {
            target - g
        };
        let end = s.header.header_size as usize + (slot + run) as usize * s.chunk_size;
        if end > s.mapped.load(Ordering::Acquire) && !grow(s, end, false) {
            break;
        }
        populate(chunk_ptr(s, slot), run as usize * s.chunk_size);
        if s.ring_chunks > 0 && g >= s.ring_chunks {
            // Reused slots come back into memory.
            l.dropped = l.dropped.saturating_sub(run);
        }
        g += run;
    }
    l.ready = g;
}

/// Faults `len` bytes at `p` in for writing.
fn populate(p: *mut u8, len: usize) {
    // SAFETY: the range lies in the mapped, file-backed part of the
    // session's reservation; populating changes no contents.
    let r = unsafe { libc::madvise(p as *mut libc::c_void, len, MADV_POPULATE_WRITE) };
    if r != 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EINVAL) {
        // Older kernels: a write access that keeps every byte as it is
        // (a writer may already be filling these pages).
        let mut off = 0;
        while off < len {
            // SAFETY: as above; an atomic RMW of 0 changes nothing.
            unsafe { (*(p.add(off) as *const AtomicU8)).fetch_or(0, Ordering::Relaxed) };
            off += 4096;
        }
    }
}

/// Looks at the chunks handed out since the last pass and at the pending
/// ones: counts, drops and writes back every sealed one. At `finish`
/// (`last`), unsealed chunks are counted too (not retired).
pub(crate) fn retire(s: &Session, l: &mut Life, next: u64, last: bool) -> u64 {
    let mut open_events = 0;
    let lo = if s.ring_chunks > 0 {
        // Slots overwritten since are looked at in their new generation.
        l.lo.max(next.saturating_sub(s.ring_chunks))
    } else {
        l.lo
    };
    let hi = if s.ring_chunks > 0 {
        next
    } else {
        next.min(s.max_chunks)
    };
    // A bounded pass (the lock is held): the rest waits for the next one.
    let hi = if last { hi } else { hi.min(lo + MAX_PER_PASS) };
    let mut todo = std::mem::take(&mut l.pending);
    todo.extend((lo..hi).map(|g| slot_of(s, g)));
    if s.ring_chunks > 0 && !last {
        // A helper that fell more than a ring behind (starved of CPU) left
        // chunks it never looked at: a sweep over every slot catches them.
        if l.dropped_at.len() != s.ring_chunks as usize {
            l.dropped_at = vec![u64::MAX; s.ring_chunks as usize];
        }
        for k in 0..SWEEP_PER_PASS.min(s.ring_chunks) {
            let slot = (l.sweep + k) % s.ring_chunks;
            let at = l.dropped_at[slot as usize];
            // The first claim that can have reused the slot since.
            let reuse =
                at.saturating_add((slot + s.ring_chunks - at % s.ring_chunks) % s.ring_chunks);
            let end = s.header.header_size as usize + (slot as usize + 1) * s.chunk_size;
            if (at == u64::MAX || next > reuse) && end <= s.mapped.load(Ordering::Acquire) {
                todo.push(slot);
            }
        }
        l.sweep = (l.sweep + SWEEP_PER_PASS) % s.ring_chunks;
    }
    todo.sort_unstable();
    todo.dedup();
    for slot in todo {
        match retire_one(s, l, slot, last, next) {
            Some(n) => open_events += n,
            None => l.pending.push(slot),
        }
    }
    l.lo = hi.max(l.lo);
    open_events
}

/// Retires the chunk in `slot` if it is sealed (`Some(0)`); `None` while
/// it is still open (at `last`: `Some(events so far)`).
fn retire_one(s: &Session, l: &mut Life, slot: u64, last: bool, next: u64) -> Option<u64> {
    let c = chunk_ptr(s, slot);
    let end = s.header.header_size as usize + (slot as usize + 1) * s.chunk_size;
    if end > s.mapped.load(Ordering::Acquire) {
        // Claimed, and its claimer is still growing the file to it.
        return if last { Some(0) } else { None };
    }
    let owner = (s.ring_chunks > 0).then(|| &s.owner[slot as usize]);
    if let Some(o) = owner {
        match o.compare_exchange(
            SLOT_FREE,
            SLOT_RETIRING,
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            Ok(_) => {}
            Err(SLOT_PINNED) => return Some(0),
            Err(_) if last => return Some(count_open(s, c)),
            Err(_) => return None,
        }
    }
    let release = || {
        if let Some(o) = owner {
            o.store(SLOT_FREE, Ordering::Release);
        }
    };
    // SAFETY: the chunk lies in the mapped file; the header words are read
    // atomically (their writer may be storing them now).
    let (magic, flags, len, crc) = unsafe {
        let w = |o: usize| (*(c.add(o) as *const AtomicU32)).load(Ordering::Acquire);
        (w(0), w(36), w(40), w(44))
    };
    if magic != CHUNK_MAGIC || flags & CHUNK_FLAG_SEALED == 0 {
        release();
        if magic != CHUNK_MAGIC && s.ring_chunks > 0 {
            // A ring slot being reset: looked at again in its new life.
            return Some(0);
        }
        return if last { Some(count_open(s, c)) } else { None };
    }
    // SAFETY: as above; reading the header bytes of a sealed chunk.
    let counted = unsafe {
        let hb: &[u8; CHUNK_HEADER_SIZE] = &*(c as *const [u8; CHUNK_HEADER_SIZE]);
        ChunkHeader::decode(hb)
            .ok()
            .and_then(|h| h.events)
            .is_some()
    };
    if !counted {
        let cap = s.chunk_size - CHUNK_HEADER_SIZE;
        // SAFETY: a sealed chunk's payload is no longer written to; its
        // length is the writer's, capped at the payload capacity.
        let n = unsafe {
            let p = core::slice::from_raw_parts(c.add(CHUNK_HEADER_SIZE), (len as usize).min(cap));
            count_events(p)
        };
        let b = ChunkHeader::encode_count(len, crc, n);
        // SAFETY: bytes 48..56 of a sealed chunk's header belong to the
        // helper (no writer touches them after the seal).
        unsafe { ptr::copy_nonoverlapping(b.as_ptr(), c.add(CHUNK_COUNT_OFFSET), b.len()) };
        l.events += u64::from(n);
    }
    if !last {
        let again = l.dropped_at.get(slot as usize).is_some_and(|&at| {
            at != u64::MAX
                && next
                    <= at
                        .saturating_add((slot + s.ring_chunks - at % s.ring_chunks) % s.ring_chunks)
        });
        if !again {
            drop_chunk(s, l, c, slot);
            if let Some(at) = l.dropped_at.get_mut(slot as usize) {
                *at = next;
            }
        }
    }
    release();
    Some(0)
}

/// Events written so far in an open chunk (up to its first zero byte).
fn count_open(s: &Session, c: *mut u8) -> u64 {
    // SAFETY: reading the mapped payload; a writer may be appending, and
    // the decoder stops at the first zero byte or undecodable record.
    let p = unsafe {
        core::slice::from_raw_parts(c.add(CHUNK_HEADER_SIZE), s.chunk_size - CHUNK_HEADER_SIZE)
    };
    u64::from(count_events(p))
}

/// Drops a retired chunk from the mapping and hands it to writeback.
fn drop_chunk(s: &Session, l: &mut Life, c: *mut u8, slot: u64) {
    let off = s.header.header_size as i64 + slot as i64 * s.chunk_size as i64;
    // SAFETY: the chunk is sealed and retired: no thread writes to it
    // again (a ring slot is reused only after the helper set it free, and
    // its pages then fault back in from the page cache). Dropping a shared
    // file mapping keeps its dirty pages in the page cache.
    unsafe {
        libc::madvise(c as *mut libc::c_void, s.chunk_size, libc::MADV_DONTNEED);
    }
    let fd = s.fd.get();
    if let Some(fd) = fd {
        // SAFETY: writeback of our own file's range.
        unsafe { libc::sync_file_range(fd, off, s.chunk_size as i64, libc::SYNC_FILE_RANGE_WRITE) };
    }
    l.dropped += 1;
    if s.ring_chunks == 0 {
        l.written.push_back(slot);
        while l.written.len() as u64 > FADVISE_LAG {
            let old = l.written.pop_front().unwrap_or(0);
            let o = s.header.header_size as i64 + old as i64 * s.chunk_size as i64;
            if let Some(fd) = fd {
                // SAFETY: advice on our own descriptor; only clean pages
                // (on disk) are dropped, dirty ones stay.
                unsafe {
                    libc::posix_fadvise(fd, o, s.chunk_size as i64, libc::POSIX_FADV_DONTNEED)
                };
            }
        }
    }
}

/// Writes the live counters block.
fn publish(s: &Session, l: &Life, next: u64) {
    let chunks = if s.ring_chunks > 0 {
        next
    } else {
        next.min(s.max_chunks)
    };
    let mapped_chunks = (s.mapped.load(Ordering::Acquire) as u64)
        .saturating_sub(u64::from(s.header.header_size))
        / s.chunk_size as u64;
    let resident = mapped_chunks.saturating_sub(l.dropped) * s.chunk_size as u64;
    let live = Live {
        events: l.events,
        chunks,
        lost_events: s.lost.load(Ordering::Relaxed),
        mono_ns: clock::monotonic_ns(),
        resident,
    };
    let b = live.encode();
    // SAFETY: the header page is mapped for the session's life; readers
    // of another process check the block's CRC (a torn read is ignored).
    unsafe { ptr::copy_nonoverlapping(b.as_ptr(), s.base.add(LIVE_OFFSET), b.len()) };
}

/// At finish: stops the helper (waits for its pass, at most 2 s) and
/// returns the events of the whole trace (counting the chunks it had not
/// retired yet), `None` without a helper or when it could not be stopped.
pub(crate) fn finish_count(s: &Session, next: u64) -> Option<u64> {
    if s.buffer_chunks == 0 {
        return None;
    }
    let mut tries = 0;
    let mut l = loop {
        match s.life.try_lock() {
            Ok(l) => break l,
            Err(std::sync::TryLockError::Poisoned(e)) => break e.into_inner(),
            Err(_) if tries < 2000 => {
                tries += 1;
                std::thread::sleep(Duration::from_millis(1));
            }
            Err(_) => return None,
        }
    };
    l.stopped = true;
    let open = retire(s, &mut l, next, true);
    // A ring's total includes overwritten chunks: readers sum the counts
    // of the chunks in the file instead.
    (s.ring_chunks == 0).then_some(l.events + open)
}
