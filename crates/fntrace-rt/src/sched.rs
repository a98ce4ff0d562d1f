//! Off-CPU intervals (`fntrace record --sched`): when each thread of the
//! process was switched off a CPU and back on, from the kernel's
//! context-switch records, written into the trace's metadata stream.
//!
//! How: one `perf_event_open` software event (`PERF_COUNT_SW_DUMMY`, which
//! counts nothing and needs no hardware counter) per (thread that exists at
//! start, CPU), with `context_switch = 1`, `inherit = 1` (threads created
//! later by those threads are followed; their records go to the same
//! per-CPU ring), `exclude_kernel`/`exclude_hv` (so that
//! `perf_event_paranoid` 2, a common default, allows it for the process's
//! own threads), `sample_id_all` with `TID | TIME`, and `use_clockid` =
//! `CLOCK_MONOTONIC`, the clock the trace header and every chunk header
//! pair with the TSC: readers place each interval on the thread's timeline
//! through that pair (`Trace::mono_to_tsc`). Per-task events with
//! `inherit` can only be mapped per CPU, hence one event per CPU.
//!
//! A helper thread (`fntrace-sched`; its own switches are left out) polls
//! the rings every 10 ms, pairs each thread's switch-out with its next
//! switch-in (in time order across the rings: a thread that blocks on one
//! CPU and wakes on another has its two records in different rings) and
//! writes one off-CPU record (thread, out, length, preempted
//! or blocked) per interval. Nothing runs on the traced threads' event
//! path. At the end ([`stop`]: process exit, `fntrace::stop`, detach) the
//! rings are drained; a thread still off CPU then gets an interval up to
//! that moment. Records the kernel dropped (a full ring) are counted and
//! reported on standard error.
//!
//! Permissions: the process's own threads, user-space only, which
//! `kernel.perf_event_paranoid` ≤ 2 allows (3 and Debian's 4 forbid
//! `perf_event_open` to unprivileged users; `CAP_PERFMON` or
//! `CAP_SYS_ADMIN` override it). When the kernel refuses (also in
//! containers whose seccomp policy blocks the system call), a one-line
//! warning says why and the recording continues without off-CPU time.

use crate::ownfd::FdId;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

const PERF_TYPE_SOFTWARE: u32 = 1;
const PERF_COUNT_SW_DUMMY: u64 = 9;
const PERF_SAMPLE_TID: u64 = 1 << 1;
const PERF_SAMPLE_TIME: u64 = 1 << 2;
const PERF_RECORD_LOST: u32 = 2;
const PERF_RECORD_SWITCH: u32 = 14;
const PERF_RECORD_MISC_SWITCH_OUT: u16 = 1 << 13;
const PERF_RECORD_MISC_SWITCH_OUT_PREEMPT: u16 = 1 << 14;
const PERF_FLAG_FD_CLOEXEC: libc::c_ulong = 1 << 3;
/// Data pages per ring (plus the control page): 512 KiB, about 20,000
/// switch records, drained every 10 ms.
const RING_PAGES: usize = 128;

/// The 128-byte `perf_event_attr` (version 7 layout) for our event.
fn attr() -> [u8; 128] {
    let mut a = [0u8; 128];
    let put32 =
        |a: &mut [u8; 128], at: usize, v: u32| a[at..at + 4].copy_from_slice(&v.to_le_bytes());
    let put64 =
        |a: &mut [u8; 128], at: usize, v: u64| a[at..at + 8].copy_from_slice(&v.to_le_bytes());
    put32(&mut a, 0, PERF_TYPE_SOFTWARE);
    put32(&mut a, 4, 128);
    put64(&mut a, 8, PERF_COUNT_SW_DUMMY);
    put64(&mut a, 24, PERF_SAMPLE_TID | PERF_SAMPLE_TIME);
    // Flag bits: inherit 1, exclude_kernel 5, exclude_hv 6,
    // sample_id_all 18, use_clockid 25, context_switch 26.
    let flags: u64 = (1 << 1) | (1 << 5) | (1 << 6) | (1 << 18) | (1 << 25) | (1 << 26);
    put64(&mut a, 40, flags);
    put32(&mut a, 92, libc::CLOCK_MONOTONIC as u32);
    a
}

/// One per-CPU ring.
struct Ring {
    fd: libc::c_int,
    /// What `fd` was opened on: the program may close or reuse the number
    /// (the mapping stays valid without it).
    id: Option<FdId>,
    base: *mut u8,
    len: usize,
}

// SAFETY: the mapping is only used by whoever holds the `Rings` (the
// helper thread, then `stop` after joining it).
unsafe impl Send for Ring {}

