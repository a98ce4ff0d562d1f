//! Attaching to a running process: the runtime's side of `fntrace record
//! -p PID`.
//!
//! The controller injects this library into the process (`dlopen` called
//! through ptrace) and calls [`fntrace_attach`] with the configuration
//! handed over at run time (`NAME=VALUE` pairs, [`config::decode_handover`]),
//! never through the environment. That call only starts the
//! `fntrace-attach` thread and returns, so the thread the controller
//! borrowed goes back to the program at once. The attach thread:
//!
//! 1. connects to the controller's abstract Unix socket (named in the
//!    hand-over; the controller checks that the peer is this process);
//! 2. starts a session from the configuration ([`super::start`]): the trace
//!    file, the policy, XRay sleds and patchable sites switched on while
//!    the program's threads run, the control socket of `fntrace live`;
//! 3. takes over the compiler hooks the program calls through its GOT
//!    (`mcount`, `__fentry__`, `__cyg_profile_func_*`, bound to glibc's
//!    definitions at start-up) with [`crate::patch::got`], and, when it
//!    did, the unwinder's entry points too (hooked frames get hijacked
//!    return addresses, which unwinding must see restored);
//! 4. answers `ok recording ...` and waits for `stop` (or for the socket
//!    to close: the controller died);
//! 5. detaches: a [`Framed::Detach`](fntrace_format::event::Framed::Detach)
//!    record and the recording ended (in one step, for every thread),
//!    then hook slots back to glibc, every site and sled off, `ok off
//!    ...`; then the trace file completed, `ok detached ...`.
//!
//! Switching on, the order is the reverse: sites and sleds are switched on
//! while nothing records, then the session starts in one step
//! (`super::start_attached`). Either way no call tree is recorded with
//! some functions switched and others not yet.
//!
//! Calls in flight when recording starts have no entry in the trace: their
//! exits are dropped (an exit that matches no open frame of the thread is
//! never written), so the first frames of each thread are those entered
//! in the window. Calls still open when it stops stay open in the trace
//! (readers count them as calls without exit, ending at the window's end).
//! The library stays loaded after detach: frames entered during the window
//! may still return through its exit trampoline, and the unwinder's slots
//! keep pointing at its pass-through wrappers for them.

use std::collections::HashMap;
use std::ffi::OsString;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use fntrace_format::event::DetachReason;

use crate::config::{
    self, ATTACH_BUSY, ATTACH_INVALID, ATTACH_NO_THREAD, ATTACH_RECORDING, ATTACH_STARTED, Config,
};
use crate::patch::got::{self, Redirected};
use crate::recorder;

/// Set from [`fntrace_attach`] until detach finishes.
static ATTACHED: AtomicBool = AtomicBool::new(false);
/// Hook slots redirected for the window (restored at detach).
static HOOK_SLOTS: Mutex<Vec<Redirected>> = Mutex::new(Vec::new());
/// Unwinder slots redirected (kept after detach, see the module doc).
static UNWIND_SLOTS: Mutex<Vec<Redirected>> = Mutex::new(Vec::new());

/// Entry point the controller calls in the process (through ptrace, on a
/// thread it borrowed): `handover` points to `len` bytes of hand-over
/// pairs. Starts the attach thread and returns at once
/// ([`config::ATTACH_STARTED`] or a negative `config::ATTACH_*` code).
///
/// # Safety
/// `handover` must point to `len` readable bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fntrace_attach(handover: *const u8, len: usize) -> i32 {
    if handover.is_null() || len > 1 << 20 {
        return ATTACH_INVALID;
    }
    // SAFETY: the caller's contract.
    let bytes = unsafe { core::slice::from_raw_parts(handover, len) }.to_vec();
    if ATTACHED.swap(true, Ordering::AcqRel) {
        return ATTACH_BUSY;
    }
    if recorder::session_active() {
        ATTACHED.store(false, Ordering::Release);
        return ATTACH_RECORDING;
    }
    crate::diag::steps_start();
    crate::clock::anchor();
    match crate::procinfo::with_async_signals_blocked(|| {
        std::thread::Builder::new()
            .name("fntrace-attach".into())
            .spawn(move || {
                recorder::guarded(|| run(&bytes));
            })
    }) {
        Ok(_) => ATTACH_STARTED,
        Err(_) => {
            ATTACHED.store(false, Ordering::Release);
            ATTACH_NO_THREAD
        }
    }
}

