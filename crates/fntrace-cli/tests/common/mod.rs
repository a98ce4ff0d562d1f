//! Helpers shared by the integration tests: the `fntrace` binary under
//! test and the preload library of the same profile next to it.

#![allow(dead_code)]

use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

/// The shared C workload (`fib(n)` makes 2*fib(n+1)-1 calls).
pub const FIB_C: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../examples/workloads/fib.c"
);
/// The same workload in Rust.
pub const FIB_RS: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../examples/workloads/fib.rs"
);

/// The `fntrace` binary built for these tests.
pub fn fntrace_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_fntrace"))
}

/// Builds `libfntrace_preload.so` of the same profile next to the binaries
/// (once per test binary; tests run in any order and a clean checkout has
/// none yet) and returns its path.
pub fn preload() -> PathBuf {
    static P: OnceLock<PathBuf> = OnceLock::new();
    P.get_or_init(|| {
        let dir = fntrace_bin().parent().unwrap().to_path_buf();
        let mut c = Command::new(env!("CARGO"));
        c.args(["build", "-q", "-p", "fntrace-preload"]);
        if dir.ends_with("release") {
            c.arg("--release");
        }
        let st = c.status().expect("cargo");
        assert!(st.success(), "building fntrace-preload failed");
        let p = dir.join("libfntrace_preload.so");
        assert!(p.is_file(), "{} missing", p.display());
        p
    })
    .clone()
}

/// `fntrace record -o DATA OPTS -- BIN ARGS` with this profile's preload
/// library, ready to run.
pub fn record_cmd(
    data: &std::path::Path,
    opts: &[&str],
    bin: &std::path::Path,
    args: &[&str],
) -> Command {
    let mut c = Command::new(fntrace_bin());
    c.arg("record")
        .arg("-o")
        .arg(data)
        .args(opts)
        .arg("--")
        .arg(bin)
        .args(args)
        .env("FNTRACE_PRELOAD", preload());
    c
}

/// Runs a build tool (`RUSTC_BOOTSTRAP=1` set for rustc's `-Z` flags) and
/// returns its standard output; a missing tool or a failure fails the
/// test, naming it.
pub fn tool(tool: &str, args: &[&str]) -> String {
    let out = Command::new(tool)
        .args(args)
        .env("RUSTC_BOOTSTRAP", "1")
        .output()
        .unwrap_or_else(|e| panic!("{tool} is required for this test: {e}"));
    assert!(
        out.status.success(),
        "{tool} {args:?} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}
