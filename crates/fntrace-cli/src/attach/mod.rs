//! `fntrace record -p PID`: attaching to a running process, recording a
//! window, detaching.
//!
//! 1. Checks: the process exists, is not traced by a debugger, belongs to
//!    us (or we are root), and has instrumentation fntrace can switch on
//!    while it runs (patchable entries, XRay sleds, `-pg`/`-pg -mfentry`/
//!    `-finstrument-functions` hook calls bound to glibc's definitions).
//! 2. Listens on a fresh abstract Unix socket for the runtime.
//! 3. Injection ([`ptrace`]): every thread is stopped, at a moment when
//!    none is inside `fork()` (which holds every malloc lock: while one
//!    is, they are let go for a few milliseconds and stopped again, for at
//!    most 2 s); one is borrowed (a thread blocked in a system call if
//!    there is one), the others are let go at once; on the borrowed
//!    thread the process's own `dlopen` loads `libfntrace_preload.so`,
//!    then `fntrace_attach` receives the
//!    configuration (hand-over pairs on the thread's stack, never the
//!    environment) and starts the runtime's attach thread; the borrowed
//!    thread gets its registers back and is let go.
//! 4. The runtime connects (its peer credentials must be the target's),
//!    starts recording and says so; we wait for `--duration`, Ctrl-C (or
//!    SIGTERM/SIGHUP), or the process's end, then ask it to detach and
//!    wait for its `ok off` (every site back) and `ok detached` (the trace
//!    complete). If we are killed, the socket closes and
//!    the runtime detaches by itself.

pub mod fixup;
pub mod ptrace;

use std::io::{BufRead, BufReader, Write};
use std::os::fd::AsRawFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::{Duration, Instant};

use fntrace_rt::config;
use object::{Object, ObjectSegment, ObjectSymbol};

use crate::record::Options;
use crate::{Error, Result, probe};

/// How long each injected call may take in all (a `dlopen` waiting for a
/// lock another thread holds finishes when that thread lets go of it);
/// Ctrl-C, SIGTERM or SIGHUP cut it to [`ptrace::STOP_GRACE`].
const CALL_TIMEOUT: Duration = Duration::from_secs(60);

/// What happened during an attach, for the summary and the benchmark.
#[derive(Debug, Default, Clone)]
pub struct Timings {
    /// Longest time any thread other than the borrowed one was stopped.
    pub others_stopped: Duration,
    /// Time the borrowed thread was away from the program.
    pub borrowed: Duration,
    /// From the start of `record -p` to the runtime saying it records.
    pub to_recording: Duration,
    /// From asking to stop to the runtime saying every site is off.
    pub to_detached: Duration,
    /// From asking to stop to the runtime saying the trace is complete.
    pub to_completed: Duration,
    /// One-byte NOP runs rewritten while the threads were stopped.
    pub fixed: fixup::Fixed,
    /// Named steps of the injection and when each ended (from the start).
    pub marks: Vec<(&'static str, Duration)>,
    /// CLOCK_MONOTONIC ns when the first thread was stopped and when the
    /// last one but the borrowed one was let go.
    pub stop_window: (u64, u64),
}

impl Timings {
    /// Each step's duration, `name:ms,...`.
    fn steps(&self) -> String {
        let mut last = Duration::ZERO;
        self.marks
            .iter()
            .map(|&(n, t)| {
                let d = t.saturating_sub(last);
                last = t;
                format!("{n}:{:.2}", d.as_secs_f64() * 1e3)
            })
            .collect::<Vec<_>>()
            .join(",")
    }
}

/// Set: `record -p` prints how long each step of the attach and the
/// detach took (for `bench --bin attach`).
pub const STEPS_ENV: &str = "FNTRACE_ATTACH_STEPS";

/// A field of `/proc/PID/status` (`TracerPid`, `Uid`, ...).
fn status_field(pid: i32, name: &str) -> Option<String> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    s.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
        .map(|v| v.trim().to_string())
}

