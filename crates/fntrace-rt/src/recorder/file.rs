//! The trace file of a session: creating and mapping it, its header and
//! the process metadata (command line, modules), finishing it (final
//! block, truncation), `msync`, and forgetting it in a forked child.

use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::ptr;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU32, AtomicU64, AtomicUsize, Ordering};

use fntrace_format::event::Framed;
use fntrace_format::layout::{
    DEFAULT_CHUNK_SIZE, FINAL_FLAG_CLEAN, FINAL_FLAG_EVENTS, FINAL_OFFSET, Final, HDR_FLAG_RING,
    HDR_FLAG_TSC_INVARIANT, HEADER_SIZE, Header, VERSION_MAJOR, VERSION_MINOR,
};

use super::helper::{self, Life};
use super::state::{Cursor, with_state};
use super::write::{close_thread, grow, seal, write_meta};
use super::{
    CALIBRATION_NS, CURRENT, LIFECYCLE, NEXT_ID, Options, REFINE_AFTER_NS, SESSION, Summary, UNINIT,
};
use crate::{clock, procinfo};

/// A recording session: its file, the reservation it is mapped into, the
/// chunk allocator and the metadata stream.
pub(crate) struct Session {
    pub(crate) id: u32,
    pub(crate) path: PathBuf,
    /// The trace file (checked before each use: the program may close
    /// or reuse descriptor numbers).
    pub(crate) fd: crate::ownfd::OwnFd,
    pub(crate) base: *mut u8,
    pub(crate) reserved: usize,
    pub(crate) chunk_size: usize,
    pub(crate) max_chunks: u64,
    /// Bytes of the file that exist and are mapped.
    pub(crate) mapped: AtomicUsize,
    pub(crate) next_chunk: AtomicU64,
    pub(crate) grow_lock: Mutex<()>,
    pub(crate) finished: AtomicBool,
    pub(crate) lost: AtomicU64,
    /// Of the events counted lost, the entries of calls deeper than the
    /// shadow stack holds (reported apart at the end).
    pub(crate) too_deep: AtomicU64,
    /// TSC at which the size limit first refused a chunk (0: never).
    pub(crate) full_tsc: AtomicU64,
    pub(crate) threads: AtomicU32,
    pub(crate) header: Header,
    /// The options the session was started with (for forked children).
    pub(crate) opts: Options,
    pub(crate) meta: Mutex<Cursor>,
    /// Modules already described (start, size, hash of path and build id).
    pub(crate) modules: Mutex<Vec<(u64, u64, u64)>>,
    /// Chunks the helper thread keeps ready ahead of the writers (0: no
    /// helper thread).
    pub(crate) buffer_chunks: u64,
    /// Flight recorder: chunks in the ring (0: not a ring).
    pub(crate) ring_chunks: u64,
    /// Ring slot owners (`helper::SLOT_*`), one per ring chunk.
    pub(crate) owner: Box<[AtomicU8]>,
    /// The helper thread's bookkeeping.
    pub(crate) life: Mutex<Life>,
    /// The helper thread was started (see [`start_helper`]).
    pub(crate) helper_started: AtomicBool,
    /// The file could not grow past the process's file size limit
    /// (`RLIMIT_FSIZE`): its value in bytes (0: not reached).
    pub(crate) fsize_limit: AtomicU64,
    /// Per thread id, the sequence number its stream goes on with, plus
    /// one (0: the id has no stream yet): see [`Session::first_seq`].
    /// Reserved at the first thread end (`MAP_NORESERVE`: only the pages
    /// of ids in use cost memory).
    pub(crate) stream_seqs: core::sync::atomic::AtomicPtr<AtomicU32>,
}

/// Thread ids the stream-sequence table covers (the kernel's largest
/// `pid_max`).
const MAX_TIDS: usize = 1 << 22;

impl Session {
    /// The sequence number of a new stream's first chunk for thread id
    /// `tid`: 0, or, when a thread that ended earlier in this session had
    /// the same id (the kernel reuses ids: a program that starts more
    /// threads over its life than `pid_max` allows at once), the number
    /// after that thread's last chunk, so that the new thread's stream
    /// goes on from the old one's (a reader keys streams by thread id; a
    /// second chunk 0 was dropped as a duplicate, with every event of the
    /// new thread).
    pub(crate) fn first_seq(&self, tid: u32) -> u32 {
        let t = self.stream_seqs.load(Ordering::Acquire);
        if t.is_null() || tid as usize >= MAX_TIDS {
            return 0;
        }
        // SAFETY: the table has MAX_TIDS entries, mapped for the session's
        // life.
        unsafe {
            (*t.add(tid as usize))
                .load(Ordering::Relaxed)
                .saturating_sub(1)
        }
    }

