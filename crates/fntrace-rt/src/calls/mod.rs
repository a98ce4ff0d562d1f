//! The call protocol the mechanisms share, between policy and the
//! mechanisms: entries that push a shadow frame and exits that pop it
//! ([`entry`]), the exit trampoline and the trampolines of patched sites'
//! call wrappers ([`tramp`]), the call wrappers themselves ([`wrapper`]),
//! the assembly fast path every trampoline starts with ([`fast`]), and the
//! unwinder interposition that keeps exceptions, panics and backtraces
//! working while return addresses are hijacked ([`unwind`]), with the
//! search for the context a signal interrupted ([`interrupted`]), and the
//! shadow stack following user-level context switches ([`context`]).
//!
//! It exists so that the mechanisms (`hooks`, `xray`, `dynamic`) never
//! import each other: what more than one of them needs lives here.

#[cfg(feature = "compiler-hooks")]
pub mod context;
pub mod entry;
#[cfg(feature = "compiler-hooks")]
pub mod fast;
#[cfg(feature = "compiler-hooks")]
pub mod interrupted;
#[cfg(feature = "compiler-hooks")]
pub mod tramp;
#[cfg(feature = "compiler-hooks")]
pub mod unwind;
#[cfg(feature = "compiler-hooks")]
pub mod wrapper;
