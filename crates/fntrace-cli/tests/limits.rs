//! Limits that say what they did (#17): the record-time time filter
//! (`-t`) keeps exactly the calls that lasted at least the threshold, with
//! their callers, nested as the program made them, on every mechanism;
//! `--max-size` says how many calls it dropped and from when; `--duration`
//! stops recording while the program runs on; an earlier trace is kept as
//! `PATH.old`.

mod common;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::{call_tree, record_cmd, tool};
use fntrace_cli::analysis::{Call, Clock, Visitor, walk_thread};
use fntrace_format::Trace;

const TIMED_C: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/limits/timed.c");

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("fntrace-limits-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d.join(name)
}

/// Builds `timed.c` with gcc and `flags` (or clang-14, when the first
/// flag is `clang-14`).
fn build(flags: &[&str], name: &str) -> PathBuf {
    let bin = tmp(name);
    let (cc, flags) = match flags.split_first() {
        Some((&"clang-14", rest)) => ("clang-14", rest),
        _ => ("gcc", flags),
    };
    let mut args = vec!["-O2", "-fno-optimize-sibling-calls"];
    args.extend_from_slice(flags);
    args.extend_from_slice(&["-o", bin.to_str().unwrap(), TIMED_C]);
    tool(cc, &args);
    bin
}

/// Records `bin args` with `opts`; returns (stdout, stderr).
fn record(data: &Path, opts: &[&str], bin: &Path, args: &[&str]) -> (String, String) {
    let out = record_cmd(data, opts, bin, args).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "record failed: {stderr}");
    (String::from_utf8_lossy(&out.stdout).into_owned(), stderr)
}

/// Every completed call: (function, depth, duration in ns), and the
/// number of calls without exit.
fn calls(data: &Path) -> (Vec<(String, usize, u64)>, u64) {
    struct V<'m> {
        sym: fntrace_cli::symbols::Symbolizer<'m>,
        clock: Clock,
        out: Vec<(String, usize, u64)>,
    }
    impl Visitor for V<'_> {
        fn call(&mut self, c: &Call) {
            if c.incomplete {
                return;
            }
            let name = self.sym.name(c.func);
            let name = name.split('(').next().unwrap_or(name).to_string();
            let ns = self.clock.ns(c.end - c.start);
            self.out.push((name, c.depth, ns));
        }
    }
    let t = Trace::open(data).unwrap();
    assert!(t.damage().is_empty(), "{:?}", t.damage());
    let mut v = V {
        sym: fntrace_cli::symbols::Symbolizer::new(t.metadata()),
        clock: Clock::of(&t),
        out: vec![],
    };
    let mut incomplete = 0;
    for tid in t.thread_ids() {
        incomplete += walk_thread(&t, tid, &mut v).incomplete;
    }
    (v.out, incomplete)
}

/// `-t 1ms` on each mechanism: every `slow` (3 ms of sleep) is kept under
/// its real caller, with `mid` and `outer` above it, and every call in the
/// trace lasted at least 1 ms (a `tiny` call appears only if it really
/// took that long: preempted on a loaded machine). The same program
/// recorded without the filter has all 550 `tiny` calls.
#[test]
fn time_filter_keeps_exactly_the_long_calls_and_their_callers() {
    for (flags, name) in [
        (&["-pg"][..], "timed-pg"),
        (&["-pg", "-mfentry"][..], "timed-fentry"),
        (&["-finstrument-functions"][..], "timed-cyg"),
        (&["-fpatchable-function-entry=5"][..], "timed-patchable"),
        (
            &[
                "clang-14",
                "-fxray-instrument",
                "-fxray-instruction-threshold=1",
            ][..],
            "timed-xray",
        ),
    ] {
        let bin = build(flags, name);
        let data = tmp(&format!("{name}.data"));
        let (out, err) = record(&data, &["-t", "1ms"], &bin, &["5"]);
        assert!(out.starts_with("5 rounds"), "{name}: {out}");
        assert!(
            err.contains("only calls that lasted at least 1.000 ms"),
            "{name}: the summary says nothing of the filter: {err}"
        );
        let (all, incomplete) = calls(&data);
        assert_eq!(incomplete, 0, "{name}");
        for (f, depth, ns) in &all {
            assert!(
                *ns >= 1_000_000,
                "{name}: {f} at depth {depth} lasted {ns} ns, under the 1 ms filter"
            );
        }
        let t = call_tree(&data);
        t.expect(name, "main", Some(""), 1);
        t.expect(name, "outer", Some("main"), 5);
        t.expect(name, "mid", Some("outer"), 5);
        let slow: HashMap<&str, u64> = t
            .edges
            .iter()
            .filter(|((_, c), _)| c == "slow")
            .map(|((p, _), n)| (p.as_str(), *n))
            .collect();
        assert_eq!(
            slow,
            HashMap::from([("outer", 5), ("mid", 5)]),
            "{name}: callers of slow"
        );
        let tiny = all.iter().filter(|c| c.0 == "tiny").count();
        assert!(tiny < 10, "{name}: {tiny} tiny calls kept");
        let info = fntrace(&["info", data.to_str().unwrap()]);
        assert!(
            info.contains("# recorded with -t 1.000 ms"),
            "{name}: {info}"
        );

        // Without the filter: everything.
        record(&data, &[], &bin, &["5"]);
        let t = call_tree(&data);
        assert_eq!(
            t.edges[&("outer".to_string(), "tiny".to_string())],
            500,
            "{name}"
        );
        assert_eq!(
            t.edges[&("mid".to_string(), "tiny".to_string())],
            50,
            "{name}"
        );
    }
}

