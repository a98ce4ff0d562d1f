//! The fntrace in-process runtime: everything that runs inside the traced
//! process.
//!
//! The runtime is built in layers; each module imports only modules of the
//! layers below it (checked by `tests/layers.rs`):
//!
//! ```text
//!  session      start-up from a Config (or the environment), exit, fork,
//!               exec's profiling timer, dlopen fan-out
//!  ──────────────────────────────────────────────────────────────────────
//!  control      switching functions across mechanisms, the control socket
//!  ──────────────────────────────────────────────────────────────────────
//!  mechanisms   site (#[instrument_fn])  hooks (mcount, fentry, cyg)
//!               xray (sleds)  dynamic (patchable sites)  markers
//!               libcalls (PLT/GOT hooks)  sched (off-CPU intervals)
//!               — never import each other
//!  ──────────────────────────────────────────────────────────────────────
//!  calls        the shared call protocol: shadow-frame entries and exits,
//!               trampolines, call wrappers, the asm fast path, unwinding
//!  ──────────────────────────────────────────────────────────────────────
//!  policy       filter (-F/-N/--depth)  args (-A/-R)  count (--count)
//!  ──────────────────────────────────────────────────────────────────────
//!  sink         recorder: thread state + TLS, chunks, the trace file
//!  ──────────────────────────────────────────────────────────────────────
//!  leaves       clock  procinfo  patch  ranges  features  config  diag
//! ```
//!
//! The one upward call, the sink starting a session lazily at a thread's
//! first event, goes through a hook `session` installs
//! (`recorder::set_start_hook`), not an import.
//!
//! Recording starts through the environment (`FNTRACE_OUTPUT`, what
//! `fntrace record` sets; parsed by [`config::Config::from_env`]), through
//! [`session::start`] with a [`config::Config`], or through [`start`]
//! (a file session with nothing else configured).

// Leaves.
pub mod clock;
pub mod config;
pub mod diag;
pub mod features;
pub mod ownfd;
pub mod patch;
pub mod procinfo;
mod ranges;

// The event sink.
pub mod recorder;

// Policy.
pub mod args;
pub mod count;
pub mod filter;
pub mod thresholds;

// The call protocol shared by the mechanisms.
pub mod calls;

// Mechanisms.
#[cfg(feature = "compiler-hooks")]
pub mod dynamic;
pub mod hooks;
#[cfg(feature = "compiler-hooks")]
pub mod libcalls;
pub mod markers;
pub mod sched;
pub mod site;
pub mod xray;

// Control.
pub mod control;

// The session, on top.
pub mod session;

pub use recorder::{Options, Summary, flush, is_recording, output_path};
pub use session::{finish, start_file as start};
