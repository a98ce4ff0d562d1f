//! The session layer, on top of every other: starting a recording from a
//! [`Config`] (policy, markers, the trace file, XRay, patchable sites, the
//! control socket, in that order), finishing it, start-up from the
//! environment before `main` (or lazily at the first event), and the
//! process events every layer must hear of: `exit`, `fork` (a child
//! records into `PATH.PID` or nothing), `exec` under a running profiling
//! timer (`prof`, [`exec`]) and `dlopen` ([`dl`], fanned out to every mechanism).
//!
//! Nothing below imports it; the sink calls back into it through one
//! hook, `recorder::set_start_hook`, for a thread whose first event
//! comes before start-up looked at the environment.

#[cfg(feature = "compiler-hooks")]
pub mod attach;
#[cfg(feature = "compiler-hooks")]
pub mod dl;
#[cfg(feature = "compiler-hooks")]
pub mod exec;
mod prof;
#[cfg(feature = "compiler-hooks")]
pub mod sigtrap;
pub mod stop;

use std::io;
use std::path::PathBuf;
use std::sync::{Mutex, Once};

use crate::config::Config;
use crate::recorder::{self, Options, Summary};
use crate::{args, count, filter, markers};

static ENV_INIT: Once = Once::new();
static PROCESS_HOOKS: Once = Once::new();
/// Serialises [`start`].
static STARTING: Mutex<()> = Mutex::new(());
/// The `-P` patterns of the running session (for objects loaded later).
static PATCH: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// Why a session did not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The configuration names no output file.
    #[error("no output file configured")]
    NoOutput,
    /// A session is already recording (its policy is left alone).
    #[error("a recording is already active")]
    AlreadyActive,
    /// The trace file could not be created or mapped, or a session is
    /// already active (the message says which, with the path).
    #[error(transparent)]
    Io(#[from] io::Error),
}

/// Starts a session from `cfg`: the record-time policy (depth, filters,
/// argument capture, counting mode), the marker probe, the trace file,
/// then XRay recording, the patchable sites `cfg` selects and the control
/// socket. Problems after the file exists (a pattern a mechanism rejects,
/// a control socket that cannot be made) are reported on standard error
/// and do not stop the session.
pub fn start(cfg: &Config) -> Result<PathBuf, StartError> {
    ENV_INIT.call_once(recorder::no_session);
    start_config(cfg, Order::FileFirst)
}

/// Starts a session in a process that was already running (see
/// [`attach`]): the code is switched on first, while nothing records, and
/// the session becomes active in one step afterwards, so that no call tree
/// is recorded with some functions already switched on and others not yet.
#[cfg(feature = "compiler-hooks")]
pub(crate) fn start_attached(cfg: &Config) -> Result<PathBuf, StartError> {
    ENV_INIT.call_once(recorder::no_session);
    start_config(cfg, Order::CodeFirst)
}

/// Whether a session's code is switched on after its file exists (at
/// start-up: nothing else runs yet) or before (attaching).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Order {
    FileFirst,
    #[cfg_attr(not(feature = "compiler-hooks"), allow(dead_code))]
    CodeFirst,
}

