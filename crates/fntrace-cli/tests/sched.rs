//! `fntrace record --sched`: off-CPU intervals from the kernel's
//! context-switch records. `tests/libcalls/sleeper.c` runs 3 threads that
//! each sleep 50 ms 10 times inside `nap()`, which measures the wall time
//! of its sleeps itself. That time must show in `nap`'s Wait column
//! (within 10 % of what the thread measured, at least 500 ms) and not in
//! its Self time; with `--libcalls` it moves to `nanosleep@libc.so.6`.
//! `replay` must show the switch points inside `nap`. Needs gcc and
//! `kernel.perf_event_paranoid` ≤ 2 (the test fails, naming the warning,
//! otherwise).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use fntrace_cli::report::{Row, SortKey, report_rows};
use fntrace_format::Trace;

mod common;

fn build(dir: &Path) -> PathBuf {
    let exe = dir.join("sleeper");
    let src = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/libcalls/sleeper.c");
    common::tool(
        "gcc",
        &[
            "-O2",
            "-g",
            "-pg",
            "-mfentry",
            "-o",
            exe.to_str().unwrap(),
            src,
            "-lpthread",
        ],
    );
    exe
}

/// Records the sleeper with `opts`; returns the trace and, per thread, the
/// sleep time it measured (ns).
fn record(dir: &Path, exe: &Path, name: &str, opts: &[&str]) -> (PathBuf, HashMap<u32, u64>) {
    let data = dir.join(name);
    let out = common::record_cmd(&data, opts, exe, &[]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(!err.contains("--sched"), "off-CPU recording refused: {err}");
    let slept: HashMap<u32, u64> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .filter_map(|l| {
            let mut f = l.strip_prefix("slept ")?.split_whitespace();
            Some((f.next()?.parse().ok()?, f.next()?.parse().ok()?))
        })
        .collect();
    assert_eq!(slept.len(), 3, "three sleeping threads");
    (data, slept)
}

fn rows_of<'a>(rows: &'a [Row], function: &str) -> Vec<&'a Row> {
    rows.iter().filter(|r| r.function == function).collect()
}

/// Each thread's `function` row carries that thread's measured sleep in
/// its Wait column (≥ 500 ms, within 10 %) and little Self time.
fn check_wait(what: &str, rows: &[Row], function: &str, slept: &HashMap<u32, u64>) {
    let r = rows_of(rows, function);
    assert_eq!(r.len(), 3, "{what}: {function} rows: {r:?}");
    for row in r {
        let tid = row.tid.unwrap();
        let s = slept[&tid];
        let wait = row.wait_ns.expect("a Wait column");
        assert!(
            wait >= 500_000_000,
            "{what}: {function} [{tid}] waited {wait} ns"
        );
        let diff = wait.abs_diff(s);
        assert!(
            diff * 10 <= s,
            "{what}: {function} [{tid}] waited {wait} ns, the thread measured {s} ns"
        );
        assert!(
            row.self_ns * 10 <= s,
            "{what}: {function} [{tid}] self {} ns of {s} ns asleep",
            row.self_ns
        );
        // Self + Wait + children make up the total.
        assert!(row.self_ns + wait <= row.total_ns, "{what}: {row:?}");
    }
}

#[test]
fn sleeps_are_wait_time_not_self_time() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build(dir.path());
    let (data, slept) = record(dir.path(), &exe, "s.data", &["--sched"]);
    let t = Trace::open(&data).unwrap();
    assert!(t.damage().is_empty(), "{:?}", t.damage());
    let rows = report_rows(&t, true, SortKey::Total);
    check_wait("--sched", &rows, "nap", &slept);

    // The switch points, inside nap, on each sleeping thread: at least 10
    // blocked intervals each (a thread can also be preempted).
    let out = std::process::Command::new(common::fntrace_bin())
        .args(["replay", "--color", "never"])
        .arg(&data)
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    for &tid in slept.keys() {
        let tag = format!("[{tid:>6}] |");
        let mut in_nap = false;
        let mut blocked = 0;
        for l in text.lines().filter(|l| l.contains(&tag)) {
            if l.ends_with("nap() {") {
                in_nap = true;
            } else if l.ends_with("} /* nap */") {
                in_nap = false;
            } else if in_nap && l.ends_with("/* off CPU: blocked */") {
                blocked += 1;
            }
        }
        assert!(
            blocked >= 10,
            "thread {tid}: {blocked} switch points in nap:\n{text}"
        );
    }

    // With the library calls recorded, the wait belongs to nanosleep.
    let (data, slept) = record(dir.path(), &exe, "l.data", &["--sched", "--libcalls"]);
    let t = Trace::open(&data).unwrap();
    let rows = report_rows(&t, true, SortKey::Total);
    check_wait("--sched --libcalls", &rows, "nanosleep@libc.so.6", &slept);
    for r in rows_of(&rows, "nap") {
        assert!(
            r.wait_ns.unwrap() * 10 <= slept[&r.tid.unwrap()],
            "nap keeps the wait of nanosleep: {r:?}"
        );
    }
}

#[test]
fn without_sched_there_is_no_wait_column() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build(dir.path());
    let (data, slept) = record(dir.path(), &exe, "n.data", &[]);
    let t = Trace::open(&data).unwrap();
    let rows = report_rows(&t, true, SortKey::Total);
    for r in rows_of(&rows, "nap") {
        assert_eq!(r.wait_ns, None);
        // Without off-CPU data the sleep is (wrongly, but as recorded) self time.
        assert!(r.self_ns >= slept[&r.tid.unwrap()] / 2);
    }
}