impl Ring {
    fn open(tid: libc::pid_t, cpu: libc::c_int) -> std::io::Result<Ring> {
        let a = attr();
        // SAFETY: a valid attribute block of the size it declares.
        let fd = unsafe {
            libc::syscall(
                libc::SYS_perf_event_open,
                a.as_ptr(),
                tid,
                cpu,
                -1 as libc::c_int,
                PERF_FLAG_FD_CLOEXEC,
            )
        } as libc::c_int;
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // Out of the way of the program's own descriptor numbers.
        let fd = crate::ownfd::park(fd);
        let len = (RING_PAGES + 1) * 4096;
        // SAFETY: mapping the event's ring as the perf ABI describes.
        let p = unsafe {
            libc::mmap(
                core::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            let e = std::io::Error::last_os_error();
            // SAFETY: our own descriptor.
            unsafe { libc::close(fd) };
            return Err(e);
        }
        Ok(Ring {
            fd,
            id: crate::ownfd::identity_of(fd),
            base: p.cast(),
            len,
        })
    }

    /// Calls `f(type, misc, body)` for every record written since the last
    /// drain and frees their space.
    fn drain(&mut self, f: &mut dyn FnMut(u32, u16, &[u8])) {
        // The control page: data_head at 1024, data_tail at 1032.
        // SAFETY: offsets of `perf_event_mmap_page` inside our mapping;
        // the kernel writes the head, we write the tail.
        let (head_p, tail_p) = unsafe {
            (
                &*(self.base.add(1024) as *const AtomicU64),
                &*(self.base.add(1032) as *const AtomicU64),
            )
        };
        let head = head_p.load(Ordering::Acquire);
        let mut tail = tail_p.load(Ordering::Relaxed);
        let size = (RING_PAGES * 4096) as u64;
        // SAFETY: the data area follows the control page.
        let data = unsafe { self.base.add(4096) };
        let mut rec = [0u8; 256];
        while tail < head {
            let mut hdr = [0u8; 8];
            for (i, b) in hdr.iter_mut().enumerate() {
                // SAFETY: inside the data area (offset mod size).
                *b = unsafe { *data.add(((tail + i as u64) % size) as usize) };
            }
            let typ = u32::from_le_bytes(hdr[0..4].try_into().unwrap_or_default());
            let misc = u16::from_le_bytes(hdr[4..6].try_into().unwrap_or_default());
            let sz = u16::from_le_bytes(hdr[6..8].try_into().unwrap_or_default()) as u64;
            if sz < 8 || tail + sz > head {
                break;
            }
            let n = (sz as usize - 8).min(rec.len());
            for (i, b) in rec[..n].iter_mut().enumerate() {
                // SAFETY: as above.
                *b = unsafe { *data.add(((tail + 8 + i as u64) % size) as usize) };
            }
            f(typ, misc, &rec[..n]);
            tail += sz;
        }
        tail_p.store(tail, Ordering::Release);
    }
}

impl Drop for Ring {
    fn drop(&mut self) {
        // SAFETY: our own mapping, used by nobody else now.
        unsafe { libc::munmap(self.base.cast(), self.len) };
        crate::ownfd::close_if_same(self.fd, self.id);
    }
}

/// How long after a context switch its record is surely in its ring: a
/// drain pairs only records older than its start minus this.
const SETTLE_NS: u64 = 2_000_000;

/// What one switch record says.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Switch {
    /// Switched back onto a CPU.
    In,
    /// Switched out while runnable.
    Preempted,
    /// Switched out to wait.
    Blocked,
}

/// What the helper thread owns.
struct Collector {
    rings: Vec<Ring>,
    pid: u32,
    helper_tid: Arc<AtomicU64>,
    /// Threads switched out and not back in yet: tid → (time, preempted).
    out: HashMap<u32, (u64, bool)>,
    /// Switch records read but not paired yet (time, tid, what), kept
    /// until every ring has been read past their time.
    pending: Vec<(u64, u32, Switch)>,
    lost: u64,
    intervals: u64,
}