fn start_config(cfg: &Config, order: Order) -> Result<PathBuf, StartError> {
    let path = cfg.output.clone().ok_or(StartError::NoOutput)?;
    // One start at a time, and none while a session runs: the policy of a
    // running session must not change under it.
    let _one = STARTING.lock().unwrap_or_else(|e| e.into_inner());
    if recorder::session_active() {
        return Err(StartError::AlreadyActive);
    }
    apply_policy(cfg);
    #[cfg(feature = "compiler-hooks")]
    {
        crate::calls::tramp::detect_vector_width(cfg.vector_width);
        crate::calls::interrupted::note_runtime_text();
        sigtrap::keep_trap_unblocked();
    }
    markers::record::start_recording(&cfg.markers);
    crate::diag::step("policy");
    let opts = Options {
        path,
        max_size: cfg.max_size,
        exclusive: cfg.exclusive,
        follow_fork: cfg.exclusive,
        time_filter_ns: cfg.time_filter_ns,
        settings: settings(cfg),
        buffer: cfg.buffer,
        ring: cfg.ring,
        snapshot_signal: cfg.snapshot_signal,
        fn_threshold: crate::thresholds::any().then_some(crate::thresholds::ns as fn(u64) -> u64),
    };
    install_process_hooks();
    *PATCH.lock().unwrap_or_else(|e| e.into_inner()) = cfg.patch.clone();
    if order == Order::CodeFirst {
        switch_on(cfg);
    }
    crate::diag::step("code-on");
    let path = match recorder::start(&opts) {
        Ok(p) => p,
        Err(e) => {
            if order == Order::CodeFirst {
                switch_off();
            }
            return Err(e.into());
        }
    };
    if order == Order::FileFirst {
        switch_on(cfg);
        start_control(cfg);
    }
    // Attaching, the control socket comes after the recording started
    // (it is not needed before, and its descriptor and thread cost time
    // before the first event).
    if order == Order::CodeFirst {
        start_control(cfg);
    }
    #[cfg(feature = "compiler-hooks")]
    crate::libcalls::describe_all();
    if cfg.duration_ns > 0 {
        stop::after(cfg.duration_ns);
    }
    crate::diag::step("file");
    recorder::start_helper();
    crate::diag::step("helper");
    Ok(path)
}

/// The settings that shape what `cfg` records, as the trace's `Setting`
/// records (readers show them and qualify what they count).
fn settings(cfg: &Config) -> Vec<(String, String)> {
    use fntrace_format::event::{
        SETTING_DEPTH, SETTING_DURATION, SETTING_FILTER, SETTING_FN_THRESHOLD, SETTING_MAX_SIZE,
        SETTING_NOTRACE, SETTING_PATCH, SETTING_TIME_FILTER,
    };
    let mut v = vec![(SETTING_MAX_SIZE.to_string(), cfg.max_size.to_string())];
    for (key, n) in [
        (SETTING_TIME_FILTER, cfg.time_filter_ns),
        (SETTING_DURATION, cfg.duration_ns),
        (SETTING_DEPTH, u64::from(cfg.depth)),
    ] {
        if n != 0 {
            v.push((key.to_string(), n.to_string()));
        }
    }
    for (key, list) in [
        (SETTING_FILTER, &cfg.filter),
        (SETTING_NOTRACE, &cfg.notrace),
        (SETTING_PATCH, &cfg.patch),
    ] {
        v.extend(list.iter().map(|p| (key.to_string(), p.clone())));
    }
    // `#[instrument_fn(threshold)]`: one record per function (its address,
    // the trace's key of its calls, and the threshold).
    v.extend(
        crate::thresholds::list()
            .into_iter()
            .map(|(f, ns)| (SETTING_FN_THRESHOLD.to_string(), format!("{f:#x} {ns}"))),
    );
    v
}

/// Switches on the XRay sleds and patchable sites `cfg` selects (and the
/// control socket).
fn switch_on(cfg: &Config) {
    // Off-CPU records go into the metadata stream, which a ring never
    // overwrites: a long run would fill the ring with them.
    if cfg.sched && cfg.ring > 0 {
        crate::diag::diag!(
            "fntrace: --sched is not recorded in a flight-recorder ring (FNTRACE_RING): its records would fill the ring"
        );
    }
    SCHED.store(
        cfg.sched && cfg.ring == 0,
        std::sync::atomic::Ordering::Relaxed,
    );
    #[cfg(feature = "compiler-hooks")]
    {
        crate::xray::api::start_recording(&cfg.patch);
        crate::diag::step("xray");
        start_dynamic(cfg);
        if let Some(p) = &cfg.libcalls
            && let Err(e) = crate::libcalls::start(p)
        {
            crate::diag::diag!("fntrace: {e}");
        }
    }
    #[cfg(not(feature = "compiler-hooks"))]
    if cfg.libcalls.is_some() {
        crate::diag::diag!(
            "fntrace: --libcalls needs the runtime with compiler hooks (libfntrace_preload.so); not recorded"
        );
    }
    // Last: its helper thread must not exist yet while start-up code
    // rewriting (one-byte NOP runs) needs a single-threaded program.
    start_sched();
}