/// Whether an attached recording is running.
pub fn attached() -> bool {
    ATTACHED.load(Ordering::Acquire)
}

/// At process exit during the window: the trace says why it ends.
pub(crate) fn at_exit() {
    if attached() {
        recorder::note_detach(DetachReason::ProcessExit.code());
    }
}

/// Connects to the controller's abstract socket `name`.
fn connect(name: &[u8]) -> std::io::Result<UnixStream> {
    use std::os::fd::{FromRawFd, IntoRawFd};
    use std::os::linux::net::SocketAddrExt;
    let addr = std::os::unix::net::SocketAddr::from_abstract_name(name)?;
    let s = UnixStream::connect_addr(&addr)?;
    // Out of the way of the program's own descriptor numbers.
    // SAFETY: the parked descriptor is the stream's, now owned here.
    Ok(unsafe { UnixStream::from_raw_fd(crate::ownfd::park(s.into_raw_fd())) })
}

/// The attach thread's work (see the module doc).
fn run(handover: &[u8]) {
    crate::diag::step("thread");
    // Registering for the membarrier that code patching needs waits for an
    // RCU grace period in a multi-threaded process (6–16 ms measured
    // here): it waits on a thread of its own while the runtime starts
    // (made here, not on the thread the controller borrowed, which goes
    // back to the program sooner).
    crate::patch::sync::register_early();
    let vars: HashMap<String, OsString> = config::decode_handover(handover).into_iter().collect();
    let Some(sock) = vars.get(config::HANDOVER_SOCKET).cloned() else {
        ATTACHED.store(false, Ordering::Release);
        return;
    };
    // Our first descriptor parked high makes the descriptor table grow,
    // which waits for an RCU grace period in a multi-threaded process
    // (5–20 ms measured here): the connection is made on a thread of its
    // own while this one switches the code on.
    let conn = crate::procinfo::with_async_signals_blocked(|| {
        std::thread::Builder::new()
            .name("fntrace-connect".into())
            .stack_size(64 << 10)
            .spawn(move || connect(sock.as_encoded_bytes()))
    });
    let controller: u64 = vars
        .get(config::HANDOVER_CONTROLLER)
        .and_then(|v| v.to_str()?.parse().ok())
        .unwrap_or(0);
    // The program's standard error is not ours to write on: messages go
    // to the controller.
    crate::diag::capture();
    let started = start(&vars, controller);
    let connected = match conn {
        Ok(h) => h.join().ok().and_then(Result::ok),
        Err(_) => connect(vars[config::HANDOVER_SOCKET].as_encoded_bytes()).ok(),
    };
    crate::diag::step("connected");
    let Some((stream, mut out)) = connected.and_then(|s| s.try_clone().ok().map(|out| (s, out)))
    else {
        // Nobody to report to: whatever started goes back off.
        if started.is_ok() {
            detach(DetachReason::ControllerGone, &mut |_| {});
        } else {
            ATTACHED.store(false, Ordering::Release);
        }
        crate::diag::release();
        return;
    };
    let send_held = |out: &mut UnixStream| {
        for m in crate::diag::take() {
            let _ = writeln!(out, "msg {m}");
        }
    };
    send_held(&mut out);
    match started {
        Ok(msg) => {
            if writeln!(out, "ok recording {msg}").is_err() {
                detach(DetachReason::ControllerGone, &mut |_| {});
                crate::diag::release();
                return;
            }
        }
        Err(msg) => {
            let _ = writeln!(out, "error: {msg}");
            crate::diag::release();
            ATTACHED.store(false, Ordering::Release);
            return;
        }
    }
    let mut reason = DetachReason::ControllerGone;
    for line in BufReader::new(stream).lines() {
        let Ok(line) = line else { break };
        match line.trim() {
            "stop" => {
                reason = DetachReason::Asked;
                break;
            }
            "status" => {
                send_held(&mut out);
                let (total, on, _) = crate::dynamic::site_counts();
                let _ = writeln!(
                    out,
                    "ok sites {on}/{total} hook-slots {}",
                    HOOK_SLOTS.lock().unwrap_or_else(|e| e.into_inner()).len()
                );
            }
            _ => {
                let _ = writeln!(out, "error: unknown command (stop, status)");
            }
        }
    }
    let summary = detach(reason, &mut |off| {
        let _ = writeln!(out, "ok off {off}");
    });
    for m in crate::diag::release() {
        let _ = writeln!(out, "msg {m}");
    }
    let _ = writeln!(out, "ok detached {summary}");
}

