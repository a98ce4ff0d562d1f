//! fntrace: see every function call of your program.
//!
//! Put [`#[instrument_fn]`](instrument_fn) on the functions, `impl` blocks or
//! inline modules you want to trace, then run the program under
//! `fntrace record -- ./prog args` and look at it with `fntrace report` and
//! `fntrace replay`. When nothing is recording, an instrumented call costs
//! one load and one well-predicted branch.
//!
//! ```no_run
//! #[fntrace::instrument_fn]
//! mod work {
//!     pub fn fib(n: u64) -> u64 {
//!         if n < 2 { n } else { fib(n - 1) + fib(n - 2) }
//!     }
//! }
//!
//! fn main() {
//!     // Optional: trace yourself instead of running under `fntrace record`.
//!     fntrace::start("fib.data").expect("start tracing");
//!     println!("{}", work::fib(20));
//!     let summary = fntrace::stop().expect("a recording was active");
//!     eprintln!("wrote {}", summary.path.display());
//! }
//! ```
//!
//! Recording through the environment: a program that uses this crate starts
//! recording at start-up when `FNTRACE_OUTPUT=PATH` is set (this is what
//! `fntrace record` does); `FNTRACE_MAX_SIZE` (bytes, or with a `K`/`M`/`G`
//! suffix) caps the file size, past which events are counted as lost. The
//! trace is finished at process exit; if the process dies instead, every
//! event written before is still in the file.
//!
//! Feature `compiler-hooks`: links the runtime for compiler instrumentation
//! (`mcount`, `__fentry__`, `__cyg_profile_func_*`, as with
//! `cargo fntrace build --instrument=mcount`) into the program, so it
//! records without `libfntrace_preload.so`. A dependency nothing refers to
//! is not linked: write `extern crate fntrace;` (or use any item of it).

use std::io;
use std::path::{Path, PathBuf};

pub use fntrace_macros::instrument_fn;
pub use fntrace_rt::recorder::{ENV_MAX_SIZE, ENV_OUTPUT};
pub use fntrace_rt::{Options, Summary};

/// Starts recording into `path` (created or truncated).
///
/// Fails if a recording is already active (for example because the program
/// runs under `fntrace record`) or the file cannot be created.
pub fn start(path: impl AsRef<Path>) -> io::Result<PathBuf> {
    fntrace_rt::start(&Options::new(path.as_ref()))
}

/// Starts recording with explicit [`Options`].
pub fn start_with(options: &Options) -> io::Result<PathBuf> {
    fntrace_rt::start(options)
}

/// Stops recording and finishes the trace file; returns `None` when nothing
/// was recording.
///
/// Threads other than the caller stop at their next event; the trace stays
/// readable whatever they were doing.
pub fn stop() -> Option<Summary> {
    fntrace_rt::finish()
}

/// Forces the trace written so far to stable storage. Not needed to survive
/// a crash of the process (the kernel already holds every event), only a
/// crash of the machine.
pub fn flush() -> io::Result<()> {
    fntrace_rt::flush()
}

/// Whether a recording is active.
pub fn is_recording() -> bool {
    fntrace_rt::is_recording()
}

/// The file being recorded into, if any.
pub fn output_path() -> Option<PathBuf> {
    fntrace_rt::output_path()
}

/// Switches on tracing of the functions whose demangled name matches
/// `pattern` (a regular expression), for code fntrace patches at run time:
/// patchable entry sites (`cargo fntrace build --instrument=fentry` or
/// `patchable`, `gcc -fpatchable-function-entry=N`, `gcc -pg -mfentry
/// -mnop-mcount -mrecord-mcount`) and XRay sleds. Takes effect at once in
/// every thread, also in objects loaded later; `#[instrument_fn = "off"]`
/// functions stay off. Returns how many functions were switched on.
///
/// Needs the patching runtime: the program runs under `fntrace record`
/// (which injects it), or uses this crate's `compiler-hooks` feature.
///
/// ```no_run
/// fntrace::enable("^myapp::parse").expect("patching runtime present");
/// // ... the calls to be traced ...
/// fntrace::disable("^myapp::parse").unwrap();
/// ```
pub fn enable(pattern: &str) -> Result<usize, String> {
    fntrace_rt::live::switch_functions(pattern, true)
}

/// Switches off tracing of the functions whose name matches `pattern`
/// (their sites become NOPs again); the counterpart of [`enable`].
pub fn disable(pattern: &str) -> Result<usize, String> {
    fntrace_rt::live::switch_functions(pattern, false)
}

#[doc(hidden)]
pub mod __private {
    pub use fntrace_rt::site::{
        Guard, Instrumented, OffEntry, Site, enter, enter_method, instrument_future,
    };
}