/// Switches every XRay sled and patchable site off again, and closes the
/// control socket.
pub(crate) fn switch_off() {
    crate::sched::stop();
    #[cfg(feature = "compiler-hooks")]
    {
        crate::dynamic::stop();
        crate::libcalls::stop();
        crate::xray::api::stop_recording();
        crate::control::socket::stop();
    }
}

/// Starts recording into a new trace file with nothing else configured
/// (what `fntrace::start` does in a Rust program). Fails if a session is
/// already active or the file cannot be created and mapped.
pub fn start_file(opts: &Options) -> io::Result<PathBuf> {
    // Looking at the environment later must not start a second session.
    ENV_INIT.call_once(recorder::no_session);
    install_process_hooks();
    let r = recorder::start(opts);
    recorder::start_helper();
    r
}

/// The record-time policy of `cfg`.
fn apply_policy(cfg: &Config) {
    filter::set_max_depth(cfg.depth);
    // `#[instrument_fn(mcount = "off")]`/`(fentry = "off")` for hook calls
    // that stay calls: with `-F`/`-N` (classified anyway) or
    // `FNTRACE_KEEP_CALLS` (then the classification is turned on for
    // them); converted calls are switched by the dynamic runtime.
    // Calls left to the hooks until a runtime thread converts them need
    // the policies too.
    let alone = cfg.keep_calls || converts_later(cfg);
    filter::use_policy(cfg!(feature = "compiler-hooks") && !cfg.count, alone);
    if cfg!(feature = "compiler-hooks") && !cfg.count && alone {
        filter::scan_new_modules();
    }
    if !cfg.filter.is_empty() || !cfg.notrace.is_empty() {
        let f: Vec<&str> = cfg.filter.iter().map(String::as_str).collect();
        let n: Vec<&str> = cfg.notrace.iter().map(String::as_str).collect();
        if let Err(e) = filter::set_filters(&f, &n) {
            crate::diag::diag!("fntrace: {e}");
        }
    }
    // `#[instrument_fn(args, retval)]` captures need a mechanism that
    // can capture (compiler hooks); the source guard cannot.
    let policy = cfg!(feature = "compiler-hooks") && !cfg.count;
    if (policy || !cfg.capture.is_empty())
        && let Err(e) = args::set_specs(&cfg.capture, policy)
    {
        crate::diag::diag!("fntrace: {e}");
    }
    // `#[instrument_fn(threshold = ...)]`: as for the captures, the
    // compiler mechanisms key calls by function address.
    crate::thresholds::set(policy);
    if cfg.count {
        count::set_count_mode(true);
    }
}

/// Switches on the patchable sites `-F`/`-N`/`-P` select (all without
/// them) and starts the control socket if asked. With patchable sites the
/// selection is what is patched, so the recording-time region filters
/// are cleared (a function switched on later with `fntrace live` must be
/// recorded wherever it is called).
#[cfg(feature = "compiler-hooks")]
fn start_dynamic(cfg: &Config) {
    let mut trace = cfg.filter.clone();
    trace.extend(cfg.patch.iter().cloned());
    // `call mcount`/`call __fentry__` become patchable sites (call
    // wrappers instead of a hijacked return) unless `-F`/`-N`/`-P` ask
    // for their semantics, counting mode wants its own fast path, or
    // `FNTRACE_KEEP_CALLS=1`.
    crate::dynamic::set_convert_calls(cfg.converts_calls());
    crate::dynamic::set_convert_later(
        converts_later(cfg),
        cfg.convert_at == crate::config::ConvertAt::BySize,
    );
    match crate::dynamic::start(&trace, &cfg.notrace) {
        Ok(_) => {
            if crate::dynamic::site_counts().0 > 0 {
                let _ = filter::set_filters(&[], &[]);
            }
        }
        Err(e) => crate::diag::diag!("fntrace: {e}"),
    }
    crate::diag::step("sites");
    if converts_later(cfg) {
        if crate::dynamic::has_pending() {
            spawn_converter(cfg.count);
        } else {
            end_policy_alone(cfg.count);
        }
    }
}

