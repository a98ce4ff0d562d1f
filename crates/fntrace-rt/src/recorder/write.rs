//! Writing events: attaching a thread to the session (its first chunk
//! and thread-start record), the compact entry and exit events of the hot
//! path (one 8-byte store when they fit), framed records (markers,
//! arguments, return values, metadata), chunk claiming, growing the file
//! and sealing chunks.

use std::ptr;
use std::sync::atomic::{AtomicU32, Ordering, compiler_fence};

use fntrace_format::event::{
    Compact, Framed, MAX_COMPACT_LEN, SliceSink, encode_compact, pack_entry_new, pack_entry_same,
    pack_exit,
};
use fntrace_format::layout::{
    CHUNK_FLAG_SEALED, CHUNK_HEADER_SIZE, CHUNK_SEAL_OFFSET, ChunkHeader, HEADER_SIZE, META_TID,
};

use super::file::Session;
use super::helper::{SLOT_FREE, SLOT_OPEN, SLOT_PINNED};
use super::pending;
use super::state::{Cursor, ThreadState, state};
use super::{CURRENT, FIRST_GROW, GROW_STEP, SESSION, SLACK, UNINIT, lazy_start};
use crate::features::{FEAT_TIME, features};
use crate::{clock, procinfo};

/// Called by the assembly fast path (through `calls::fast::fntrace_fast_switch`)
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

// ---------------------------------------------------------------------------
// Hot path.

