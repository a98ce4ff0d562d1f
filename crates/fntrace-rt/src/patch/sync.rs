//! Serialising every thread's instruction stream after code changed.
//!
//! Cross-modifying code on x86 requires each other core to execute a
//! serialising instruction before it runs the new bytes.
//! `membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED_SYNC_CORE)` (Linux 4.16+,
//! after the process registered for it) does that for every thread of the
//! process. Where it is unavailable, an `mprotect` of a code page forces a
//! TLB shoot-down interrupt on every core running the process, and the
//! return from that interrupt serialises too.

use std::sync::OnceLock;
use std::sync::atomic::Ordering;

const MEMBARRIER_CMD_PRIVATE_EXPEDITED_SYNC_CORE: libc::c_long = 1 << 5;
const MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED_SYNC_CORE: libc::c_long = 1 << 6;

/// Whether the process registered for the core-serialising membarrier
/// (set once; callers that arrive while it registers wait for it).
static STATE: OnceLock<bool> = OnceLock::new();

/// Whether the expedited core-serialising membarrier is available (and
/// registers the process for it the first time). In a process with more
/// than one thread, registering waits for an RCU grace period (6–16 ms
/// measured here): a runtime attaching to a running program registers on
/// a thread of its own while it does other work ([`register_early`]).
pub fn available() -> bool {
    *STATE.get_or_init(|| {
        // SAFETY: plain system call with integer arguments.
        let r = unsafe {
            libc::syscall(
                libc::SYS_membarrier,
                MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED_SYNC_CORE,
                0,
                0,
            )
        };
        r == 0
    })
}

/// Registers for the membarrier on a short-lived thread of its own, so
/// that the wait overlaps the caller's work; the first [`serialize_all`]
/// waits for it if it has not finished. Falls back to registering at the
/// first use if no thread can be made.
pub fn register_early() {
    if STATE.get().is_some() {
        return;
    }
    let _ = crate::procinfo::with_async_signals_blocked(|| {
        std::thread::Builder::new()
            .name("fntrace-membar".into())
            .stack_size(64 << 10)
            .spawn(|| {
                available();
            })
    });
}

/// Makes every thread of the process execute a serialising instruction
/// before it runs user code again. `page` is a code page the caller has
/// made writable (used by the fallback; it is left writable).
pub fn serialize_all(page: u64) {
    if available() {
        // SAFETY: plain system call; the process registered above.
        let r = unsafe {
            libc::syscall(
                libc::SYS_membarrier,
                MEMBARRIER_CMD_PRIVATE_EXPEDITED_SYNC_CORE,
                0,
                0,
            )
        };
        if r == 0 {
            return;
        }
    }
    let page = page & !4095;
    // SAFETY: toggles a page the caller already made writable code back to
    // read + execute and then writable again; the shoot-down interrupts
    // are the point.
    unsafe {
        libc::mprotect(
            page as *mut libc::c_void,
            4096,
            libc::PROT_READ | libc::PROT_EXEC,
        );
        libc::mprotect(
            page as *mut libc::c_void,
            4096,
            libc::PROT_READ | libc::PROT_WRITE | libc::PROT_EXEC,
        );
    }
    core::sync::atomic::fence(Ordering::SeqCst);
}
