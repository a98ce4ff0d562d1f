//! `fntrace record --sched`: off-CPU intervals from the kernel's
//! context-switch records. `tests/libcalls/sleeper.c` runs 3 threads that
//! each sleep 50 ms 10 times inside `nap()`, which measures the wall time
//! of its sleeps itself. That time must show in `nap`'s Wait column
//! (within 10 % of what the thread measured, at least 500 ms) and not in
//! its Self time; with `--libcalls` it moves to `nanosleep@libc.so.6`.
//! `replay` must show the switch points inside `nap`.
//! `tests/libcalls/migrate.c` moves a thread between CPUs 1000 times: each
//! off-CPU interval's two switch records are then in different per-CPU
//! rings and must still be paired. Needs gcc, two CPUs and
//! `kernel.perf_event_paranoid` ≤ 2 (the test fails, naming the warning,
//! otherwise).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use fntrace_cli::report::{Row, SortKey, report_rows};
use fntrace_format::Trace;

mod common;
use common::decode_perfetto;

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
    // Threads are merged in time order: main's call opens before the
    // threads it starts print anything (its line once waited for main's
    // next event, after the threads had run).
    assert!(
        text.lines()
            .find(|l| !l.ends_with("*/") && !l.starts_with('#'))
            .is_some_and(|l| l.ends_with("| main() {")),
        "{text}"
    );
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

    // `info` counts the intervals of the traced threads (main + 3).
    let out = std::process::Command::new(common::fntrace_bin())
        .arg("info")
        .arg(&data)
        .output()
        .unwrap();
    let info = String::from_utf8(out.stdout).unwrap();
    assert!(
        info.lines()
            .any(|l| l.starts_with("# off CPU") && l.contains("on 4 threads")),
        "{info}"
    );

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

fn export(data: &Path, format: &str, out: &Path, extra: &[&str]) {
    let o = std::process::Command::new(common::fntrace_bin())
        .arg("export")
        .arg(data)
        .args(["--format", format, "-o"])
        .arg(out)
        .args(extra)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

/// Within 10 % of the measured sleep, and at least 500 ms.
fn close_to(what: &str, got: u64, slept: u64) {
    assert!(
        got >= 500_000_000 && got.abs_diff(slept) * 10 <= slept,
        "{what}: {got} ns off CPU, the thread measured {slept} ns asleep"
    );
}

#[test]
fn exports_show_off_cpu_slices_and_off_cpu_flame_graphs() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build(dir.path());
    let (data, slept) = record(dir.path(), &exe, "s.data", &["--sched"]);

    // Chrome: complete events of category sched on each thread's off-CPU
    // track; the blocked ones of a sleeper add up to its sleep (its
    // other blocked moments are microseconds).
    let json = dir.path().join("s.json");
    export(&data, "chrome", &json, &[]);
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let evs = v["traceEvents"].as_array().unwrap();
    for (&tid, &s) in &slept {
        let otid = (1u64 << 32) | u64::from(tid);
        let blocked: f64 = evs
            .iter()
            .filter(|e| e["ph"] == "X" && e["cat"] == "sched" && e["tid"] == otid)
            .filter(|e| e["name"] == "off CPU (blocked)")
            .map(|e| e["dur"].as_f64().unwrap())
            .sum();
        close_to(&format!("chrome [{tid}]"), (blocked * 1000.0) as u64, s);
        assert!(
            evs.iter().any(|e| e["ph"] == "M" && e["tid"] == otid),
            "the off-CPU track of {tid} has a name"
        );
    }

    // Perfetto, decoded with the upstream protos: an "off CPU" child
    // track per thread, its slices adding up the same way.
    let pf = dir.path().join("s.pftrace");
    export(&data, "perfetto", &pf, &[]);
    let d = decode_perfetto(dir.path(), &pf);
    for (&tid, &s) in &slept {
        let blocked: u64 = d["slices"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|x| x["tid"] == tid && x["track"] == "off CPU" && x["name"] == "blocked")
            .map(|x| x["dur"].as_u64().unwrap())
            .sum();
        close_to(&format!("perfetto [{tid}]"), blocked, s);
    }
    // The calls are still on the thread tracks, unchanged.
    assert!(
        d["slices"]
            .as_array()
            .unwrap()
            .iter()
            .any(|x| x["name"] == "nap" && x.get("track").is_none())
    );

    // Off-CPU flame graph: sleeper;nap carries the three sleeps; on-CPU
    // it carries almost nothing.
    let total: u64 = slept.values().sum();
    let folded = |weight: &str| -> HashMap<String, u64> {
        let f = dir.path().join(format!("{weight}.folded"));
        export(&data, "folded", &f, &["--weight", weight]);
        std::fs::read_to_string(&f)
            .unwrap()
            .lines()
            .map(|l| {
                let (k, v) = l.rsplit_once(' ').unwrap();
                (k.to_string(), v.parse().unwrap())
            })
            .collect()
    };
    let off = folded("off-cpu");
    let on = folded("on-cpu");
    let wall = folded("wall");
    let nap = "sleeper;nap";
    assert!(
        off[nap].abs_diff(total) * 10 <= total,
        "off-CPU {off:?}, slept {total}"
    );
    assert!(
        on.get(nap).copied().unwrap_or(0) * 10 <= total,
        "on-CPU {on:?}"
    );
    // On and off CPU make up the wall-clock self time of every stack.
    for (k, w) in &wall {
        let sum = on.get(k).copied().unwrap_or(0) + off.get(k).copied().unwrap_or(0);
        assert!(
            sum.abs_diff(*w) <= 2 + w / 1000,
            "{k}: wall {w}, on + off {sum}"
        );
    }
    let svg = dir.path().join("off.svg");
    export(&data, "flamegraph", &svg, &["--weight", "off-cpu"]);
    let svg = std::fs::read_to_string(&svg).unwrap();
    assert!(svg.contains("nap") && svg.contains("(off CPU)"));

    // A trace without --sched refuses an on/off-CPU graph in one line.
    let (plain, _) = record(dir.path(), &exe, "p.data", &[]);
    let o = std::process::Command::new(common::fntrace_bin())
        .arg("export")
        .arg(&plain)
        .args(["--format", "flamegraph", "--weight", "off-cpu", "-o"])
        .arg(dir.path().join("x.svg"))
        .output()
        .unwrap();
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("--sched") && err.trim().lines().count() == 1,
        "{err}"
    );
}

