//! fork + exec under `fntrace record`: a `-pg` program with a thread
//! forks, the child records 3,000 calls and then execs another `-pg`
//! program. The exec'd image has the child's pid, so it must not reuse the
//! child's `PATH.PID` (which it used to open with truncation, wiping the
//! child's events): it writes `PATH.PID.1`, and `report --children` shows
//! the calls of every image of the recording. `tests/forkexec/ends.c`
//! ends an image with `exec`, a process with `_exit` and a forked child
//! with `_exit`: no exit handler runs, and each trace must still end
//! clean with every call.

mod common;

use std::collections::HashMap;
use std::path::Path;
use std::process::Command;

use common::{fntrace_bin, record_cmd, tool};

const SRC: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/hooks");

fn build(dir: &Path, src: &str, name: &str, flags: &[&str]) -> std::path::PathBuf {
    let out = dir.join(name);
    let src = format!("{SRC}/{src}");
    let mut a = vec!["-O2", "-fno-optimize-sibling-calls"];
    a.extend(flags);
    a.extend(["-o", out.to_str().unwrap(), &src, "-lpthread"]);
    tool("gcc", &a);
    out
}

/// Calls per function of `fntrace report ARGS --format json`.
fn report(args: &[&std::ffi::OsStr]) -> HashMap<String, u64> {
    let o = Command::new(fntrace_bin())
        .arg("report")
        .args(args)
        .args(["--format", "json"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    v.as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["function"].as_str().unwrap().to_string(),
                r["calls"].as_u64().unwrap(),
            )
        })
        .collect()
}

#[test]
fn an_image_execd_by_a_forked_child_keeps_the_childs_trace() {
    let d = tempfile::tempdir().unwrap();
    for (name, flags) in [("pg", &["-pg"][..]), ("fentry", &["-pg", "-mfentry"][..])] {
        let dir = d.path().join(name);
        std::fs::create_dir(&dir).unwrap();
        let bin = build(&dir, "fork_exec.c", "fork_exec", flags);
        let target = build(&dir, "exec_target.c", "exec_target", flags);
        let data = dir.join("t.data");
        let o = record_cmd(&data, &[], &bin, &[target.to_str().unwrap()])
            .output()
            .unwrap();
        let out = String::from_utf8_lossy(&o.stdout);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(o.status.success(), "{name}: {err}");
        assert!(
            out.contains("exec'd ") && out.contains("parent 6765 0"),
            "{name}: {out}"
        );
        let files = fntrace_cli::tracefile::child_traces(&data);
        assert_eq!(files.len(), 2, "{name}: {files:?} ({err})");
        // t.data.PID: the child before exec; t.data.PID.1: the exec'd image.
        let pre = report(&[files[0].as_os_str()]);
        assert_eq!(pre.get("leaf"), Some(&3000), "{name}: {pre:?}");
        let post = report(&[files[1].as_os_str()]);
        assert_eq!(post.get("other"), Some(&500), "{name}: {post:?}");
        let all = report(&[data.as_os_str(), "--children".as_ref()]);
        assert_eq!(all.get("leaf"), Some(&3000), "{name}: {all:?}");
        assert_eq!(all.get("other"), Some(&500), "{name}: {all:?}");
        assert!(
            all.get("fib").is_some_and(|&n| n == 21891),
            "{name}: {all:?}"
        );
        assert!(err.contains("2 more trace(s)"), "{name}: {err}");
    }
}

