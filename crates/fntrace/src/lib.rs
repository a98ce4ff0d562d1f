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

//! # Markers
//!
//! Typed static trace points: [`declare_marker!`] and [`fire!`], or
//! [`marker!`] in one statement. While no probe is attached a marker costs
//! a 5-byte NOP (the static-key design) and its arguments are not
//! evaluated. Attach probes with `MARKER.attach(closure)` (type-checked at
//! compile time) or [`set_probe`] by name (checked at run time); remove
//! them with [`ProbeHandle::remove`], which returns after a grace period.
//! `fntrace record -M PATTERN` records the matching markers' events with
//! their argument values; so does [`record_markers`].
//!
//! ```
//! fntrace::declare_marker! {
//!     /// A request was served.
//!     pub static SERVED: served(status: u16, path: &str);
//! }
//!
//! fn serve(path: &str) {
//!     fntrace::fire!(SERVED, 200, path);
//! }
//!
//! let probe = SERVED.attach(|status, path| println!("{status} {path}")).unwrap();
//! serve("/index.html");
//! probe.remove().map_err(|(e, _)| e).unwrap();
//! ```

use std::io;
use std::path::{Path, PathBuf};

pub use fntrace_macros::instrument_fn;
pub use fntrace_rt::config::{ENV_MAX_SIZE, ENV_OUTPUT};
pub use fntrace_rt::patch::PatchError;
pub use fntrace_rt::{Options, Summary};

/// Why a probe could not be attached or removed.
pub use fntrace_markers::Error as MarkerError;
pub use fntrace_markers::{
    AnyArgs, Arg, DesignKind, Event, Marker, MarkerCore, Probe, ProbeHandle, Signature, design,
    fire,
};

/// Declares a marker (see [`fntrace_markers::declare_marker!`]):
/// `declare_marker! { pub static NET_RX: net_rx(len: u32, dev: &str); }`,
/// optionally followed by `as Flag`, `as FnPtr` or `as EmptyFn` before the
/// `;` for another disabled-path design.
#[macro_export]
macro_rules! declare_marker {
    ($($t:tt)*) => {
        $crate::__private::fntrace_markers::declare_marker! { $($t)* }
        $crate::__link_runtime!();
    };
}

/// Declares a marker and fires it in one statement:
/// `marker!(net_rx, len: u32 = buf.len() as u32, dev: &str = name)`.
#[macro_export]
macro_rules! marker {
    ($($t:tt)*) => {{
        $crate::__link_runtime!();
        $crate::__private::fntrace_markers::marker!($($t)*)
    }};
}

/// Makes sure the runtime (the static-key patcher) is linked and
/// installed before `main`, even when nothing else of it is used.
#[doc(hidden)]
#[macro_export]
macro_rules! __link_runtime {
    () => {
        const _: () = {
            #[used]
            #[unsafe(link_section = ".init_array")]
            static __FNTRACE_MARKERS_INIT: extern "C" fn() = $crate::__private::markers_init;
        };
    };
}

/// Attaches `probe` to every marker named `name`; its argument types must
/// be the marker's ([`MarkerError::Mismatch`] names both signatures).
///
/// ```
/// fntrace::declare_marker! { static JOB: job_done(id: u64, ok: bool); }
/// let p = fntrace::set_probe("job_done", fntrace::Probe::<(u64, bool)>::new(|id, ok| {
///     println!("job {id}: {ok}");
/// }))
/// .unwrap();
/// fntrace::fire!(JOB, 7, true);
/// p.remove().map_err(|(e, _)| e).unwrap();
/// let e = fntrace::set_probe("job_done", fntrace::Probe::<(u64,)>::new(|_| {})).err().unwrap();
/// assert_eq!(e.to_string(), "probe signature (u64) does not match marker `job_done(id: u64, ok: bool)`");
/// ```
pub fn set_probe<S: Signature>(name: &str, probe: Probe<S>) -> Result<ProbeHandle, MarkerError> {
    fntrace_rt::markers::init();
    fntrace_markers::set_probe(name, probe)
}

/// Every marker linked into the program.
pub fn markers() -> &'static [&'static MarkerCore] {
    fntrace_markers::all()
}

/// Records the events of the markers whose names match one of `patterns`
/// (regular expressions) into the active trace, as `fntrace record -M`
/// does. Returns the recording probe (remove it to stop), or `None` when
/// no marker matches.
pub fn record_markers(patterns: &[&str]) -> io::Result<Option<ProbeHandle>> {
    fntrace_rt::markers::record_markers(patterns).map_err(io::Error::other)
}

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
pub fn enable(pattern: &str) -> Result<usize, PatchError> {
    fntrace_rt::control::switch_functions(pattern, true)
}

/// Switches off tracing of the functions whose name matches `pattern`
/// (their sites become NOPs again); the counterpart of [`enable`].
pub fn disable(pattern: &str) -> Result<usize, PatchError> {
    fntrace_rt::control::switch_functions(pattern, false)
}

#[doc(hidden)]
pub mod __private {
    pub use fntrace_markers;

    pub extern "C" fn markers_init() {
        fntrace_rt::markers::init();
    }

    pub use fntrace_rt::site::{
        Guard, Instrumented, OffEntry, PolicyEntry, Site, enter, enter_method, instrument_future,
    };
}