impl Collector {
    /// Reads every ring, then pairs switch-outs with switch-ins in time
    /// order across all rings: a thread that blocks on one CPU and wakes
    /// on another has its switch-out and switch-in in different rings, so
    /// pairing them in the order the rings happen to be read loses
    /// intervals (or joins two into one). Records newer than a moment just
    /// before this drain began wait for the next drain, since another
    /// ring's earlier record may not have been read yet; `last` (at stop)
    /// takes everything.
    fn drain(&mut self, last: bool) {
        let helper = self.helper_tid.load(Ordering::Relaxed) as u32;
        let watermark = crate::clock::monotonic_ns().saturating_sub(SETTLE_NS);
        let (pid, pending, lost) = (self.pid, &mut self.pending, &mut self.lost);
        for r in &mut self.rings {
            r.drain(&mut |typ, misc, body| {
                let u32_at = |o: usize| {
                    body.get(o..o + 4)
                        .map(|b| u32::from_le_bytes(b.try_into().unwrap_or_default()))
                };
                let u64_at = |o: usize| {
                    body.get(o..o + 8)
                        .map(|b| u64::from_le_bytes(b.try_into().unwrap_or_default()))
                };
                match typ {
                    PERF_RECORD_SWITCH => {
                        // sample_id: pid, tid, time.
                        let (Some(p), Some(tid), Some(time)) = (u32_at(0), u32_at(4), u64_at(8))
                        else {
                            return;
                        };
                        if p != pid || tid == helper {
                            return;
                        }
                        let kind = if misc & PERF_RECORD_MISC_SWITCH_OUT == 0 {
                            Switch::In
                        } else if misc & PERF_RECORD_MISC_SWITCH_OUT_PREEMPT != 0 {
                            Switch::Preempted
                        } else {
                            Switch::Blocked
                        };
                        pending.push((time, tid, kind));
                    }
                    PERF_RECORD_LOST => *lost += u64_at(8).unwrap_or(0),
                    _ => {}
                }
            });
        }
        // Stable: a thread's records from one ring keep their order when
        // two carry the same time.
        self.pending.sort_by_key(|&(time, _, _)| time);
        let ready = if last {
            self.pending.len()
        } else {
            self.pending
                .partition_point(|&(time, _, _)| time <= watermark)
        };
        for (time, tid, kind) in self.pending.drain(..ready) {
            match kind {
                Switch::In => {
                    if let Some((t0, pre)) = self.out.remove(&tid) {
                        crate::recorder::note_offcpu(tid, t0, time.max(t0), u64::from(pre));
                        self.intervals += 1;
                    }
                }
                Switch::Preempted | Switch::Blocked => {
                    self.out.insert(tid, (time, kind == Switch::Preempted));
                }
            }
        }
    }

    /// Closes the intervals of threads still off CPU at `now`.
    fn close_open(&mut self, now: u64) {
        for (tid, (t0, pre)) in self.out.drain() {
            crate::recorder::note_offcpu(tid, t0, now.max(t0), u64::from(pre));
        }
    }
}

struct Running {
    stop: Arc<AtomicBool>,
    helper: std::thread::JoinHandle<Collector>,
}

static RUNNING: Mutex<Option<Running>> = Mutex::new(None);

/// Why off-CPU recording could not start.
#[derive(Debug, thiserror::Error)]
#[error("--sched: perf_event_open: {source}{hint}; recording continues without off-CPU time")]
pub struct SchedError {
    source: std::io::Error,
    hint: String,
}

/// The CPUs the kernel may run our threads on (`/sys/.../possible`).
fn cpus() -> Vec<libc::c_int> {
    let s = std::fs::read_to_string("/sys/devices/system/cpu/possible").unwrap_or_default();
    let mut v = vec![];
    for part in s.trim().split(',') {
        let (a, b) = part.split_once('-').unwrap_or((part, part));
        if let (Ok(a), Ok(b)) = (a.parse::<libc::c_int>(), b.parse::<libc::c_int>()) {
            v.extend(a..=b.min(a + 4095));
        }
    }
    if v.is_empty() {
        // SAFETY: sysconf has no preconditions.
        let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_CONF) }.max(1);
        v.extend(0..n as libc::c_int);
    }
    v
}