/// A file mapped into the process: its path and where its offset 0 is.
struct Mapped {
    /// The path as the process sees it.
    path: PathBuf,
    /// The same file as we can open it (through `/proc/PID/root`, so that
    /// a process in another mount namespace is read right).
    file: PathBuf,
    start: u64,
}

/// The files mapped at offset 0 in `pid` (one per object).
fn mapped_objects(pid: i32) -> Vec<Mapped> {
    let Ok(maps) = std::fs::read_to_string(format!("/proc/{pid}/maps")) else {
        return vec![];
    };
    let mut v: Vec<Mapped> = vec![];
    for line in maps.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 6 || f[2] != "00000000" || !f[5].starts_with('/') {
            continue;
        }
        let path = PathBuf::from(f[5..].join(" "));
        if v.iter().any(|m| m.path == path) {
            continue;
        }
        let Some(start) = f[0]
            .split('-')
            .next()
            .and_then(|a| u64::from_str_radix(a, 16).ok())
        else {
            continue;
        };
        let file = PathBuf::from(format!("/proc/{pid}/root{}", path.display()));
        v.push(Mapped { path, file, start });
    }
    v
}

/// The offset of the dynamic symbol `name` of the ELF file `path` from
/// where the file's offset 0 is mapped.
fn symbol_offset(path: &Path, name: &str) -> Option<u64> {
    let file = std::fs::File::open(path).ok()?;
    // SAFETY: a read-only private mapping of a library file that is not
    // rewritten in place.
    let data = unsafe { memmap2::Mmap::map(&file) }.ok()?;
    let obj = object::File::parse(&*data).ok()?;
    let first = obj.segments().map(|s| s.address()).min()? & !0xfff;
    obj.dynamic_symbols()
        .find(|s| s.name() == Ok(name) && s.is_definition())
        .map(|s| s.address().wrapping_sub(first))
}

/// The run-time address of the dynamic symbol `name` of the object `m`
/// (mapped in the target).
fn symbol_address(m: &Mapped, name: &str) -> Option<u64> {
    symbol_offset(&m.file, name).map(|o| m.start.wrapping_add(o))
}

/// The run-time code ranges of the functions `names` of the object `m`
/// that it defines, from its dynamic symbols and, if it has one, its
/// symbol table (a name it does not define is left out).
fn symbol_ranges(m: &Mapped, names: &[&str]) -> Vec<(u64, u64)> {
    let Ok(file) = std::fs::File::open(&m.file) else {
        return vec![];
    };
    // SAFETY: a read-only private mapping of a library file that is not
    // rewritten in place.
    let Ok(data) = (unsafe { memmap2::Mmap::map(&file) }) else {
        return vec![];
    };
    let Ok(obj) = object::File::parse(&*data) else {
        return vec![];
    };
    let Some(first) = obj.segments().map(|s| s.address()).min() else {
        return vec![];
    };
    let first = first & !0xfff;
    let mut v: Vec<(u64, u64)> = obj
        .dynamic_symbols()
        .chain(obj.symbols())
        .filter(|s| s.is_definition() && s.size() > 0)
        .filter(|s| s.name().is_ok_and(|n| names.contains(&n)))
        .map(|s| {
            let a = m.start.wrapping_add(s.address().wrapping_sub(first));
            (a, a.wrapping_add(s.size()))
        })
        .collect();
    v.sort_unstable();
    v.dedup();
    v
}