    /// Thread `tid`'s stream ended with chunk `seq`: a later thread with
    /// the same id goes on at `seq + 1`.
    pub(crate) fn note_stream_end(&self, tid: u32, seq: u32) {
        if tid as usize >= MAX_TIDS {
            return;
        }
        let mut t = self.stream_seqs.load(Ordering::Acquire);
        if t.is_null() {
            // SAFETY: an anonymous private mapping at a kernel-chosen
            // address; zero-filled, and all-zero is "no stream".
            let p = unsafe {
                libc::mmap(
                    ptr::null_mut(),
                    MAX_TIDS * 4,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                    -1,
                    0,
                )
            };
            if p == libc::MAP_FAILED {
                return;
            }
            match self.stream_seqs.compare_exchange(
                ptr::null_mut(),
                p.cast(),
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => t = p.cast(),
                Err(other) => {
                    // SAFETY: our own mapping, never shared.
                    unsafe { libc::munmap(p, MAX_TIDS * 4) };
                    t = other;
                }
            }
        }
        // SAFETY: as in `first_seq`.
        unsafe { (*t.add(tid as usize)).store(seq.saturating_add(2), Ordering::Relaxed) };
    }
}

// SAFETY: the raw pointers in `Session` point into a mapping that lives as
// long as the process; shared mutable state is atomic or behind a Mutex.
unsafe impl Sync for Session {}
// SAFETY: as above; nothing in `Session` is tied to the creating thread.
unsafe impl Send for Session {}
// SAFETY: a Cursor is only used under the `meta` Mutex or by its thread.
unsafe impl Send for Cursor {}

// ---------------------------------------------------------------------------
// Session life cycle.

/// Starts recording into a new trace file. Fails if a session is already
/// active or the file cannot be created and mapped. (`session::start`
/// is the public entry: it also installs the process hooks.)
pub(crate) fn start(opts: &Options) -> io::Result<PathBuf> {
    let _l = LIFECYCLE.lock().unwrap_or_else(|e| e.into_inner());
    start_locked(opts)
}

/// Starts the helper thread of the active session, once. `session` calls
/// it after the code is patched: a thread of our own running while sites
/// are patched would keep one-byte NOP runs from being rewritten.
pub(crate) fn start_helper() {
    let _l = LIFECYCLE.lock().unwrap_or_else(|e| e.into_inner());
    let p = CURRENT.load(Ordering::Acquire);
    let sid = SESSION.load(Ordering::Acquire);
    if p.is_null() || sid == 0 || sid == UNINIT {
        return;
    }
    // SAFETY: sessions are leaked.
    let s: &'static Session = unsafe { &*p };
    if !s.helper_started.swap(true, Ordering::AcqRel) {
        helper::spawn(s);
    }
}

/// Creates, describes and publishes a session; the caller holds
/// `LIFECYCLE`.
pub(crate) fn start_locked(opts: &Options) -> io::Result<PathBuf> {
    let cur = SESSION.load(Ordering::Acquire);
    if cur != 0 && cur != UNINIT {
        return Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            "fntrace: a recording is already active",
        ));
    }
    let s: &'static Session = Box::leak(Box::new(create_session(opts)?));
    super::pending::set_threshold(opts.time_filter_ns, s.header.tsc_hz, opts.fn_threshold);
    write_process_metadata(s);
    CURRENT.store(s as *const Session as *mut Session, Ordering::Release);
    SESSION.store(s.id, Ordering::Release);
    Ok(s.path.clone())
}

pub(crate) fn open_trace(path: &Path, exclusive: bool) -> io::Result<(libc::c_int, PathBuf)> {
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
    // Never truncate a trace in exclusive mode: `PATH`, else `PATH.PID`
    // (a forked child's own name already ends with its pid), else
    // `PATH.PID.1`, `.2`, ... An image `exec`'d by a process that already
    // wrote `PATH.PID` (a forked child, or an earlier `exec`) keeps it.
    match open(path, true) {
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        r => return r.map(|fd| (fd, path.to_path_buf())),
    }
    let pid = format!(".{}", std::process::id());
    let mut base = path.as_os_str().to_owned();
    if !base.as_bytes().ends_with(pid.as_bytes()) {
        base.push(&pid);
        let p = PathBuf::from(&base);
        match open(&p, true) {
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            r => return r.map(|fd| (fd, p)),
        }
    }
    for n in 1..=MAX_EXEC_FILES {
        let mut p = base.clone();
        p.push(format!(".{n}"));
        let p = PathBuf::from(p);
        match open(&p, true) {
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            r => return r.map(|fd| (fd, p)),
        }
    }
    Err(io::Error::new(
        io::ErrorKind::AlreadyExists,
        format!("{}{pid}.1 to .{MAX_EXEC_FILES} all exist", path.display()),
    ))
}