/// Starts recording off-CPU intervals of every thread of the process (and
/// the threads they create). An error means nothing is recorded; the
/// caller reports it.
pub fn start() -> Result<(), SchedError> {
    // Not `lock`: in a forked child the lock may be held by a parent's
    // thread that does not exist here (then the child goes without).
    let mut g = match RUNNING.try_lock() {
        Ok(g) => g,
        Err(std::sync::TryLockError::Poisoned(e)) => e.into_inner(),
        Err(std::sync::TryLockError::WouldBlock) => return Ok(()),
    };
    if g.is_some() {
        return Ok(());
    }
    let mut rings = vec![];
    let tids: Vec<libc::pid_t> = std::fs::read_dir("/proc/self/task")
        .map(|d| {
            d.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default();
    let tids = if tids.is_empty() { vec![0] } else { tids };
    for &tid in &tids {
        for &cpu in &cpus() {
            match Ring::open(tid, cpu) {
                Ok(r) => rings.push(r),
                // A CPU that is possible but offline, a thread that ended.
                Err(e)
                    if matches!(
                        e.raw_os_error(),
                        Some(libc::ENODEV | libc::ESRCH | libc::EINVAL)
                    ) && !rings.is_empty() => {}
                Err(e) => {
                    let hint = match e.raw_os_error() {
                        Some(libc::EACCES | libc::EPERM) => {
                            let p = std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid")
                                .map(|s| s.trim().to_string())
                                .unwrap_or_else(|_| "?".into());
                            format!(
                                " (kernel.perf_event_paranoid is {p}; it must be 2 or lower, or the process needs CAP_PERFMON)"
                            )
                        }
                        Some(libc::ENOSYS) => " (the kernel or a seccomp policy forbids it)".into(),
                        _ => String::new(),
                    };
                    return Err(SchedError { source: e, hint });
                }
            }
        }
    }
    let stop = Arc::new(AtomicBool::new(false));
    let helper_tid = Arc::new(AtomicU64::new(0));
    let mut c = Collector {
        rings,
        // SAFETY: getpid cannot fail.
        pid: unsafe { libc::getpid() } as u32,
        helper_tid: helper_tid.clone(),
        out: HashMap::new(),
        pending: Vec::new(),
        lost: 0,
        intervals: 0,
    };
    let s2 = stop.clone();
    let helper = crate::procinfo::with_async_signals_blocked(|| {
        std::thread::Builder::new()
            .name("fntrace-sched".into())
            .spawn(move || {
                c.helper_tid
                    .store(u64::from(crate::procinfo::gettid()), Ordering::Relaxed);
                let mut fds: Vec<libc::pollfd> = c
                    .rings
                    .iter()
                    .map(|r| libc::pollfd {
                        fd: r.fd,
                        events: libc::POLLIN,
                        revents: 0,
                    })
                    .collect();
                while !s2.load(Ordering::Acquire) {
                    // SAFETY: a valid array of pollfd.
                    unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, 10) };
                    // A descriptor that can say no more would make every
                    // poll return at once (a busy loop whose CPU time, in
                    // a `-pg` program, also sends the profiling timer's
                    // SIGPROF into sleeping threads): leave it out (its
                    // ring is still mapped and drained). That is an event
                    // whose thread and every thread it made have ended
                    // (POLLHUP: a thread that existed at start and ended,
                    // such as a short-lived runtime thread or, after an
                    // attach, a program thread), a descriptor the program
                    // closed (POLLNVAL), or a number that is no longer
                    // ours.
                    for (p, r) in fds.iter_mut().zip(&c.rings) {
                        if p.fd >= 0
                            && p.revents != 0
                            && (p.revents & (libc::POLLNVAL | libc::POLLHUP | libc::POLLERR) != 0
                                || crate::ownfd::identity_of(p.fd) != r.id)
                        {
                            p.fd = -1;
                        }
                    }
                    if fds.iter().all(|p| p.fd < 0) {
                        std::thread::sleep(std::time::Duration::from_millis(10));
                    }
                    c.drain(false);
                }
                c
            })
    })
    .map_err(|e| SchedError {
        source: e,
        hint: " (cannot start its thread)".into(),
    })?;
    *g = Some(Running { stop, helper });
    Ok(())
}

/// Stops recording off-CPU intervals: the helper drains the rings one last
/// time, threads still off CPU get an interval up to now, the events are
/// closed. Call before the session finishes.
pub fn stop() {
    let Some(r) = RUNNING.lock().unwrap_or_else(|e| e.into_inner()).take() else {
        return;
    };
    r.stop.store(true, Ordering::Release);
    let Ok(mut c) = r.helper.join() else { return };
    c.drain(true);
    let now = crate::clock::clock_pair().1;
    c.close_open(now);
    if c.lost > 0 {
        crate::diag::diag!(
            "fntrace: --sched: the kernel dropped {} context-switch records (ring full); off-CPU time is incomplete",
            c.lost
        );
    }
}

/// In a forked child: the parent's helper does not exist here; forget it
/// (its events stay with the parent) so that [`start`] can start anew.
pub fn forget_after_fork() {
    if let Ok(mut g) = RUNNING.try_lock()
        && let Some(r) = g.take()
    {
        // The thread is gone: its handle must not be joined, its
        // collector's rings belong to the parent's events.
        core::mem::forget(r);
    }
}