/// Whether start-up may leave the hook calls of objects that have nothing
/// else to a runtime thread (the hooks record meanwhile): whenever they
/// are converted at all, unless `FNTRACE_CONVERT_AT_START=1`.
fn converts_later(cfg: &Config) -> bool {
    cfg!(feature = "compiler-hooks")
        && cfg.converts_calls()
        && cfg.convert_at != crate::config::ConvertAt::Start
}

/// The hooks no longer need the policies on their own (every hook call
/// that could be converted is): back to the state of a start that
/// converted them at once.
#[cfg(feature = "compiler-hooks")]
fn end_policy_alone(count: bool) {
    filter::use_policy(!count, false);
    let _ = filter::set_filters(&[], &[]);
}

/// Starts the runtime thread that converts the pending `call __fentry__`
/// sites ([`crate::dynamic::convert_pending`]); converts them on the
/// calling thread if no thread can be made.
#[cfg(feature = "compiler-hooks")]
fn spawn_converter(count: bool) {
    let convert = move || {
        let t0 = crate::clock::monotonic_ns();
        let (c, failed, left) = crate::dynamic::convert_pending();
        // An object that could not be converted keeps its hook calls,
        // which still need the policies.
        if failed == 0 {
            end_policy_alone(count);
        }
        if crate::diag::steps_wanted() {
            crate::diag::diag!(
                "fntrace: {} hook calls converted on a runtime thread in {:.2} ms ({} traps, \
                 {} left to the hooks)",
                c.on + c.off,
                (crate::clock::monotonic_ns() - t0) as f64 / 1e6,
                crate::patch::int3::traps(),
                left
            );
        }
    };
    // The core-serialising membarrier the thread's code changes need:
    // registering takes microseconds while the process has one thread,
    // and waits for an RCU grace period (12–15 ms here) once it has two.
    crate::patch::sync::available();
    // The `SIGTRAP` handler before `main`: a program that sets its own
    // action later keeps ours in place (see `sigtrap`).
    crate::patch::int3::install();
    // Registered as the runtime's own (like the recorder's helper): it
    // never runs the program's code.
    let r = crate::procinfo::spawn_runtime_thread("fntrace-convert", move || {
        recorder::guarded(convert);
    });
    if r.is_err() {
        convert();
    }
}

/// Starts the control socket of `fntrace live` if `cfg` asks for it.
fn start_control(cfg: &Config) {
    #[cfg(feature = "compiler-hooks")]
    if cfg.control
        && let Err(e) = crate::control::socket::start()
    {
        crate::diag::diag!("fntrace: control socket: {e}");
    }
    #[cfg(not(feature = "compiler-hooks"))]
    let _ = cfg;
}

/// Finishes the active session: the counted arcs (counting mode), the
/// calling thread's stream, the final block, the file's final size.
/// Other threads stop recording at their next event; their last chunks
/// stay unsealed (readers handle that).
pub fn finish() -> Option<Summary> {
    crate::sched::stop();
    recorder::finish(false, &|f| count::for_each_arc(f))
}

/// [`finish`] in two halves: ends the recording in one step (no thread
/// records after it returns); [`complete`] then writes the rest of the
/// file. A detaching runtime switches the code off in between.
#[cfg(feature = "compiler-hooks")]
pub(crate) fn end() -> Option<recorder::Ended> {
    crate::sched::stop();
    recorder::end(false, &|f| count::for_each_arc(f))
}

