//! `cargo fntrace run --instrument=mcount` on a fresh Cargo project
//! records and reports with no further steps; `--instrument=xray` and
//! `fentry` (patchable entries) never patch functions marked off and
//! follow `fntrace::enable`/`disable` at run time.

use std::process::Command;

mod common;

/// `cargo fntrace ARGS` run in `proj`, with the caller's target directory
/// and flags removed (and `env` added).
fn cargo_fntrace(
    proj: &std::path::Path,
    args: &[&str],
    env: &[(&str, &str)],
) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_cargo-fntrace"))
        .arg("fntrace")
        .args(args)
        .current_dir(proj)
        .env_remove("CARGO_TARGET_DIR")
        .env_remove("RUSTFLAGS")
        .envs(env.iter().copied())
        .output()
        .unwrap()
}

/// A fresh `demo` project (fib.rs) depending on the fntrace facade, with
/// the preload library built next to the binaries.
fn facade_project(dir: &std::path::Path) -> std::path::PathBuf {
    common::preload();
    let facade = concat!(env!("CARGO_MANIFEST_DIR"), "/../fntrace");
    project(dir, &format!("fntrace = {{ path = \"{facade}\" }}"))
}

#[test]
fn cargo_fntrace_run_mcount_records_a_fresh_project() {
    // The preload library must sit next to the binaries.
    common::preload();
    let d = tempfile::tempdir().unwrap();
    let proj = project(d.path(), "");
    let out = cargo_fntrace(&proj, &["run", "--instrument=mcount", "--", "15"], &[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "610\n");
    assert!(err.contains("RUSTC_BOOTSTRAP=1"), "{err}");
    let trace = proj.join("target/fntrace/mcount/fntrace.data");
    assert!(err.contains(trace.to_str().unwrap()), "{err}");
    let t = fntrace_format::Trace::open(&trace).unwrap();
    let rows = fntrace_cli::report::report_rows(&t, false, fntrace_cli::report::SortKey::Name);
    let fib = rows
        .iter()
        .find(|r| r.function == "demo::fib")
        .expect("demo::fib");
    assert_eq!(fib.calls, 1973);
    // The normal target directory was not touched.
    assert!(!proj.join("target/debug").exists());
}

#[test]
fn cargo_fntrace_help_and_bad_options() {
    let d = tempfile::tempdir().unwrap();
    for args in [&["--help"][..], &["build", "--help"], &["run", "--help"]] {
        let out = cargo_fntrace(d.path(), args, &[]);
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{args:?}: {out:?}");
        assert!(text.contains("Usage: cargo fntrace"), "{args:?}: {text}");
        assert!(text.contains("mcount | fentry | xray"), "{args:?}: {text}");
        if args.len() > 1 {
            assert!(text.contains("--instrument <MODE>"), "{args:?}: {text}");
            assert!(text.contains("--release"), "{args:?}: {text}");
        }
    }
    for (args, want) in [
        (
            &["build", "--instrument=mcount", "--bogus"][..],
            "'--bogus'",
        ),
        (&["build"], "--instrument <MODE>"),
        (&["bogus", "--instrument=mcount"], "'bogus'"),
        (
            &["build", "--instrument=maybe"],
            "unknown --instrument mode \"maybe\"",
        ),
    ] {
        let out = cargo_fntrace(d.path(), args, &[]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: {err}");
    }
}

#[test]
fn cargo_fntrace_build_lists_the_instrumented_binaries() {
    let d = tempfile::tempdir().unwrap();
    let proj = project(d.path(), "");
    let out = cargo_fntrace(&proj, &["build", "--instrument=mcount", "--release"], &[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let listed: Vec<&str> = err
        .lines()
        .skip_while(|l| *l != "cargo-fntrace: instrumented binaries:")
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .map(str::trim)
        .collect();
    assert_eq!(listed, ["target/fntrace/mcount/release/demo"], "{err}");
    assert!(proj.join(listed[0]).is_file(), "{err}");
}

fn project(dir: &std::path::Path, deps: &str) -> std::path::PathBuf {
    let proj = dir.join("demo");
    std::fs::create_dir_all(proj.join("src")).unwrap();
    std::fs::write(
        proj.join("Cargo.toml"),
        format!(
            "[package]\nname = \"demo\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n\
             [dependencies]\n{deps}\n\n[workspace]\n"
        ),
    )
    .unwrap();
    let fib = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../examples/workloads/fib.rs"
    );
    std::fs::copy(fib, proj.join("src/main.rs")).unwrap();
    proj
}

#[test]
fn static_runtime_and_gprof_linking() {
    let d = tempfile::tempdir().unwrap();
    // The runtime linked in with the `compiler-hooks` feature: no preload.
    let facade = concat!(env!("CARGO_MANIFEST_DIR"), "/../fntrace");
    let proj = project(
        d.path(),
        &format!("fntrace = {{ path = \"{facade}\", features = [\"compiler-hooks\"] }}"),
    );
    // A dependency nothing refers to is not linked: name it.
    let main = std::fs::read_to_string(proj.join("src/main.rs")).unwrap();
    std::fs::write(
        proj.join("src/main.rs"),
        format!("extern crate fntrace;\n{main}"),
    )
    .unwrap();
    let out = cargo_fntrace(
        &proj,
        &["run", "--instrument=mcount", "--", "15"],
        &[("FNTRACE_PRELOAD", "/nonexistent/libfntrace_preload.so")],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "610\n");
    let t = fntrace_format::Trace::open(proj.join("target/fntrace/mcount/fntrace.data")).unwrap();
    assert!(
        !t.metadata()
            .modules
            .iter()
            .any(|m| m.path.contains("fntrace_preload")),
        "the preload library was injected"
    );
    let rows = fntrace_cli::report::report_rows(&t, false, fntrace_cli::report::SortKey::Name);
    let fib = rows
        .iter()
        .find(|r| r.function == "demo::fib")
        .expect("demo::fib");
    assert_eq!(fib.calls, 1973);

    // --gprof: glibc writes gmon.out itself, gprof reads the counts.
    let d2 = tempfile::tempdir().unwrap();
    let proj = project(d2.path(), "");
    let out = cargo_fntrace(&proj, &["build", "--instrument=mcount", "--gprof"], &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let exe = proj.join("target/fntrace/mcount/debug/demo");
    let st = Command::new(&exe)
        .arg("12")
        .current_dir(&proj)
        .output()
        .unwrap();
    assert!(st.status.success());
    let g = Command::new("gprof")
        .args(["-b", "-q"])
        .arg(&exe)
        .arg(proj.join("gmon.out"))
        .output()
        .expect("gprof is required");
    let text = String::from_utf8_lossy(&g.stdout);
    assert!(
        text.lines()
            .any(|l| l.starts_with('[') && l.contains("1+464") && l.contains("demo::fib")),
        "{text}"
    );
}

#[test]
fn cargo_fntrace_xray_and_fentry_never_patch_functions_marked_off() {
    let d = tempfile::tempdir().unwrap();
    let proj = facade_project(d.path());
    std::fs::write(
        proj.join("src/main.rs"),
        r#"use std::hint::black_box;
#[inline(never)]
fn traced(n: u64) -> u64 {
    if n < 2 { n } else { traced(black_box(n - 1)) + traced(black_box(n - 2)) }
}
#[fntrace::instrument_fn(off)]
#[inline(never)]
fn hidden(n: u64) -> u64 {
    black_box(n) + 1
}
fn main() {
    let n: u64 = std::env::args().nth(1).unwrap().parse().unwrap();
    let h: u64 = (0..10).map(|i| hidden(black_box(i))).sum();
    let a = traced(n);
    // Switched off, this call is not recorded; switched on again, it is.
    assert_eq!(fntrace::disable("^demo::traced$"), Ok(1));
    let b = traced(n);
    assert_eq!(fntrace::enable("^demo::traced$"), Ok(1));
    let c = traced(n);
    assert!(fntrace::enable("(").is_err());
    println!("{}", a + b + c + h);
}
"#,
    )
    .unwrap();
    for mode in ["xray", "fentry"] {
        let out = cargo_fntrace(
            &proj,
            &["run", &format!("--instrument={mode}"), "--", "10"],
            &[],
        );
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{mode}: {err}");
        assert_eq!(String::from_utf8_lossy(&out.stdout), "220\n", "{mode}");
        let t =
            fntrace_format::Trace::open(proj.join(format!("target/fntrace/{mode}/fntrace.data")))
                .unwrap();
        let rows = fntrace_cli::report::report_rows(&t, false, fntrace_cli::report::SortKey::Name);
        let calls = |f: &str| rows.iter().find(|r| r.function == f).map(|r| r.calls);
        assert_eq!(calls("demo::traced"), Some(2 * 177), "{mode}: {rows:?}");
        assert_eq!(calls("demo::main"), Some(1), "{mode}: {rows:?}");
        assert_eq!(
            calls("demo::hidden"),
            None,
            "{mode}: an off function was patched: {rows:?}"
        );
    }
}

#[test]
fn cargo_fntrace_test_gives_each_test_binary_its_own_trace() {
    common::preload();
    let d = tempfile::tempdir().unwrap();
    let proj = project(d.path(), "");
    std::fs::write(
        proj.join("src/main.rs"),
        r#"#[inline(never)]
fn fib(n: u64) -> u64 { if n < 2 { n } else { fib(std::hint::black_box(n - 1)) + fib(std::hint::black_box(n - 2)) } }
fn main() { println!("{}", fib(5)); }
#[test]
fn fib_works() { assert_eq!(fib(10), 55); }
"#,
    )
    .unwrap();
    std::fs::create_dir_all(proj.join("tests")).unwrap();
    std::fs::write(
        proj.join("tests/other.rs"),
        "#[test]\nfn trivial() { assert_eq!(1 + 1, 2); }\n",
    )
    .unwrap();
    let out = cargo_fntrace(&proj, &["test", "--instrument=mcount"], &[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let traces: Vec<String> = std::fs::read_dir(proj.join("target/fntrace/mcount"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".data"))
        .collect();
    assert!(traces.iter().any(|n| n.starts_with("demo-")), "{traces:?}");
    assert!(traces.iter().any(|n| n.starts_with("other-")), "{traces:?}");
    let unit = traces.iter().find(|n| n.starts_with("demo-")).unwrap();
    let t = fntrace_format::Trace::open(proj.join("target/fntrace/mcount").join(unit)).unwrap();
    let rows = fntrace_cli::report::report_rows(&t, true, fntrace_cli::report::SortKey::Name);
    let fib: u64 = rows
        .iter()
        .filter(|r| r.function == "demo::fib")
        .map(|r| r.calls)
        .sum();
    assert_eq!(fib, 177);
}

/// `#[instrument_fn]` is XRay's always-instrument: with
/// `--instrument=xray:instruction-threshold=200` LLVM drops the sleds of
/// small functions, and a marked one is recorded through the patchable
/// entry the attribute gives it (an unmarked one is not recorded at all).
/// A large marked function (a loop: LLVM instruments it whatever its
/// size; its entry sled becomes the patchable entry, its exit sleds stay)
/// is recorded once per call and switched as one function, by its
/// patchable entry only.
#[test]
fn cargo_fntrace_xray_threshold_records_functions_marked_on() {
    let d = tempfile::tempdir().unwrap();
    let proj = facade_project(d.path());
    std::fs::write(
        proj.join("src/main.rs"),
        r#"use std::hint::black_box;
#[fntrace::instrument_fn]
#[inline(never)]
fn marked_tiny(x: u64) -> u64 {
    x ^ 3
}
#[inline(never)]
fn plain_tiny(x: u64) -> u64 {
    x ^ 5
}
#[fntrace::instrument_fn]
#[inline(never)]
fn marked_big(n: u64) -> u64 {
    let mut s = 0u64;
    for i in 0..n {
        s = s.wrapping_mul(31).wrapping_add(black_box(i) ^ (s >> 3));
        if s % 7 == 3 {
            s = s.rotate_left(5);
        }
    }
    s
}
// Every kind of item the attribute instruments compiles with the cfg
// (methods get no patchable entry: rustc allows it on free functions).
#[fntrace::instrument_fn]
mod extra {
    pub struct S(pub u64);
    impl S {
        pub fn get(&self) -> u64 {
            self.0
        }
    }
    pub trait T {
        fn twice(&self) -> u64;
        fn thrice(&self) -> u64 {
            self.twice() + 1
        }
    }
    impl T for S {
        fn twice(&self) -> u64 {
            self.0 * 2
        }
    }
    #[inline(never)]
    pub fn generic<X: Copy>(x: X) -> X {
        x
    }
    pub async fn later(x: u64) -> u64 {
        x + 1
    }
    #[instrument_fn = "off"]
    #[inline(never)]
    pub fn hidden(x: u64) -> u64 {
        x ^ 2
    }
}
use extra::T as _;
fn main() {
    let s = extra::S(black_box(2));
    let mut acc = s.get() + s.thrice();
    for i in 0..5u64 {
        acc += extra::generic(black_box(i)) + extra::hidden(black_box(i));
    }
    let _ = extra::later(1);
    // One function, one mechanism: its patchable entry, not also its
    // exit sleds (switching it counts one function).
    assert_eq!(fntrace::disable("^demo::marked_big$"), Ok(1));
    assert_eq!(fntrace::enable("^demo::marked_big$"), Ok(1));
    for i in 0..1000 {
        acc = acc.wrapping_add(marked_tiny(black_box(i)));
        acc = acc.wrapping_add(plain_tiny(black_box(i)));
    }
    for i in 0..37 {
        acc = acc.wrapping_add(marked_big(black_box(100 + i)));
    }
    println!("{}", acc != 0);
}
"#,
    )
    .unwrap();
    let out = cargo_fntrace(
        &proj,
        &["run", "--instrument=xray:instruction-threshold=200"],
        &[],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "true\n");
    // No warning in the user's crate (the cfg is declared).
    assert!(!err.contains("warning: unexpected `cfg`"), "{err}");
    assert!(!err.contains("warning: `demo`"), "{err}");
    // The trace path `cargo fntrace run` prints.
    let trace = err
        .lines()
        .find_map(|l| l.strip_prefix("cargo-fntrace: trace in "))
        .and_then(|l| l.split(" (").next())
        .unwrap_or_else(|| panic!("no trace path in: {err}"));
    let rep = Command::new(common::fntrace_bin())
        .args(["report", "--format", "json", trace])
        .output()
        .unwrap();
    assert!(
        rep.status.success(),
        "{}",
        String::from_utf8_lossy(&rep.stderr)
    );
    let rows: serde_json::Value = serde_json::from_slice(&rep.stdout).unwrap();
    let calls = |f: &str| {
        rows.as_array()
            .unwrap()
            .iter()
            .find(|r| r["function"] == f)
            .map(|r| r["calls"].as_u64().unwrap())
    };
    assert_eq!(calls("demo::marked_tiny"), Some(1000), "{rows:#}");
    assert_eq!(
        calls("demo::plain_tiny"),
        None,
        "an unmarked small function was recorded: {rows:#}"
    );
    assert_eq!(calls("demo::marked_big"), Some(37), "{rows:#}");
    let generic: u64 = rows
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| {
            r["function"]
                .as_str()
                .unwrap()
                .starts_with("demo::extra::generic")
        })
        .map(|r| r["calls"].as_u64().unwrap())
        .sum();
    assert_eq!(generic, 5, "{rows:#}");
    assert_eq!(calls("demo::extra::hidden"), None, "{rows:#}");
}