/// Starts the session and takes over the hooks; returns a description
/// (`path=... sites=... xray=... hooks=...`) or the reason it failed.
fn start(vars: &HashMap<String, OsString>, controller: u64) -> Result<String, String> {
    let mut cfg = match Config::from_vars(|n| vars.get(n).cloned()) {
        Ok(c) => c,
        Err(e) => {
            return Err(e
                .invalid
                .iter()
                .map(|b| b.to_string())
                .collect::<Vec<_>>()
                .join("; "));
        }
    };
    // A running program's `call mcount`/`call __fentry__` cannot be
    // rewritten while its threads run; they are taken over through the GOT.
    cfg.keep_calls = true;
    // The hooks are taken over while nothing records yet, like the sites.
    let hooks = if vars.get(config::HANDOVER_HOOKS).is_some_and(|v| v == "0") {
        0
    } else {
        take_over_hooks()
    };
    crate::diag::step("hooks");
    let path = match super::start_attached(&cfg) {
        Ok(p) => p,
        Err(e) => {
            let slots = std::mem::take(&mut *HOOK_SLOTS.lock().unwrap_or_else(|e| e.into_inner()));
            got::restore(&slots);
            return Err(format!("cannot record: {e}"));
        }
    };
    recorder::note_attach(controller);
    let (total, on, bad) = crate::dynamic::site_counts();
    let xray = crate::xray::patch::patched_functions().len();
    Ok(format!(
        "path={} sites={on}/{total} unusable-sites={bad} xray={xray} hook-slots={hooks} steps={} traps={}",
        path.display(),
        crate::diag::steps_take(),
        crate::patch::int3::traps()
    ))
}

/// The object holding this library (its own slots are never redirected).
fn own_object() -> Option<std::path::PathBuf> {
    // SAFETY: Dl_info is plain data (pointers and integers): all-zero is
    // a valid value.
    let mut info: libc::Dl_info = unsafe { core::mem::zeroed() };
    // SAFETY: dladdr fills `info` for an address of this library.
    if unsafe { libc::dladdr(fntrace_attach as *const libc::c_void, &mut info) } == 0
        || info.dli_fname.is_null()
    {
        return None;
    }
    // SAFETY: dladdr returned a NUL-terminated path owned by the loader.
    let p = unsafe { std::ffi::CStr::from_ptr(info.dli_fname) };
    std::fs::canonicalize(std::ffi::OsStr::new(p.to_str().ok()?)).ok()
}

/// This library's own definition of `name`. Taking the address of an
/// exported function in Rust goes through symbol lookup, which for a
/// library loaded with `dlopen` finds the program's definitions first
/// (glibc's `__fentry__`, libgcc_s's `_Unwind_*`); `dlsym` on this
/// library's handle searches it first.
fn own_symbol(own: &std::path::Path, name: &str) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(own.as_os_str().as_bytes()).ok()?;
    let name = std::ffi::CString::new(name).ok()?;
    // SAFETY: NUL-terminated strings; RTLD_NOLOAD only returns a handle
    // to this already loaded library (a reference, dropped below).
    let h = unsafe { libc::dlopen(path.as_ptr(), libc::RTLD_NOW | libc::RTLD_NOLOAD) };
    if h.is_null() {
        return None;
    }
    // SAFETY: a valid handle and a NUL-terminated name.
    let f = unsafe { libc::dlsym(h, name.as_ptr()) };
    // SAFETY: drops the reference RTLD_NOLOAD took.
    unsafe { libc::dlclose(h) };
    (!f.is_null()).then_some(f as u64)
}

