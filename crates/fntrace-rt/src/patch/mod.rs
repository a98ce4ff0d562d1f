//! Safe code patching, shared by every mechanism that rewrites code while
//! the program runs: XRay sleds, patchable function entries and marker
//! static keys.
//!
//! - [`text`]: writable windows over code pages (one `mprotect` per run of
//!   contiguous pages, read + execute restored on drop) and the atomic
//!   2-byte store;
//! - [`sync`]: serialising every thread's instruction stream
//!   (`membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED_SYNC_CORE)`);
//! - [`int3`]: the breakpoint protocol that changes a 5-byte instruction
//!   while other threads may execute it, and the `SIGTRAP` handler that
//!   steers threads that hit a half-written site;
//! - [`stubs`]: `jmp [rip]` stubs within ±2 GiB of patched code, so that a
//!   `call rel32` written into a site can reach a trampoline anywhere.
//!
//! Every change of code goes through [`LOCK`], so two patchers never write
//! the same bytes at once.

pub mod int3;
pub mod stubs;
pub mod sync;
pub mod text;

use std::sync::Mutex;

/// Held by whoever writes code (XRay, patchable sites, static keys).
pub static LOCK: Mutex<()> = Mutex::new(());

/// Takes [`LOCK`], ignoring poisoning (a panicking patcher leaves code in
/// a consistent state: every write is complete or not started).
pub fn lock() -> std::sync::MutexGuard<'static, ()> {
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}
