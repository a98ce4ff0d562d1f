//! Helpers shared by the benchmarks: building the workloads and timing
//! whole processes.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

/// Runs per measurement (the best is kept).
pub const RUNS: usize = 7;

/// Builds `examples/workloads/fib.c` with `cc -O2 -fno-optimize-sibling-calls`
/// and `flags` into `dir/name`.
pub fn build(cc: &str, dir: &Path, name: &str, flags: &[&str]) -> PathBuf {
    let src = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../examples/workloads/fib.c"
    );
    build_src(cc, dir, name, src, flags)
}

/// Builds the C file `src` with `cc -O2 -fno-optimize-sibling-calls` and
/// `flags` into `dir/name`.
pub fn build_src(cc: &str, dir: &Path, name: &str, src: &str, flags: &[&str]) -> PathBuf {
    let out = dir.join(name);
    let st = Command::new(cc)
        .args(["-O2", "-fno-optimize-sibling-calls"])
        .args(flags)
        .arg("-o")
        .arg(&out)
        .arg(src)
        .status()
        .unwrap_or_else(|e| panic!("{cc}: {e}"));
    assert!(st.success(), "{cc} {flags:?} {src}");
    out
}

/// Builds the release `libfntrace_preload.so` next to the binaries and
/// returns its path.
pub fn preload() -> PathBuf {
    let st = Command::new(env!("CARGO"))
        .args(["build", "-q", "--release", "-p", "fntrace-preload"])
        .status()
        .unwrap();
    assert!(st.success());
    PathBuf::from(env!("CARGO_BIN_EXE_fntrace"))
        .parent()
        .unwrap()
        .join("libfntrace_preload.so")
}

pub fn gcc(dir: &Path, name: &str, flags: &[&str]) -> PathBuf {
    build("gcc", dir, name, flags)
}

/// Best wall time of `RUNS` runs, in seconds.
pub fn best(dir: &Path, make: impl FnMut() -> Command) -> f64 {
    best_of(dir, RUNS, make)
}

/// Best wall time of `runs` runs, in seconds.
pub fn best_of(dir: &Path, runs: usize, mut make: impl FnMut() -> Command) -> f64 {
    (0..runs)
        .map(|_| {
            let mut c = make();
            c.current_dir(dir)
                .stdout(Stdio::null())
                .stderr(Stdio::null());
            // Outputs are removed first, as `fntrace record` does.
            let _ = std::fs::remove_file(dir.join("t.data"));
            let _ = std::fs::remove_dir_all(dir.join("uftrace.data"));
            let t = Instant::now();
            let st = c.status().expect("run");
            let e = t.elapsed().as_secs_f64();
            assert!(st.success(), "{c:?} failed");
            e
        })
        .fold(f64::INFINITY, f64::min)
}

pub fn size(p: &Path) -> u64 {
    if p.is_dir() {
        std::fs::read_dir(p)
            .map(|d| d.filter_map(|e| e.ok()).map(|e| size(&e.path())).sum())
            .unwrap_or(0)
    } else {
        std::fs::metadata(p).map(|m| m.len()).unwrap_or(0)
    }
}