/// The C string at `addr` in the stopped process (at most 1 KiB).
fn read_cstr(st: &ptrace::Stopped, addr: u64) -> String {
    let mut out = vec![];
    for k in 0..16u64 {
        let Ok(b) = st.read_mem(addr + 64 * k, 64) else {
            break;
        };
        if let Some(n) = b.iter().position(|&c| c == 0) {
            out.extend_from_slice(&b[..n]);
            break;
        }
        out.extend_from_slice(&b);
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Whether an object's file name is glibc's C library or dynamic loader.
fn is_libc(p: &Path) -> bool {
    p.file_name()
        .and_then(|f| f.to_str())
        .is_some_and(|f| f.starts_with("libc.so") || f.starts_with("libc-"))
}

/// Checks that `pid` can be attached to; returns its executable's path.
fn check_target(pid: i32) -> Result<PathBuf> {
    if pid <= 0 || !Path::new(&format!("/proc/{pid}")).exists() {
        return Err(Error::Invalid(format!("-p {pid}: no such process")));
    }
    if pid == std::process::id() as i32 {
        return Err(Error::Invalid(format!("-p {pid}: that is fntrace itself")));
    }
    let tracer = status_field(pid, "TracerPid").unwrap_or_default();
    if tracer != "0" && !tracer.is_empty() {
        let who = std::fs::read_to_string(format!("/proc/{tracer}/comm")).unwrap_or_default();
        return Err(Error::Invalid(format!(
            "process {pid} is already traced by process {tracer} ({}): detach the debugger first",
            who.trim()
        )));
    }
    // SAFETY: geteuid cannot fail.
    let me = unsafe { libc::geteuid() };
    let uid: Option<u32> = status_field(pid, "Uid")
        .and_then(|u| u.split_whitespace().nth(1).and_then(|e| e.parse().ok()));
    if me != 0 && uid.is_some_and(|u| u != me) {
        return Err(Error::Invalid(format!(
            "cannot attach to process {pid}: it belongs to uid {}, you are uid {me} (only root \
             may attach to another user's process)",
            uid.unwrap_or(0)
        )));
    }
    std::fs::read_link(format!("/proc/{pid}/exe")).map_err(Error::io_at(format!(
        "cannot attach to process {pid}: its executable"
    )))
}

/// What instrumentation the objects mapped in `pid` have.
fn instrumentation(pid: i32) -> probe::Instrumentation {
    let mut all = probe::Instrumentation::default();
    for m in mapped_objects(pid) {
        if let Some(i) = probe::inspect(&m.file) {
            all.runtime |= i.runtime;
            all.hooks_runtime |= i.hooks_runtime;
            all.mcount |= i.mcount;
            all.fentry |= i.fentry;
            all.cyg_profile |= i.cyg_profile;
            all.xray |= i.xray;
            all.patchable |= i.patchable;
            all.mcount_loc |= i.mcount_loc;
        }
    }
    all
}

/// Set by the signal handler: stop recording.
static STOP: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_signal(sig: libc::c_int) {
    STOP.store(sig, Ordering::Relaxed);
}

/// Attaches to `pid`, records into `output` until `--duration` elapses,
/// Ctrl-C, or the process ends, then detaches.
pub fn run(pid: i32, output: &Path, o: &Options) -> Result<ExitCode> {
    let t0 = Instant::now();
    let exe = check_target(pid)?;
    let t_checked = t0.elapsed();
    // The fix-up plan (reading every object's sites and code) is made on
    // a thread of its own while the other checks run.
    let plan = std::thread::spawn(move || {
        let objs = mapped_objects(pid);
        fixup::plan(
            pid,
            &objs
                .iter()
                .map(|m| (m.file.clone(), m.start))
                .collect::<Vec<_>>(),
        )
    });
    let ins = instrumentation(pid);
    let t_inspected = t0.elapsed();
    if !(ins.patchable_code() || ins.mcount || ins.fentry || ins.cyg_profile) {
        return Err(Error::Invalid(format!(
            "process {pid} ({}) has no instrumentation fntrace can switch on while it runs; \
             rebuild it with patchable entries (gcc/clang -fpatchable-function-entry=5, \
             cargo fntrace build --instrument=fentry), XRay (clang -fxray-instrument), or \
             gcc -pg / -pg -mfentry, and start it again",
            exe.display()
        )));
    }
    let preload = probe::preload_path().ok_or_else(|| {
        Error::Invalid(format!(
            "cannot find {} (set {}, or build it: cargo build --release -p fntrace-preload)",
            probe::PRELOAD_NAME,
            config::ENV_PRELOAD
        ))
    })?;
    let preload =
        std::fs::canonicalize(&preload).map_err(Error::io_at(preload.display().to_string()))?;
    {
        use std::os::unix::fs::MetadataExt;
        let ours =
            std::fs::metadata(&preload).map_err(Error::io_at(preload.display().to_string()))?;
        let theirs = std::fs::metadata(format!("/proc/{pid}/root{}", preload.display()));
        if !theirs.is_ok_and(|m| m.dev() == ours.dev() && m.ino() == ours.ino()) {
            return Err(Error::Invalid(format!(
                "process {pid} does not see {} at the same path (it runs in another mount \
                 namespace, such as a container): attaching needs the runtime library there",
                preload.display()
            )));
        }
    }
    let mut cfg = o.config()?;
    // The window's length is ours to keep: the runtime detaches when told.
    let duration = (cfg.duration_ns > 0).then(|| Duration::from_nanos(cfg.duration_ns));
    cfg.duration_ns = 0;
    let output = std::path::absolute(output)?;
    if let Some(dir) = output.parent()
        && !dir.is_dir()
    {
        return Err(Error::Invalid(format!(
            "{}: no such directory",
            dir.display()
        )));
    }
    // An earlier trace at the same path is kept as `PATH.old`.
    if let Some(old) = crate::tracefile::keep_old(&output)? {
        eprintln!("fntrace: the previous trace is kept as {}", old.display());
    }
    cfg.output = Some(output.clone());
    cfg.control = !o.no_control;
    // The runtime's socket: abstract, named after us and a random part.
    let mut rnd = [0u8; 8];
    // SAFETY: getrandom writes at most 8 bytes into `rnd`.
    unsafe { libc::getrandom(rnd.as_mut_ptr().cast(), 8, 0) };
    let name = format!(
        "fntrace-attach-{}-{:016x}",
        std::process::id(),
        u64::from_le_bytes(rnd)
    );
    let listener = {
        use std::os::linux::net::SocketAddrExt;
        let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes())?;
        UnixListener::bind_addr(&addr).map_err(Error::io_at("cannot make the attach socket"))?
    };
    let me = std::process::id().to_string();
    let mut pairs: Vec<(&str, std::ffi::OsString)> = cfg.to_env();
    pairs.push((config::HANDOVER_SOCKET, name.clone().into()));
    pairs.push((config::HANDOVER_CONTROLLER, me.into()));
    if !(ins.mcount || ins.fentry || ins.cyg_profile) {
        pairs.push((config::HANDOVER_HOOKS, "0".into()));
    }
    let handover = config::encode_handover(pairs.iter().map(|(n, v)| (*n, v.as_os_str())));

    let mut timings = Timings::default();
    timings.marks.push(("target", t_checked));
    timings.marks.push(("inspect", t_inspected));
    timings.marks.push(("checks", t0.elapsed()));
    // Ctrl-C (and SIGTERM, SIGHUP) from here on only asks to stop: the
    // injection in progress finishes first (a controller that died while
    // the borrowed thread ran our call would leave it returning to
    // address 0) if it does within `ptrace::STOP_GRACE` (else we give up
    // on it, as after `CALL_TIMEOUT`), then the window closes at once.
    // SIGKILL cannot be caught: killing `record -p` during the injection
    // (a few tens of ms) can kill the target; after it, the runtime
    // detaches by itself.
    catch_stop_signals();
    inject(pid, &preload, &handover, plan, &mut timings, t0)?;

    // The runtime connects back.
    listener.set_nonblocking(true)?;
    let stream = accept_from(&listener, pid, Duration::from_secs(15))?;
    timings.marks.push(("connected", t0.elapsed()));
    stream.set_nonblocking(false)?;
    let mut reader = BufReader::new(stream.try_clone()?);
    let line = answer(&mut reader)?;
    let Some(started) = line.strip_prefix("ok recording ") else {
        let why = line.strip_prefix("error: ").unwrap_or(&line);
        return Err(Error::Invalid(format!(
            "process {pid}: the runtime could not start recording: {}",
            if why.is_empty() {
                "it closed the connection"
            } else {
                why
            }
        )));
    };
    timings.to_recording = t0.elapsed();
    timings.marks.push(("recording", timings.to_recording));
    let field = |k: &str| {
        started
            .split_whitespace()
            .find_map(|f| f.strip_prefix(k)?.strip_prefix('='))
            .unwrap_or("?")
            .to_string()
    };
    eprintln!(
        "fntrace: attached to process {pid} ({}) in {:.1} ms: patchable sites on {}, XRay \
         functions {}, hook slots {}; recording into {}{}",
        exe.display(),
        timings.to_recording.as_secs_f64() * 1e3,
        field("sites"),
        field("xray"),
        field("hook-slots"),
        output.display(),
        match duration {
            Some(d) => format!(" for {:.3} s (Ctrl-C stops earlier)", d.as_secs_f64()),
            None => " until Ctrl-C".into(),
        }
    );
    let show_steps = std::env::var_os(STEPS_ENV).is_some();
    if show_steps {
        eprintln!(
            "fntrace: attach steps (ms): {}; in the runtime: {}; traps {}; stop-window {} {}",
            timings.steps(),
            field("steps"),
            field("traps"),
            timings.stop_window.0,
            timings.stop_window.1
        );
    }
    if cfg.control && std::io::IsTerminal::is_terminal(&std::io::stderr()) {
        eprintln!(
            "fntrace: switch functions on and off meanwhile: fntrace live {pid} list|enable REGEX|disable REGEX"
        );
    }
    let progress = std::io::IsTerminal::is_terminal(&std::io::stderr())
        .then(|| crate::progress::Progress::start(output.to_path_buf()));
    let ended = wait_for_end(&stream, duration);
    drop(progress);
    let t_stop = Instant::now();
    let mut w = stream.try_clone()?;
    // The runtime answers twice: `ok off` once every site is back (the
    // program runs at full speed from there), `ok detached` once the
    // trace file is complete.
    let mut off_steps = None;
    let detached = if ended {
        None
    } else {
        let _ = writeln!(w, "stop");
        let _ = stream.set_read_timeout(Some(Duration::from_secs(30)));
        let mut l = answer(&mut reader).unwrap_or_default();
        timings.to_detached = t_stop.elapsed();
        if let Some(off) = l.strip_prefix("ok off ") {
            off_steps = off
                .split_whitespace()
                .find_map(|f| f.strip_prefix("steps="))
                .map(str::to_string);
            l = answer(&mut reader).unwrap_or_default();
        }
        timings.to_completed = t_stop.elapsed();
        Some(l)
    };
    if show_steps && detached.is_some() {
        eprintln!(
            "fntrace: detach steps in the runtime (ms): {}; trace complete after {:.2} ms",
            off_steps.as_deref().unwrap_or("?"),
            timings.to_completed.as_secs_f64() * 1e3
        );
    }
    match &detached {
        Some(l) if l.starts_with("ok detached") => eprintln!(
            "fntrace: detached from process {pid} in {:.1} ms (every site switched back off); \
             threads were stopped for at most {:.2} ms, the borrowed thread for {:.2} ms",
            timings.to_detached.as_secs_f64() * 1e3,
            timings.others_stopped.as_secs_f64() * 1e3,
            timings.borrowed.as_secs_f64() * 1e3,
        ),
        Some(l) => eprintln!(
            "fntrace: process {pid} did not confirm the detach ({}); it may have exited or exec'd",
            if l.is_empty() { "no answer" } else { l }
        ),
        None => eprintln!(
            "fntrace: process {pid} ended (exit or exec) during the window; the trace ends there"
        ),
    }
    // A trace that cannot be read (it printed why) fails the command.
    if crate::record::print_summary(&output) {
        Ok(ExitCode::SUCCESS)
    } else {
        Ok(ExitCode::from(2))
    }
}

/// The runtime's next answer line; its messages (`msg ...`, what it would
/// have printed on the program's standard error) are printed on ours.
fn answer(r: &mut impl BufRead) -> std::io::Result<String> {
    loop {
        let mut l = String::new();
        if r.read_line(&mut l)? == 0 {
            return Ok(String::new());
        }
        match l.trim_end().strip_prefix("msg ") {
            Some(m) => eprintln!("{m}"),
            None => return Ok(l.trim().to_string()),
        }
    }
}

/// Accepts the runtime's connection, checking that it comes from `pid`.
fn accept_from(l: &UnixListener, pid: i32, timeout: Duration) -> Result<UnixStream> {
    let start = Instant::now();
    loop {
        match l.accept() {
            Ok((s, _)) => {
                if fntrace_rt::control::peer(&s).is_some_and(|p| p.0 == pid) {
                    return Ok(s);
                }
                // Someone else: not our runtime.
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(Error::io_at("attach socket")(e)),
        }
        if start.elapsed() > timeout || !Path::new(&format!("/proc/{pid}")).exists() {
            return Err(Error::Invalid(format!(
                "process {pid} did not connect back within {} s after the runtime was loaded \
                 (it may have exited)",
                timeout.as_secs()
            )));
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Makes SIGINT, SIGTERM and SIGHUP set [`STOP`] instead of ending us.
fn catch_stop_signals() {
    STOP.store(0, Ordering::Relaxed);
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: installs a handler that only stores to an atomic.
        unsafe { libc::signal(sig, on_signal as *const () as libc::sighandler_t) };
    }
}

/// Waits for `duration`, a stop signal, or the connection to close (the
/// process ended). Returns whether the process ended.
fn wait_for_end(s: &UnixStream, duration: Option<Duration>) -> bool {
    let start = Instant::now();
    let ended = loop {
        if STOP.load(Ordering::Relaxed) != 0 {
            break false;
        }
        let left = match duration {
            Some(d) => match d.checked_sub(start.elapsed()) {
                Some(l) => l,
                None => break false,
            },
            None => Duration::from_millis(100),
        };
        let mut p = libc::pollfd {
            fd: s.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let ms = left.as_millis().clamp(1, 100) as i32;
        // SAFETY: polls one valid descriptor.
        let r = unsafe { libc::poll(&mut p, 1, ms) };
        if r > 0 && p.revents & (libc::POLLIN | libc::POLLHUP | libc::POLLERR) != 0 {
            let mut b = [0u8; 1];
            // SAFETY: peeks one byte into `b`.
            let n = unsafe {
                libc::recv(
                    s.as_raw_fd(),
                    b.as_mut_ptr().cast(),
                    1,
                    libc::MSG_PEEK | libc::MSG_DONTWAIT,
                )
            };
            if n <= 0 {
                break true;
            }
        }
    };
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: restores the default disposition.
        unsafe { libc::signal(sig, libc::SIG_DFL) };
    }
    ended
}

/// System calls that make a process or a thread: `clone`, `fork`,
/// `vfork`, `clone3`.
const FORK_SYSCALLS: [u64; 4] = [56, 57, 58, 435];

/// glibc's `fork()` and the helpers it calls with every malloc arena lock
/// held (the helpers are found only in a C library with its symbol table).
const FORK_SYMBOLS: &[&str] = &[
    "fork",
    "__libc_fork",
    "_Fork",
    "__fork",
    "__malloc_fork_lock_parent",
    "__malloc_fork_unlock_parent",
    "__malloc_fork_unlock_child",
];

/// How long `record -p` waits for a moment when no thread is inside
/// `fork()`.
const FORK_PATIENCE: Duration = Duration::from_secs(2);

/// Whether the stopped thread `tid` of `pid` is inside `fork()`: in one of
/// [`FORK_SYSCALLS`], or running the code of `fork_code` (glibc's fork
/// path). Such a thread may hold every malloc lock (glibc's fork takes
/// them all before its `clone` and lets go after it), and a `dlopen` run
/// while it is stopped, or on it, would wait for them forever.
fn in_fork(st: &ptrace::Stopped, pid: i32, tid: i32, fork_code: &[(u64, u64)]) -> bool {
    match st.regs(tid) {
        Ok(r) => {
            FORK_SYSCALLS.contains(&r.orig_rax)
                || fork_code.iter().any(|&(a, b)| (a..b).contains(&r.rip))
        }
        // The registers could not be read: the system call the kernel
        // reports, if any.
        Err(_) => std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/syscall"))
            .ok()
            .and_then(|s| s.split_whitespace().next()?.parse::<u64>().ok())
            .is_some_and(|n| FORK_SYSCALLS.contains(&n)),
    }
}

/// Stops every thread of `pid` at a moment when none is inside `fork()`
/// (see [`in_fork`]): while one is, every thread is let go for a few
/// milliseconds and stopped again, for at most [`FORK_PATIENCE`]. Returns
/// the stopped threads and when the successful stop began (`Instant` and
/// CLOCK_MONOTONIC ns).
fn stop_outside_fork(
    pid: i32,
    fork_code: &[(u64, u64)],
) -> Result<(ptrace::Stopped, Instant, u64)> {
    let start = Instant::now();
    let mut tries = 0u64;
    loop {
        let stop_start = Instant::now();
        let stop_ns = fntrace_rt::clock::monotonic_ns();
        let mut st = ptrace::Stopped::all(pid).map_err(|e| Error::Invalid(e.to_string()))?;
        if !st
            .tids()
            .iter()
            .any(|&tid| in_fork(&st, pid, tid, fork_code))
        {
            return Ok((st, stop_start, stop_ns));
        }
        st.release();
        if STOP.load(Ordering::Relaxed) != 0 {
            return Err(Error::Invalid(format!(
                "process {pid}: fntrace was asked to stop before it attached; the process was \
                 left running untouched"
            )));
        }
        if start.elapsed() >= FORK_PATIENCE {
            return Err(Error::Invalid(format!(
                "process {pid} kept forking: could not find a moment when no thread was inside \
                 fork() within {} s; the process was left running untouched",
                FORK_PATIENCE.as_secs()
            )));
        }
        // 5 to 15 ms, varied so as not to keep meeting a periodic fork.
        std::thread::sleep(Duration::from_millis(5 + tries * 7 % 11));
        tries += 1;
    }
}

/// Ranks a stopped thread for borrowing: lower is better.
fn rank(st: &ptrace::Stopped, tid: i32, pid: i32, libc_range: &[(u64, u64)]) -> u32 {
    let Ok(r) = st.regs(tid) else { return 9 };
    let in_libc = libc_range.iter().any(|&(a, b)| (a..b).contains(&r.rip));
    // Memory-management calls may be made by malloc with a lock held.
    let mm = matches!(r.orig_rax, 9..=12 | 25 | 28);
    let in_syscall = r.orig_rax != u64::MAX;
    let main = u32::from(tid != pid);
    match (in_syscall && !mm, in_libc) {
        (true, _) => main,
        (false, false) => 2 + main,
        (false, true) => 4 + main,
    }
}

/// Executable ranges of glibc's C library and loader in `pid`.
fn libc_ranges(pid: i32) -> Vec<(u64, u64)> {
    let Ok(maps) = std::fs::read_to_string(format!("/proc/{pid}/maps")) else {
        return vec![];
    };
    maps.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let p = Path::new(f.get(5)?);
            let name = p.file_name()?.to_str()?;
            if !(f.get(1)?.contains('x') && (is_libc(p) || name.starts_with("ld-linux"))) {
                return None;
            }
            let (a, b) = f[0].split_once('-')?;
            Some((
                u64::from_str_radix(a, 16).ok()?,
                u64::from_str_radix(b, 16).ok()?,
            ))
        })
        .collect()
}

/// Loads the runtime into `pid` and hands it the configuration.
fn inject(
    pid: i32,
    preload: &Path,
    handover: &[u8],
    plan: std::thread::JoinHandle<Vec<fixup::Span>>,
    t: &mut Timings,
    t0: Instant,
) -> Result<()> {
    let objs = mapped_objects(pid);
    let libc_obj = objs
        .iter()
        .find(|m| is_libc(&m.path))
        .ok_or_else(|| Error::Invalid(format!("process {pid} has no glibc C library mapped (a static executable cannot load the runtime)")))?;
    let (dlopen, legacy) = match symbol_address(libc_obj, "dlopen") {
        Some(a) => (a, false),
        None => (
            symbol_address(libc_obj, "__libc_dlopen_mode").ok_or_else(|| {
                Error::Invalid(format!(
                    "{}: neither dlopen nor __libc_dlopen_mode found",
                    libc_obj.path.display()
                ))
            })?,
            true,
        ),
    };
    let dlerror = symbol_address(libc_obj, "dlerror");
    let fork_code = symbol_ranges(libc_obj, FORK_SYMBOLS);
    let ranges = libc_ranges(pid);
    // Found before anything is stopped: the borrowed thread only waits
    // for the calls themselves.
    let attach_offset = symbol_offset(preload, "fntrace_attach").ok_or_else(|| {
        Error::Invalid(format!(
            "{}: no fntrace_attach (an older runtime?)",
            preload.display()
        ))
    })?;
    t.marks.push(("symbols", t0.elapsed()));
    let plan = plan.join().unwrap_or_default();
    t.marks.push(("plan", t0.elapsed()));
    let (mut st, stop_start, stop_ns) = stop_outside_fork(pid, &fork_code)?;
    t.stop_window.0 = stop_ns;
    t.marks.push(("stop", t0.elapsed()));
    t.fixed = fixup::apply(&st, &plan);
    t.marks.push(("fixup", t0.elapsed()));
    let mut tids = st.tids();
    tids.sort_by_key(|&tid| rank(&st, tid, pid, &ranges));
    let tid = tids[0];
    st.release_all_but(tid);
    t.stop_window.1 = fntrace_rt::clock::monotonic_ns();
    t.others_stopped = stop_start.elapsed();
    t.marks.push(("release", t0.elapsed()));
    let fail = |e: ptrace::PtraceError| Error::Invalid(e.to_string());
    let mut path = preload.as_os_str().as_encoded_bytes().to_vec();
    path.push(0);
    // RTLD_NOW; the legacy internal entry also wants __RTLD_DLOPEN.
    let mode = if legacy { 2 | 0x8000_0000 } else { 2 };
    let handle = st
        .call(
            tid,
            dlopen,
            &[ptrace::DATA, mode],
            &path,
            CALL_TIMEOUT,
            &STOP,
        )
        .map_err(fail)?;
    t.marks.push(("dlopen", t0.elapsed()));
    if handle == 0 {
        let why = match dlerror {
            Some(f) => match st.call(tid, f, &[], &[], CALL_TIMEOUT, &STOP) {
                Ok(0) | Err(_) => String::new(),
                Ok(p) => read_cstr(&st, p),
            },
            None => String::new(),
        };
        return Err(Error::Invalid(format!(
            "process {pid}: dlopen of {} failed: {}",
            preload.display(),
            if why.is_empty() {
                "no reason given"
            } else {
                &why
            }
        )));
    }
    let ours = mapped_objects(pid)
        .into_iter()
        .find(|m| std::fs::canonicalize(&m.path).is_ok_and(|p| p == preload))
        .ok_or_else(|| {
            Error::Invalid(format!(
                "process {pid}: {} is not mapped after dlopen",
                preload.display()
            ))
        })?;
    let attach = ours.start + attach_offset;
    let r = st
        .call(
            tid,
            attach,
            &[ptrace::DATA, handover.len() as u64],
            handover,
            CALL_TIMEOUT,
            &STOP,
        )
        .map_err(fail)? as u32 as i32;
    st.release();
    t.borrowed = stop_start.elapsed();
    t.marks.push(("handover", t0.elapsed()));
    match r {
        config::ATTACH_STARTED => Ok(()),
        config::ATTACH_BUSY => Err(Error::Invalid(format!(
            "process {pid} is already being recorded by another `fntrace record -p` (try again \
             after it detaches)"
        ))),
        config::ATTACH_RECORDING => Err(Error::Invalid(format!(
            "process {pid} already records (it was started under `fntrace record` or started \
             recording itself); use `fntrace live {pid}` to change what it records"
        ))),
        config::ATTACH_NO_THREAD => Err(Error::Invalid(format!(
            "process {pid}: the runtime could not start its thread"
        ))),
        other => Err(Error::Invalid(format!(
            "process {pid}: the runtime refused to attach (code {other})"
        ))),
    }
}
