//! The ptrace side of attaching: stopping every thread of a process,
//! calling a function in it on one borrowed thread, and letting go.
//!
//! - [`Stopped::all`] seizes every thread (`PTRACE_SEIZE`, which sends no
//!   signal the program could see) and interrupts it (`PTRACE_INTERRUPT`),
//!   reading `/proc/PID/task` again until no new thread appears; a signal
//!   that arrives meanwhile is kept and delivered when the thread is let go.
//! - [`Stopped::release_all_but`] lets every other thread go at once, so
//!   they are stopped only while we look at them, and so that none of them
//!   can hold a lock the borrowed thread waits for.
//! - [`Stopped::call`] runs `func(args...)` on the borrowed thread: its
//!   general registers and its whole extended state (x87/SSE/AVX, through
//!   `PTRACE_GETREGSET NT_X86_XSTATE`) are saved; the call gets a 16-byte
//!   aligned stack below the thread's red zone with its data copied there
//!   and a return address of 0, so that returning raises `SIGSEGV` at
//!   address 0, which ends the call; `orig_rax` is set to -1 so that the
//!   kernel does not treat the borrowed registers as an interrupted system
//!   call. Afterwards everything is put back, including an interrupted
//!   system call, which the kernel then restarts as if nothing happened.
//!   The wait for the call has one deadline, which signals arriving for
//!   the thread (delivered to it as they come) do not move, and a stop
//!   signal sent to fntrace shortens it to [`STOP_GRACE`].
//!
//! Every `unsafe` block here is a ptrace or wait system call on threads we
//! trace; none touches our own memory beyond the buffers passed.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::{Duration, Instant};

/// `NT_X86_XSTATE`: the regset of the extended processor state.
const NT_X86_XSTATE: libc::c_int = 0x202;

/// A thread stopped under ptrace.
struct Thread {
    tid: i32,
    /// A signal that arrived while stopping it, delivered when let go.
    pending: i32,
}

/// Why something failed, with what the user can do about it.
#[derive(Debug, thiserror::Error)]
pub enum PtraceError {
    /// `PTRACE_SEIZE` was refused.
    #[error("{0}")]
    Refused(String),
    /// The process (or the borrowed thread) went away.
    #[error("process {0} exited while fntrace was attaching")]
    Gone(i32),
    /// Another failure, described.
    #[error("{0}")]
    Other(String),
}

fn errno() -> io::Error {
    io::Error::last_os_error()
}

/// The threads of `pid`.
fn tids(pid: i32) -> Vec<i32> {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .collect()
}

/// Explains a refused `PTRACE_SEIZE` of `pid`.
fn refusal(pid: i32, e: &io::Error) -> PtraceError {
    let scope = std::fs::read_to_string("/proc/sys/kernel/yama/ptrace_scope")
        .ok()
        .and_then(|s| s.trim().parse::<u32>().ok());
    let why = match scope {
        Some(1) => "; Yama's ptrace_scope is 1: only a parent may trace its children, so run \
                    fntrace as root (or with CAP_SYS_PTRACE), or set \
                    /proc/sys/kernel/yama/ptrace_scope to 0"
            .to_string(),
        Some(2) => "; Yama's ptrace_scope is 2: only root (CAP_SYS_PTRACE) may attach".into(),
        Some(3) => {
            "; Yama's ptrace_scope is 3: attaching is disabled on this system until reboot".into()
        }
        _ => "; you may attach only to your own processes (or be root), and not to a process \
              that changed its credentials (setuid) or is not dumpable"
            .into(),
    };
    PtraceError::Refused(format!("cannot attach to process {pid}: {e}{why}"))
}

/// Every thread of one process, stopped.
pub struct Stopped {
    pid: i32,
    threads: Vec<Thread>,
}

