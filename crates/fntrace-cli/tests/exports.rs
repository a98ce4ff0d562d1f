//! Exports and views over real recordings: Chrome Trace Event JSON (every
//! B has its E on the same thread), folded stacks and flame graph, `graph`
//! (text and dot) and `report --diff`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;

mod common;
use common::{fntrace_bin as fntrace, preload};

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
    let g = fntrace_ok(&["graph", "fib", &s(&a), "--depth", "3"]);
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

#[test]
fn html_page_renders_the_flame_graph_in_headless_chromium() {
    let d = tempfile::tempdir().unwrap();
    let bin = gcc(d.path(), FIB, "fib", &["-pg"]);
    let s = |p: &Path| p.to_str().unwrap().to_string();
    let a = d.path().join("a.data");
    fntrace_ok(&["record", "-o", &s(&a), "--", &s(&bin), "15"]);
    let html = d.path().join("a.html");
    fntrace_ok(&["export", &s(&a), "--format", "html", "-o", &s(&html)]);
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(page.contains("<details") && page.contains("data:image/svg+xml;base64,"));
    assert!(
        !page.contains("http://") || page.contains("www.w3.org"),
        "must be offline"
    );
    let png = d.path().join("a.png");
    let out = Command::new("chromium")
        .args([
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            "--window-size=1280,1400",
        ])
        .arg(format!("--screenshot={}", png.display()))
        .arg(format!("file://{}", html.display()))
        .env("HOME", d.path())
        .output()
        .expect("chromium (Debian package) is required for this test");
    assert!(
        png.is_file(),
        "no screenshot: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Decode and count flame-coloured pixels (reds, oranges, yellows).
    let dec = png::Decoder::new(std::io::BufReader::new(std::fs::File::open(&png).unwrap()));
    let mut r = dec.read_info().unwrap();
    let mut buf = vec![0; r.output_buffer_size().unwrap()];
    let info = r.next_frame(&mut buf).unwrap();
    let ch = info.color_type.samples();
    let px = &buf[..info.buffer_size()];
    let total = px.len() / ch;
    let flame = px
        .chunks(ch)
        .filter(|p| p[0] > 190 && p[2] < 110 && p[1] > 20 && p[1] < 235)
        .count();
    assert!(
        flame * 100 > total * 2,
        "only {flame} of {total} pixels look like a flame graph"
    );
}

use fntrace_format::event::Framed;
use fntrace_format::layout::{
    ChunkHeader, DEFAULT_CHUNK_SIZE, FINAL_FLAG_CLEAN, Final, HEADER_SIZE, Header, META_TID,
    VERSION_MAJOR, VERSION_MINOR,
};
use fntrace_format::writer::TraceBuilder;

/// Header of chunk `seq` of thread `tid`, started at call depth `depth`
/// and TSC `base_tsc`.
fn chunk_header(tid: u32, seq: u32, depth: u32, base_tsc: u64) -> ChunkHeader {
    ChunkHeader {
        tid,
        seq,
        depth,
        base_tsc,
        base_mono_ns: 0,
        flags: 0,
        payload_len: 0,
        payload_crc: 0,
        events: None,
    }
}

/// A synthetic trace (1 GHz clock, pid 7) whose metadata names `functions`.
fn synthetic_trace(functions: &[(u64, &str)]) -> TraceBuilder {
    let mut b = TraceBuilder::new(Header {
        version_major: VERSION_MAJOR,
        version_minor: VERSION_MINOR,
        header_size: HEADER_SIZE,
        chunk_size: DEFAULT_CHUNK_SIZE,
        flags: 0,
        tsc_hz: 1_000_000_000,
        start_tsc: 1000,
        start_mono_ns: 0,
        start_realtime_ns: 0,
        pid: 7,
        ring_chunks: 0,
    });
    let mut meta = b.new_chunk(&chunk_header(META_TID, 0, 0, 1000));
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
    let mut c = b.new_chunk(&chunk_header(1, 0, 0, 1000));
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
    let mut c = b.new_chunk(&chunk_header(1, seq, depth, tsc));
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
            c = b.new_chunk(&chunk_header(1, seq, depth, tsc));
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

/// The upstream Perfetto protos and our decoder of them.
const PERFETTO_PROTOS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/perfetto_protos");

/// Decodes a Perfetto trace with the upstream `perfetto_trace.proto`
/// (compiled by `protoc` into Python classes, read by
/// `perfetto_protos/decode.py`): the process, threads, slices and instants
/// it holds, as JSON. `protoc` and Python's protobuf package are required
/// (`scripts/test` installs them).
fn decode_perfetto(dir: &Path, trace: &Path) -> serde_json::Value {
    let gen_dir = dir.join("perfetto_pb2");
    std::fs::create_dir_all(&gen_dir).unwrap();
    let st = Command::new("protoc")
        .arg(format!("--python_out={}", gen_dir.display()))
        .arg(format!("-I{PERFETTO_PROTOS}"))
        .arg(format!("{PERFETTO_PROTOS}/perfetto_trace.proto"))
        .status()
        .expect("protoc (apt protobuf-compiler) is required");
    assert!(st.success(), "protoc failed on the upstream protos");
    // Debian's python3-protobuf is installed for the system interpreter.
    let python = if Path::new("/usr/bin/python3").exists() {
        "/usr/bin/python3"
    } else {
        "python3"
    };
    let out = Command::new(python)
        .arg(format!("{PERFETTO_PROTOS}/decode.py"))
        .arg(&gen_dir)
        .arg(trace)
        .output()
        .expect("python3 with protobuf (apt python3-protobuf) is required");
    assert!(
        out.status.success(),
        "decoding with the upstream protos failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        v["problems"],
        serde_json::json!([]),
        "decoder found problems"
    );
    v
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
    let mut c = b.new_chunk(&chunk_header(1, 0, 0, 1000));
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
    // A format without selections refuses them in one line, leaving no file.
    let html = d.path().join("t.html");
    let r = Command::new(fntrace())
        .args(["export", &s(&data), "--format", "html", "--tid", &tid, "-o"])
        .arg(&html)
        .output()
        .unwrap();
    assert!(!r.status.success());
    assert_eq!(String::from_utf8_lossy(&r.stderr).lines().count(), 1);
    assert!(!html.exists());
}