/// Smallest ring, in chunks (metadata, and room for threads' open chunks
/// besides the ones being overwritten).
const MIN_RING_CHUNKS: u64 = 8;

/// How many `PATH.PID.N` files one process id may write (successive
/// `exec`s of one process).
const MAX_EXEC_FILES: u32 = 10_000;

pub(crate) fn create_session(opts: &Options) -> io::Result<Session> {
    let with_path =
        |e: io::Error| io::Error::new(e.kind(), format!("{}: {e}", opts.path.display()));
    let (fd, path) = open_trace(&opts.path, opts.exclusive).map_err(with_path)?;
    let chunk_size = DEFAULT_CHUNK_SIZE as usize;
    let max = opts
        .max_size
        .max(HEADER_SIZE as u64 + 2 * chunk_size as u64);
    let mut max_chunks = (max - HEADER_SIZE as u64) / chunk_size as u64;
    // A ring needs room for the metadata and a few threads' open chunks.
    let ring_chunks = if opts.ring > 0 {
        (opts.ring.saturating_sub(HEADER_SIZE as u64) / chunk_size as u64).max(MIN_RING_CHUNKS)
    } else {
        0
    };
    if ring_chunks > 0 {
        max_chunks = ring_chunks;
    }
    let buffer_chunks = opts.buffer.div_ceil(chunk_size as u64).min(max_chunks);
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
    crate::diag::step("file-open");
    let tsc_hz = clock::calibrate(CALIBRATION_NS);
    crate::diag::step("calibrate");
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
        } | if ring_chunks > 0 { HDR_FLAG_RING } else { 0 },
        ring_chunks,
        tsc_hz,
        start_tsc,
        start_mono_ns,
        start_realtime_ns: clock::realtime_ns(),
        pid: std::process::id(),
    };
    let s = Session {
        id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
        fd: crate::ownfd::OwnFd::new(fd, &path),
        path,
        base: base as *mut u8,
        reserved,
        chunk_size,
        max_chunks,
        mapped: AtomicUsize::new(0),
        next_chunk: AtomicU64::new(0),
        grow_lock: Mutex::new(()),
        finished: AtomicBool::new(false),
        lost: AtomicU64::new(0),
        too_deep: AtomicU64::new(0),
        full_tsc: AtomicU64::new(0),
        threads: AtomicU32::new(0),
        header,
        opts: opts.clone(),
        meta: Mutex::new(Cursor::EMPTY),
        modules: Mutex::new(Vec::new()),
        buffer_chunks,
        ring_chunks,
        owner: (0..ring_chunks).map(|_| AtomicU8::new(0)).collect(),
        life: Mutex::new(Life::default()),
        helper_started: AtomicBool::new(false),
        stream_seqs: core::sync::atomic::AtomicPtr::new(ptr::null_mut()),
        fsize_limit: AtomicU64::new(0),
    };
    if !grow(&s, HEADER_SIZE as usize, true) {
        let e = io::Error::last_os_error();
        // SAFETY: closing our own descriptor.
        unsafe { libc::close(fd) };
        return Err(with_path(e));
    }
    // The first growth was populated: the helper starts ahead of those
    // chunks (a short run never makes it grow or fault anything).
    let mut s = s;
    let mut populated =
        ((s.mapped.load(Ordering::Acquire) - HEADER_SIZE as usize) / chunk_size) as u64;
    if ring_chunks > 0 {
        populated = populated.min(ring_chunks);
    }
    s.life.get_mut().unwrap_or_else(|e| e.into_inner()).ready = populated;
    let hb = s.header.encode();
    // SAFETY: the header page is mapped and file-backed (grow above).
    unsafe { ptr::copy_nonoverlapping(hb.as_ptr(), s.base, hb.len()) };
    Ok(s)
}

pub(crate) fn write_process_metadata(s: &Session) {
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
    for (key, value) in &s.opts.settings {
        write_meta(
            s,
            &Framed::Setting {
                key: key.as_bytes(),
                value: value.as_bytes(),
            },
        );
    }
    write_modules(s);
}