/// `fntrace info` of `path`.
fn info(path: &Path) -> String {
    let o = Command::new(fntrace_bin())
        .arg("info")
        .arg(path)
        .output()
        .unwrap();
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn exec_and_underscore_exit_end_the_trace_clean() {
    // An image replaced by `exec`, a process ending with `_exit` (no
    // `atexit` handler runs either way) and a forked child that `_exit`s:
    // each trace ends clean, with the writer's counts, every `work` call
    // of its image, and `outer` still open.
    let d = tempfile::tempdir().unwrap();
    let exe = d.path().join("ends");
    tool(
        "gcc",
        &[
            "-O2",
            "-fno-optimize-sibling-calls",
            "-pg",
            "-mfentry",
            "-o",
            exe.to_str().unwrap(),
            concat!(env!("CARGO_MANIFEST_DIR"), "/tests/forkexec/ends.c"),
        ],
    );
    for (how, n) in [("exec", 5000u64), ("_exit", 4000), ("child", 3000)] {
        let data = d.path().join(format!("{how}.data"));
        let out = record_cmd(&data, &[], &exe, &[how, &n.to_string()])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{how}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let others: Vec<std::path::PathBuf> = std::fs::read_dir(d.path())
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| {
                p.file_name()
                    .unwrap()
                    .to_string_lossy()
                    .starts_with(&format!("{how}.data."))
            })
            .collect();
        assert_eq!(
            others.len(),
            1 - usize::from(how == "_exit"),
            "{how}: {others:?}"
        );
        // The image or process that ended without exit handlers.
        let ended = if how == "_exit" {
            data.clone()
        } else {
            others[0].clone()
        };
        let ended = if how == "exec" { data.clone() } else { ended };
        let i = info(&ended);
        assert!(i.contains("# ending        clean"), "{how}: {i}");
        assert!(i.contains("# counted       by the writer"), "{how}: {i}");
        let calls = report(&[ended.as_os_str()]);
        assert_eq!(calls.get("work"), Some(&n), "{how}: {calls:?}");
        assert_eq!(calls.get("loop"), Some(&1), "{how}: {calls:?}");
        if how == "exec" {
            // The exec'd image's own trace: its 7 calls.
            let i = info(&others[0]);
            assert!(i.contains("# ending        clean"), "{i}");
            assert_eq!(report(&[others[0].as_os_str()]).get("work"), Some(&7));
        }
    }
}

/// `record --count` of the same fork + exec: `report --children` gives
/// every function the calls the timed recording gives it. (A forked
/// child's arc tables held the parent's counts from before the fork,
/// which the child's trace then counted a second time.)
#[test]
fn counted_children_count_each_call_once() {
    let d = tempfile::tempdir().unwrap();
    for (name, flags) in [("pg", &["-pg"][..]), ("fentry", &["-pg", "-mfentry"][..])] {
        let dir = d.path().join(name);
        std::fs::create_dir(&dir).unwrap();
        let bin = build(&dir, "fork_exec.c", "fork_exec", flags);
        let target = build(&dir, "exec_target.c", "exec_target", flags);
        let mut counts = vec![];
        for opts in [&[][..], &["--count"][..]] {
            let data = dir.join(if opts.is_empty() { "t.data" } else { "c.data" });
            let o = record_cmd(&data, opts, &bin, &[target.to_str().unwrap()])
                .output()
                .unwrap();
            assert!(
                o.status.success(),
                "{name} {opts:?}: {}",
                String::from_utf8_lossy(&o.stderr)
            );
            counts.push(report(&[data.as_os_str(), "--children".as_ref()]));
        }
        assert_eq!(counts[1], counts[0], "{name}: --count against timed");
        assert_eq!(counts[1].get("leaf"), Some(&3000), "{name}");
    }
}

/// `--depth 2` holds in forked children too: a child's depth goes on from
/// its parent's open calls (main, already recorded by the parent), so
/// `leaf`, at depth 2 everywhere, is never recorded. (A child counted its
/// depth from 0 below main and recorded 1,500 calls of `leaf`.)
#[test]
fn depth_limits_hold_in_forked_children() {
    let d = tempfile::tempdir().unwrap();
    let src = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/forkexec/depth.c");
    for (name, flags) in [
        ("pg", &["-pg"][..]),
        ("fentry", &["-pg", "-mfentry"][..]),
        ("cyg", &["-finstrument-functions"][..]),
    ] {
        let bin = d.path().join(format!("depth-{name}"));
        let mut a = vec!["-O2", "-fno-optimize-sibling-calls"];
        a.extend(flags);
        a.extend(["-o", bin.to_str().unwrap(), src]);
        tool("gcc", &a);
        let data = d.path().join(format!("{name}.data"));
        let o = record_cmd(&data, &["-D", "2"], &bin, &["3"])
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "{name}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        let all = report(&[data.as_os_str(), "--children".as_ref()]);
        assert_eq!(all.get("leaf"), None, "{name}: {all:?}");
        assert_eq!(all.get("main"), Some(&1), "{name}: {all:?}");
        // work: once before the forks, once after, 10 times per child.
        assert_eq!(all.get("work"), Some(&32), "{name}: {all:?}");
    }
}