/// Writes a compact event already packed into `w` (`n` bytes).
///
/// # Safety
/// `t.cur.pos` must be at or before `t.cur.limit` of a live chunk.
#[inline(always)]
pub(crate) unsafe fn put_word(t: &mut ThreadState, w: u64, n: u32) {
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
pub(crate) unsafe fn put_long(t: &mut ThreadState, ev: Compact) {
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

/// Records the entry of `func` now (held back instead while the
/// record-time time filter is on, see [`super::pending`]).
#[inline(always)]
pub(crate) fn record_entry_inner(t: &mut ThreadState, func: u64) {
    if features() & FEAT_TIME != 0 {
        pending::enter(t, func);
        return;
    }
    let d = t.cur.delta_now();
    entry_with_delta(t, func, d);
}

/// Writes an entry of `func` whose delta from the cursor's last timed
/// record is `d` (the cursor's timeline already advanced by `d`).
#[inline(always)]
pub(crate) fn entry_with_delta(t: &mut ThreadState, func: u64, d: u64) {
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
    if t.session != sid || t.busy || (t.depth == 0 && !pending::any(t)) {
        return;
    }
    t.busy = true;
    compiler_fence(Ordering::SeqCst);
    exit_inner(t);
    compiler_fence(Ordering::SeqCst);
    t.busy = false;
}

/// Writes an exit record; the caller holds `busy` on an attached thread.
/// (While the time filter is on, the innermost held-back call is decided
/// instead, see [`super::pending`].)
#[inline(always)]
pub(crate) fn exit_inner(t: &mut ThreadState) {
    if features() & FEAT_TIME != 0 {
        if t.session != 0 {
            pending::exit(t);
        }
        return;
    }
    exit_now(t);
}

/// Writes an exit record now.
#[inline(always)]
pub(crate) fn exit_now(t: &mut ThreadState) {
    if t.depth == 0 || t.session == 0 {
        return;
    }
    let d = t.cur.delta_now();
    exit_with_delta(t, d);
}

/// Writes an exit record whose delta from the cursor's last timed record
/// is `d` (the cursor's timeline already advanced by `d`).
#[inline(always)]
pub(crate) fn exit_with_delta(t: &mut ThreadState, d: u64) {
    if t.depth == 0 || t.session == 0 {
        return;
    }
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

/// The slow path of an entry on a thread that is busy or not attached to
/// the current session: counts a reentrant event as lost, looks at the
/// environment once, attaches. Returns whether the thread is now attached
/// and not busy.
#[cold]
#[inline(never)]
pub(crate) fn attach_slow(t: &mut ThreadState) -> bool {
    if t.busy {
        t.lost += 1;
        return false;
    }
    if SESSION.load(Ordering::Acquire) == UNINIT {
        lazy_start();
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
pub(crate) fn attach(t: &mut ThreadState, sid: u32) -> bool {
    // Signals blocked as in [`next_chunk`]: the first chunk is claimed.
    procinfo::with_async_signals_blocked(|| attach_now(t, sid))
}

fn attach_now(t: &mut ThreadState, sid: u32) -> bool {
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
    // Frames whose calls an earlier session recorded (a forked child's,
    // from its parent) write no exit here but count for `--depth`.
    t.depth_base = 0;
    for f in t.shadow.frames() {
        if f.flags & super::shadow::F_RECORDED != 0 {
            f.flags = (f.flags & !super::shadow::F_RECORDED) | super::shadow::F_BASE;
        }
        if f.flags & super::shadow::F_BASE != 0 {
            t.depth_base += 1;
        }
    }
    t.pend.reset();
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
    super::state::watch_thread_exit();
    true
}

/// The code that held `busy` on this thread was abandoned: a signal
/// handler that interrupted it left with `siglongjmp` (see
/// `calls::entry::jumping_to`). The event it was writing counts as lost
/// (flushed with the next chunk switch, like every drop), and `busy` is
/// cleared so that the thread records again. Nothing else is repaired:
/// an event is committed by the store that advances `pos`, so a
/// half-written one is overwritten by the next; only a jump out of the
/// few instructions between an entry's store and its shadow frame's push
/// (or an exit's store and the pop) leaves the open calls and the shadow
/// stack apart, which `calls::entry` puts right. The runtime's locks that
/// a traced thread takes (growing the file, the metadata stream) are held
/// with asynchronous signals blocked, so no handler can leave with one,
/// and so are chunk switches and a thread's first chunk (a chunk claimed
/// and left without its header would be damage in the trace).
pub(crate) fn abandoned(t: &mut ThreadState) {
    t.lost += 1;
    compiler_fence(Ordering::SeqCst);
    t.busy = false;
}

/// Reads the calling thread's open-call depth, last entry's function and
/// last record's time back from its chunk (its header and the payload up
/// to `pos`, scanned by `fntrace_format::event::stream_end`): after the
/// recorder was abandoned between writing an event and updating those
/// fields, they are what the trace says again. False (nothing changed)
/// when the cursor does not look like a live chunk (abandoned while
/// switching chunks).
pub(crate) fn resync_cursor(t: &mut ThreadState) -> bool {
    if t.session == 0 || t.cur.chunk.is_null() {
        return false;
    }
    // SAFETY: an attached thread's session pointer is set; sessions are
    // leaked.
    let s = unsafe { &*t.session_ptr };
    let payload = t.cur.payload() as usize;
    let pos = t.cur.pos as usize;
    if pos < payload || pos > t.cur.chunk as usize + s.chunk_size {
        return false;
    }
    // SAFETY: the chunk's header and its payload up to `pos` are mapped
    // and written by this thread (its open chunk).
    let (h, end) = unsafe {
        let hb = &*(t.cur.chunk as *const [u8; CHUNK_HEADER_SIZE]);
        let p = core::slice::from_raw_parts(payload as *const u8, pos - payload);
        let Ok(h) = ChunkHeader::decode(hb) else {
            return false;
        };
        let end = fntrace_format::event::stream_end(p, h.base_tsc);
        (h, end)
    };
    let depth = i64::from(h.depth) + end.depth_change;
    let Ok(depth) = u32::try_from(depth) else {
        return false;
    };
    t.depth = depth;
    t.cur.last_func = end.last_func;
    t.cur.last_tsc = end.last_tsc;
    true
}

/// Moves a thread to a fresh chunk after sealing the full one.
#[cold]
#[inline(never)]
pub(crate) fn next_chunk(t: &mut ThreadState) {
    // With the program's asynchronous signals blocked: a handler that
    // interrupted the switch and left with `siglongjmp` would leave a
    // claimed chunk without its header (see [`abandoned`]). One pair of
    // `sigprocmask` calls per chunk (64 KiB of events).
    procinfo::with_async_signals_blocked(|| next_chunk_now(t))
}

fn next_chunk_now(t: &mut ThreadState) {
    // SAFETY: only called by an attached thread.
    let s = unsafe { &*t.session_ptr };
    seal_release(s, &t.cur);
    if !claim_chunk(s, &mut t.cur, t.tid, t.depth) {
        // Out of space: detach; later events of this thread count as lost.
        t.full = true;
        t.session = 0;
        return;
    }
    flush_lost(s, t);
}

/// Moves a thread to a fresh chunk whose timeline starts at `base` (the
/// time of a held-back record about to be written), sealing and releasing
/// the full one (in a ring its slot can be reused); false, with the thread
/// detached, when the session is full.
pub(crate) fn next_chunk_at(t: &mut ThreadState, base: u64) -> bool {
    // Signals blocked as in [`next_chunk`].
    procinfo::with_async_signals_blocked(|| next_chunk_at_now(t, base))
}

fn next_chunk_at_now(t: &mut ThreadState, base: u64) -> bool {
    // SAFETY: only called by an attached thread; sessions are leaked.
    let s = unsafe { &*t.session_ptr };
    seal_release(s, &t.cur);
    if !claim_chunk_at(s, &mut t.cur, t.tid, t.depth, Some(base)) {
        t.full = true;
        t.session = 0;
        return false;
    }
    true
}

/// Reports events dropped so far in a `Lost` record.
pub(crate) fn flush_lost(s: &Session, t: &mut ThreadState) {
    if t.lost > 0 {
        let count = std::mem::take(&mut t.lost);
        s.lost.fetch_add(count, Ordering::Relaxed);
        // Untimed while entries are held back: a timed record now would
        // come before their (earlier) times in the stream.
        let timed = !pending::any(t);
        write_framed(s, &mut t.cur, t.tid, t.depth, timed, |d| Framed::Lost {
            d,
            count,
        });
    }
}

/// Writes the thread's exit record (if `exiting`) and seals its chunk.
pub(crate) fn close_thread(s: &Session, t: &mut ThreadState, exiting: bool) {
    if t.cur.chunk.is_null() {
        return;
    }
    // Calls still open that already lasted long enough are written (as
    // calls without exit); the others are dropped.
    pending::flush_long(t);
    flush_lost(s, t);
    if exiting {
        let mut nb = [0u8; 16];
        let name = procinfo::thread_name(&mut nb);
        write_framed(s, &mut t.cur, t.tid, t.depth, true, |d| {
            Framed::ThreadExit { d, name }
        });
    }
    seal_release(s, &t.cur);
    if exiting {
        s.note_stream_end(t.tid, t.cur.seq);
    }
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
    // A marker keeps the calls it happened in (time filter).
    pending::flush(t);
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
pub(crate) fn write_framed<'a>(
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
        seal_release(s, cur);
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
/// In a ring, the slot of the oldest chunk that no thread is filling is
/// reset and reused; metadata chunks are never reused.
pub(crate) fn claim_chunk(s: &Session, cur: &mut Cursor, tid: u32, depth: u32) -> bool {
    claim_chunk_at(s, cur, tid, depth, None)
}

/// [`claim_chunk`] with the chunk's timeline starting at `base` (a TSC in
/// the past: held-back entries written later carry their own times)
/// instead of now.
pub(crate) fn claim_chunk_at(
    s: &Session,
    cur: &mut Cursor,
    tid: u32,
    depth: u32,
    base: Option<u64>,
) -> bool {
    if s.finished.load(Ordering::Acquire) {
        return false;
    }
    let (idx, reused) = if s.ring_chunks > 0 {
        let want = if tid == META_TID {
            SLOT_PINNED
        } else {
            SLOT_OPEN
        };
        let mut tries = 0;
        loop {
            let g = s.next_chunk.fetch_add(1, Ordering::Relaxed);
            let slot = g % s.ring_chunks;
            if s.owner[slot as usize]
                .compare_exchange(SLOT_FREE, want, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
            {
                break (slot, g >= s.ring_chunks);
            }
            tries += 1;
            if tries > s.ring_chunks {
                note_full(s);
                return false;
            }
        }
    } else {
        let idx = s.next_chunk.fetch_add(1, Ordering::Relaxed);
        if idx >= s.max_chunks {
            note_full(s);
            return false;
        }
        (idx, false)
    };
    let end = HEADER_SIZE as usize + (idx as usize + 1) * s.chunk_size;
    if end > s.mapped.load(Ordering::Acquire) && !grow(s, end, true) {
        release(s, idx);
        note_full(s);
        return false;
    }
    let chunk = s
        .base
        .wrapping_add(HEADER_SIZE as usize + idx as usize * s.chunk_size);
    if reused {
        // SAFETY: the slot is ours (its owner word went from free to
        // ours); its previous chunk is sealed, so everything past its
        // payload length is zero. The magic goes first: a chunk read
        // while it is reset has no header (a reader skips it), never an
        // old header over new bytes.
        unsafe {
            (*(chunk as *const AtomicU32)).store(0, Ordering::Release);
            let len = (chunk.add(40) as *const u32).read_unaligned() as usize;
            let used = CHUNK_HEADER_SIZE + len.min(s.chunk_size - CHUNK_HEADER_SIZE - 8) + 8;
            ptr::write_bytes(chunk.add(4), 0, used - 4);
        }
        compiler_fence(Ordering::Release);
    }
    let (mut base_tsc, mut base_mono_ns) = (clock::tsc(), clock::monotonic_ns());
    if let Some(b) = base.filter(|&b| b < base_tsc) {
        let ticks = u128::from(base_tsc - b);
        let hz = u128::from(s.header.tsc_hz.max(1));
        base_mono_ns = base_mono_ns.saturating_sub((ticks * 1_000_000_000 / hz) as u64);
        base_tsc = b;
    }
    let seq = if cur.chunk.is_null() {
        s.first_seq(tid)
    } else {
        cur.seq + 1
    };
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
    // caller alone by the atomic `next_chunk` (and, in a ring, its owner
    // word). The magic (bytes 0..4) is written last so a half-written
    // header reads as unused.
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

/// In a ring: gives the slot of a thread's chunk back (after its seal),
/// so that it can be overwritten. Metadata slots stay pinned.
pub(crate) fn release(s: &Session, slot: u64) {
    if let Some(o) = s.owner.get(slot as usize) {
        let _ = o.compare_exchange(SLOT_OPEN, SLOT_FREE, Ordering::AcqRel, Ordering::Relaxed);
    }
}

/// Seals the cursor's chunk and, in a ring, releases its slot.
pub(crate) fn seal_release(s: &Session, cur: &Cursor) {
    if cur.chunk.is_null() {
        return;
    }
    seal(cur);
    if s.ring_chunks > 0 {
        let slot = (cur.chunk as usize - s.base as usize - HEADER_SIZE as usize) / s.chunk_size;
        release(s, slot as u64);
    }
}

/// Notes, the first time, from when the size limit (or a full disk)
/// refused chunks: events were dropped from then on.
fn note_full(s: &Session) {
    let _ = s
        .full_tsc
        .compare_exchange(0, clock::tsc(), Ordering::Relaxed, Ordering::Relaxed);
}

/// Makes at least `end` bytes of the file exist and be mapped.
/// Without `populate`, pages are left to fault in (the helper thread
/// pre-faults them for writing).
pub(crate) fn grow(s: &Session, end: usize, populate: bool) -> bool {
    // With the program's asynchronous signals blocked while the lock is
    // held: a handler that interrupted a traced thread here and left with
    // `siglongjmp` would keep the lock forever (see [`abandoned`]).
    if end <= s.mapped.load(Ordering::Acquire) {
        return true;
    }
    procinfo::with_async_signals_blocked(|| grow_locked(s, end, populate))
}

fn grow_locked(s: &Session, end: usize, populate: bool) -> bool {
    let _g = s.grow_lock.lock().unwrap_or_else(|e| e.into_inner());
    let mapped = s.mapped.load(Ordering::Acquire);
    if end <= mapped {
        return true;
    }
    if s.finished.load(Ordering::Acquire) {
        return false;
    }
    // Start small (short runs should not pay for allocating and then
    // truncating megabytes), then double up to large steps.
    let step = mapped.clamp(FIRST_GROW, GROW_STEP);
    let mut new_len = (end.max(mapped + step)).min(s.reserved);
    if new_len < end {
        return false;
    }
    // Not past the process's file size limit: the kernel would refuse
    // and send SIGXFSZ, which kills the program by default (and, raised
    // by the helper thread, goes to whichever thread does not block it).
    if let Some(limit) = fsize_limit()
        && new_len as u64 > limit
    {
        // Whole chunks only (the file ends at a chunk boundary).
        let h = HEADER_SIZE as usize;
        let cap = match (limit as usize).checked_sub(h) {
            Some(room) => h + room / s.chunk_size * s.chunk_size,
            None => 0,
        };
        if cap < end {
            s.fsize_limit.store(limit.max(1), Ordering::Relaxed);
            return false;
        }
        new_len = cap;
    }
    let Some(fd) = s.fd.get() else {
        return false;
    };
    // SAFETY: plain system calls on our own descriptor; the mapping goes
    // exactly over the reserved, not yet file-backed range
    // [base+mapped, base+new_len), which no one else uses.
    unsafe {
        // Reserve disk blocks first: a store into a hole of a full disk
        // would be SIGBUS, an error here is just "no space".
        if !extend(s, fd, mapped, new_len) {
            return false;
        }
        let p = libc::mmap(
            s.base.add(mapped) as *mut libc::c_void,
            new_len - mapped,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED | libc::MAP_FIXED | if populate { libc::MAP_POPULATE } else { 0 },
            fd,
            mapped as i64,
        );
        if p == libc::MAP_FAILED {
            return false;
        }
    }
    s.mapped.store(new_len, Ordering::Release);
    true
}

/// The process's file size limit (`RLIMIT_FSIZE`), if it has one.
fn fsize_limit() -> Option<u64> {
    let mut rl = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes the struct it is given.
    let ok = unsafe { libc::getrlimit(libc::RLIMIT_FSIZE, &mut rl) } == 0;
    (ok && rl.rlim_cur != libc::RLIM_INFINITY).then_some(rl.rlim_cur)
}

/// Makes the file `new_len` bytes long (from `mapped`), with its blocks
/// allocated where the file system can. Past the process's file size
/// limit (`RLIMIT_FSIZE`, which [`grow_locked`] stays under; the program
/// may lower it meanwhile) the kernel refuses (EFBIG) and sends SIGXFSZ,
/// whose default action would kill the program: the signal is held back
/// around the calls and the one they raised taken back when it came to
/// this thread, and the limit is noted for the trace's summary; the trace
/// then ends as if the disk were full.
///
/// # Safety
/// `fd` is the session's open trace file.
unsafe fn extend(s: &Session, fd: libc::c_int, mapped: usize, new_len: usize) -> bool {
    // SAFETY: signal sets are plain data initialised by sigemptyset /
    // sigpending / pthread_sigmask before use; the calls work on the
    // calling thread's own mask and on our descriptor.
    unsafe {
        let mut xfsz: libc::sigset_t = core::mem::zeroed();
        libc::sigemptyset(&mut xfsz);
        libc::sigaddset(&mut xfsz, libc::SIGXFSZ);
        let mut old: libc::sigset_t = core::mem::zeroed();
        libc::pthread_sigmask(libc::SIG_BLOCK, &xfsz, &mut old);
        let mut pending: libc::sigset_t = core::mem::zeroed();
        libc::sigpending(&mut pending);
        let was_pending = libc::sigismember(&pending, libc::SIGXFSZ) == 1;
        let mut ok = libc::fallocate(fd, 0, mapped as i64, (new_len - mapped) as i64) == 0;
        let mut e = if ok { 0 } else { *libc::__errno_location() };
        if !ok && e == libc::EOPNOTSUPP {
            ok = libc::ftruncate(fd, new_len as i64) == 0;
            e = if ok { 0 } else { *libc::__errno_location() };
        }
        if e == libc::EFBIG {
            if !was_pending {
                let zero = libc::timespec {
                    tv_sec: 0,
                    tv_nsec: 0,
                };
                libc::sigtimedwait(&xfsz, core::ptr::null_mut(), &zero);
            }
            let mut rl = libc::rlimit {
                rlim_cur: 0,
                rlim_max: 0,
            };
            libc::getrlimit(libc::RLIMIT_FSIZE, &mut rl);
            s.fsize_limit.store(rl.rlim_cur.max(1), Ordering::Relaxed);
        }
        libc::pthread_sigmask(libc::SIG_SETMASK, &old, core::ptr::null_mut());
        ok
    }
}

/// Seals a chunk: payload length, CRC, then the sealed flag.
pub(crate) fn seal(cur: &Cursor) {
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

pub(crate) fn write_meta(s: &Session, rec: &Framed<'_>) {
    // Signals blocked while the lock is held, as in [`grow`].
    procinfo::with_async_signals_blocked(|| {
        let mut m = s.meta.lock().unwrap_or_else(|e| e.into_inner());
        if m.chunk.is_null() && !claim_chunk(s, &mut m, META_TID, 0) {
            return;
        }
        write_framed(s, &mut m, META_TID, 0, false, |_| *rec);
    })
}

/// Writes the framed record `make(delta)` on the calling thread's stream
/// (see [`write_framed`]); the thread must be attached and hold `busy`.
pub(crate) fn write_record<'a>(
    t: &mut ThreadState,
    timed: bool,
    make: impl Fn(u64) -> Framed<'a>,
) -> bool {
    if pending::any(t) {
        // Arguments and return values of a held-back call wait with it;
        // anything else keeps the calls it happened in.
        match make(0) {
            Framed::Args { values } if pending::keep_args(t, values) => return true,
            Framed::RetVal { value } if pending::keep_retval(t, value) => return true,
            _ => pending::flush(t),
        }
    }
    // SAFETY: only called by an attached thread, whose session pointer is
    // set; sessions are leaked.
    let s = unsafe { &*t.session_ptr };
    write_framed(s, &mut t.cur, t.tid, t.depth, timed, make)
}

/// Writes `rec` to the metadata stream of the session the calling thread
/// is attached to.
pub(crate) fn write_thread_meta(t: &ThreadState, rec: &Framed<'_>) {
    // SAFETY: only called by an attached thread; sessions are leaked.
    let s = unsafe { &*t.session_ptr };
    write_meta(s, rec);
}
