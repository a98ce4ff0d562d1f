//! Hostile traces found by a fuzz sweep, built here with the format's
//! writer: deep call stacks (replay stays linear), module records naming
//! special files (FIFOs, `/dev/zero`), many module records for one file,
//! names carrying control characters, a module rebuilt after the
//! recording, filters that match nothing and off-CPU intervals longer
//! than the recording.

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use fntrace_format::event::Framed;
use fntrace_format::layout::{
    ChunkHeader, DEFAULT_CHUNK_SIZE, FINAL_FLAG_CLEAN, Final, Header, META_TID,
};
use fntrace_format::writer::{ChunkBuf, TraceBuilder};

/// Far above any normal run of these tiny traces (debug build): a run
/// still going after this long hangs or is quadratic.
const WATCHDOG: Duration = Duration::from_secs(30);

/// Runs `fntrace args`, killing it (and failing) after [`WATCHDOG`].
fn fntrace(args: &[&str]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_fntrace"))
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Drain both pipes on threads so a large output cannot block the child.
    let mut so = child.stdout.take().unwrap();
    let mut se = child.stderr.take().unwrap();
    let ho = std::thread::spawn(move || {
        let mut v = vec![];
        std::io::Read::read_to_end(&mut so, &mut v).unwrap();
        v
    });
    let he = std::thread::spawn(move || {
        let mut v = vec![];
        std::io::Read::read_to_end(&mut se, &mut v).unwrap();
        v
    });
    let start = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if start.elapsed() > WATCHDOG {
            child.kill().unwrap();
            child.wait().unwrap();
            panic!("fntrace {args:?} still running after {WATCHDOG:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    Output {
        status,
        stdout: ho.join().unwrap(),
        stderr: he.join().unwrap(),
    }
}

/// `fntrace args` (which must succeed) with `trace` appended; what it
/// wrote: stdout, or for an export (`-o OUT` in `args`) the file.
fn output_of(args: &[&str], trace: &Path) -> (String, String) {
    let mut a = args.to_vec();
    a.push(s(trace));
    let o = fntrace_ok(&a);
    let out = match args.iter().position(|&x| x == "-o") {
        Some(i) => std::fs::read_to_string(args[i + 1]).unwrap(),
        None => stdout(&o),
    };
    (out, stderr(&o))
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// `fntrace args`, which must succeed; its stdout.
fn fntrace_ok(args: &[&str]) -> Output {
    let o = fntrace(args);
    assert!(o.status.success(), "fntrace {args:?}: {}", stderr(&o));
    o
}

/// A module record.
struct Module<'a> {
    start: u64,
    size: u64,
    build_id: &'a [u8],
    path: &'a str,
}

/// A trace (1 GHz clock) whose metadata has the `sites` (key, name), the
/// `modules` and the `extra` records.
fn builder(sites: &[(u64, &str)], modules: &[Module<'_>], extra: &[Framed<'_>]) -> TraceBuilder {
    let mut b = TraceBuilder::new(Header {
        start_tsc: 1000,
        pid: 7,
        ..Header::current(DEFAULT_CHUNK_SIZE, 1_000_000_000)
    });
    let mut seq = 0;
    let mut meta = b.new_chunk(&ChunkHeader::at(META_TID, seq, 0, 1000));
    let mut push = |b: &mut TraceBuilder, meta: &mut ChunkBuf, rec: &Framed<'_>| {
        if !meta.framed(rec) {
            meta.seal();
            b.push_chunk(meta);
            seq += 1;
            *meta = b.new_chunk(&ChunkHeader::at(META_TID, seq, 0, 1000));
            assert!(meta.framed(rec));
        }
    };
    for &(key, name) in sites {
        let rec = Framed::Site {
            key,
            prefix: b"",
            name: name.as_bytes(),
            file: b"x.c",
            line: 1,
        };
        push(&mut b, &mut meta, &rec);
    }
    for m in modules {
        let rec = Framed::Module {
            bias: m.start,
            start: m.start,
            size: m.size,
            build_id: m.build_id,
            path: m.path.as_bytes(),
        };
        push(&mut b, &mut meta, &rec);
    }
    for rec in extra {
        push(&mut b, &mut meta, rec);
    }
    meta.seal();
    b.push_chunk(&meta);
    b
}

