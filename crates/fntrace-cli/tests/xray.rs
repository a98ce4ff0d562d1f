//! XRay end to end: clang and rustc XRay builds recorded by fntrace's own
//! XRay runtime (injected by `fntrace record`), the export read by the real
//! `llvm-xray`, a program written against compiler-rt's C API behaving the
//! same with fntrace, and patching 10,000 times while threads run. clang-14,
//! rustc and llvm-xray are required (a missing tool fails the test).

use std::path::{Path, PathBuf};
use std::process::Command;

use fntrace_cli::analysis::{Call, Visitor, walk_thread};
use fntrace_cli::report::{SortKey, report_rows};
use fntrace_format::Trace;

mod common;
use common::{FIB_C, FIB_RS, fntrace_bin, preload, tool as run};

const SRC: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/xray");

fn record(dir: &Path, bin: &Path, args: &[&str]) -> (String, PathBuf) {
    let data = dir.join("t.data");
    let out = common::record_cmd(&data, &[], bin, args).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    (String::from_utf8(out.stdout).unwrap(), data)
}

fn calls_of(data: &Path, name: &str) -> u64 {
    let t = Trace::open(data).unwrap();
    report_rows(&t, false, SortKey::Name)
        .into_iter()
        .find(|r| r.function == name)
        .map(|r| r.calls)
        .unwrap_or(0)
}

#[test]
fn clang_and_rustc_xray_builds_record_and_llvm_xray_reads_the_export() {
    let d = tempfile::tempdir().unwrap();
    let c = d.path().join("fib-xray");
    common::xray_cc(
        "clang-14",
        &[
            "-fno-optimize-sibling-calls",
            "-o",
            c.to_str().unwrap(),
            FIB_C,
        ],
    );
    let rs = d.path().join("fibrs-xray");
    run(
        "rustc",
        &[
            "-O",
            "-Zinstrument-xray=always",
            "-o",
            rs.to_str().unwrap(),
            FIB_RS,
        ],
    );
    for (bin, name) in [(&c, "fib"), (&rs, "fib::fib")] {
        let (out, data) = record(d.path(), bin, &["20"]);
        assert_eq!(out, "6765\n");
        assert_eq!(calls_of(&data, name), 21891, "{}", bin.display());
        // The export, read by llvm-xray.
        let log = d.path().join("xray-log.fntrace");
        let st = Command::new(fntrace_bin())
            .arg("export")
            .arg(&data)
            .args(["--format", "xray", "-o"])
            .arg(&log)
            .status()
            .unwrap();
        assert!(st.success());
        let instr = format!("-instr_map={}", bin.display());
        let csv = run(
            "llvm-xray",
            &[
                "account",
                &instr,
                "-format=csv",
                "-sort=count",
                "-sortorder=dsc",
                log.to_str().unwrap(),
            ],
        );
        let top = csv.lines().nth(1).expect("a row");
        let f: Vec<&str> = top.split(',').collect();
        assert_eq!(f[1], "21891", "{csv}");
        assert!(
            top.ends_with(&format!(
                "\"{}\"",
                if bin == &c { "fib" } else { "fib::fib" }
            )) || top.contains("fib"),
            "{csv}"
        );
        let yaml = run(
            "llvm-xray",
            &[
                "convert",
                &instr,
                "-output-format=yaml",
                log.to_str().unwrap(),
            ],
        );
        assert_eq!(
            yaml.matches("kind: function-enter").count(),
            yaml.matches("kind: function-exit").count()
        );
        let stack = run("llvm-xray", &["stack", &instr, log.to_str().unwrap()]);
        assert!(stack.contains("Unique Stacks"), "{stack}");
    }
}

/// Frames left by exceptions, `longjmp` and signal handlers on several
/// threads (`tests/hooks/unwind.cc`): XRay has no exit event for them, so
/// the runtime closes them (at the landing pad, the `longjmp`, or the next
/// event); checked for callers, depths and counts.
#[test]
fn unwound_frames_are_closed() {
    let d = tempfile::tempdir().unwrap();
    let bin = d.path().join("unwind-xray");
    common::xray_cc(
        "clang++-14",
        &[
            "-fno-optimize-sibling-calls",
            "-o",
            bin.to_str().unwrap(),
            common::UNWIND_CC,
            "-lpthread",
        ],
    );
    let plain = run(bin.to_str().unwrap(), &[]);
    let (out, data) = record(d.path(), &bin, &[]);
    assert_eq!(out, plain);
    common::check_unwind_tree("xray", &data);
}

