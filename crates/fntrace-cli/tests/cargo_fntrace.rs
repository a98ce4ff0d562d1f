//! `cargo fntrace run --instrument=mcount` on a fresh Cargo project
//! records and reports with no further steps; `--instrument=fentry` is
//! refused with the alternatives named.

use std::process::Command;

#[test]
fn cargo_fntrace_run_mcount_records_a_fresh_project() {
    let bin = std::path::PathBuf::from(env!("CARGO_BIN_EXE_cargo-fntrace"));
    let dir = bin.parent().unwrap();
    // The preload library must sit next to the binaries.
    let mut c = Command::new(env!("CARGO"));
    c.args(["build", "-q", "-p", "fntrace-preload"]);
    if dir.ends_with("release") {
        c.arg("--release");
    }
    assert!(c.status().unwrap().success());
    let d = tempfile::tempdir().unwrap();
    let proj = d.path().join("demo");
    std::fs::create_dir_all(proj.join("src")).unwrap();
    std::fs::write(
        proj.join("Cargo.toml"),
        "[package]\nname = \"demo\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n[workspace]\n",
    )
    .unwrap();
    let fib = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../examples/workloads/fib.rs"
    );
    std::fs::copy(fib, proj.join("src/main.rs")).unwrap();
    let out = Command::new(&bin)
        .args(["fntrace", "run", "--instrument=mcount", "--", "15"])
        .current_dir(&proj)
        .env_remove("CARGO_TARGET_DIR")
        .env_remove("RUSTFLAGS")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "610\n");
    assert!(err.contains("RUSTC_BOOTSTRAP=1"), "{err}");
    let trace = proj.join("target/fntrace/mcount/fntrace.data");
    assert!(err.contains(trace.to_str().unwrap()), "{err}");
    let t = fntrace_format::Trace::open(&trace).unwrap();
    let rows = fntrace_cli::commands::report_rows(&t, false, fntrace_cli::commands::SortKey::Name);
    let fib = rows
        .iter()
        .find(|r| r.function == "demo::fib")
        .expect("demo::fib");
    assert_eq!(fib.calls, 1973);
    // The normal target directory was not touched.
    assert!(!proj.join("target/debug").exists());

    let out = Command::new(&bin)
        .args(["fntrace", "build", "--instrument=fentry"])
        .current_dir(&proj)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("patchable") && err.contains("xray"), "{err}");
}
