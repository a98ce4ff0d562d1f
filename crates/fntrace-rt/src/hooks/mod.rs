//! The compiler instrumentation ABIs: the `mcount`/`_mcount` (gcc `-pg`,
//! rustc `-Zinstrument-mcount`), `__fentry__` (gcc `-pg -mfentry`) and
//! `__cyg_profile_func_enter`/`_exit` (`-finstrument-functions`) entry
//! points. A mechanism: built on the shared call protocol (`calls`), the
//! policy layer and the sink; it imports no other mechanism.
//!
//! The symbols are only defined with the `compiler-hooks` feature (the
//! `LD_PRELOAD` library turns it on; a Rust program can too, to link the
//! runtime statically).

#[cfg(feature = "compiler-hooks")]
pub mod tramp;

#[cfg(all(test, feature = "compiler-hooks"))]
mod fast_tests;
