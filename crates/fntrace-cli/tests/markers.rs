//! Markers through the real CLI: `fntrace record -M` on the example
//! program (events with argument values in `replay`, counted by `report`,
//! instant events in the Chrome export), none without `-M`, and
//! `fntrace markers BINARY`.

mod common;

use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

use common::fntrace_bin;

/// Builds `examples/markers` in the profile of these tests.
fn example() -> PathBuf {
    static P: OnceLock<PathBuf> = OnceLock::new();
    P.get_or_init(|| {
        let dir = fntrace_bin().parent().unwrap().to_path_buf();
        let mut c = Command::new(env!("CARGO"));
        c.args(["build", "-q", "-p", "markers-example"]);
        if dir.ends_with("release") {
            c.arg("--release");
        }
        assert!(
            c.status().expect("cargo").success(),
            "building markers-example failed"
        );
        let p = dir.join("markers-example");
        assert!(p.is_file(), "{} missing", p.display());
        p
    })
    .clone()
}

fn run(args: &[&str]) -> String {
    let o = Command::new(fntrace_bin()).args(args).output().unwrap();
    assert!(
        o.status.success(),
        "fntrace {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout).unwrap()
}

#[test]
fn record_with_markers_shows_them_everywhere() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("m.data");
    let d = data.to_str().unwrap();
    let ex = example();
    let ex = ex.to_str().unwrap();
    let out = run(&["record", "-o", d, "-M", "^job_", "--", ex, "4"]);
    assert_eq!(out.trim().len(), 16, "{out}");

    let replay = run(&["replay", d]);
    let lines: Vec<&str> = replay.lines().collect();
    let pos = |needle: &str| {
        lines
            .iter()
            .position(|l| l.contains(needle))
            .unwrap_or_else(|| panic!("{needle:?} not in\n{replay}"))
    };
    // Inline, in order, inside the instrumented function's call.
    let run_line = pos("markers_example::work::run() {");
    let s0 = pos(r#"/* marker job_start id=0 kind="parse" */"#);
    let d0 = pos("/* marker job_done id=0 checksum=");
    let s3 = pos(r#"/* marker job_start id=3 kind="parse" */"#);
    assert!(run_line < s0 && s0 < d0 && d0 < s3, "{replay}");
    assert!(
        !replay.contains("marker phase"),
        "phase was not selected:\n{replay}"
    );

    let report = run(&["report", d]);
    assert!(
        report.contains("           4  job_done") && report.contains("           4  job_start"),
        "{report}"
    );

    let json = dir.path().join("m.json");
    run(&[
        "export",
        d,
        "--format",
        "chrome",
        "-o",
        json.to_str().unwrap(),
    ]);
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let events = v
        .get("traceEvents")
        .and_then(|e| e.as_array())
        .cloned()
        .or_else(|| v.as_array().cloned())
        .unwrap();
    let instants: Vec<_> = events
        .iter()
        .filter(|e| e["ph"] == "i" && e["cat"] == "marker")
        .collect();
    assert_eq!(instants.len(), 8);
    assert!(
        instants
            .iter()
            .any(|e| e["name"] == "job_start" && e["args"]["text"] == r#"id=2 kind="upload""#)
    );

    // Both markers of a name (`phase` is declared twice) and a second
    // pattern.
    run(&[
        "record",
        "-o",
        d,
        "-M",
        "^phase$",
        "-M",
        "job_start",
        "--",
        ex,
        "2",
    ]);
    let replay = run(&["replay", d]);
    assert!(
        replay.contains(r#"/* marker phase name="start" jobs=2 */"#),
        "{replay}"
    );
    assert!(
        replay.contains(r#"/* marker phase name="end" jobs=2 */"#),
        "{replay}"
    );
    assert_eq!(replay.matches("marker job_start").count(), 2);
    assert!(!replay.contains("job_done"));

    // A pattern that matches nothing is worth a warning.
    let o = Command::new(fntrace_bin())
        .args(["record", "-o", d, "-M", "^jobs_start$", "--", ex, "1"])
        .output()
        .unwrap();
    assert!(o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("warning: -M \"^jobs_start$\" matches none of the 4 markers"),
        "{err}"
    );
}

#[test]
fn without_m_the_trace_has_no_marker_events() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("n.data");
    let d = data.to_str().unwrap();
    let ex = example();
    run(&["record", "-o", d, "--", ex.to_str().unwrap(), "4"]);
    let t = fntrace_format::Trace::open(&data).unwrap();
    let mut markers = 0;
    let mut entries = 0;
    for tid in t.thread_ids() {
        for r in t.stream(tid) {
            match r {
                fntrace_format::Record::Marker { .. } => markers += 1,
                fntrace_format::Record::Entry { .. } => entries += 1,
                _ => {}
            }
        }
    }
    assert_eq!(markers, 0);
    assert_eq!(entries, 5, "run + 4 checksums");
    assert!(!run(&["report", d]).contains("Marker"));
}

#[test]
fn markers_command_lists_the_binary_s_markers() {
    let ex = example();
    let ex = ex.to_str().unwrap();
    let table = run(&["markers", ex]);
    assert!(table.contains("job_start(id: u32, kind: &str)"), "{table}");
    assert!(
        table.contains("job_done(id: u32, checksum: u64, ok: bool)"),
        "{table}"
    );
    assert!(
        table.contains("StaticKey  examples/markers/src/main.rs:"),
        "{table}"
    );
    let json: serde_json::Value =
        serde_json::from_str(&run(&["markers", ex, "--format", "json"])).unwrap();
    let names: Vec<&str> = json
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["job_done", "job_start", "phase", "phase"]);
    assert_eq!(json[1]["args"][1]["type"], "&str");

    // Not an ELF file: a clear error, exit status 2.
    let o = Command::new(fntrace_bin())
        .args(["markers", "Cargo.toml"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("not an executable or shared library"));
    // A binary without markers: an empty list.
    let none = run(&["markers", fntrace_bin().to_str().unwrap()]);
    assert_eq!(none.lines().count(), 2, "{none}");
}

#[test]
fn bad_marker_pattern_is_refused() {
    let o = Command::new(fntrace_bin())
        .args(["record", "-M", "(", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("bad marker pattern"));
}

/// A program built with `-Zinstrument-mcount` that declares markers: its
/// own runtime copy stays idle under `libfntrace_preload.so`, and the
/// marker events go to the preload runtime's trace.
#[test]
fn markers_of_an_mcount_program_are_recorded_by_the_preload_runtime() {
    common::preload();
    let cargo_fntrace = PathBuf::from(env!("CARGO_BIN_EXE_cargo-fntrace"));
    let root = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."));
    let out = Command::new(&cargo_fntrace)
        .args([
            "fntrace",
            "build",
            "--instrument=mcount",
            "-q",
            "-p",
            "markers-example",
        ])
        .current_dir(&root)
        .env_remove("RUSTFLAGS")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target"));
    let ex = target.join("fntrace/mcount/debug/markers-example");
    assert!(ex.is_file(), "{} missing", ex.display());
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("p.data");
    let d = data.to_str().unwrap();
    run(&[
        "record",
        "-o",
        d,
        "-M",
        "job_start",
        "--",
        ex.to_str().unwrap(),
        "3",
    ]);
    let replay = run(&["replay", d]);
    assert!(
        replay.contains("markers_example::work::checksum"),
        "{replay}"
    );
    assert!(
        replay.contains(r#"/* marker job_start id=2 kind="upload" */"#),
        "{replay}"
    );
    assert_eq!(replay.matches("/* marker ").count(), 3);
}
