//! The fntrace in-process runtime: everything that runs inside the traced
//! process.
//!
//! - [`site`]: entry points for `#[instrument_fn]` (site descriptors, the
//!   entry call and its exit guard, the per-poll future wrapper);
//! - [`recorder`]: sessions, the `MAP_SHARED` trace file, per-thread
//!   lock-free chunk buffers and the event hot path;
//! - [`hooks`]: compiler instrumentation ABIs (mcount, fentry,
//!   cyg_profile), the shadow stack and the exit trampoline;
//! - [`xray`]: an XRay runtime (sled discovery, patching, trampolines,
//!   compiler-rt's C API);
//! - [`patch`]: safe code patching shared by XRay, patchable entries and
//!   marker static keys (writable windows, the `int3` protocol, stubs);
//! - [`dynamic`]: patchable entry sites switched on and off at run time,
//!   the control socket of `fntrace live`;
//! - [`markers`]: static-key patching for `fntrace-markers` and the probe
//!   that records marker events;
//! - [`args`]: `-A`/`-R` argument and return-value capture;
//! - [`live`]: `enable`/`disable` from inside the program;
//! - [`filter`]: record-time depth limit and function filters;
//! - [`clock`]: TSC timestamps and their calibration;
//! - [`procinfo`]: the process description written into the trace (module
//!   map, command line, thread names).
//!
//! Recording starts either through the environment (`FNTRACE_OUTPUT`, what
//! `fntrace record` sets) or through [`recorder::start`].

pub mod args;
pub mod clock;
pub mod config;
#[cfg(feature = "compiler-hooks")]
pub mod dynamic;
pub mod filter;
pub mod hooks;
pub mod live;
pub mod markers;
pub mod patch;
pub mod procinfo;
mod ranges;
pub mod recorder;
pub mod site;
pub mod xray;

pub use recorder::{Options, Summary, finish, flush, is_recording, output_path, start};