#[test]
fn a_refused_perf_event_open_is_one_warning_and_the_recording_goes_on() {
    // perf_event_open refused (a shim preloaded after the runtime answers
    // EACCES, as kernel.perf_event_paranoid 3 would): one line naming
    // --sched, the cause and the remedy; the program and its trace are
    // complete, only without off-CPU time.
    let dir = tempfile::tempdir().unwrap();
    let exe = build(dir.path());
    let shim = dir.path().join("deny_perf.so");
    common::tool(
        "gcc",
        &[
            "-O2",
            "-shared",
            "-fPIC",
            "-o",
            shim.to_str().unwrap(),
            concat!(env!("CARGO_MANIFEST_DIR"), "/tests/libcalls/deny_perf.c"),
            "-ldl",
        ],
    );
    let data = dir.path().join("d.data");
    let out = common::record_cmd(&data, &["--sched"], &exe, &[])
        .env("LD_PRELOAD", &shim)
        .output()
        .unwrap();
    assert!(out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    let warn: Vec<&str> = err.lines().filter(|l| l.contains("--sched")).collect();
    assert_eq!(warn.len(), 1, "{err}");
    assert!(
        warn[0].contains("Permission denied")
            && warn[0].contains("perf_event_paranoid")
            && warn[0].contains("CAP_PERFMON")
            && warn[0].contains("without off-CPU time"),
        "{}",
        warn[0]
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).lines().count(), 3);
    let t = Trace::open(&data).unwrap();
    assert!(t.metadata().offcpu.is_empty());
    let rows = report_rows(&t, true, SortKey::Total);
    assert_eq!(rows_of(&rows, "nap").len(), 3);
    assert!(rows.iter().all(|r| r.wait_ns.is_none()));
}

