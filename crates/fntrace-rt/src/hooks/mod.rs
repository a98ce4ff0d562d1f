//! Compiler instrumentation ABIs: the `mcount`/`_mcount` (gcc `-pg`,
//! rustc `-Zinstrument-mcount`), `__fentry__` (gcc `-pg -mfentry`) and
//! `__cyg_profile_func_enter`/`_exit` (`-finstrument-functions`) entry
//! points, the exit trampoline reached through hijacked return addresses,
//! and the unwinder interposition that keeps exceptions, panics and
//! backtraces working while return addresses are hijacked.
//!
//! The symbols are only defined with the `compiler-hooks` feature (the
//! `LD_PRELOAD` library turns it on; a Rust program can too, to link the
//! runtime statically).

pub mod shadow;

#[cfg(feature = "compiler-hooks")]
pub mod tramp;

#[cfg(feature = "compiler-hooks")]
pub mod fast;

#[cfg(feature = "compiler-hooks")]
pub mod unwind;

#[cfg(feature = "compiler-hooks")]
pub mod dl;

pub mod count;