/// Arguments and return values of kept calls are kept with them (`-A`,
/// `-R` on a fentry build), and the held-back entries keep their own
/// times: a kept call's entry is before its callee's.
#[test]
fn time_filter_keeps_arguments_return_values_and_times() {
    let bin = build(&["-pg", "-mfentry"], "timed-args");
    let data = tmp("timed-args.data");
    record(
        &data,
        &["-t", "1ms", "-A", "mid@arg1", "-R", "mid"],
        &bin,
        &["4"],
    );
    let replay = fntrace(&["replay", data.to_str().unwrap()]);
    for r in 0..4 {
        let s: i64 = (0..10).map(|i| i * 3).sum::<i64>() + r;
        assert!(
            replay.contains(&format!("mid({r}) {{")),
            "no mid({r}) entry with its argument:\n{replay}"
        );
        assert!(
            replay.contains(&format!("}} = {s} /* mid */")),
            "no return value {s} of mid({r}):\n{replay}"
        );
    }
    // outer lasts two sleeps (6 ms or more): its entry, written late, kept
    // its own time.
    let (all, _) = calls(&data);
    for (f, _, ns) in all.iter().filter(|c| c.0 == "outer") {
        assert!(
            *ns >= 6_000_000,
            "{f} lasted {ns} ns, less than its two sleeps"
        );
    }
}

fn fntrace(args: &[&str]) -> String {
    let out = Command::new(common::fntrace_bin())
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "fntrace {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The calls recorded in the trace at `data` (entries), and those `info`'s
/// limit line (`# limit ... at +T: N later calls ...`) says were dropped.
fn recorded_and_dropped(data: &Path, line: &str) -> (u64, u64) {
    let dropped: u64 = line
        .split(": ")
        .nth(1)
        .and_then(|s| s.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no count in {line:?}"));
    let t = Trace::open(data).unwrap();
    let mut recorded = 0u64;
    struct Count<'a>(&'a mut u64);
    impl Visitor for Count<'_> {
        fn enter(&mut self, _f: u64, _d: usize, _t: u64) {
            *self.0 += 1;
        }
        fn call(&mut self, _c: &Call) {}
    }
    for tid in t.thread_ids() {
        walk_thread(&t, tid, &mut Count(&mut recorded));
    }
    (recorded, dropped)
}

/// `--max-size` drops calls once the file is full and says so: in
/// `record`'s summary and in `info`, with how many and from when; every
/// call of fib(27) is either recorded or counted as dropped.
#[test]
fn max_size_reports_what_it_dropped() {
    let bin = tmp("fib-pg");
    tool(
        "gcc",
        &[
            "-O2",
            "-fno-optimize-sibling-calls",
            "-pg",
            "-o",
            bin.to_str().unwrap(),
            common::FIB_C,
        ],
    );
    let data = tmp("fib-max.data");
    let (out, err) = record(&data, &["--max-size", "512K"], &bin, &["27"]);
    assert_eq!(out.trim(), "196418");
    assert!(
        err.contains("--max-size 512 KiB (or the disk) was full at +"),
        "the summary says nothing of the limit: {err}"
    );
    let info = fntrace(&["info", data.to_str().unwrap()]);
    let line = info
        .lines()
        .find(|l| l.starts_with("# limit"))
        .unwrap_or_else(|| panic!("no limit in info:\n{info}"));
    let (recorded, dropped) = recorded_and_dropped(&data, line);
    // fib(27) makes 2*fib(28)-1 calls, and main one.
    assert_eq!(recorded + dropped, 2 * 317_811 - 1 + 1, "{line}");
    assert!(dropped > 0);
    assert!(std::fs::metadata(&data).unwrap().len() <= 512 << 10);
}

