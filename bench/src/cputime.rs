//! CPU time of a child run, shared by the benchmark binaries that time in
//! CPU time rather than wall time (`time-filter`, `scaling`): a loaded
//! machine does not inflate it. Included with `#[path]` (the bench crate
//! has no library target).

use std::process::Command;

/// Runs `cmd` (its standard output discarded) and returns the CPU seconds
/// (user + system) it used; panics if it fails.
pub fn cpu_seconds(mut cmd: Command) -> f64 {
    #[allow(clippy::zombie_processes)] // reaped by `wait4` below
    let child = cmd
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("run");
    let mut status = 0;
    // `wait4` reaps the child (`Child::wait` cannot report its resource
    // usage).
    // SAFETY: an all-zero rusage is valid; wait4 fills it for our child.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: waiting for our own child with valid out-pointers.
    let r = unsafe { libc::wait4(child.id() as i32, &mut status, 0, &mut ru) };
    assert!(r > 0 && status == 0, "the workload failed");
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// The median of `v` (not empty).
pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}