/// Waits for the next stop of `tid`; returns the raw status.
/// `spin`: yield instead of sleeping for the first 2 ms (waiting for
/// stops, which need the threads to get a processor; not for calls, whose
/// thread would compete with us for one).
fn wait(tid: i32, timeout: Duration, spin: bool) -> io::Result<Option<i32>> {
    let start = Instant::now();
    loop {
        let mut status = 0;
        // SAFETY: waitpid on a thread we trace, with a valid status pointer.
        let r = unsafe { libc::waitpid(tid, &mut status, libc::__WALL | libc::WNOHANG) };
        if r == tid {
            return Ok(Some(status));
        }
        if r < 0 {
            return Err(errno());
        }
        let waited = start.elapsed();
        if waited > timeout {
            return Ok(None);
        }
        // The threads we wait for need a processor to reach their stop:
        // for the first 2 ms we only yield (a sleep's timer wake-up adds
        // 50-100 us per thread on a busy machine), then poll every 50 us.
        if spin && waited < Duration::from_millis(2) {
            std::thread::yield_now();
        } else {
            std::thread::sleep(Duration::from_micros(50));
        }
    }
}

impl Stopped {
    /// Seizes and stops every thread of `pid`.
    pub fn all(pid: i32) -> Result<Stopped, PtraceError> {
        let mut s = Stopped {
            pid,
            threads: vec![],
        };
        // Seize and interrupt every thread first, then wait for them all:
        // the threads stop in parallel, so the pause is the slowest
        // thread's, not the sum.
        loop {
            let first_new = s.threads.len();
            for tid in tids(pid) {
                if s.threads.iter().any(|t| t.tid == tid) {
                    continue;
                }
                // SAFETY: PTRACE_SEIZE takes no pointers.
                if unsafe { libc::ptrace(libc::PTRACE_SEIZE, tid, 0, 0) } != 0 {
                    let e = errno();
                    if e.raw_os_error() == Some(libc::ESRCH) {
                        continue; // the thread exited
                    }
                    s.release();
                    return Err(refusal(pid, &e));
                }
                // SAFETY: PTRACE_INTERRUPT takes no pointers.
                unsafe { libc::ptrace(libc::PTRACE_INTERRUPT, tid, 0, 0) };
                s.threads.push(Thread { tid, pending: 0 });
            }
            if s.threads.len() == first_new {
                break;
            }
            for k in first_new..s.threads.len() {
                if let Err(e) = s.wait_stop(k) {
                    s.release();
                    return Err(e);
                }
            }
            // A thread created before its creator stopped shows up in the
            // next listing.
        }
        s.threads.retain(|t| t.tid != 0);
        if s.threads.is_empty() {
            return Err(PtraceError::Gone(pid));
        }
        Ok(s)
    }

    /// Waits until thread `k` is in a ptrace stop (a signal arriving first
    /// is kept for later; a thread that exits is forgotten).
    fn wait_stop(&mut self, k: usize) -> Result<(), PtraceError> {
        let tid = self.threads[k].tid;
        loop {
            let status = match wait(tid, Duration::from_secs(5), true) {
                Ok(Some(s)) => s,
                Ok(None) => {
                    return Err(PtraceError::Other(format!(
                        "thread {tid} of process {} did not stop within 5 s",
                        self.pid
                    )));
                }
                Err(_) => {
                    self.threads[k].tid = 0;
                    return Ok(());
                }
            };
            if libc::WIFEXITED(status) || libc::WIFSIGNALED(status) {
                self.threads[k].tid = 0;
                return Ok(());
            }
            if libc::WIFSTOPPED(status) {
                if status >> 16 == libc::PTRACE_EVENT_STOP {
                    return Ok(());
                }
                // A signal-delivery stop: the thread is stopped; the
                // signal is delivered when we let it go.
                self.threads[k].pending = libc::WSTOPSIG(status);
                return Ok(());
            }
        }
    }

    /// The stopped threads.
    pub fn tids(&self) -> Vec<i32> {
        self.threads.iter().map(|t| t.tid).collect()
    }

    /// The general registers of `tid`.
    pub fn regs(&self, tid: i32) -> io::Result<libc::user_regs_struct> {
        // SAFETY: all-zero is a valid user_regs_struct (plain integers).
        let mut r: libc::user_regs_struct = unsafe { core::mem::zeroed() };
        // SAFETY: PTRACE_GETREGS writes one user_regs_struct into `r`.
        if unsafe { libc::ptrace(libc::PTRACE_GETREGS, tid, 0, &mut r as *mut _) } != 0 {
            return Err(errno());
        }
        Ok(r)
    }