/// The second half of [`finish`] (see [`end`]).
#[cfg(feature = "compiler-hooks")]
pub(crate) fn complete(e: recorder::Ended) -> Summary {
    recorder::complete(e)
}

/// Whether a session is active (after looking at the environment).
pub fn is_recording() -> bool {
    recorder::is_recording()
}

/// Objects were loaded (`dlopen`): their modules go into the trace, and
/// every policy and mechanism resolves and patches them as it did the
/// others.
pub fn note_modules_changed() {
    if !recorder::note_modules() {
        return;
    }
    filter::scan_new_modules();
    args::scan_new_modules();
    crate::thresholds::scan_new_modules();
    #[cfg(feature = "compiler-hooks")]
    {
        if crate::xray::tramp::RECORD.load(std::sync::atomic::Ordering::Acquire) {
            let patch = PATCH.lock().unwrap_or_else(|e| e.into_inner()).clone();
            crate::xray::api::start_recording(&patch);
        }
        crate::dynamic::scan();
        crate::libcalls::scan();
    }
}

/// `--sched` was asked for (kept for a forked child's session).
static SCHED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Starts off-CPU recording if asked; a refusal is a warning.
fn start_sched() {
    if SCHED.load(std::sync::atomic::Ordering::Relaxed)
        && let Err(e) = crate::sched::start()
    {
        crate::diag::diag!("fntrace: {e}");
    }
}

extern "C" fn at_exit() {
    crate::sched::stop();
    #[cfg(feature = "compiler-hooks")]
    {
        attach::at_exit();
        crate::control::socket::stop();
    }
    recorder::finish(true, &|f| count::for_each_arc(f));
}

/// Before an `exec` that will most likely replace the image (`target`
/// names an executable regular file: searched in `PATH` when `search` and
/// it has no slash; `None`: a descriptor, `fexecve`): finishes the
/// session as at exit, since no exit handler runs in an image that is
/// replaced, so that the trace ends clean with the writer's counts.
/// Returns the options to record with again if the `exec` fails after
/// all. Nothing is done in a `vfork` child (it shares the parent's
/// memory and session) or while attached (`record -p` ends its window by
/// itself).
#[cfg(feature = "compiler-hooks")]
pub(crate) fn finish_before_exec(target: Option<&std::ffi::CStr>, search: bool) -> Option<Options> {
    let opts = recorder::session_options()?;
    if attach::attached() {
        return None;
    }
    if let Some(t) = target
        && !exec::executable(t, search)
    {
        return None;
    }
    crate::sched::stop();
    crate::control::socket::stop();
    recorder::finish(true, &|f| count::for_each_arc(f));
    Some(opts)
}

/// Before `_exit`/`_Exit`: the session ends as at a normal exit (whose
/// `atexit` handler does not run then), if it is this process's own (not
/// the parent's, in a `vfork` child).
#[cfg(feature = "compiler-hooks")]
pub(crate) fn finish_at_exit() {
    if recorder::session_options().is_some() {
        at_exit();
    }
}

/// The `exec` after [`finish_before_exec`] failed: recording goes on in a
/// new file (`PATH.PID`, or `PATH.PID.N`), with the sites as they were.
#[cfg(feature = "compiler-hooks")]
pub(crate) fn resume_after_failed_exec(mut opts: Options) {
    opts.exclusive = true;
    match recorder::start(&opts) {
        Ok(p) => {
            recorder::start_helper();
            crate::diag::diag!(
                "fntrace: exec failed after this process's trace was finished; recording goes on in {}",
                p.display()
            );
        }
        Err(e) => crate::diag::diag!("fntrace: exec failed; cannot record further: {e}"),
    }
}