#[test]
fn compiler_rt_api_program_behaves_the_same_on_fntrace() {
    let d = tempfile::tempdir().unwrap();
    let src = format!("{SRC}/capi.cc");
    let lib = preload();
    let libdir = lib.parent().unwrap().to_str().unwrap().to_string();
    let ours = d.path().join("capi-fntrace");
    let rpath = format!("-Wl,-rpath,{libdir}");
    let ldir = format!("-L{libdir}");
    common::xray_cc(
        "clang++-14",
        &[
            "-fnoxray-link-deps",
            "-o",
            ours.to_str().unwrap(),
            &src,
            &ldir,
            "-lfntrace_preload",
            &rpath,
        ],
    );
    let theirs = d.path().join("capi-crt");
    common::xray_cc("clang++-14", &["-o", theirs.to_str().unwrap(), &src]);
    let a = run(ours.to_str().unwrap(), &[]);
    let out = Command::new(&theirs)
        .env("XRAY_OPTIONS", "patch_premain=false verbosity=0")
        .output()
        .unwrap();
    assert!(out.status.success());
    let b = String::from_utf8(out.stdout).unwrap();
    assert_eq!(a, b);
    assert!(a.contains("patched: entries 20 exits 20"), "{a}");
    assert!(
        a.contains("leaf only: entries 10 exits 10 last is leaf 1"),
        "{a}"
    );
    assert!(a.contains("patch bad id: 3"), "{a}");
}

#[test]
fn patching_10000_times_while_four_threads_run() {
    let d = tempfile::tempdir().unwrap();
    let lib = preload();
    let libdir = lib.parent().unwrap().to_str().unwrap().to_string();
    let bin = d.path().join("stress");
    let rpath = format!("-Wl,-rpath,{libdir}");
    let ldir = format!("-L{libdir}");
    let src = format!("{SRC}/stress.c");
    common::xray_cc(
        "clang-14",
        &[
            "-fnoxray-link-deps",
            "-o",
            bin.to_str().unwrap(),
            &src,
            &ldir,
            "-lfntrace_preload",
            &rpath,
            "-lpthread",
        ],
    );
    let (out, data) = record(d.path(), &bin, &[]);
    assert_eq!(out, "patching ok 1, workers ok 4\n");
    let t = Trace::open(&data).unwrap();
    assert!(t.damage().is_empty());
    struct Nest {
        calls: u64,
    }
    impl Visitor for Nest {
        fn call(&mut self, c: &Call) {
            assert!(c.end >= c.start);
            self.calls += 1;
        }
    }
    let mut busy = 0;
    for tid in t.thread_ids() {
        let mut v = Nest { calls: 0 };
        let s = walk_thread(&t, tid, &mut v);
        assert_eq!(s.unmatched_exits, 0, "thread {tid}");
        assert!(s.damage.is_empty());
        if v.calls > 1000 {
            busy += 1;
        }
    }
    assert_eq!(busy, 4, "every worker recorded while patched");
}

#[test]
fn xray_shared_object_loaded_unloaded_and_reloaded() {
    let d = tempfile::tempdir().unwrap();
    let lib = d.path().join("libplugin.so");
    run(
        "clang-14",
        &[
            "-O2",
            "-fPIC",
            "-shared",
            "-fxray-instrument",
            "-fxray-instruction-threshold=1",
            "-fnoxray-link-deps",
            "-o",
            lib.to_str().unwrap(),
            &format!("{SRC}/plugin.c"),
        ],
    );
    let bin = d.path().join("dl_main");
    run(
        "clang-14",
        &[
            "-O2",
            "-o",
            bin.to_str().unwrap(),
            &format!("{SRC}/dl_main.c"),
            "-ldl",
        ],
    );
    let (out, data) = record(d.path(), &bin, &[lib.to_str().unwrap()]);
    assert_eq!(out, "290\n");
    assert_eq!(calls_of(&data, "plugin_helper"), 20);
    assert_eq!(calls_of(&data, "plugin_work"), 20);
}

#[test]
fn xray_patch_selection_and_record_filters() {
    let d = tempfile::tempdir().unwrap();
    let c = d.path().join("fib-xray");
    common::xray_cc(
        "clang-14",
        &[
            "-fno-optimize-sibling-calls",
            "-o",
            c.to_str().unwrap(),
            FIB_C,
        ],
    );
    let rec = |extra: &[&str]| {
        let data = d.path().join("t.data");
        let out = Command::new(fntrace_bin())
            .args(["record", "-o"])
            .arg(&data)
            .args(extra)
            .arg("--")
            .arg(&c)
            .arg("10")
            .env("FNTRACE_PRELOAD", preload())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(String::from_utf8_lossy(&out.stdout), "55\n");
        (calls_of(&data, "fib"), calls_of(&data, "main"))
    };
    assert_eq!(rec(&[]), (177, 1));
    assert_eq!(rec(&["-P", "^main$"]), (0, 1), "-P patches only main");
    assert_eq!(rec(&["-P", "^fib$"]), (177, 0), "-P patches only fib");
    assert_eq!(rec(&["-F", "^fib$"]), (177, 0), "-F records only fib");
    assert_eq!(rec(&["-N", "^fib$"]), (0, 1), "-N records all but fib");
    assert_eq!(rec(&["--depth", "2"]), (1, 1), "--depth");
}