    fn set_regs(&self, tid: i32, r: &libc::user_regs_struct) -> io::Result<()> {
        // SAFETY: PTRACE_SETREGS reads one user_regs_struct from `r`.
        if unsafe { libc::ptrace(libc::PTRACE_SETREGS, tid, 0, r as *const _) } != 0 {
            return Err(errno());
        }
        Ok(())
    }

    /// The extended state of `tid` (the bytes the kernel returned).
    fn xstate(&self, tid: i32) -> io::Result<Vec<u8>> {
        let mut buf = vec![0u8; 16 << 10];
        let mut iov = libc::iovec {
            iov_base: buf.as_mut_ptr().cast(),
            iov_len: buf.len(),
        };
        // SAFETY: the kernel writes at most `iov_len` bytes into `buf` and
        // stores the length it wrote in `iov_len`.
        if unsafe {
            libc::ptrace(
                libc::PTRACE_GETREGSET,
                tid,
                NT_X86_XSTATE,
                &mut iov as *mut _,
            )
        } != 0
        {
            return Err(errno());
        }
        buf.truncate(iov.iov_len);
        Ok(buf)
    }

    fn set_xstate(&self, tid: i32, x: &mut [u8]) -> io::Result<()> {
        let mut iov = libc::iovec {
            iov_base: x.as_mut_ptr().cast(),
            iov_len: x.len(),
        };
        // SAFETY: the kernel reads `iov_len` bytes from `x`.
        if unsafe {
            libc::ptrace(
                libc::PTRACE_SETREGSET,
                tid,
                NT_X86_XSTATE,
                &mut iov as *mut _,
            )
        } != 0
        {
            return Err(errno());
        }
        Ok(())
    }

    /// Lets thread `tid` go (with its pending signal) and forgets it.
    fn release_one(&mut self, tid: i32) {
        if let Some(k) = self.threads.iter().position(|t| t.tid == tid) {
            let t = self.threads.remove(k);
            // SAFETY: PTRACE_DETACH takes no pointers; the data argument is
            // the signal to deliver (0: none).
            unsafe { libc::ptrace(libc::PTRACE_DETACH, t.tid, 0, t.pending as libc::c_long) };
        }
    }

    /// Lets every thread but `keep` go.
    pub fn release_all_but(&mut self, keep: i32) {
        for tid in self.tids() {
            if tid != keep {
                self.release_one(tid);
            }
        }
    }

    /// Lets every thread go.
    pub fn release(&mut self) {
        for tid in self.tids() {
            self.release_one(tid);
        }
    }

    /// Writes `data` into the process at `addr`.
    pub fn write_mem(&self, addr: u64, data: &[u8]) -> io::Result<()> {
        let f = File::options()
            .read(true)
            .write(true)
            .open(format!("/proc/{}/mem", self.pid))?;
        f.write_all_at(data, addr)
    }

    /// Reads `n` bytes of the process at `addr`.
    pub fn read_mem(&self, addr: u64, n: usize) -> io::Result<Vec<u8>> {
        let f = File::open(format!("/proc/{}/mem", self.pid))?;
        let mut v = vec![0u8; n];
        f.read_exact_at(&mut v, addr)?;
        Ok(v)
    }

