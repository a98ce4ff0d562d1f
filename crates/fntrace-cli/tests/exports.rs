//! Exports and views over real recordings: Chrome Trace Event JSON (every
//! B has its E on the same thread), folded stacks and flame graph, `graph`
//! (text and dot) and `report --diff`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;

mod common;
use common::{
    WINDOW, chromium, chromium_dom, decode_perfetto, fntrace_bin as fntrace, gprof_called, preload,
    selftest_text,
};

fn gcc(dir: &Path, src: &str, name: &str, flags: &[&str]) -> PathBuf {
    let out = dir.join(name);
    let st = Command::new("gcc")
        .args(["-O2", "-fno-optimize-sibling-calls"])
        .args(flags)
        .arg("-o")
        .arg(&out)
        .arg(src)
        .arg("-lpthread")
        .status()
        .expect("gcc is required");
    assert!(st.success());
    out
}

fn fntrace_ok(args: &[&str]) -> String {
    let out = Command::new(fntrace())
        .args(args)
        .env("FNTRACE_PRELOAD", preload())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "fntrace {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

const FIB: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../examples/workloads/fib.c"
);
const THREADS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/hooks/threads_fork.c");

#[test]
fn chrome_export_pairs_every_begin_with_its_end() {
    let d = tempfile::tempdir().unwrap();
    let bin = gcc(d.path(), THREADS, "threads", &["-finstrument-functions"]);
    let data = d.path().join("t.data");
    let json = d.path().join("t.json");
    let s = |p: &Path| p.to_str().unwrap().to_string();
    fntrace_ok(&["record", "-o", &s(&data), "--", &s(&bin), "threads"]);
    fntrace_ok(&["export", &s(&data), "--format", "chrome", "-o", &s(&json)]);
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let ev = v["traceEvents"].as_array().unwrap();
    let mut stacks: HashMap<u64, Vec<String>> = HashMap::new();
    let (mut b, mut thread_names) = (0, 0);
    let mut last_ts: HashMap<u64, f64> = HashMap::new();
    for e in ev {
        let tid = e["tid"].as_u64().unwrap();
        match e["ph"].as_str().unwrap() {
            "B" => {
                b += 1;
                stacks
                    .entry(tid)
                    .or_default()
                    .push(e["name"].as_str().unwrap().into());
            }
            "E" => {
                let top = stacks.get_mut(&tid).and_then(|s| s.pop());
                assert_eq!(top.as_deref(), e["name"].as_str(), "unpaired E on {tid}");
            }
            "M" if e["name"] == "thread_name" => thread_names += 1,
            _ => {}
        }
        if let Some(ts) = e["ts"].as_f64() {
            let l = last_ts.entry(tid).or_insert(0.0);
            assert!(ts >= *l, "time goes back on thread {tid}");
            *l = ts;
        }
    }
    assert!(stacks.values().all(|s| s.is_empty()), "B without E");
    // 8 workers × 1973 fib + worker, plus main.
    assert_eq!(b, 8 * 1974 + 1);
    assert_eq!(thread_names, 9);
}

#[test]
fn folded_flamegraph_graph_and_diff() {
    let d = tempfile::tempdir().unwrap();
    let bin = gcc(d.path(), FIB, "fib", &["-pg"]);
    let s = |p: &Path| p.to_str().unwrap().to_string();
    let (a, b) = (d.path().join("a.data"), d.path().join("b.data"));
    fntrace_ok(&["record", "-o", &s(&a), "--", &s(&bin), "12"]);
    // b does 18 times the work of a, so its total is larger whatever
    // the scheduler does to one run (a timing comparison needs a margin).
    fntrace_ok(&["record", "-o", &s(&b), "--", &s(&bin), "18"]);
    // Folded stacks: every line "frames value", the deepest has 13 frames
    // (main + fib(12) down to fib(1)); values sum to the total time.
    let folded = d.path().join("a.folded");
    fntrace_ok(&["export", &s(&a), "--format", "folded", "-o", &s(&folded)]);
    let text = std::fs::read_to_string(&folded).unwrap();
    let mut sum = 0u64;
    let mut deepest = 0;
    for l in text.lines() {
        let (stack, v) = l.rsplit_once(' ').unwrap();
        sum += v.parse::<u64>().unwrap();
        assert!(stack.starts_with("main"), "{l}");
        deepest = deepest.max(stack.split(';').count());
    }
    assert_eq!(deepest, 13);
    // `-o -` is standard output (not a file named "-" in the current
    // directory): the same stacks.
    let out = Command::new(fntrace())
        .args(["export", &s(&a), "--format", "folded", "-o", "-"])
        .current_dir(d.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), text);
    assert!(!d.path().join("-").exists());
    let rows: serde_json::Value =
        serde_json::from_str(&fntrace_ok(&["report", &s(&a), "--format", "json"])).unwrap();
    let main_total = rows
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["function"] == "main")
        .unwrap()["total_ns"]
        .as_u64()
        .unwrap();
    let diff = sum.abs_diff(main_total);
    assert!(
        diff * 100 <= main_total + 100,
        "folded {sum} vs total {main_total}"
    );
    // Flame graph.
    let svg = d.path().join("a.svg");
    fntrace_ok(&["export", &s(&a), "--format", "flamegraph", "-o", &s(&svg)]);
    let svg = std::fs::read_to_string(&svg).unwrap();
    assert!(svg.starts_with("<?xml") && svg.contains("<svg") && svg.contains(">fib<"));
    // graph: backtrace main → fib, callee tree with the call counts.
    let g = fntrace_ok(&["graph", "fib", &s(&a), "--levels", "3"]);
    assert!(g.contains("[0] main") && g.contains("[1] fib"), "{g}");
    let tree: Vec<&str> = g
        .lines()
        .skip_while(|l| !l.contains("CALL GRAPH"))
        .skip(2)
        .collect();
    assert_eq!(tree.len(), 3, "{g}");
    assert!(tree[0].split_whitespace().nth(2) == Some("1"), "{g}");
    assert!(
        tree[1].contains("+-fib") && tree[1].split_whitespace().nth(2) == Some("2"),
        "{g}"
    );
    let dot = fntrace_ok(&["graph", "main", &s(&a), "--format", "dot"]);
    assert!(dot.contains("\"main\" -> \"fib\" [label=\"1\"]"), "{dot}");
    assert!(dot.contains("\"fib\" -> \"fib\" [label=\"464\"]"), "{dot}");
    // A function that is not there is an error naming the file.
    let out = Command::new(fntrace())
        .args(["graph", "nothing", &s(&a)])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no calls of"));
    // diff: fib(12) → fib(18), 465 → 8361 calls, total grows.
    let j: serde_json::Value = serde_json::from_str(&fntrace_ok(&[
        "report",
        &s(&a),
        "--diff",
        &s(&b),
        "--format",
        "json",
    ]))
    .unwrap();
    let fib = j
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["function"] == "fib")
        .unwrap();
    assert_eq!(
        (fib["calls_a"].as_u64(), fib["calls_b"].as_u64()),
        (Some(465), Some(8361))
    );
    assert!(fib["delta_total_ns"].as_i64().unwrap() > 0);
}