extern "C" fn after_fork_child() {
    // The child shares the parent's MAP_SHARED mapping: it must never write
    // to it. It records nothing unless it starts a session of its own.
    let Some(mut o) = recorder::forget_after_fork() else {
        return;
    };
    // The parent's arc counts are the parent's trace's.
    crate::count::forget_counts_after_fork();
    let mut name = o.path.clone().into_os_string();
    name.push(format!(".{}", std::process::id()));
    o.path = name.into();
    o.exclusive = true;
    crate::sched::forget_after_fork();
    match recorder::start_after_fork(&o) {
        Some(Err(e)) => {
            crate::diag::diag!("fntrace: child {}: cannot record: {e}", std::process::id())
        }
        Some(Ok(_)) => recorder::start_helper(),
        None => {}
    }
    start_sched();
    #[cfg(feature = "compiler-hooks")]
    crate::libcalls::describe_all_after_fork();
    // The parent's deadline holds for the child's recording too.
    stop::after_fork();
    #[cfg(feature = "compiler-hooks")]
    if crate::control::socket::forget() {
        let _ = crate::control::socket::start();
    }
}

fn install_process_hooks() {
    PROCESS_HOOKS.call_once(|| {
        // SAFETY: registering plain `extern "C"` functions without state.
        unsafe {
            libc::atexit(at_exit);
            libc::pthread_atfork(None, None, Some(after_fork_child));
        }
    });
}

/// Starts a session if `FNTRACE_OUTPUT` is set (once per process): the
/// lazy start hook of the sink, and what the constructor below runs.
pub(crate) fn init_from_env() {
    if ENV_INIT.is_completed() {
        return;
    }
    // Instrumented code that runs while we initialise (a dependency built
    // with instrumentation, a hook in a library we call) must not start
    // initialising again on this thread: it would wait for itself.
    let t = recorder::state();
    if t.busy {
        return;
    }
    t.busy = true;
    ENV_INIT.call_once(init_from_env_once);
    recorder::state().busy = false;
}

/// Whether the `LD_PRELOAD` runtime is in the process besides this one
/// (then it records; this copy, linked into the program without
/// `compiler-hooks`, stays idle instead of writing a second trace).
fn preload_runtime_present() -> bool {
    if cfg!(feature = "compiler-hooks") {
        return false;
    }
    // SAFETY: dlsym with a NUL-terminated name.
    !unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"fntrace_preload_marker".as_ptr()) }.is_null()
}

fn init_from_env_once() {
    let cfg = match Config::from_env() {
        Ok(c) => c,
        Err(e) => {
            for bad in &e.invalid {
                crate::diag::diag!("fntrace: {bad}");
            }
            *e.usable
        }
    };
    if cfg.output.is_none() {
        recorder::no_session();
        return;
    }
    if preload_runtime_present() {
        recorder::no_session();
        markers::record::forward_to_preload(&cfg.markers);
        return;
    }
    let _prof = prof::ProfTimerGuard::new();
    // `FNTRACE_STARTUP_STEPS=1`: how long each step of the start took,
    // on stderr (for `bench --bin startup`).
    let timed = std::env::var_os("FNTRACE_STARTUP_STEPS").is_some();
    if timed {
        crate::diag::steps_start();
    }
    if let Err(e) = start_config(&cfg, Order::FileFirst) {
        crate::diag::diag!("fntrace: cannot record: {e}");
        recorder::no_session();
    }
    if timed {
        crate::diag::diag!("fntrace: start-up steps (ms) {}", crate::diag::steps_take());
    }
}

/// Runs at program start (before `main`) so that recording requested
/// through the environment starts with the process, not at the first
/// instrumented call; it also installs the sink's lazy start hook, for
/// instrumented code that runs before it (other constructors).
#[used]
#[unsafe(link_section = ".init_array")]
static INIT_FROM_ENV: extern "C" fn() = {
    extern "C" fn init() {
        recorder::set_start_hook(init_from_env);
        init_from_env();
    }
    init
};
