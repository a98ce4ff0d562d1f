//! A traced program that owns every descriptor number
//! (`tests/fds/closer.c`): it closes every descriptor above stderr at
//! start-up, as daemons do, then opens its own files and `dup2`s them onto
//! high numbers. The runtime must never write into, grow, truncate or
//! close the program's files, and must keep recording into its own trace.
//! Needs gcc.

use std::path::Path;

use fntrace_format::Trace;

mod common;

#[test]
fn a_program_that_closes_and_reuses_every_descriptor_keeps_its_files_and_the_trace() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let exe = d.join("closer");
    let src = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fds/closer.c");
    common::tool(
        "gcc",
        &[
            "-O2",
            "-fno-optimize-sibling-calls",
            "-pg",
            "-mfentry",
            "-o",
            exe.to_str().unwrap(),
            src,
        ],
    );
    for (name, opts) in [("plain", &[][..]), ("sched", &["--sched"][..])] {
        let work = d.join(name);
        std::fs::create_dir(&work).unwrap();
        let data = d.join(format!("{name}.data"));
        let out = common::record_cmd(&data, opts, &exe, &[work.to_str().unwrap(), "30"])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{name}: {err}");
        let text = String::from_utf8(out.stdout).unwrap();
        let calls: u64 = text
            .lines()
            .find_map(|l| l.strip_prefix("fib 832040 calls "))
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("{name}: {text}"));
        assert!(
            text.contains("files ok\n"),
            "{name}: the runtime wrote into the program's files: {text}"
        );
        // And after the exit (the runtime finishes its trace then).
        for i in 0..4 {
            let f = work.join(format!("own{i}.txt"));
            assert_eq!(
                std::fs::read_to_string(&f).unwrap(),
                "start\nhigh\nhigh\nhigh\nhigh\n",
                "{name}: {}",
                f.display()
            );
        }
        check_trace(name, &data, calls);
    }
}

/// The trace is undamaged and holds every one of the `calls` calls of
/// fib(30) the program counted, nested as they ran.
fn check_trace(name: &str, data: &Path, calls: u64) {
    let t = Trace::open(data).unwrap();
    assert!(t.damage().is_empty(), "{name}: {:?}", t.damage());
    let tree = common::call_tree(data);
    let edge = |a: &str, b: &str| tree.edges.get(&(a.into(), b.into())).copied();
    // One from main, the others from fib (as many as the program counted:
    // built without sibling-call optimisation, every call is a call); the
    // deepest is 29 calls below the first.
    assert_eq!(edge("main", "fib"), Some(1), "{name}");
    assert_eq!(edge("fib", "fib"), Some(calls - 1), "{name}");
    let depths: Vec<usize> = tree.depths["fib"].iter().map(|d| d.1).collect();
    assert_eq!(
        depths.last().unwrap() - depths[0],
        29,
        "{name}: fib depths {depths:?}"
    );
    // Every call recorded has its exit, but main's, which the trace ends
    // inside only if it returns after the session finished.
    assert!(
        tree.incomplete <= 1,
        "{name}: {} calls without exit",
        tree.incomplete
    );
}
