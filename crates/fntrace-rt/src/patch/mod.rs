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
//!   `call rel32` written into a site can reach a trampoline anywhere;
//! - [`sites`]: classifying patchable entry sites (their NOP layouts, the
//!   rewrites one-byte NOP runs and hook calls need);
//! - [`got`]: redirecting calls to an imported function by rewriting GOT
//!   slots (a runtime loaded into a running process taking over the
//!   compiler hooks).
//!
//! A leaf: it imports nothing else of the runtime but the error type of
//! a bad pattern.
//!
//! Every change of code goes through [`LOCK`], so two patchers never write
//! the same bytes at once.

pub mod got;
pub mod int3;
pub mod sites;
pub mod stubs;
pub mod sync;
pub mod text;

use std::sync::Mutex;

use crate::config::PatternError;

/// Why code could not be patched or a selection not applied.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PatchError {
    /// A function pattern is not a valid regular expression.
    #[error(transparent)]
    Pattern(#[from] PatternError),
    /// The code cannot be changed (writable code forbidden, no room for
    /// stubs or wrappers near it, a registry full); the message names the
    /// code and the reason.
    #[error("{0}")]
    Code(String),
    /// compiler-rt's patching status (`XRayPatchingStatus`).
    #[error("XRay patching failed (status {0})")]
    Xray(i32),
    /// No patching runtime in this process (neither linked nor preloaded).
    #[error(
        "no fntrace patching runtime in this process: run it under `fntrace record`, or \
         enable the `compiler-hooks` feature"
    )]
    NoRuntime,
    /// The preloaded runtime reported a failure (its reason is on
    /// standard error).
    #[error("patching failed (see the message on standard error)")]
    Failed,
}

/// Held by whoever writes code (XRay, patchable sites, static keys).
pub static LOCK: Mutex<()> = Mutex::new(());

/// Takes [`LOCK`], ignoring poisoning (a panicking patcher leaves code in
/// a consistent state: every write is complete or not started).
pub fn lock() -> std::sync::MutexGuard<'static, ()> {
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}