/// Redirects the program's hook slots to this runtime; returns how many.
fn take_over_hooks() -> usize {
    let Some(own) = own_object() else {
        return 0;
    };
    let is_own = |p: &std::path::Path| std::fs::canonicalize(p).is_ok_and(|c| c == own);
    let resolve = |names: &[&'static str]| -> Vec<(&'static str, u64)> {
        names
            .iter()
            .filter_map(|&n| Some((n, own_symbol(&own, n)?)))
            .collect()
    };
    // `__cyg_profile_func_exit` before `_enter`: an entry recorded must
    // never miss its exit (an exit without a recorded entry is dropped).
    let mut done = got::redirect(&resolve(&["__cyg_profile_func_exit"]), &is_own);
    let hooks = resolve(&[
        "mcount",
        "_mcount",
        "__fentry__",
        "__cyg_profile_func_enter",
    ]);
    done.extend(got::redirect(&hooks, &is_own));
    let n = done.len();
    let hijacks = done
        .iter()
        .any(|r| !r.symbol.starts_with("__cyg_profile_func_"));
    HOOK_SLOTS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .extend(done);
    if hijacks {
        let unwinders = resolve(&[
            "_Unwind_RaiseException",
            "_Unwind_Resume",
            "_Unwind_Resume_or_Rethrow",
            "_Unwind_ForcedUnwind",
            "_Unwind_SetIP",
            "_Unwind_Backtrace",
            "backtrace",
        ]);
        // libgcc_s defines them (its own calls stay inside it); glibc's
        // `backtrace` calls `_Unwind_Backtrace` through libgcc_s.
        let skip = |p: &std::path::Path| {
            is_own(p)
                || p.file_name()
                    .and_then(|f| f.to_str())
                    .is_some_and(|f| f.starts_with("libgcc_s"))
        };
        let u = got::redirect(&unwinders, &skip);
        UNWIND_SLOTS
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend(u);
    }
    n
}

/// Switches everything back off and finishes the session; returns a
/// summary (`threads=... lost=... bytes=...`). `off` is told as soon as
/// the code is back (`sites-off=... xray-off=... hook-slots-restored=...
/// steps=...`), before the trace file is completed.
fn detach(reason: DetachReason, off: &mut dyn FnMut(&str)) -> String {
    // The recording ends first, in one step, so that the trace never
    // holds a call tree with some functions already switched off; then
    // the code goes back (hooks and sites that still run meanwhile record
    // nothing), and only then is the file completed (counting what the
    // helper has not counted yet can take tens of ms with a large trace:
    // the program runs at full speed meanwhile).
    crate::diag::steps_start();
    recorder::note_detach(reason.code());
    let ended = super::end();
    crate::diag::step("end");
    let mut slots = std::mem::take(&mut *HOOK_SLOTS.lock().unwrap_or_else(|e| e.into_inner()));
    // Entries stop being recorded before exits do (see take_over_hooks).
    slots.sort_by_key(|r| r.symbol == "__cyg_profile_func_exit");
    got::restore(&slots);
    // Library calls (`--libcalls`) go back to their functions too.
    crate::libcalls::stop();
    crate::diag::step("hooks");
    let sites = crate::dynamic::stop();
    crate::diag::step("sites");
    let sleds = crate::xray::api::stop_recording();
    crate::diag::step("xray");
    crate::control::socket::stop();
    crate::diag::step("control");
    off(&format!(
        "sites-off={} xray-off={sleds} hook-slots-restored={} steps={}",
        sites.off,
        slots.len(),
        crate::diag::steps_take()
    ));
    let s = ended.map(super::complete);
    ATTACHED.store(false, Ordering::Release);
    match s {
        Some(s) => format!(
            "threads={} lost={} bytes={} sites-off={} xray-off={sleds} hook-slots-restored={}",
            s.threads,
            s.lost_events,
            s.bytes,
            sites.off,
            slots.len(),
        ),
        None => "no-session".into(),
    }
}
