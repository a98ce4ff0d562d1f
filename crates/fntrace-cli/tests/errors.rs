//! Errors that are true: bad options and paths fail before the program runs
//! with one line naming the option or file; patterns that match nothing
//! warn; a failed export leaves no file behind; views a `--count` trace
//! cannot have say so in one line.

mod common;

use std::path::Path;
use std::process::{Command, Output};

use common::{FIB_C, fntrace_bin, preload, record_cmd, tool};

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// `fib.c` built with `-pg -mfentry` in `dir`.
fn fib_fentry(dir: &Path) -> std::path::PathBuf {
    let bin = dir.join("fib");
    tool(
        "gcc",
        &[
            "-O2",
            "-fno-optimize-sibling-calls",
            "-pg",
            "-mfentry",
            "-o",
            bin.to_str().unwrap(),
            FIB_C,
        ],
    );
    bin
}

#[test]
fn an_output_path_that_cannot_be_written_fails_before_running() {
    let d = tempfile::tempdir().unwrap();
    let mark = d.path().join("ran");
    let o = record_cmd(
        Path::new("/nonexistent/x.data"),
        &[],
        Path::new("touch"),
        &[mark.to_str().unwrap()],
    )
    .output()
    .unwrap();
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(
        err.contains("/nonexistent/x.data") && err.contains("No such file or directory"),
        "{err}"
    );
    assert!(!mark.exists(), "the program ran");
}

#[test]
fn bad_max_sizes_are_rejected() {
    let d = tempfile::tempdir().unwrap();
    let mark = d.path().join("ran");
    for bad in ["abc", "12Q", "-5", "99999999999999999999999G", ""] {
        let o = record_cmd(
            &d.path().join("t.data"),
            &[&format!("--max-size={bad}")],
            Path::new("touch"),
            &[mark.to_str().unwrap()],
        )
        .output()
        .unwrap();
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{bad:?}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{err}");
        assert!(err.contains("--max-size"), "{err}");
        assert!(!mark.exists(), "{bad:?}: the program ran");
    }
}

#[test]
fn patterns_that_match_no_function_warn() {
    let d = tempfile::tempdir().unwrap();
    let bin = fib_fentry(d.path());
    let data = d.path().join("t.data");
    let o = record_cmd(
        &data,
        &[
            "-A",
            "nosuchfunc@arg1",
            "-R",
            "nosuchret",
            "-F",
            "^nosuchfilter",
            "-N",
            "nosuchnotrace",
            "-A",
            "fib@arg1",
        ],
        &bin,
        &["10"],
    )
    .output()
    .unwrap();
    let err = stderr(&o);
    assert!(o.status.success(), "{err}");
    for (opt, p) in [
        ("-A", "nosuchfunc@arg1"),
        ("-R", "nosuchret"),
        ("-F", "^nosuchfilter"),
        ("-N", "nosuchnotrace"),
    ] {
        assert!(
            err.contains(&format!("warning: {opt} {p:?} matches none of the")),
            "{opt} {p}: {err}"
        );
    }
    assert!(!err.contains("\"fib@arg1\" matches none"), "{err}");
}

#[test]
fn a_failed_export_leaves_no_file() {
    let d = tempfile::tempdir().unwrap();
    let bin = fib_fentry(d.path());
    let data = d.path().join("t.data");
    let o = record_cmd(&data, &[], &bin, &["10"]).output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    // A gcc build has no XRay instrumentation map: the XRay export fails.
    let out = d.path().join("x.log");
    let o = Command::new(fntrace_bin())
        .arg("export")
        .arg(&data)
        .args(["--format", "xray", "-o"])
        .arg(&out)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(!out.exists(), "a failed export left {}", out.display());
    // An earlier file of that name is left as it was.
    std::fs::write(&out, "earlier").unwrap();
    let o = Command::new(fntrace_bin())
        .arg("export")
        .arg(&data)
        .args(["--format", "xray", "-o"])
        .arg(&out)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "earlier");
    let left: Vec<_> = std::fs::read_dir(d.path())
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().contains(".tmp"))
        .collect();
    assert!(left.is_empty(), "temporary files left: {left:?}");
}

#[test]
fn flame_graphs_of_a_count_trace_say_why_not() {
    let d = tempfile::tempdir().unwrap();
    let bin = fib_fentry(d.path());
    let data = d.path().join("c.data");
    let o = Command::new(fntrace_bin())
        .args(["record", "--count", "-o"])
        .arg(&data)
        .arg("--")
        .arg(&bin)
        .arg("12")
        .env("FNTRACE_PRELOAD", preload())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    for f in ["html", "flamegraph"] {
        let out = d.path().join(format!("out.{f}"));
        let o = Command::new(fntrace_bin())
            .arg("export")
            .arg(&data)
            .args(["--format", f, "-o"])
            .arg(&out)
            .output()
            .unwrap();
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{f}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{err}");
        assert!(err.contains("--count trace"), "{err}");
        assert!(!out.exists());
    }
}
