//! Where the runtime's messages go (a pattern a mechanism rejects, sites
//! that cannot be used, a control socket that cannot be made): standard
//! error, or — while the runtime is attached to a process that was already
//! running — a buffer the attach thread sends to its controller, so that
//! the program's own standard error stays what it was. A leaf.

use std::sync::Mutex;

/// Messages held while capturing (`None`: not capturing).
static HELD: Mutex<Option<Vec<String>>> = Mutex::new(None);

/// Emits one message line (already prefixed `fntrace: ` by the caller).
pub fn message(args: std::fmt::Arguments<'_>) {
    let line = args.to_string();
    let mut held = HELD.lock().unwrap_or_else(|e| e.into_inner());
    match held.as_mut() {
        // Bounded: a flood of messages keeps the first ones.
        Some(v) if v.len() < 1000 => v.push(line),
        Some(_) => {}
        None => {
            drop(held);
            eprintln!("{line}");
        }
    }
}

/// Starts holding messages instead of writing them.
pub fn capture() {
    let mut held = HELD.lock().unwrap_or_else(|e| e.into_inner());
    held.get_or_insert_with(Vec::new);
}

/// The messages held so far (holding continues).
pub fn take() -> Vec<String> {
    let mut held = HELD.lock().unwrap_or_else(|e| e.into_inner());
    held.as_mut().map(std::mem::take).unwrap_or_default()
}

/// Stops holding messages; returns those still held.
pub fn release() -> Vec<String> {
    HELD.lock()
        .unwrap_or_else(|e| e.into_inner())
        .take()
        .unwrap_or_default()
}

/// `eprintln!` for the runtime's messages (see the module doc).
macro_rules! diag {
    ($($t:tt)*) => {
        $crate::diag::message(format_args!($($t)*))
    };
}
pub(crate) use diag;

/// Steps timed while attaching or detaching (`None`: not timing): names
/// and CLOCK_MONOTONIC nanoseconds, for the controller's benchmark.
static STEPS: Mutex<Option<Vec<(&'static str, u64)>>> = Mutex::new(None);

/// Starts timing steps (forgetting earlier ones).
pub fn steps_start() {
    STEPS_WANTED.store(true, std::sync::atomic::Ordering::Relaxed);
    // Not waiting for the lock either (see [`step`]).
    let mut s = match STEPS.try_lock() {
        Ok(s) => s,
        Err(std::sync::TryLockError::Poisoned(e)) => e.into_inner(),
        Err(std::sync::TryLockError::WouldBlock) => return,
    };
    *s = Some(vec![("start", crate::clock::monotonic_ns())]);
}

/// Set once start-up steps were asked for (`FNTRACE_STARTUP_STEPS=1`).
static STEPS_WANTED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Whether start-up steps were asked for (work done after start-up, on a
/// runtime thread, reports its time then too).
pub fn steps_wanted() -> bool {
    STEPS_WANTED.load(std::sync::atomic::Ordering::Relaxed)
}

/// Marks the end of step `name` (nothing unless timing).
///
/// Never waits for the lock: in a forked child, another thread of the
/// parent may have held it at the fork, and nobody would release it (a
/// child hung here, and its parent in `waitpid`). A step not noted is
/// only a missing line of start-up timing.
pub fn step(name: &'static str) {
    if !STEPS_WANTED.load(std::sync::atomic::Ordering::Relaxed) {
        return;
    }
    let mut s = match STEPS.try_lock() {
        Ok(s) => s,
        Err(std::sync::TryLockError::Poisoned(e)) => e.into_inner(),
        Err(std::sync::TryLockError::WouldBlock) => return,
    };
    if let Some(v) = s.as_mut()
        && v.len() < 64
    {
        v.push((name, crate::clock::monotonic_ns()));
    }
}

/// Stops timing; returns each step's duration as `name:ms,name:ms,...`.
pub fn steps_take() -> String {
    let v = STEPS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .take()
        .unwrap_or_default();
    v.windows(2)
        .map(|w| format!("{}:{:.2}", w[1].0, (w[1].1 - w[0].1) as f64 / 1e6))
        .collect::<Vec<_>>()
        .join(",")
}