/// A file size limit (`ulimit -f`, `RLIMIT_FSIZE`) below what the trace
/// needs ends the trace as a full disk would, and says which limit it
/// was: the program runs to its end (SIGXFSZ killed it, and nothing said
/// why the trace stopped), every call is recorded or counted as dropped.
#[test]
fn a_file_size_limit_ends_the_trace_not_the_program() {
    use std::os::unix::process::CommandExt;
    let bin = tmp("fib-pg-fsize");
    tool(
        "gcc",
        &[
            "-O2",
            "-fno-optimize-sibling-calls",
            "-pg",
            "-o",
            bin.to_str().unwrap(),
            common::FIB_C,
        ],
    );
    let data = tmp("fib-fsize.data");
    let mut c = record_cmd(&data, &[], &bin, &["27"]);
    // SAFETY: setrlimit is async-signal-safe; it only limits the child.
    unsafe {
        c.pre_exec(|| {
            let rl = libc::rlimit {
                rlim_cur: 1 << 20,
                rlim_max: 1 << 20,
            };
            libc::setrlimit(libc::RLIMIT_FSIZE, &rl);
            Ok(())
        });
    }
    let out = c.output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{:?}: {err}", out.status);
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "196418");
    assert!(
        err.contains("file size limit (ulimit -f, 1 MiB) was reached at +"),
        "{err}"
    );
    let info = fntrace(&["info", data.to_str().unwrap()]);
    let line = info
        .lines()
        .find(|l| l.starts_with("# limit"))
        .unwrap_or_else(|| panic!("no limit in info:\n{info}"));
    assert!(line.contains("ulimit -f"), "{line}");
    let (recorded, dropped) = recorded_and_dropped(&data, line);
    assert_eq!(recorded + dropped, 2 * 317_811 - 1 + 1, "{line}");
    assert!(dropped > 0);
}

/// `--duration` stops recording while the program runs on: the trace
/// says it stopped, holds the first part of the run only, and the
/// program finishes its work and prints as it would untraced.
#[test]
fn duration_stops_recording_and_the_program_runs_on() {
    for (flags, name) in [
        (&["-pg"][..], "dur-pg"),
        (&["-fpatchable-function-entry=5"][..], "dur-patchable"),
    ] {
        let bin = build(flags, name);
        let data = tmp(&format!("{name}.data"));
        let (out, err) = record(&data, &["--duration", "300ms"], &bin, &["1", "1500"]);
        let ticks: u64 = out
            .split_whitespace()
            .nth(2)
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("{name}: {out}"));
        assert!(
            err.contains("recording stopped after --duration 300.000 ms"),
            "{name}: {err}"
        );
        let t = call_tree(&data);
        let recorded = t
            .edges
            .iter()
            .filter(|((_, c), _)| c == "tick")
            .map(|(_, n)| *n)
            .sum::<u64>();
        assert!(
            recorded < ticks,
            "{name}: {recorded} of {ticks} ticks recorded: recording did not stop"
        );
        let tr = Trace::open(&data).unwrap();
        let f = tr.final_block().expect("the stopped trace is finished");
        let clock = Clock::of(&tr);
        let window = clock.ns(f.end_tsc - tr.header().start_tsc);
        assert!(
            (300_000_000..1_400_000_000).contains(&window),
            "{name}: stopped after {window} ns"
        );
    }
}

/// Recording again to the same file keeps the previous trace (and its
/// children's) as `PATH.old`.
#[test]
fn an_earlier_trace_is_kept_as_old() {
    let bin = build(&["-pg"], "old-pg");
    let data = tmp("old.data");
    let _ = std::fs::remove_file(&data);
    let (_, err) = record(&data, &[], &bin, &["1"]);
    assert!(!err.contains("kept as"), "{err}");
    let first = std::fs::read(&data).unwrap();
    let (_, err) = record(&data, &[], &bin, &["2"]);
    let old = tmp("old.data.old");
    assert!(
        err.contains(&format!("the previous trace is kept as {}", old.display())),
        "{err}"
    );
    assert_eq!(std::fs::read(&old).unwrap(), first);
    assert_ne!(std::fs::read(&data).unwrap(), first);
}

/// Bad values are one clear line and exit status 2.
#[test]
fn bad_time_values_are_refused() {
    let bin = build(&["-pg"], "bad-pg");
    for (opt, val) in [("-t", "fast"), ("--duration", "-3s"), ("-t", "0")] {
        let out = record_cmd(&tmp("bad.data"), &[opt, val], &bin, &["1"])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{opt} {val}: {err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.contains(val), "{err}");
    }
}
