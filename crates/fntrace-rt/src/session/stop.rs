//! Stopping a recording before the program ends (`fntrace record
//! --duration 30s`): a timer thread that, at the deadline, marks the trace
//! as stopped, finishes the session and switches every patched site off
//! again, while the program runs on at the speed it had untraced (compiler
//! hooks that cannot be switched off return at once without a session).
//!
//! The deadline is absolute (CLOCK_MONOTONIC), so a child created by
//! `fork`, which records into its own file, stops at the same moment.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use fntrace_format::event::{Framed, SETTING_STOPPED};

use crate::{clock, recorder};

/// CLOCK_MONOTONIC nanoseconds at which recording stops (0: never).
static DEADLINE: AtomicU64 = AtomicU64::new(0);

/// Stops the session `ns` nanoseconds from now (see the module docs).
pub(crate) fn after(ns: u64) {
    DEADLINE.store(clock::monotonic_ns().saturating_add(ns), Ordering::Relaxed);
    spawn_timer();
}

/// In a child just created by `fork`: the parent's timer thread does not
/// exist here; start one for the same deadline.
pub(crate) fn after_fork() {
    if DEADLINE.load(Ordering::Relaxed) != 0 {
        spawn_timer();
    }
}

fn spawn_timer() {
    let r = crate::procinfo::with_async_signals_blocked(|| {
        std::thread::Builder::new()
            .name("fntrace-stop".into())
            .spawn(|| {
                loop {
                    let (now, at) = (clock::monotonic_ns(), DEADLINE.load(Ordering::Relaxed));
                    if now >= at {
                        break;
                    }
                    std::thread::sleep(Duration::from_nanos(at - now));
                }
                stop_now("duration");
            })
    });
    if let Err(e) = r {
        crate::diag::diag!("fntrace: cannot start the --duration timer: {e}; recording runs on");
    }
}

/// Stops the active session now, noting `why` in the trace: its final
/// block is written and every patched site switched off. Returns whether
/// a session was active.
pub fn stop_now(why: &str) -> bool {
    if !recorder::note_meta(&Framed::Setting {
        key: SETTING_STOPPED.as_bytes(),
        value: why.as_bytes(),
    }) {
        return false;
    }
    super::finish();
    super::switch_off();
    true
}