    /// Calls `func(args[0], args[1], ...)` on the stopped thread `tid`,
    /// with `data` copied onto its stack; `args` may refer to the copy as
    /// [`DATA`]. Returns `rax`. Waits at most `timeout` for the call, all
    /// told (signals the thread receives meanwhile do not extend it), and
    /// at most [`STOP_GRACE`] more once `stop` is non-zero (a signal asked
    /// fntrace to stop; it holds the signal's number).
    pub fn call(
        &mut self,
        tid: i32,
        func: u64,
        args: &[u64],
        data: &[u8],
        timeout: Duration,
        stop: &AtomicI32,
    ) -> Result<u64, PtraceError> {
        let deadline = Instant::now() + timeout;
        // When a stop signal was first seen, and until when the call may
        // still finish.
        let mut cut: Option<(i32, Instant)> = None;
        let other = |e: io::Error| PtraceError::Other(format!("thread {tid}: {e}"));
        let saved = self.regs(tid).map_err(other)?;
        let mut saved_x = self.xstate(tid).ok();
        // Below the red zone (128 bytes) and some margin, 16-byte aligned.
        let mut sp = (saved.rsp - 512) & !15;
        sp -= (data.len() as u64).div_ceil(16) * 16;
        let data_at = sp;
        self.write_mem(data_at, data).map_err(other)?;
        sp -= 8;
        self.write_mem(sp, &0u64.to_le_bytes()).map_err(other)?;
        let mut r = saved;
        r.rsp = sp;
        r.rip = func;
        r.rax = 0;
        r.orig_rax = u64::MAX;
        let regs = [
            &mut r.rdi, &mut r.rsi, &mut r.rdx, &mut r.rcx, &mut r.r8, &mut r.r9,
        ];
        for (slot, &a) in regs.into_iter().zip(args) {
            *slot = if a == DATA { data_at } else { a };
        }
        self.set_regs(tid, &r).map_err(other)?;
        let mut deliver = 0;
        let result = loop {
            // SAFETY: PTRACE_CONT takes no pointers; data is the signal.
            if unsafe { libc::ptrace(libc::PTRACE_CONT, tid, 0, deliver as libc::c_long) } != 0 {
                break Err(PtraceError::Gone(self.pid));
            }
            deliver = 0;
            // One deadline for the whole call, checked between short waits
            // and after every stop (a periodic signal stops the thread
            // more often than any wait lasts).
            let status = loop {
                let now = Instant::now();
                let sig = stop.load(Ordering::Relaxed);
                if sig != 0 && cut.is_none() {
                    cut = Some((sig, now + STOP_GRACE));
                }
                if let Some((sig, until)) = cut
                    && now >= until
                {
                    break Err(PtraceError::Other(format!(
                        "the call into process {} did not return within {} s after fntrace was \
                         asked to stop (signal {sig}) (thread {tid} may be waiting for a lock); \
                         the process was left as it is",
                        self.pid,
                        STOP_GRACE.as_secs()
                    )));
                }
                if now >= deadline {
                    break Err(PtraceError::Other(format!(
                        "the call into process {} did not return within {} s (thread {tid} \
                         may be waiting for a lock); the process was left as it is",
                        self.pid,
                        timeout.as_secs()
                    )));
                }
                let left = match cut {
                    Some((_, until)) => until.min(deadline),
                    None => deadline,
                } - now;
                match wait(tid, left.min(Duration::from_millis(20)), false) {
                    Ok(Some(s)) => break Ok(s),
                    Ok(None) => {}
                    Err(_) => break Err(PtraceError::Gone(self.pid)),
                }
            };
            let status = match status {
                Ok(s) => s,
                Err(e) => break Err(e),
            };
            if libc::WIFEXITED(status) || libc::WIFSIGNALED(status) {
                break Err(PtraceError::Gone(self.pid));
            }
            if !libc::WIFSTOPPED(status) || status >> 16 == libc::PTRACE_EVENT_STOP {
                continue;
            }
            let sig = libc::WSTOPSIG(status);
            let now = self.regs(tid).map_err(other)?;
            if sig == libc::SIGSEGV && now.rip == 0 {
                break Ok(now.rax);
            }
            if sig == libc::SIGSEGV || sig == libc::SIGBUS || sig == libc::SIGILL {
                break Err(PtraceError::Other(format!(
                    "the call into process {} faulted (signal {sig} at {:#x}); its registers \
                     were put back",
                    self.pid, now.rip
                )));
            }
            // Another signal for the program: deliver it (its handler runs
            // on top of our call and returns into it).
            deliver = sig;
        };
        if matches!(result, Err(PtraceError::Gone(_))) {
            return result;
        }
        if matches!(&result, Err(PtraceError::Other(m)) if m.contains("did not return")) {
            return result;
        }
        self.set_regs(tid, &saved).map_err(other)?;
        if let Some(x) = saved_x.as_mut() {
            let _ = self.set_xstate(tid, x);
        }
        result
    }
}

/// How long [`Stopped::call`] still waits for the call to return once
/// fntrace was asked to stop (a call that returns leaves the thread as it
/// was; one abandoned may hold a lock or return into nothing).
pub const STOP_GRACE: Duration = Duration::from_secs(1);

/// In [`Stopped::call`]'s `args`: the address of the copied data.
pub const DATA: u64 = u64::MAX - 0xfff;

impl Drop for Stopped {
    fn drop(&mut self) {
        self.release();
    }
}
