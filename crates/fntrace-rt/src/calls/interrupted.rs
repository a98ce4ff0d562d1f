//! Signal handlers that leave the recorder for good: a `siglongjmp` (or
//! `longjmp`) out of a handler whose signal interrupted runtime code. That
//! code held the thread's `busy` flag and never gets to clear it, so the
//! thread would record nothing more. This module owns what is needed to
//! tell that case apart: the address range of the runtime's own code
//! (noted when a session starts, off any signal handler) and the search,
//! from inside a handler, for the signal frame the kernel pushed, whose
//! saved context says where the signal landed.
//!
//! The kernel's x86_64 signal frame (`struct rt_sigframe`) starts with the
//! return address of the handler, `sa_restorer` (glibc's `__restore_rt`,
//! which it sets for every handler installed through `sigaction`),
//! followed by the `ucontext_t` whose `uc_mcontext.gregs` hold the
//! interrupted `rip` and `rsp`. Everything here is async-signal-safe: no
//! allocation, no lock, only `sigaction` queries.

use core::sync::atomic::{AtomicU64, Ordering};

/// Start of the object holding the runtime's code (0: not noted yet).
static TEXT_LO: AtomicU64 = AtomicU64::new(0);
/// End of that object.
static TEXT_HI: AtomicU64 = AtomicU64::new(0);
/// glibc's signal return trampoline, once found (0: not yet).
static RESTORER: AtomicU64 = AtomicU64::new(0);

/// `SA_RESTORER` (the x86_64 kernel ABI; not exported by every libc crate
/// version).
const SA_RESTORER: libc::c_int = 0x0400_0000;

/// Notes the address range of the object that holds this code (the
/// preload library, or the program when the runtime is linked in). Called
/// when a session starts; reads the loaded objects (allocates).
pub fn note_runtime_text() {
    if TEXT_HI.load(Ordering::Acquire) != 0 {
        return;
    }
    let here = note_runtime_text as *const () as u64;
    for (start, size, _, _) in crate::procinfo::loaded_objects() {
        if here >= start && here < start + size {
            TEXT_LO.store(start, Ordering::Relaxed);
            TEXT_HI.store(start + size, Ordering::Release);
            return;
        }
    }
}

/// The `sa_restorer` of the handlers installed through glibc (the return
/// address at the bottom of every signal frame), found by asking the
/// kernel for the actions of the signals; `None` if no handler has one.
fn restorer() -> Option<u64> {
    let r = RESTORER.load(Ordering::Relaxed);
    if r != 0 {
        return Some(r);
    }
    for sig in 1..=64 {
        if sig == libc::SIGKILL || sig == libc::SIGSTOP {
            continue;
        }
        // SAFETY: all-zero is a valid `sigaction`; a null new action only
        // reads the current one into `old` (async-signal-safe).
        let (ok, old) = unsafe {
            let mut old: libc::sigaction = core::mem::zeroed();
            (libc::sigaction(sig, core::ptr::null(), &mut old) == 0, old)
        };
        let handled = old.sa_sigaction != libc::SIG_DFL && old.sa_sigaction != libc::SIG_IGN;
        if ok && handled && old.sa_flags & SA_RESTORER != 0 {
            if let Some(f) = old.sa_restorer {
                let r = f as usize as u64;
                RESTORER.store(r, Ordering::Relaxed);
                return Some(r);
            }
        }
    }
    None
}

/// The stack pointer at which a signal interrupted runtime code, read from
/// the innermost signal frame found between `lo` and `hi` (the stack above
/// the running handler) whose saved `rip` lies in the runtime's code, or
/// failing that the innermost signal frame found at all (the runtime may
/// have been inside a libc function it called, or the vDSO); `None` if
/// there is none (or the runtime's range was never noted).
///
/// # Safety
/// `[lo, hi)` must be readable memory (the running thread's stack above
/// its current stack pointer, or its alternate signal stack).
pub unsafe fn runtime_interrupted_at(lo: u64, hi: u64) -> Option<u64> {
    let (tlo, thi) = (
        TEXT_LO.load(Ordering::Relaxed),
        TEXT_HI.load(Ordering::Acquire),
    );
    if thi == 0 {
        return None;
    }
    let r = restorer()?;
    // The return address, then `ucontext_t` up to the end of its general
    // registers.
    let need = 8 + core::mem::offset_of!(libc::ucontext_t, uc_mcontext) as u64 + 23 * 8;
    let mut innermost = None;
    let mut p = (lo + 7) & !7;
    while p + need <= hi {
        // SAFETY: `p` is 8-aligned and inside the readable range (caller).
        let w = unsafe { (p as *const u64).read() };
        if w == r {
            // SAFETY: the whole frame up to the registers lies in range.
            let uc = unsafe { &*((p + 8) as *const libc::ucontext_t) };
            let rip = uc.uc_mcontext.gregs[libc::REG_RIP as usize] as u64;
            let rsp = uc.uc_mcontext.gregs[libc::REG_RSP as usize] as u64;
            if rip >= tlo && rip < thi {
                return Some(rsp);
            }
            innermost.get_or_insert(rsp);
        }
        p += 8;
    }
    innermost
}