pub(crate) fn write_modules(s: &Session) {
    let mut known = s.modules.lock().unwrap_or_else(|e| e.into_inner());
    procinfo::for_each_module(|m| {
        // A library loaded where an unloaded one was (`dlclose`, then
        // `dlopen` of another) is a new module: its path and build id are
        // part of what is known.
        let mut h = 0xcbf2_9ce4_8422_2325u64;
        for &b in m.path.iter().chain([0u8].iter()).chain(m.build_id.iter()) {
            h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
        if known.contains(&(m.start, m.size, h)) {
            return;
        }
        known.push((m.start, m.size, h));
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
/// Returns whether a session is active.
pub(crate) fn note_modules() -> bool {
    let _l = LIFECYCLE.lock().unwrap_or_else(|e| e.into_inner());
    let p = CURRENT.load(Ordering::Acquire);
    let sid = SESSION.load(Ordering::Acquire);
    if p.is_null() || sid == 0 || sid == UNINIT {
        return false;
    }
    // SAFETY: sessions are leaked.
    write_modules(unsafe { &*p });
    true
}

/// Writes `rec` (metadata: [`Framed::Attach`], [`Framed::Detach`]) into
/// the active session; returns whether one is active.
pub(crate) fn note_meta(rec: &Framed<'_>) -> bool {
    let _l = LIFECYCLE.lock().unwrap_or_else(|e| e.into_inner());
    let p = CURRENT.load(Ordering::Acquire);
    let sid = SESSION.load(Ordering::Acquire);
    if p.is_null() || sid == 0 || sid == UNINIT {
        return false;
    }
    // SAFETY: sessions are leaked.
    write_meta(unsafe { &*p }, rec);
    true
}

/// Calls its argument with every counted arc (`from`, `to`, `count`).
pub(crate) type ArcSource<'a> = &'a dyn Fn(&mut dyn FnMut(u64, u64, u64));

/// Finishes the active session: writes the arcs `arcs` reports (counting
/// mode), closes the calling thread's stream (with a thread-exit record
/// if `process_exit`), writes the final block and truncates the file.
/// Other threads stop recording at their next event; their last chunks
/// stay unsealed (readers handle that).
pub(crate) fn finish(process_exit: bool, arcs: ArcSource<'_>) -> Option<Summary> {
    end(process_exit, arcs).map(complete)
}

/// A session whose recording ended ([`end`]) and whose file is not
/// complete yet ([`complete`]).
pub(crate) struct Ended {
    s: &'static Session,
}

/// Ends the active session's recording in one step (the first half of
/// [`finish`]): the arcs, the calling thread's stream, then no thread
/// records any more. The file is completed by [`complete`], which may
/// come later (a detaching runtime switches the code off in between).
pub(crate) fn end(process_exit: bool, arcs: ArcSource<'_>) -> Option<Ended> {
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
    arcs(&mut |from, to, count| {
        write_meta(s, &Framed::Arc { from, to, count });
    });
    with_state(|t| {
        if !t.busy && t.session == sid {
            t.busy = true;
            close_thread(s, t, process_exit);
            t.busy = false;
        }
    });
    let limit = s.fsize_limit.load(Ordering::Relaxed);
    if limit > 0 {
        let v = limit.to_string();
        write_meta(
            s,
            &Framed::Setting {
                key: fntrace_format::event::SETTING_FSIZE_LIMIT.as_bytes(),
                value: v.as_bytes(),
            },
        );
    }
    let deep = s.too_deep.load(Ordering::Relaxed);
    if deep > 0 {
        let v = deep.to_string();
        write_meta(
            s,
            &Framed::Setting {
                key: fntrace_format::event::SETTING_TOO_DEEP.as_bytes(),
                value: v.as_bytes(),
            },
        );
    }
    SESSION.store(0, Ordering::Release);
    Some(Ended { s })
}

/// Completes the file of a session whose recording [`end`]ed: the
/// metadata stream sealed, the event count (waiting for the helper's
/// pass), the final block, the file truncated to its chunks and closed.
pub(crate) fn complete(e: Ended) -> Summary {
    let _l = LIFECYCLE.lock().unwrap_or_else(|e| e.into_inner());
    let s = e.s;
    {
        let m = s.meta.lock().unwrap_or_else(|e| e.into_inner());
        seal(&m);
    }
    let (end_tsc, end_mono_ns) = clock::clock_pair();
    let h = &s.header;
    let measured = clock::hz_between((h.start_tsc, h.start_mono_ns), (end_tsc, end_mono_ns))
        .filter(|_| end_mono_ns - h.start_mono_ns >= REFINE_AFTER_NS);
    let (next, chunks) = {
        let _g = s.grow_lock.lock().unwrap_or_else(|e| e.into_inner());
        s.finished.store(true, Ordering::Release);
        let next = s.next_chunk.load(Ordering::Acquire);
        // The chunks handed out, but never past what the file holds: a
        // chunk counted but refused (the file size limit,
        // `RLIMIT_FSIZE`) was never added to it, and extending the file
        // past the limit would raise SIGXFSZ.
        let whole = (s.mapped.load(Ordering::Acquire) as u64).saturating_sub(HEADER_SIZE as u64)
            / s.chunk_size as u64;
        (next, next.min(s.max_chunks).min(whole))
    };
    let events = helper::finish_count(s, next);
    let fin = Final {
        flags: FINAL_FLAG_CLEAN
            | if events.is_some() {
                FINAL_FLAG_EVENTS
            } else {
                0
            },
        events: events.unwrap_or(0),
        overwritten: next - next.min(s.max_chunks),
        end_tsc,
        end_mono_ns,
        tsc_hz: measured.unwrap_or(h.tsc_hz),
        chunks,
        lost_events: s.lost.load(Ordering::Relaxed),
        full_tsc: s.full_tsc.load(Ordering::Relaxed),
    };
    let fb = fin.encode();
    let len = HEADER_SIZE as u64 + chunks * s.chunk_size as u64;
    // SAFETY: the header page is mapped; truncating to the chunks handed
    // out keeps every page a thread may still write to inside the file.
    unsafe {
        ptr::copy_nonoverlapping(fb.as_ptr(), s.base.add(FINAL_OFFSET), fb.len());
        if let Some(fd) = s.fd.get() {
            libc::ftruncate(fd, len as i64);
        }
        s.fd.close();
    }
    detach_mapping(s);
    Summary {
        path: s.path.clone(),
        bytes: len,
        threads: s.threads.load(Ordering::Relaxed),
        lost_events: fin.lost_events,
        full_tsc: fin.full_tsc,
        events,
        overwritten: fin.overwritten,
    }
}

/// Replaces a completed session's file mapping with anonymous memory:
/// the file's pages leave the process (a process attached to many times,
/// or one that keeps running after its recording ended, does not keep
/// every trace mapped), and a thread that was inside the event path when
/// the recording ended and stores one more event writes it to memory that
/// is thrown away, never into the completed file (a late store into a
/// chunk sealed since would break its checksum). Pages are allocated only
/// if such a store touches them. The rest of the address-space
/// reservation is given back.
fn detach_mapping(s: &Session) {
    let len = s.mapped.load(Ordering::Acquire);
    // SAFETY: [base, base+len) is this session's own file-backed mapping
    // inside its reservation; MAP_FIXED replaces it in one step with
    // readable and writable zero pages, so a late store by a thread still
    // holding a cursor into it stays valid. Sessions are leaked: nothing
    // frees this range afterwards.
    unsafe {
        libc::mmap(
            s.base as *mut libc::c_void,
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED | libc::MAP_NORESERVE,
            -1,
            0,
        );
    }
    if s.reserved > len {
        // SAFETY: the reservation past the mapped part was never handed
        // out, and `grow` refuses to map more once the session is
        // finished (checked under the same lock that set it), so no one
        // uses [base+len, base+reserved) any more.
        unsafe { libc::munmap(s.base.add(len) as *mut libc::c_void, s.reserved - len) };
    }
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

/// In a child just created by `fork`: forgets the parent's session (the
/// child shares its `MAP_SHARED` mapping and must never write to it) and
/// closes the parent's descriptor. Returns the parent's options when it
/// asked that forked children record into their own file.
pub(crate) fn forget_after_fork() -> Option<Options> {
    let p = CURRENT.load(Ordering::Acquire);
    let was = SESSION.load(Ordering::Acquire);
    SESSION.store(0, Ordering::Release);
    CURRENT.store(ptr::null_mut(), Ordering::Release);
    if p.is_null() || was == 0 || was == UNINIT {
        return None;
    }
    // SAFETY: sessions are leaked.
    let s: &'static Session = unsafe { &*p };
    // Closing the parent's descriptor in the child only (if the child
    // still has it).
    s.fd.close();
    s.opts.follow_fork.then(|| s.opts.clone())
}

/// [`start`] in a child just created by `fork`: `None` if the lock is
/// held (by a thread of the parent, which does not exist here).
pub(crate) fn start_after_fork(opts: &Options) -> Option<io::Result<PathBuf>> {
    let _l = LIFECYCLE.try_lock().ok()?;
    Some(start_locked(opts))
}