#[test]
fn sched_and_the_flight_recorder_ring_are_refused_together() {
    let out = std::process::Command::new(common::fntrace_bin())
        .args(["record", "--sched", "--ring", "64M", "--", "true"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--sched") && err.contains("--ring"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
}

#[test]
fn intervals_whose_switches_are_on_different_cpus_are_paired() {
    // A thread switched out on one CPU and back in on another has the two
    // records in different per-CPU rings: pairing them in the order the
    // rings are read lost almost every such interval (4 of 1,000 kept).
    let dir = tempfile::tempdir().unwrap();
    let exe = dir.path().join("migrate");
    let src = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/libcalls/migrate.c");
    common::tool(
        "gcc",
        &["-O2", "-pg", "-mfentry", "-o", exe.to_str().unwrap(), src],
    );
    let data = dir.path().join("m.data");
    let out = common::record_cmd(&data, &["--sched"], &exe, &[])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(!err.contains("--sched"), "off-CPU recording refused: {err}");
    let moved: u64 = String::from_utf8(out.stdout)
        .unwrap()
        .trim()
        .strip_prefix("moved ")
        .and_then(|n| n.parse().ok())
        .expect("the program's count of CPU moves");
    assert!(
        moved >= 500,
        "the test needs two CPUs: only {moved} moves between CPU 0 and 1"
    );
    let t = Trace::open(&data).unwrap();
    let intervals: usize = t.metadata().offcpu.values().map(Vec::len).sum();
    assert!(
        intervals as u64 >= moved,
        "{intervals} off-CPU intervals for {moved} moves between CPUs"
    );
    let rows = report_rows(&t, false, SortKey::Total);
    let hop = rows.iter().find(|r| r.function == "hop").expect("hop");
    assert!(
        hop.self_ns + hop.wait_ns.unwrap() <= hop.total_ns,
        "{hop:?}"
    );
}

/// One of the sleeps on the HTML page: a blocked interval in `nap` of at
/// least this long. A `nanosleep` of 50 ms blocks for at least 50 ms (the
/// page's two clocks are mapped to within microseconds) unless the thread
/// was preempted between arming its timer and blocking, which would move
/// part of it into a preempted interval: so every sleep is at least
/// [`NAP_SLEEP_MIN_NS`] and all but a rare one at least [`NAP_SLEEP_NS`].
const NAP_SLEEP_MIN_NS: f64 = 25_000_000.0;
/// See [`NAP_SLEEP_MIN_NS`].
const NAP_SLEEP_NS: f64 = 49_500_000.0;

#[test]
fn the_html_timeline_draws_off_cpu_slices_under_the_call_they_happened_in() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build(dir.path());
    let (data, slept) = record(dir.path(), &exe, "s.data", &["--sched"]);
    let html = dir.path().join("s.html");
    export(&data, "html", &html, &[]);
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(page.contains("off-CPU interval(s)"), "the page's note");
    // The top-functions table has report's Wait column: nap's is the three
    // threads' sleep.
    let row = page
        .lines()
        .find(|l| l.starts_with("<tr><td") && l.contains(">nap</td>"))
        .expect("nap's row in the top functions");
    let cells: Vec<&str> = row
        .split("<td class=\"n\">")
        .skip(1)
        .map(|c| &c[..c.find("</td>").unwrap()])
        .collect();
    let ns = |c: &str| -> f64 {
        let mut f = c.split_whitespace();
        let (v, u) = (f.next().unwrap(), f.next().unwrap_or("ns"));
        let k = match u {
            "s" => 1e9,
            "ms" => 1e6,
            "us" => 1e3,
            _ => 1.0,
        };
        v.parse::<f64>().unwrap() * k
    };
    assert!(page.contains(">wait</th>"), "a wait column");
    close_to(
        "html top functions: nap's wait",
        ns(cells[2]) as u64 / 3,
        slept.values().sum::<u64>() / 3,
    );
    // Headless Chromium decodes the page's data and draws it; the
    // #selftest listing has a line per call and per off-CPU interval, per
    // thread the colour drawn and the tooltip at its longest blocked and
    // longest preempted interval, and every flame-graph node under each
    // weight (wall, on CPU, off CPU).
    let url = format!("file://{}#selftest", html.display());
    let (dom, _) = common::chromium_dom(dir.path(), &url);
    let text = common::selftest_text(&dom);
    let lines: Vec<Vec<&str>> = text
        .lines()
        .map(|l| l.splitn(7, ' ').collect::<Vec<_>>())
        .collect();
    // "tid offcpu depth start dur blocked|preempted function".
    let is_nap_sleep = |f: &Vec<&str>| {
        f[1] == "offcpu"
            && f[5] == "blocked"
            && f[6] == "nap"
            && f[4].parse::<f64>().unwrap() >= NAP_SLEEP_MIN_NS
    };
    let tids: std::collections::HashSet<&str> = lines
        .iter()
        .map(|f| f[0])
        .filter(|t| t.parse::<u32>().is_ok())
        .collect();
    assert_eq!(tids.len(), 4, "main and three sleepers: {tids:?}");
    let mut sleeps = 0;
    for tid in tids {
        let lines: Vec<&Vec<&str>> = lines.iter().filter(|f| f[0] == tid).collect();
        let tid = tid.parse::<u32>().unwrap();
        let drawn = |kind: &str| {
            lines
                .iter()
                .find(|f| f[1] == "offcpu-drawn" && f[3..].join(" ").starts_with(kind))
        };
        // A preemption (in spin, mostly), when there was one: amber
        // (#e0a526), its tooltip saying so.
        if let Some(p) = drawn("off CPU (preempted) in ") {
            assert_eq!(p[2], "224,165,38", "[{tid}]: preempted colour: {p:?}");
        }
        let Some(&s) = slept.get(&tid) else {
            // The main thread sleeps in pthread_join, inside main; no nap.
            assert!(
                !lines.iter().any(|f| is_nap_sleep(f)),
                "main [{tid}]: a nap sleep"
            );
            assert!(
                lines.iter().any(|f| f[1] == "offcpu" && f[6] == "main"),
                "main [{tid}]: no off-CPU slice in main"
            );
            continue;
        };
        // nap: "tid depth start dur nap".
        let nap = lines
            .iter()
            .find(|f| f.len() == 5 && f[4] == "nap")
            .unwrap_or_else(|| panic!("no nap call of {tid} on the page"));
        let (nap_depth, nap_start, nap_dur): (usize, f64, f64) = (
            nap[1].parse().unwrap(),
            nap[2].parse().unwrap(),
            nap[3].parse().unwrap(),
        );
        // Its ten sleeps, each one slice of at least 50 ms, one row below
        // nap and inside it, adding up to what the thread measured.
        let in_nap: Vec<&&Vec<&str>> = lines.iter().filter(|f| is_nap_sleep(f)).collect();
        assert_eq!(in_nap.len(), 10, "[{tid}]: sleeps in nap: {in_nap:?}");
        let full = in_nap
            .iter()
            .filter(|f| f[4].parse::<f64>().unwrap() >= NAP_SLEEP_NS)
            .count();
        assert!(full >= 9, "[{tid}]: 50 ms slices in nap: {in_nap:?}");
        sleeps += in_nap.len();
        let mut sum = 0.0;
        for f in &in_nap {
            let (depth, start, dur): (usize, f64, f64) = (
                f[2].parse().unwrap(),
                f[3].parse().unwrap(),
                f[4].parse().unwrap(),
            );
            assert_eq!(depth, nap_depth + 1, "[{tid}]: one row below nap");
            assert!(
                start + 50_000.0 >= nap_start && start + dur <= nap_start + nap_dur + 50_000.0,
                "[{tid}]: off CPU at {start} for {dur} outside nap at {nap_start} for {nap_dur}"
            );
            sum += dur;
        }
        close_to(&format!("html [{tid}]"), sum as u64, s);
        // The thread's flame graph weighted by off-CPU time puts the sleep
        // in sleeper;nap, on-CPU time leaves it out, and the two add up
        // to wall time.
        let (wall, on, off) = (
            flame(&lines, "wall", "sleeper;nap"),
            flame(&lines, "on", "sleeper;nap"),
            flame(&lines, "off", "sleeper;nap"),
        );
        close_to(&format!("html flame off-CPU [{tid}]"), off as u64, s);
        assert!(on * 10.0 < s as f64, "[{tid}]: nap on CPU {on} ns");
        assert!(
            (wall - on - off).abs() < 1e3,
            "[{tid}]: {wall} != {on} + {off}"
        );
        // Drawn in the blocked colour (#9aa3ad), with its tooltip: one of
        // the sleeps, "off CPU (blocked) in nap | 50.081 ms at ...".
        let drawn = drawn("off CPU (blocked) in ")
            .unwrap_or_else(|| panic!("[{tid}]: no drawn blocked off-CPU slice: {lines:?}"));
        assert_eq!(
            drawn[2], "154,163,173",
            "[{tid}]: colour at the slice: {drawn:?}"
        );
        let tip = drawn[3..].join(" ");
        let ms: f64 = tip
            .strip_prefix("off CPU (blocked) in nap | ")
            .and_then(|t| t.split(" ms at ").next())
            .and_then(|t| t.parse().ok())
            .unwrap_or_else(|| panic!("[{tid}]: tooltip {tip:?}"));
        let longest = in_nap
            .iter()
            .map(|f| f[4].parse::<f64>().unwrap())
            .fold(0.0, f64::max);
        assert!(
            (ms * 1e6 - longest).abs() < 1e3,
            "[{tid}]: tooltip {tip:?}, longest sleep {longest} ns"
        );
    }
    assert_eq!(sleeps, 30);
    // The merged flame graph (all threads): the three sleeps in one node.
    let all: Vec<&Vec<&str>> = lines.iter().filter(|f| f[0] == "all").collect();
    let off = flame(&all, "off", "sleeper;nap");
    close_to(
        "html flame off-CPU, all threads",
        off as u64 / 3,
        slept.values().sum::<u64>() / 3,
    );
}

/// The total of flame-graph node `path` under `weight` in the #selftest
/// lines ("tid flame weight total path").
fn flame(lines: &[&Vec<&str>], weight: &str, path: &str) -> f64 {
    let l = lines
        .iter()
        .find(|f| f.len() >= 5 && f[1] == "flame" && f[2] == weight && f[4] == path)
        .unwrap_or_else(|| panic!("no {weight} flame node {path}"));
    l[3].parse().unwrap()
}
