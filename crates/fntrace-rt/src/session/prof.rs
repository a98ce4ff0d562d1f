//! The profiling-timer guard of start-up (`gcc -pg` programs that
//! `exec`): part of `session`.

use crate::config::ENV_PROF_EXEC;

/// Keeps an inherited profiling timer from killing the process while the
/// runtime starts. A `gcc -pg` program that `exec`s keeps its
/// `ITIMER_PROF` timer running into the new image, whose `SIGPROF`
/// handler glibc installs only in the program's own start-up code
/// (`__monstartup`, called from the executable's `_init`), after ours: a
/// tick during our start-up, or between its end and `__monstartup`, would
/// find the default action and terminate the process. While the timer is
/// armed and the action is the default, `SIGPROF` is ignored. If the new
/// image calls `__monstartup` itself, it stays ignored until glibc
/// replaces the action with its own handler (a lost tick only loses one
/// histogram sample); otherwise the default comes back when the guard is
/// dropped, so a program that would have died of the signal still does.
///
/// The ticks before this guard exists (in the kernel's `exec`, in `ld.so`)
/// are covered by the image that `exec`ed: `session::exec` ignores
/// `SIGPROF` across the `exec` (an ignored action survives it) and marks
/// the environment with `config::ENV_PROF_EXEC`; such an inherited "ignored" is
/// then treated here as the default it stands for.
pub(crate) struct ProfTimerGuard(bool);

impl ProfTimerGuard {
    /// Ignores `SIGPROF` while the timer is armed and the action is the
    /// default (see the type's documentation).
    pub(crate) fn new() -> ProfTimerGuard {
        let marked = take_exec_marker();
        // SAFETY: getitimer and sigaction only read and write the local
        // structures passed to them.
        unsafe {
            let mut t: libc::itimerval = core::mem::zeroed();
            if libc::getitimer(libc::ITIMER_PROF, &mut t) != 0
                || (t.it_value.tv_sec == 0 && t.it_value.tv_usec == 0)
            {
                return ProfTimerGuard(false);
            }
            let mut old: libc::sigaction = core::mem::zeroed();
            if libc::sigaction(libc::SIGPROF, core::ptr::null(), &mut old) != 0 {
                return ProfTimerGuard(false);
            }
            // Ignored by the image that exec'd us: it stands for the
            // default the exec would have left.
            let ignored_for_us = marked && old.sa_sigaction == libc::SIG_IGN;
            if old.sa_sigaction != libc::SIG_DFL && !ignored_for_us {
                return ProfTimerGuard(false);
            }
            libc::signal(libc::SIGPROF, libc::SIG_IGN);
        }
        ProfTimerGuard(!main_image_starts_gmon())
    }
}

impl Drop for ProfTimerGuard {
    fn drop(&mut self) {
        if self.0 {
            // SAFETY: restores the default action we replaced.
            unsafe { libc::signal(libc::SIGPROF, libc::SIG_DFL) };
        }
    }
}

/// Whether the image that exec'd us ignored `SIGPROF` across the `exec`
/// (the marker is removed, so our own children do not see it).
fn take_exec_marker() -> bool {
    let marked = std::env::var_os(ENV_PROF_EXEC).is_some_and(|v| v == "1");
    if marked {
        // SAFETY: start-up, before the program's own code runs: no other
        // thread of the program reads the environment yet.
        unsafe { std::env::remove_var(ENV_PROF_EXEC) };
    }
    marked
}

/// Whether the main executable imports `__monstartup` (it was linked with
/// `-pg`, and its start-up code installs glibc's `SIGPROF` handler).
fn main_image_starts_gmon() -> bool {
    use object::{Object as _, ObjectSymbol as _};
    let Some(map) = crate::procinfo::FileMap::open(std::path::Path::new("/proc/self/exe")) else {
        return false;
    };
    let Ok(obj) = object::File::parse(map.as_slice()) else {
        return false;
    };
    obj.dynamic_symbols()
        .any(|s| s.is_undefined() && s.name() == Ok("__monstartup"))
}