/// Adds thread 1's calls: `(d, Some(func))` enters, `(d, None)` exits;
/// as many chunks as needed.
fn calls(b: &mut TraceBuilder, events: impl IntoIterator<Item = (u64, Option<u64>)>) {
    let (mut seq, mut depth, mut tsc) = (0u32, 0u32, 1000u64);
    let mut c = b.new_chunk(&ChunkHeader::at(1, seq, depth, tsc));
    for (d, ev) in events {
        let put = |c: &mut ChunkBuf, d| match ev {
            Some(f) => c.entry(d, f),
            None => c.exit(d),
        };
        if !put(&mut c, d) {
            c.seal();
            b.push_chunk(&c);
            seq += 1;
            c = b.new_chunk(&ChunkHeader::at(1, seq, depth, tsc));
            assert!(put(&mut c, d));
        }
        tsc += d;
        match ev {
            Some(_) => depth += 1,
            None => depth -= 1,
        }
    }
    c.seal();
    b.push_chunk(&c);
}

/// Finishes a trace cleanly at `end_tsc` and writes it to `path`.
fn finish(b: TraceBuilder, end_tsc: u64, path: &Path) {
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

fn tmp() -> tempfile::TempDir {
    tempfile::tempdir().unwrap()
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// 150 000 nested calls, none returning: every entry opens a line, and
/// replay must not look at the whole open stack each time (quadratic:
/// minutes).
#[test]
fn replay_is_linear_on_deep_stacks() {
    const N: u64 = 150_000;
    let d = tmp();
    let p = d.path().join("deep.data");
    let mut b = builder(&[(0x10, "rec")], &[], &[]);
    calls(&mut b, (0..N).map(|_| (1, Some(0x10))));
    finish(b, 1000 + N + 10, &p);
    let o = fntrace_ok(&["replay", "--color", "never", s(&p)]);
    let out = stdout(&o);
    // The header, an opening and a closing line per call but the
    // innermost, shown on one line.
    assert_eq!(out.lines().count() as u64, 2 * N, "{}", &out[..200]);
    assert!(out.lines().nth(1).unwrap().ends_with("| rec() {"));
}

/// One call of each of `funcs`, in turn.
fn one_call_each(b: &mut TraceBuilder, funcs: impl IntoIterator<Item = u64>) {
    calls(
        b,
        funcs.into_iter().flat_map(|f| [(10, Some(f)), (10, None)]),
    );
}

/// A trace whose one module (at 0x1000_0000, calls at +0x10 and +0x20)
/// is the file at `module`.
fn module_trace(dir: &Path, module: &str) -> std::path::PathBuf {
    let p = dir.join("m.data");
    let m = Module {
        start: 0x1000_0000,
        size: 0x1000,
        build_id: b"",
        path: module,
    };
    let mut b = builder(&[], &[m], &[]);
    one_call_each(&mut b, [0x1000_0010, 0x1000_0020]);
    finish(b, 2000, &p);
    p
}

/// A module path naming a FIFO: the views used to block in `open(2)`
/// forever. Now one warning names the module and functions are
/// addresses.
#[test]
fn a_module_that_is_a_fifo_is_skipped_with_one_warning() {
    let d = tmp();
    let fifo = d.path().join("fifo");
    let c = std::ffi::CString::new(s(&fifo)).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let p = module_trace(d.path(), s(&fifo));
    let folded = d.path().join("f.folded");
    let warn = format!(
        "warning: module {}: not a regular file (a FIFO)",
        fifo.display()
    );
    for args in [
        &["report"][..],
        &["replay", "--srcline"],
        &["export", "--format", "folded", "-o", s(&folded)],
    ] {
        let (out, err) = output_of(args, &p);
        assert_eq!(err.matches(&warn).count(), 1, "{args:?}: {err}");
        assert!(out.contains("fifo+0x10"), "{args:?}: {out}");
    }
    let o = fntrace(&["graph", "fifo", s(&p)]);
    assert_eq!(stderr(&o).matches(&warn).count(), 1, "{}", stderr(&o));
    // A FIFO given as the trace, or as the file to list.
    for cmd in ["info", "report", "markers", "functions"] {
        let o = fntrace(&[cmd, s(&fifo)]);
        let err = stderr(&o);
        assert!(!o.status.success(), "{cmd}");
        assert_eq!(err.lines().count(), 1, "{cmd}: {err}");
        assert!(
            err.contains(&format!("{}: not a regular file (a FIFO)", fifo.display())),
            "{cmd}: {err}"
        );
    }
}

/// `/dev/zero` as the module the XRay export reads, and as the file
/// `markers` and `functions` list: they read it until memory ran out.
#[test]
fn character_devices_are_not_read() {
    let d = tmp();
    let p = module_trace(d.path(), "/dev/zero");
    let out = d.path().join("x.xray");
    let o = fntrace(&["export", "--format", "xray", "-o", s(&out), s(&p)]);
    let err = stderr(&o);
    assert!(!o.status.success());
    assert!(
        err.contains("/dev/zero: not a regular file (a character device)"),
        "{err}"
    );
    for (cmd, dev) in [("markers", "/dev/zero"), ("functions", "/dev/urandom")] {
        let o = fntrace(&[cmd, dev]);
        let err = stderr(&o);
        assert!(!o.status.success(), "{cmd}");
        assert_eq!(
            err.trim_end(),
            format!("fntrace: {dev}: not a regular file (a character device)"),
        );
    }
}

/// The link-time address of `main` in the fntrace binary, and the
/// binary's GNU build id.
fn fntrace_main() -> (u64, Vec<u8>) {
    use object::{Object, ObjectSymbol};
    let data = std::fs::read(env!("CARGO_BIN_EXE_fntrace")).unwrap();
    let obj = object::File::parse(&*data).unwrap();
    let main = obj
        .symbols()
        .find(|s| s.name() == Ok("main"))
        .expect("main")
        .address();
    (main, obj.build_id().unwrap().expect("a build id").to_vec())
}

/// 3000 module records naming one large file (this fntrace binary):
/// its symbol table used to be loaded 3000 times (gigabytes, minutes);
/// now once, shared.
#[test]
fn many_module_records_for_one_file_load_it_once() {
    const N: u64 = 3000;
    let (main, _) = fntrace_main();
    let bin = env!("CARGO_BIN_EXE_fntrace");
    let mods: Vec<Module> = (1..=N)
        .map(|i| Module {
            start: i << 32,
            size: 0x1000_0000,
            build_id: b"",
            path: bin,
        })
        .collect();
    let d = tmp();
    let p = d.path().join("many.data");
    let mut b = builder(&[], &mods, &[]);
    one_call_each(&mut b, (1..=N).map(|i| (i << 32) + main));
    finish(b, 1000 + 20 * N + 10, &p);
    let start = Instant::now();
    let o = fntrace_ok(&["report", s(&p)]);
    let rows = stdout(&o).lines().filter(|l| l.ends_with(" main")).count();
    assert_eq!(rows as u64, N, "{:?}", start.elapsed());
    assert!(stderr(&o).is_empty(), "{}", stderr(&o));
}

/// Names with control characters (ESC, BEL, newline, tab, C1 CSI) from
/// the trace: no view or export may copy them raw (terminal escapes, a
/// folded line split in two, an SVG that is not XML).
#[test]
fn control_characters_in_names_are_escaped_everywhere() {
    let evil = "\x1b]0;TITLE\x07\x1b[31mred\nnext\tcol\u{9b}2J";
    let d = tmp();
    let p = d.path().join("evil.data");
    let inner = format!("{evil}inner");
    let marker = Framed::Marker {
        d: 1,
        name: evil.as_bytes(),
        text: evil.as_bytes(),
    };
    let mut b = builder(&[(0x10, evil), (0x20, &inner)], &[], &[]);
    let mut c = b.new_chunk(&ChunkHeader::at(1, 0, 0, 1000));
    assert!(c.framed(&Framed::ThreadStart {
        d: 0,
        name: evil.as_bytes()
    }));
    assert!(c.entry(10, 0x10));
    assert!(c.entry(10, 0x20));
    assert!(c.framed(&marker));
    assert!(c.exit(10));
    assert!(c.exit(10));
    c.seal();
    b.push_chunk(&c);
    finish(b, 2000, &p);
    let bad = |t: &str| {
        t.chars()
            .any(|c| matches!(c, '\x1b' | '\x07' | '\u{80}'..='\u{9f}'))
    };
    let folded = d.path().join("e.folded");
    let svg = d.path().join("e.svg");
    let json = d.path().join("e.json");
    for args in [
        &["replay", "--color", "never"][..],
        &["report"],
        &["report", "--threads"],
        &["info"],
        &["export", "--format", "folded", "-o", s(&folded)],
        &["export", "--format", "flamegraph", "-o", s(&svg)],
        &["export", "--format", "chrome", "-o", s(&json)],
    ] {
        let (out, err) = output_of(args, &p);
        assert!(!bad(&out), "{args:?}: {out:?}");
        assert!(!bad(&err), "{args:?}: {err:?}");
        if matches!(args[0], "replay" | "report") {
            assert!(
                out.contains("\\x1b]0;TITLE\\x07\\x1b[31mred\\x0anext\\x09col\\x9b2J"),
                "{args:?}: {out}"
            );
        }
    }
    let o = fntrace(&["graph", "inner", s(&p)]);
    assert!(!bad(&stdout(&o)) && !bad(&stderr(&o)), "{o:?}");
    // One stack per line, two stacks.
    let out = std::fs::read_to_string(&folded).unwrap();
    assert_eq!(out.lines().count(), 2, "{out}");
    // Control characters other than newline are not allowed in XML 1.0.
    let out = std::fs::read_to_string(&svg).unwrap();
    assert!(
        !out.chars()
            .any(|c| c < ' ' && !matches!(c, '\n' | '\r' | '\t')),
        "{out}"
    );
    // The JSON export still parses, with the escaped name.
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert!(v.to_string().contains("TITLE"));
}

/// A module file rebuilt after the recording (its build id differs from
/// the one in the trace): one warning, and addresses instead of the new
/// file's names (which would be wrong). The right build id, or none
/// recorded: the names.
#[test]
fn a_module_rebuilt_since_the_recording_is_not_used() {
    let (main, id) = fntrace_main();
    let bin = env!("CARGO_BIN_EXE_fntrace");
    let d = tmp();
    for (recorded, changed) in [(&b"\x01\x02"[..], true), (&id[..], false), (b"", false)] {
        let p = d.path().join("b.data");
        let m = [
            Module {
                start: 1 << 32,
                size: 0x1000_0000,
                build_id: recorded,
                path: bin,
            },
            Module {
                start: 2 << 32,
                size: 0x1000_0000,
                build_id: recorded,
                path: bin,
            },
        ];
        let mut b = builder(&[], &m, &[]);
        one_call_each(&mut b, [(1 << 32) + main, (2 << 32) + main]);
        finish(b, 2000, &p);
        let o = fntrace_ok(&["report", s(&p)]);
        let (out, err) = (stdout(&o), stderr(&o));
        if changed {
            let hex: String = id.iter().map(|b| format!("{b:02x}")).collect();
            assert_eq!(
                err,
                format!(
                    "fntrace: warning: {bin} has changed since the trace was recorded \
                     (build id {hex}, trace says 0102): its functions are shown as addresses\n"
                )
            );
            assert!(out.contains(&format!("fntrace+0x{main:x}")), "{out}");
            assert!(!out.contains(" main"), "{out}");
        } else {
            assert!(err.is_empty(), "{err}");
            assert_eq!(
                out.lines().filter(|l| l.ends_with(" main")).count(),
                2,
                "{out}"
            );
        }
    }
}

/// `report` with a filter or thread that selects nothing fails with one
/// line, as `graph` does, instead of an empty table.
#[test]
fn a_report_selecting_nothing_says_so() {
    let d = tmp();
    let p = d.path().join("r.data");
    let mut b = builder(&[(0x10, "fib")], &[], &[]);
    one_call_each(&mut b, [0x10]);
    finish(b, 2000, &p);
    for (args, what) in [
        (&["-F", "nosuch"][..], "--filter \"nosuch\""),
        (&["--tid", "12345"], "--tid 12345"),
    ] {
        let mut a = vec!["report"];
        a.extend_from_slice(args);
        a.push(s(&p));
        let o = fntrace(&a);
        assert_eq!(o.status.code(), Some(2), "{a:?}");
        assert!(o.stdout.is_empty());
        assert_eq!(
            stderr(&o),
            format!(
                "fntrace: {}: no calls in the selection ({what})\n",
                p.display()
            )
        );
    }
    // What matches still works; `graph` fails the same way.
    assert!(stdout(&fntrace_ok(&["report", "-F", "fib", s(&p)])).contains(" fib"));
    assert_eq!(fntrace(&["graph", "nosuch", s(&p)]).status.code(), Some(2));
}

/// An off-CPU interval of 8000 s in a trace of microseconds: `info`'s
/// total counts only what lies in the recording and says it cut some.
#[test]
fn off_cpu_time_is_cut_to_the_recording() {
    let d = tmp();
    let p = d.path().join("o.data");
    let off = [
        Framed::OffCpu {
            tid: 1,
            out_ns: 5,
            len_ns: 10,
            flags: 0,
        },
        Framed::OffCpu {
            tid: 1,
            out_ns: 20,
            len_ns: 8_000_000_000_000,
            flags: 1,
        },
    ];
    let mut b = builder(&[(0x10, "f")], &[], &off);
    one_call_each(&mut b, [0x10]);
    // 1 µs of recording (TSC 1000..2000, monotonic 0..1000 ns).
    finish(b, 2000, &p);
    let out = stdout(&fntrace_ok(&["info", s(&p)]));
    let line = out.lines().find(|l| l.starts_with("# off CPU")).unwrap();
    assert_eq!(
        line,
        "# off CPU       2 intervals, 990 ns in all, 1 cut to the recording's window (damaged), \
         on 1 threads (record --sched)"
    );
}