#[test]
fn replay_time_range_and_colour() {
    let d = tempfile::tempdir().unwrap();
    let bin = gcc(d.path(), FIB, "fib", &["-pg"]);
    let s = |p: &Path| p.to_str().unwrap().to_string();
    let a = d.path().join("a.data");
    fntrace_ok(&["record", "-o", &s(&a), "--", &s(&bin), "12"]);
    let lines = |extra: &[&str]| {
        let mut args = vec!["replay", "--color", "never"];
        let p = s(&a);
        args.push(&p);
        args.extend(extra);
        fntrace_ok(&args).lines().skip(1).count()
    };
    let all = lines(&[]);
    assert!(all > 400);
    assert_eq!(lines(&["-r", "0~"]), all);
    assert_eq!(lines(&["-r", "~0ns"]), 0);
    // The second half of the run (by entry time of fib calls, from the
    // chrome export's timestamps) shows some calls but not all.
    let json = d.path().join("a.json");
    fntrace_ok(&["export", &s(&a), "--format", "chrome", "-o", &s(&json)]);
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let ts: Vec<f64> = v["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["ph"] == "B")
        .map(|e| e["ts"].as_f64().unwrap())
        .collect();
    let mid = (ts[0] + ts[ts.len() - 1]) / 2.0;
    let half = lines(&["-r", &format!("{}us~", mid as u64)]);
    assert!(half > 0 && half < all, "{half} of {all}");
    let col = fntrace_ok(&["replay", "--color", "always", &s(&a)]);
    assert!(col.contains("\x1b["));
    let plain = fntrace_ok(&["replay", &s(&a)]);
    assert!(!plain.contains("\x1b["), "colour when not a terminal");
}

use fntrace_format::event::Framed;
use fntrace_format::layout::{
    ChunkHeader, DEFAULT_CHUNK_SIZE, FINAL_FLAG_CLEAN, Final, Header, META_TID,
};
use fntrace_format::writer::TraceBuilder;

/// A synthetic trace (1 GHz clock, pid 7) whose metadata names `functions`.
fn synthetic_trace(functions: &[(u64, &str)]) -> TraceBuilder {
    let mut b = TraceBuilder::new(Header {
        start_tsc: 1000,
        pid: 7,
        ..Header::current(DEFAULT_CHUNK_SIZE, 1_000_000_000)
    });
    let mut meta = b.new_chunk(&ChunkHeader::at(META_TID, 0, 0, 1000));
    for &(key, name) in functions {
        assert!(meta.framed(&Framed::Site {
            key,
            prefix: b"",
            name: name.as_bytes(),
            file: b"x.rs",
            line: 1,
        }));
    }
    meta.seal();
    b.push_chunk(&meta);
    b
}

/// Finishes a synthetic trace cleanly and writes it to `path`.
fn finish_trace(b: TraceBuilder, end_tsc: u64, path: &Path) {
    let chunks = b.chunks();
    let bytes = b.finish(&Final {
        flags: FINAL_FLAG_CLEAN,
        end_tsc,
        end_mono_ns: 0,
        tsc_hz: 1_000_000_000,
        chunks,
        ..Final::default()
    });
    std::fs::write(path, bytes).unwrap();
}

#[test]
fn replay_shows_arguments_return_values_and_markers() {
    let mut b = synthetic_trace(&[(0x10, "fib"), (0x20, "leaf")]);
    let mut c = b.new_chunk(&ChunkHeader::at(1, 0, 0, 1000));
    assert!(c.entry(10, 0x10));
    assert!(c.framed(&Framed::Args { values: &[30, -1] }));
    assert!(c.entry(10, 0x20));
    assert!(c.framed(&Framed::Args { values: &[2] }));
    assert!(c.framed(&Framed::RetVal { value: 7 }));
    assert!(c.exit(10));
    assert!(c.framed(&Framed::Marker {
        d: 5,
        name: b"net_rx",
        text: b"len=64"
    }));
    assert!(c.framed(&Framed::RetVal { value: 832040 }));
    assert!(c.exit(10));
    c.seal();
    b.push_chunk(&c);
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("a.data");
    finish_trace(b, 2000, &p);
    let out = fntrace_ok(&["replay", "--color", "never", p.to_str().unwrap()]);
    let lines: Vec<&str> = out
        .lines()
        .map(|l| l.split(" | ").nth(1).unwrap_or(l))
        .collect();
    assert_eq!(
        &lines[1..],
        &[
            "fib(30, -1) {",
            "  leaf(2) = 7;",
            "  /* marker net_rx len=64 */",
            "} = 832040 /* fib */",
        ],
        "{out}"
    );
    // The report counts calls as usual; chrome has the marker as an instant.
    let rep = fntrace_ok(&["report", p.to_str().unwrap(), "--format", "csv"]);
    assert!(
        rep.contains("\nfib,,1,") && rep.contains("\nleaf,,1,"),
        "{rep}"
    );
    let json = d.path().join("a.json");
    fntrace_ok(&[
        "export",
        p.to_str().unwrap(),
        "--format",
        "chrome",
        "-o",
        json.to_str().unwrap(),
    ]);
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert!(
        v["traceEvents"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["ph"] == "i" && e["name"] == "net_rx" && e["args"]["text"] == "len=64")
    );
}

/// A recursion 20,000 deep with a leaf call at every level: `report`,
/// the folded stacks and `graph` stay fast and small (a calling-context
/// tree, stacks cut at 1,024 frames, with a message, and the cut keeps
/// every nanosecond of self time; backtraces in a trie).
#[test]
fn deep_recursion_exports_and_graph_stay_small() {
    const DEPTH: u32 = 20_000;
    let mut b = synthetic_trace(&[(0x10, "rec"), (0x20, "leaf")]);
    let (mut seq, mut depth, mut tsc) = (0, 0u32, 1000);
    let mut c = b.new_chunk(&ChunkHeader::at(1, seq, depth, tsc));
    // Each call to `rec` enters, calls `leaf` (10 ticks), then recurses;
    // every record is 10 ticks after the one before.
    let mut ops = vec![];
    for _ in 0..DEPTH {
        ops.extend([Some(0x10), Some(0x20), None]);
    }
    ops.extend((0..DEPTH).map(|_| None));
    for op in ops {
        let ok = |c: &mut fntrace_format::writer::ChunkBuf| match op {
            Some(f) => c.entry(10, f),
            None => c.exit(10),
        };
        if !ok(&mut c) {
            c.seal();
            b.push_chunk(&c);
            seq += 1;
            c = b.new_chunk(&ChunkHeader::at(1, seq, depth, tsc));
            assert!(ok(&mut c));
        }
        tsc += 10;
        match op {
            Some(_) => depth += 1,
            None => depth -= 1,
        }
    }
    c.seal();
    b.push_chunk(&c);
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("deep.data");
    finish_trace(b, 1_000_000_000, &p);
    let rep = fntrace_ok(&["report", p.to_str().unwrap(), "--format", "csv"]);
    assert!(
        rep.contains(&format!("\nrec,,{DEPTH},")) && rep.contains(&format!("\nleaf,,{DEPTH},")),
        "{rep}"
    );
    let folded = d.path().join("deep.folded");
    let out = Command::new(fntrace())
        .args(["export", p.to_str().unwrap(), "--format", "folded", "-o"])
        .arg(&folded)
        .output()
        .unwrap();
    assert!(out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    // 1,023 `rec` frames and the leaf under the deepest fit; the other
    // (20,000 - 1,023) recs and leaves (minus the one kept) are cut.
    let cut = 2 * (DEPTH as u64 - 1023) - 1;
    assert!(
        err.contains(&format!("the self time of {cut} deeper calls")),
        "{err}"
    );
    let text = std::fs::read_to_string(&folded).unwrap();
    let mut total = 0u64;
    let mut deepest = 0;
    for l in text.lines() {
        let (stack, ns) = l.rsplit_once(' ').unwrap();
        total += ns.parse::<u64>().unwrap();
        deepest = deepest.max(stack.split(';').count());
    }
    assert_eq!(deepest, 1024);
    // Every tick between the first entry and the last exit is some call's
    // self time: 10 ticks per record after the first (1 GHz: 1 tick = 1 ns).
    assert_eq!(total, 10 * (4 * DEPTH as u64 - 1), "{text:.300}");
    // One stack per depth for `rec` and one for `leaf`.
    assert_eq!(text.lines().count(), 2 * 1023 + 1);
    // `graph leaf`: backtraces kept as a trie (the old per-path vectors
    // needed O(depth) memory each), a recursion printed as one line.
    let g = fntrace_ok(&["graph", "leaf", p.to_str().unwrap()]);
    assert!(
        g.contains(" backtrace #19: hit 1, time 10 ns\n   [0-19] rec (x20)\n   [20] leaf\n"),
        "{g:.2000}"
    );
    assert!(
        g.contains(&format!(" ... {} more backtraces", DEPTH - 20)),
        "{g:.2000}"
    );
    let dot = fntrace_ok(&["graph", "leaf", p.to_str().unwrap(), "--format", "dot"]);
    // Each backtrace counts once on every edge it goes through: the leaf
    // at depth k passes k rec -> rec edges.
    let through: u64 = (0..DEPTH as u64).sum();
    assert!(
        dot.contains("\"rec\" -> \"leaf\" [label=\"20000\"]")
            && dot.contains(&format!("\"rec\" -> \"rec\" [label=\"{through}\"]")),
        "{dot}"
    );
}

/// A slice as `fntrace replay` prints it: name, depth, duration in ns and
/// the resolution of the printed duration.
#[derive(Debug)]
struct ReplaySlice {
    name: String,
    depth: usize,
    dur: u64,
    resolution: u64,
}

/// Parses `12.345 us` into (ns, resolution of the printed value).
fn parse_replay_duration(s: &str) -> (u64, u64) {
    let (v, unit) = s.trim().split_once(' ').unwrap();
    let unit = unit.trim();
    let v: f64 = v.parse().unwrap();
    let (mult, res) = match unit {
        "ns" => (1.0, 1),
        "us" => (1e3, 1),
        "ms" => (1e6, 1_000),
        "s" => (1e9, 1_000_000),
        _ => panic!("unit {unit:?}"),
    };
    ((v * mult).round() as u64, res)
}

/// `name(1, 2) = 3` → `name`.
fn strip_call_suffix(s: &str) -> String {
    let s = s.split(" = ").next().unwrap();
    match s.rfind('(') {
        Some(i) if s.ends_with(')') => s[..i].to_string(),
        _ => s.to_string(),
    }
}

/// The slices of `fntrace replay`, per thread, in order of entry.
fn replay_slices(trace: &Path, select: &[&str]) -> HashMap<u64, Vec<ReplaySlice>> {
    let mut args = vec!["replay", "--color", "never", trace.to_str().unwrap()];
    args.extend(select);
    let out = fntrace_ok(&args);
    let mut per: HashMap<u64, Vec<ReplaySlice>> = HashMap::new();
    let mut open: HashMap<u64, Vec<usize>> = HashMap::new();
    for line in out.lines().skip(1) {
        let (head, body) = line.split_once(" | ").unwrap();
        let (dur, tid) = head.split_once('[').unwrap();
        let tid: u64 = tid.trim_end_matches(']').trim().parse().unwrap();
        let depth = (body.len() - body.trim_start().len()) / 2;
        let body = body.trim_start();
        let slices = per.entry(tid).or_default();
        let stack = open.entry(tid).or_default();
        if body.starts_with("/* marker ") {
            continue;
        } else if let Some(call) = body.strip_suffix(" {") {
            stack.push(slices.len());
            slices.push(ReplaySlice {
                name: strip_call_suffix(call),
                depth,
                dur: 0,
                resolution: 0,
            });
        } else if body.starts_with('}') {
            let i = stack.pop().expect("replay closes an unopened call");
            (slices[i].dur, slices[i].resolution) = parse_replay_duration(dur);
        } else {
            let call = body.split(';').next().unwrap();
            let (dur, resolution) = parse_replay_duration(dur);
            slices.push(ReplaySlice {
                name: strip_call_suffix(call),
                depth,
                dur,
                resolution,
            });
        }
    }
    per
}

/// Every slice of the Perfetto export, decoded with the upstream protos,
/// is the call `fntrace replay` shows: same threads, names, nesting,
/// order and durations (within the printed precision plus the 1 ns that
/// converting begin and end separately may round off), with the same
/// selection options (`select`) given to both.
fn assert_perfetto_matches_replay(dir: &Path, data: &Path, select: &[&str]) -> serde_json::Value {
    let pf = dir.join("t.pftrace");
    let s = |p: &Path| p.to_str().unwrap().to_string();
    let (data_s, pf_s) = (s(data), s(&pf));
    let mut args = vec!["export", &data_s, "--format", "perfetto", "-o", &pf_s];
    args.extend(select);
    fntrace_ok(&args);
    let v = decode_perfetto(dir, &pf);
    let want = replay_slices(data, select);
    let mut got: HashMap<u64, Vec<&serde_json::Value>> = HashMap::new();
    for sl in v["slices"].as_array().unwrap() {
        got.entry(sl["tid"].as_u64().unwrap()).or_default().push(sl);
    }
    let mut tids: Vec<_> = want.keys().copied().collect();
    tids.sort();
    let mut gtids: Vec<_> = got.keys().copied().collect();
    gtids.sort();
    assert_eq!(gtids, tids, "threads with calls");
    let mut n = 0;
    for tid in tids {
        let (w, g) = (&want[&tid], &got[&tid]);
        assert_eq!(g.len(), w.len(), "calls of thread {tid}");
        for (w, g) in w.iter().zip(g) {
            assert_eq!(g["name"].as_str().unwrap(), w.name, "thread {tid}");
            assert_eq!(g["depth"].as_u64().unwrap() as usize, w.depth, "{}", w.name);
            let dur = g["dur"].as_u64().unwrap();
            assert!(
                dur.abs_diff(w.dur) <= w.resolution + 1,
                "{} on {tid}: {dur} ns, replay {} ns",
                w.name,
                w.dur
            );
            n += 1;
        }
        // Time never goes back on a thread.
        let ts: Vec<u64> = g.iter().map(|s| s["ts"].as_u64().unwrap()).collect();
        assert!(ts.windows(2).all(|p| p[0] <= p[1]), "thread {tid}");
    }
    assert!(n > 0);
    v
}

#[test]
fn perfetto_export_decodes_with_the_upstream_protos_and_matches_replay() {
    let d = tempfile::tempdir().unwrap();
    let bin = gcc(d.path(), THREADS, "threads", &["-finstrument-functions"]);
    let data = d.path().join("t.data");
    let s = |p: &Path| p.to_str().unwrap().to_string();
    fntrace_ok(&["record", "-o", &s(&data), "--", &s(&bin), "threads"]);
    let v = assert_perfetto_matches_replay(d.path(), &data, &[]);
    // 8 workers × 1973 fib + worker, plus main.
    assert_eq!(v["slices"].as_array().unwrap().len(), 8 * 1974 + 1);
    // Every thread has its track with its name, under the process.
    let threads = v["threads"].as_object().unwrap();
    assert_eq!(threads.len(), 9);
    assert!(threads.values().all(|n| n == "threads"), "{threads:?}");
    assert_eq!(v["process"]["name"], "threads");
    assert_eq!(v["process"]["cmdline"][1], "threads");
    // At most 12 bytes per event (two per call).
    let bytes = std::fs::metadata(d.path().join("t.pftrace")).unwrap().len();
    let events = 2 * v["slices"].as_array().unwrap().len() as u64;
    assert!(bytes <= 12 * events, "{bytes} bytes for {events} events");
}

#[test]
fn perfetto_export_has_arguments_return_values_and_markers() {
    let mut b = synthetic_trace(&[(0x10, "fib"), (0x20, "leaf")]);
    let mut c = b.new_chunk(&ChunkHeader::at(1, 0, 0, 1000));
    assert!(c.entry(10, 0x10));
    assert!(c.framed(&Framed::Args { values: &[30, -1] }));
    assert!(c.entry(200, 0x20));
    assert!(c.framed(&Framed::Args { values: &[2] }));
    assert!(c.framed(&Framed::RetVal { value: 7 }));
    assert!(c.exit(300));
    assert!(c.framed(&Framed::Marker {
        d: 5,
        name: b"net_rx",
        text: b"len=64"
    }));
    assert!(c.framed(&Framed::RetVal { value: 832040 }));
    assert!(c.exit(10));
    // A second call of leaf, without values: its name is not interned again.
    assert!(c.entry(1000, 0x20));
    assert!(c.exit(20_000));
    c.seal();
    b.push_chunk(&c);
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("a.data");
    finish_trace(b, 30_000, &p);
    let v = assert_perfetto_matches_replay(d.path(), &p, &[]);
    let sl = v["slices"].as_array().unwrap();
    assert_eq!(sl.len(), 3);
    assert_eq!(sl[0]["name"], "fib");
    assert_eq!(
        sl[0]["args"],
        serde_json::json!({"arg1": 30, "arg2": -1, "retval": 832040})
    );
    assert_eq!(sl[1]["name"], "leaf");
    assert_eq!(sl[1]["args"], serde_json::json!({"arg1": 2, "retval": 7}));
    assert_eq!(sl[2]["args"], serde_json::json!({}));
    // A 1 GHz clock: nanoseconds are ticks, from the start of the recording.
    assert_eq!(sl[0]["ts"], 10);
    assert_eq!(sl[1]["ts"], 210);
    assert_eq!(sl[1]["dur"], 300);
    assert_eq!(sl[0]["dur"], 200 + 300 + 5 + 10);
    assert_eq!(sl[2]["dur"], 20_000);
    let inst = v["instants"].as_array().unwrap();
    assert_eq!(inst.len(), 1);
    assert_eq!(inst[0]["name"], "net_rx");
    assert_eq!(inst[0]["ts"], 10 + 200 + 300 + 5);
    assert_eq!(inst[0]["args"], serde_json::json!({"args": "len=64"}));
    // Selected: the marker goes with the call it fired in, as in replay,
    // and the values with their (selected) call.
    let v = assert_perfetto_matches_replay(d.path(), &p, &["--filter", "leaf"]);
    assert_eq!(v["slices"].as_array().unwrap().len(), 2);
    assert_eq!(v["instants"], serde_json::json!([]));
    assert_eq!(
        v["slices"][0]["args"],
        serde_json::json!({"arg1": 2, "retval": 7})
    );
    let v = assert_perfetto_matches_replay(d.path(), &p, &["--filter", "fib", "--depth", "1"]);
    assert_eq!(v["slices"].as_array().unwrap().len(), 1);
    assert_eq!(v["instants"].as_array().unwrap().len(), 1);
    let v = assert_perfetto_matches_replay(d.path(), &p, &["--threshold", "400ns"]);
    assert_eq!(v["slices"].as_array().unwrap().len(), 2);
}

#[test]
fn failed_export_leaves_no_file_and_says_why_in_one_line() {
    let d = tempfile::tempdir().unwrap();
    let bad = d.path().join("bad.data");
    std::fs::write(&bad, b"not a trace at all, just some bytes").unwrap();
    let out = d.path().join("t.pftrace");
    for input in [bad.clone(), d.path().join("missing.data")] {
        let r = Command::new(fntrace())
            .args([
                "export",
                input.to_str().unwrap(),
                "--format",
                "perfetto",
                "-o",
            ])
            .arg(&out)
            .output()
            .unwrap();
        assert!(!r.status.success());
        let err = String::from_utf8_lossy(&r.stderr);
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(!out.exists(), "a failed export left {}", out.display());
    }
}

/// `--tid`, `--time-range`, `--filter`, `--depth` and `--threshold`
/// select the same calls in the Perfetto and Chrome exports and in
/// `report` as in `replay`; a format without selections refuses them in
/// one line.
#[test]
fn exports_select_the_calls_replay_shows() {
    let d = tempfile::tempdir().unwrap();
    let bin = gcc(d.path(), THREADS, "threads", &["-finstrument-functions"]);
    let data = d.path().join("t.data");
    let s = |p: &Path| p.to_str().unwrap().to_string();
    fntrace_ok(&["record", "-o", &s(&data), "--", &s(&bin), "threads"]);
    let all = assert_perfetto_matches_replay(d.path(), &data, &[]);
    let all_n = all["slices"].as_array().unwrap().len();
    let worker_tid = all["slices"].as_array().unwrap()[1]["tid"]
        .as_u64()
        .unwrap();
    let tid = worker_tid.to_string();
    let cases: Vec<Vec<&str>> = vec![
        vec!["--tid", &tid],
        vec!["--filter", "worker", "--depth", "3"],
        vec!["--filter", "^fib$", "--depth", "2"],
        vec!["--threshold", "2us"],
        vec!["--tid", &tid, "--threshold", "500ns", "--depth", "4"],
    ];
    for case in &cases {
        let v = assert_perfetto_matches_replay(d.path(), &data, case);
        let n = v["slices"].as_array().unwrap().len();
        assert!(n > 0 && n < all_n, "{case:?}: {n} of {all_n}");
        // Chrome: the same number of calls, every B with its E.
        let json = d.path().join("t.json");
        let (data_s, json_s) = (s(&data), s(&json));
        let mut args = vec!["export", &data_s, "--format", "chrome", "-o", &json_s];
        args.extend(case);
        fntrace_ok(&args);
        let j: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
        let ev = j["traceEvents"].as_array().unwrap();
        let b = ev.iter().filter(|e| e["ph"] == "B").count();
        let e = ev.iter().filter(|e| e["ph"] == "E").count();
        assert_eq!((b, e), (n, n), "{case:?}");
        // report: the same calls counted.
        let mut args = vec!["report", &data_s, "--format", "json"];
        args.extend(case);
        let rep: serde_json::Value = serde_json::from_str(&fntrace_ok(&args)).unwrap();
        let calls: u64 = rep
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["calls"].as_u64().unwrap())
            .sum();
        assert_eq!(calls as usize, n, "report {case:?}");
    }
    let tids: std::collections::HashSet<u64> =
        assert_perfetto_matches_replay(d.path(), &data, &["--tid", &tid])["slices"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["tid"].as_u64().unwrap())
            .collect();
    assert_eq!(tids.len(), 1);
    // --time-range: as many calls as replay shows in the window (a call
    // entered in it whose parent was not is shown without it, so nesting
    // is not compared here), and fewer than all.
    let start = all["start"].as_u64().unwrap();
    let mut ts: Vec<u64> = all["slices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["ts"].as_u64().unwrap() - start)
        .collect();
    ts.sort();
    let window = format!("{}ns~{}ns", ts[ts.len() / 4], ts[ts.len() / 2]);
    let pf = d.path().join("r.pftrace");
    fntrace_ok(&[
        "export",
        &s(&data),
        "--format",
        "perfetto",
        "-o",
        &s(&pf),
        "-r",
        &window,
    ]);
    let v = decode_perfetto(d.path(), &pf);
    let n = v["slices"].as_array().unwrap().len();
    let shown: usize = replay_slices(&data, &["-r", &window])
        .values()
        .map(|v| v.len())
        .sum();
    assert_eq!(n, shown, "--time-range {window}");
    let rep: serde_json::Value = serde_json::from_str(&fntrace_ok(&[
        "report",
        &s(&data),
        "--format",
        "json",
        "-r",
        &window,
    ]))
    .unwrap();
    let calls: u64 = rep
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["calls"].as_u64().unwrap())
        .sum();
    assert_eq!(calls as usize, n, "report --time-range {window}");
    assert!(n > 0 && n < all_n, "{n} of {all_n}");
    // Folded stacks of the selected calls: stacks start at the match and
    // are at most --depth frames.
    let folded = d.path().join("t.folded");
    fntrace_ok(&[
        "export",
        &s(&data),
        "--format",
        "folded",
        "-o",
        &s(&folded),
        "--filter",
        "worker",
        "--depth",
        "2",
    ]);
    let text = std::fs::read_to_string(&folded).unwrap();
    assert!(text.lines().count() >= 2, "{text}");
    for l in text.lines() {
        let stack = l.rsplit_once(' ').unwrap().0;
        assert!(
            stack.starts_with("worker") && stack.split(';').count() <= 2,
            "{l}"
        );
    }
    // A --count trace has no calls to select: gmon says so in one line.
    let counted = d.path().join("c.data");
    fntrace_ok(&[
        "record",
        "--count",
        "-o",
        &s(&counted),
        "--",
        &s(&bin),
        "threads",
    ]);
    let gmon = d.path().join("c.gmon");
    let r = Command::new(fntrace())
        .args([
            "export",
            &s(&counted),
            "--format",
            "gmon",
            "--tid",
            &tid,
            "-o",
        ])
        .arg(&gmon)
        .output()
        .unwrap();
    assert!(!r.status.success());
    let err = String::from_utf8_lossy(&r.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("--count"), "{err}");
    assert!(!gmon.exists());
}

/// The caller of each replay slice of one thread (by depth), and whether
/// a call of the same function is among its callers.
fn replay_parents(slices: &[ReplaySlice]) -> Vec<(Option<usize>, bool)> {
    let mut stack: Vec<usize> = vec![];
    let mut out: Vec<(Option<usize>, bool)> = vec![];
    for (i, s) in slices.iter().enumerate() {
        stack.truncate(s.depth);
        let p = stack.last().copied();
        let recursive = stack.iter().any(|&a| slices[a].name == s.name);
        out.push((p, recursive));
        stack.push(i);
    }
    out
}

/// The slices of an llvm-xray log as `llvm-xray convert` reads them
/// (trace-event output, symbolized): per thread, in order of entry,
/// (name, depth, duration in ns).
fn xray_slices(bin: &Path, log: &Path) -> HashMap<u64, Vec<(String, usize, f64)>> {
    let out = Command::new("llvm-xray")
        .arg("convert")
        .arg(format!("-instr_map={}", bin.display()))
        .args(["-output-format=trace_event", "-symbolize"])
        .arg(log)
        .output()
        .expect("llvm-xray is required");
    assert!(
        out.status.success(),
        "llvm-xray convert: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let mut per: HashMap<u64, Vec<(String, usize, f64)>> = HashMap::new();
    let mut open: HashMap<u64, Vec<(usize, f64)>> = HashMap::new();
    for e in v["traceEvents"].as_array().unwrap() {
        let tid: u64 = e["tid"].as_str().unwrap().parse().unwrap();
        let ts: f64 = e["ts"].as_str().unwrap().parse::<f64>().unwrap() * 1e3;
        let slices = per.entry(tid).or_default();
        let stack = open.entry(tid).or_default();
        match e["ph"].as_str().unwrap() {
            "B" => {
                stack.push((slices.len(), ts));
                let name = e["name"].as_str().unwrap().to_string();
                slices.push((name, stack.len() - 1, 0.0));
            }
            "E" => {
                let (i, start) = stack.pop().expect("an E without its B");
                slices[i].2 = ts - start;
            }
            ph => panic!("phase {ph}"),
        }
    }
    assert!(open.values().all(|s| s.is_empty()), "calls left open");
    per
}

/// `gmon`, `xray`, `graph` (and the counts of `html`) with a selection
/// hold the calls `replay` shows with the same selection: llvm-xray reads
/// the selected entries and exits back as the same slices (names,
/// nesting, durations), gprof reads the arcs between selected calls, and
/// `graph` counts the selected calls of its function.
#[test]
fn gmon_xray_and_graph_select_the_calls_replay_shows() {
    let d = tempfile::tempdir().unwrap();
    let bin = d.path().join("threads-xray");
    let st = Command::new("clang-14")
        .args([
            "-O2",
            "-fno-optimize-sibling-calls",
            "-Wno-unknown-attributes",
            "-fxray-instrument",
            "-fxray-instruction-threshold=1",
            "-o",
        ])
        .arg(&bin)
        .arg(THREADS)
        .arg("-lpthread")
        .status()
        .expect("clang-14 is required");
    assert!(st.success());
    let data = d.path().join("t.data");
    let s = |p: &Path| p.to_str().unwrap().to_string();
    fntrace_ok(&["record", "-o", &s(&data), "--", &s(&bin), "threads"]);
    let all = replay_slices(&data, &[]);
    let all_n: usize = all.values().map(|v| v.len()).sum();
    let worker_tid = all
        .iter()
        .find(|(_, v)| v[0].name == "worker")
        .map(|(t, _)| t.to_string())
        .unwrap();
    let tid = worker_tid.as_str();
    let cases: Vec<Vec<&str>> = vec![
        vec![],
        vec!["--tid", tid],
        vec!["--filter", "worker", "--depth", "3"],
        vec!["--filter", "^fib$", "--depth", "2"],
        vec!["--threshold", "2us"],
        vec!["--tid", tid, "--threshold", "500ns", "-D", "4"],
    ];
    let (data_s, log, gmon) = (s(&data), d.path().join("x.log"), d.path().join("g.out"));
    let (log_s, gmon_s) = (s(&log), s(&gmon));
    for case in &cases {
        let want = replay_slices(&data, case);
        let n: usize = want.values().map(|v| v.len()).sum();
        assert!(
            n > 0 && (case.is_empty() || n < all_n),
            "{case:?}: {n} of {all_n}"
        );
        // XRay: the same slices, read back by llvm-xray.
        let mut args = vec!["export", &data_s, "--format", "xray", "-o", &log_s];
        args.extend(case);
        fntrace_ok(&args);
        let got = xray_slices(&bin, &log);
        let mut wt: Vec<_> = want.keys().collect();
        let mut gt: Vec<_> = got.keys().collect();
        wt.sort();
        gt.sort();
        assert_eq!(gt, wt, "{case:?}: threads");
        for (tid, w) in &want {
            let g = &got[tid];
            assert_eq!(g.len(), w.len(), "{case:?}: calls of {tid}");
            for (w, g) in w.iter().zip(g) {
                assert_eq!((&g.0, g.1), (&w.name, w.depth), "{case:?} on {tid}");
                assert!(
                    (g.2 - w.dur as f64).abs() <= (w.resolution + 2) as f64,
                    "{case:?}: {} on {tid}: {} ns, replay {} ns",
                    w.name,
                    g.2,
                    w.dur
                );
            }
        }
        let acc = Command::new("llvm-xray")
            .arg("account")
            .arg(format!("-instr_map={}", bin.display()))
            .arg(&log)
            .output()
            .unwrap();
        assert!(
            acc.status.success(),
            "llvm-xray account {case:?}: {}",
            String::from_utf8_lossy(&acc.stderr)
        );
        // gmon: gprof's calls of fib are the arcs between selected calls
        // (from another function + from fib itself).
        let mut args = vec!["export", &data_s, "--format", "gmon", "-o", &gmon_s];
        args.extend(case);
        fntrace_ok(&args);
        let (mut from_other, mut from_fib) = (0, 0);
        for w in want.values() {
            for (sl, (p, _)) in w.iter().zip(replay_parents(w)) {
                match p {
                    Some(p) if sl.name == "fib" && w[p].name == "fib" => from_fib += 1,
                    Some(_) if sl.name == "fib" => from_other += 1,
                    _ => {}
                }
            }
        }
        let expect = match (from_other, from_fib) {
            (0, 0) => None,
            (a, 0) => Some(a.to_string()),
            (a, b) => Some(format!("{a}+{b}")),
        };
        assert_eq!(gprof_called(&bin, &gmon, "fib"), expect, "gmon {case:?}");
        // graph fib --levels 2: calls of fib with no fib above them, and
        // of fib right below those.
        let mut args = vec!["graph", "fib", &data_s, "--levels", "2"];
        args.extend(case);
        let (mut roots, mut below) = (0u64, 0u64);
        for w in want.values() {
            let ps = replay_parents(w);
            for (i, sl) in w.iter().enumerate() {
                if sl.name != "fib" {
                    continue;
                }
                if !ps[i].1 {
                    roots += 1;
                } else if let Some(p) = ps[i].0
                    && w[p].name == "fib"
                    && !ps[p].1
                {
                    below += 1;
                }
            }
        }
        let g = fntrace_ok(&args);
        let rows: Vec<Vec<&str>> = g
            .lines()
            .skip_while(|l| !l.contains("CALL GRAPH"))
            .skip(2)
            .map(|l| l.split_whitespace().collect())
            .collect();
        assert_eq!(rows[0][3], "fib", "{g}");
        assert_eq!(rows[0][2], roots.to_string(), "graph {case:?}: {g}");
        if below > 0 {
            assert_eq!(rows[1][3], "+-fib", "{g}");
            assert_eq!(rows[1][2], below.to_string(), "graph {case:?}: {g}");
        } else {
            assert_eq!(rows.len(), 1, "graph {case:?}: {g}");
        }
    }
    // graph's -D is the selection's depth: fib is not among the outermost
    // calls, and the error says where the callee levels went.
    let r = Command::new(fntrace())
        .args(["graph", "fib", &data_s, "-D", "1"])
        .output()
        .unwrap();
    assert!(!r.status.success());
    let err = String::from_utf8_lossy(&r.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("--levels"), "{err}");
}

/// A screenshot of `url`: (width, channels, pixels).
fn chromium_png(home: &Path, url: &str) -> (usize, usize, Vec<u8>) {
    let png = home.join("shot.png");
    let _ = std::fs::remove_file(&png);
    let out = chromium(home)
        .arg(format!("--screenshot={}", png.display()))
        .arg(url)
        .output()
        .expect("chromium (Debian package) is required for this test");
    assert!(
        png.is_file(),
        "no screenshot: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let dec = png::Decoder::new(std::io::BufReader::new(std::fs::File::open(&png).unwrap()));
    let mut r = dec.read_info().unwrap();
    let mut buf = vec![0; r.output_buffer_size().unwrap()];
    let info = r.next_frame(&mut buf).unwrap();
    buf.truncate(info.buffer_size());
    (info.width as usize, info.color_type.samples(), buf)
}

/// The value of attribute `name` in the element text `el`.
fn attr<'a>(el: &'a str, name: &str) -> Option<&'a str> {
    let k = format!(" {name}=\"");
    let i = el.find(&k)? + k.len();
    Some(&el[i..i + el[i..].find('"')?])
}

/// The timeline's lane labels: (tid, embedded calls, rows, page top of
/// the first row, page x of the slice area's left and right).
fn lanes(dom: &str) -> Vec<(u64, usize, usize, usize, usize, usize)> {
    dom.split("<div class=\"lane\"")
        .skip(1)
        .map(|el| {
            let el = &el[..el.find('>').unwrap()];
            let n = |k: &str| attr(el, k).unwrap().parse::<usize>().unwrap();
            (
                n("data-tid") as u64,
                n("data-slices"),
                n("data-rows"),
                n("data-top"),
                n("data-x0"),
                n("data-x1"),
            )
        })
        .collect()
}

/// The calls the page holds, as its #selftest listing gives them: per
/// thread, in order of entry, (depth, start ns, duration ns, name); and
/// the marker lines.
#[allow(clippy::type_complexity)]
fn page_calls(dom: &str) -> (HashMap<u64, Vec<(usize, u64, u64, String)>>, Vec<String>) {
    let text = selftest_text(dom);
    let mut per: HashMap<u64, Vec<(usize, u64, u64, String)>> = HashMap::new();
    let mut markers = vec![];
    for l in text.lines() {
        let f: Vec<&str> = l.splitn(5, ' ').collect();
        if f[1] == "marker" {
            markers.push(l.to_string());
            continue;
        }
        // Off-CPU intervals and flame-graph nodes (traces with --sched).
        if f[1].parse::<usize>().is_err() {
            continue;
        }
        per.entry(f[0].parse().unwrap()).or_default().push((
            f[1].parse().unwrap(),
            f[2].parse().unwrap(),
            f[3].parse().unwrap(),
            f[4].to_string(),
        ));
    }
    (per, markers)
}

/// The HTML page of the threads program, with and without selections,
/// in headless Chromium: it finishes drawing, has a lane per thread with
/// that thread's calls, holds exactly the calls `replay` shows with the
/// same selection (names, depths, durations), draws a slice in every
/// lane and a flame graph; markers of a synthetic trace are on its
/// timeline. Then a 1 M-call trace: the time Chromium takes to open and
/// draw it is printed (the 3 s target is checked by `fntrace-bench
/// --bin export`, not here).
#[test]
fn html_page_timeline_lanes_and_flame_graph_in_headless_chromium() {
    let d = tempfile::tempdir().unwrap();
    let s = |p: &Path| p.to_str().unwrap().to_string();
    let bin = gcc(d.path(), THREADS, "threads", &["-finstrument-functions"]);
    let data = d.path().join("t.data");
    fntrace_ok(&["record", "-o", &s(&data), "--", &s(&bin), "threads"]);
    let all = replay_slices(&data, &[]);
    let worker = all
        .iter()
        .find(|(_, v)| v[0].name == "worker")
        .map(|(t, _)| t.to_string())
        .unwrap();
    let html = d.path().join("t.html");
    let cases: Vec<Vec<&str>> = vec![
        vec![],
        vec!["--tid", &worker, "-t", "500ns"],
        vec!["--filter", "^fib$", "-D", "3"],
    ];
    for case in &cases {
        let (data_s, html_s) = (s(&data), s(&html));
        let mut args = vec!["export", &data_s, "--format", "html", "-o", &html_s];
        args.extend(case);
        fntrace_ok(&args);
        let page = std::fs::read_to_string(&html).unwrap();
        assert!(
            !page.contains("http://") && !page.contains("https://") || page.contains("www.w3.org"),
            "must be offline"
        );
        let url = format!("file://{}#selftest", html.display());
        let (dom, _) = chromium_dom(d.path(), &url);
        let want = replay_slices(&data, case);
        let ls = lanes(&dom);
        let tids: Vec<u64> = ls.iter().map(|l| l.0).collect();
        if case.is_empty() {
            assert_eq!(ls.len(), 9, "a lane per thread");
        }
        let (got, _) = page_calls(&dom);
        for (tid, w) in &want {
            let lane = ls.iter().find(|l| l.0 == *tid).unwrap_or_else(|| {
                panic!("{case:?}: no lane for thread {tid} in {tids:?}");
            });
            assert_eq!(lane.1, w.len(), "{case:?}: calls in the lane of {tid}");
            let g = &got[tid];
            assert_eq!(g.len(), w.len(), "{case:?}: calls of {tid}");
            for (w, g) in w.iter().zip(g) {
                assert_eq!((&g.3, g.0), (&w.name, w.depth), "{case:?} on {tid}");
                assert!(
                    g.2.abs_diff(w.dur) <= w.resolution + 1,
                    "{case:?}: {} on {tid}: {} ns, replay {} ns",
                    w.name,
                    g.2,
                    w.dur
                );
            }
        }
        // The wheel zoomed in around the middle, D panned right; the flame
        // graph of each thread has its outermost calls, all threads their sum.
        let view: Vec<f64> = attr(&dom, "data-selftest-view")
            .unwrap()
            .split(' ')
            .map(|v| v.parse().unwrap())
            .collect();
        assert!(
            view[1] < view[0] * 0.6 && view[2] > 0.0,
            "{case:?}: view {view:?}"
        );
        let roots: Vec<usize> = attr(&dom, "data-selftest-flame")
            .unwrap()
            .split(' ')
            .map(|v| v.parse().unwrap())
            .collect();
        assert_eq!(roots.len(), ls.len() + 1, "{case:?}");
        for (l, &n) in ls.iter().zip(&roots[1..]) {
            let outer = want
                .get(&l.0)
                .map_or(0, |w| w.iter().filter(|s| s.depth == 0).count());
            assert_eq!(n, outer, "{case:?}: flame graph of {}", l.0);
        }
        assert_eq!(
            roots[0],
            roots[1..].iter().sum::<usize>(),
            "{case:?}: all threads"
        );
        let page_n: usize = got.values().map(|v| v.len()).sum();
        let want_n: usize = want.values().map(|v| v.len()).sum();
        assert_eq!(page_n, want_n, "{case:?}");
        if !case.is_empty() {
            continue;
        }
        // The screenshot: every lane has coloured slices in its first row;
        // the flame graph has its warm colours.
        let (w, ch, px) = chromium_png(d.path(), &format!("file://{}", html.display()));
        let at = |x: usize, y: usize| &px[(y * w + x) * ch..(y * w + x) * ch + 3];
        let coloured = |p: &[u8]| p.iter().max().unwrap() - p.iter().min().unwrap() > 40;
        for l in &ls {
            let y = l.3 + 6;
            assert!(y < WINDOW.1 as usize, "lane of {} below the window", l.0);
            let n = (l.4..l.5.min(w)).filter(|&x| coloured(at(x, y))).count();
            assert!(n > 0, "no slice drawn in the lane of {}", l.0);
        }
        let flame = px
            .chunks(ch)
            .filter(|p| p[0] > 200 && p[1] >= 55 && p[1] < 235 && p[2] < 60)
            .count();
        assert!(flame > 5_000, "only {flame} pixels look like a flame graph");
    }
    // Markers on the timeline, with their arguments.
    let mut b = synthetic_trace(&[(0x10, "fib"), (0x20, "leaf")]);
    let mut c = b.new_chunk(&ChunkHeader::at(1, 0, 0, 1000));
    assert!(c.entry(10, 0x10));
    assert!(c.entry(200, 0x20));
    assert!(c.exit(300));
    assert!(c.framed(&Framed::Marker {
        d: 5,
        name: b"net_rx",
        text: b"len=64"
    }));
    assert!(c.exit(10));
    c.seal();
    b.push_chunk(&c);
    let m = d.path().join("m.data");
    finish_trace(b, 30_000, &m);
    let mh = d.path().join("m.html");
    fntrace_ok(&["export", &s(&m), "--format", "html", "-o", &s(&mh)]);
    let (dom, _) = chromium_dom(d.path(), &format!("file://{}#selftest", mh.display()));
    let (calls, markers) = page_calls(&dom);
    assert_eq!(markers, ["1 marker 515 net_rx len=64"]);
    assert_eq!(
        calls[&1],
        [
            (0, 10, 515, "fib".to_string()),
            (1, 210, 300, "leaf".to_string())
        ]
    );
    // A 1 M-call trace (main and fib(28): 1,028,458 calls): the time to open it.
    let fib = gcc(d.path(), FIB, "fib", &["-pg"]);
    let big = d.path().join("big.data");
    fntrace_ok(&["record", "-o", &s(&big), "--", &s(&fib), "28"]);
    let bh = d.path().join("big.html");
    let t = std::time::Instant::now();
    fntrace_ok(&["export", &s(&big), "--format", "html", "-o", &s(&bh)]);
    let export = t.elapsed();
    let (dom, took) = chromium_dom(d.path(), &format!("file://{}", bh.display()));
    let drawn_ms = attr(&dom, "data-load-ms").unwrap();
    let calls: usize = lanes(&dom).iter().map(|l| l.1).sum();
    assert_eq!(
        calls, 1_028_458,
        "every call (main and fib) on the timeline"
    );
    println!(
        "html: 1,028,458 calls, page {:.1} MB, export {:.2} s (debug build), drawn {drawn_ms} ms \
         after navigation start, chromium --dump-dom run {:.2} s",
        std::fs::metadata(&bh).unwrap().len() as f64 / 1e6,
        export.as_secs_f64(),
        took.as_secs_f64()
    );
}

/// Standard base64 decoding (for the page's embedded arrays).
fn unbase64(s: &str) -> Vec<u8> {
    let val = |c: u8| match c {
        b'A'..=b'Z' => c - b'A',
        b'a'..=b'z' => c - b'a' + 26,
        b'0'..=b'9' => c - b'0' + 52,
        b'+' => 62,
        _ => 63,
    };
    let b = s.trim_end_matches('=').as_bytes();
    let mut out = Vec::with_capacity(b.len() * 3 / 4);
    for c in b.chunks(4) {
        let mut n = 0u32;
        for (i, &x) in c.iter().enumerate() {
            n |= u32::from(val(x)) << (18 - 6 * i);
        }
        out.push((n >> 16) as u8);
        if c.len() > 2 {
            out.push((n >> 8) as u8);
        }
        if c.len() > 3 {
            out.push(n as u8);
        }
    }
    out
}

/// More calls than the page's timeline holds: it keeps the longest, says
/// so in the page, and the flame graph still counts every call.
#[test]
fn html_page_bounds_the_timeline_and_says_what_it_left_out() {
    let mut b = synthetic_trace(&[(0x10, "work")]);
    let (mut seq, mut tsc) = (0u32, 1000u64);
    let mut c = b.new_chunk(&ChunkHeader::at(1, seq, 0, tsc));
    const N: u64 = 1_100_000;
    for i in 0..N {
        let dur = if i % 11 < 6 { 1000 } else { 10 };
        for (depth, d, enter) in [(0, 5, true), (1, dur, false)] {
            let ok = |c: &mut fntrace_format::writer::ChunkBuf| {
                if enter { c.entry(d, 0x10) } else { c.exit(d) }
            };
            if !ok(&mut c) {
                c.seal();
                b.push_chunk(&c);
                seq += 1;
                c = b.new_chunk(&ChunkHeader::at(1, seq, depth, tsc));
                assert!(ok(&mut c));
            }
            tsc += d;
        }
    }
    c.seal();
    b.push_chunk(&c);
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("big.data");
    finish_trace(b, tsc + 10, &p);
    let html = d.path().join("big.html");
    fntrace_ok(&[
        "export",
        p.to_str().unwrap(),
        "--format",
        "html",
        "-o",
        html.to_str().unwrap(),
    ]);
    let page = std::fs::read_to_string(&html).unwrap();
    let tag = "<script id=\"data\" type=\"application/json\">";
    let json = &page[page.find(tag).unwrap() + tag.len()..];
    let json = &json[..json.find("</script>").unwrap()];
    let v: serde_json::Value = serde_json::from_str(json).unwrap();
    let notes = v["notes"].as_array().unwrap();
    assert_eq!(notes.len(), 1, "{notes:?}");
    let note = notes[0].as_str().unwrap();
    assert!(
        note.contains("the 600000 longest of 1100000 calls"),
        "{note}"
    );
    let t = &v["threads"][0];
    assert_eq!(t["calls"], N);
    let durs: Vec<f64> = unbase64(t["dur"].as_str().unwrap())
        .chunks(8)
        .map(|b| f64::from_le_bytes(b.try_into().unwrap()))
        .collect();
    assert_eq!(durs.len(), 600_000);
    assert!(durs.iter().all(|&d| d == 1000.0));
    // The flame graph's root counts every call, and all their time.
    let calls = unbase64(t["flame"]["calls"].as_str().unwrap());
    assert_eq!(f64::from_le_bytes(calls[..8].try_into().unwrap()), N as f64);
    let total = unbase64(t["flame"]["total"].as_str().unwrap());
    assert_eq!(
        f64::from_le_bytes(total[..8].try_into().unwrap()),
        (600_000 * 1000 + 500_000 * 10) as f64
    );
}
