//! A pure-Rust XRay runtime: finds the sleds of every loaded object,
//! patches them on and off while other threads run, and dispatches sled
//! events to a compiler-rt style handler or to the fntrace recorder.
//!
//! - [`sleds`]: `xray_instr_map` parsing and LLVM's function ids;
//! - [`patch`]: the object registry, trampoline stubs within ±2 GiB of each
//!   object, and the two-phase sled writes;
//! - [`tramp`]: the entry, exit, tail-exit and log-args trampolines and the
//!   dispatcher;
//! - [`api`]: the compiler-rt compatible C API (`__xray_patch` and
//!   friends).
//!
//! Ids: the main executable is object 0 and its function ids are LLVM's
//! (1-based, section order), as `llvm-xray extract` prints them; a shared
//! object `k` gets ids `(k << 24) | id`, as newer compiler-rt packs them.

pub mod sleds;

#[cfg(feature = "compiler-hooks")]
pub mod api;
#[cfg(feature = "compiler-hooks")]
pub mod patch;
#[cfg(feature = "compiler-hooks")]
pub mod tramp;
