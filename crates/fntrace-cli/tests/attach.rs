//! `fntrace record -p PID`: attaching to a running multi-threaded program
//! of every build kind fntrace can switch on while it runs, recording a
//! window, detaching — and the program keeps its output, its exit status
//! and its original code bytes; repeated attaches, a second controller
//! refused while one is attached, the runtime detaching by itself when
//! its controller is killed, the process exiting during the window,
//! refusals (a debugger, another user's process, no instrumentation).
//!
//! The program (`tests/attach/target.c`, and a Rust twin built with
//! `cargo fntrace --instrument=fentry`) runs four workers calling
//! `outer` → `middle` → `leaf_mul`/`leaf_add` in a loop, checking each
//! result; the structure of every recorded thread is checked against that
//! call graph.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use fntrace_format::{Record, Trace};

mod common;

const TARGET_C: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/attach/target.c");

/// Build kinds: (name, compiler, flags).
const KINDS: &[(&str, &str, &[&str])] = &[
    ("pfe5", "gcc", &["-fpatchable-function-entry=5"]),
    ("pfe9-7", "gcc", &["-fpatchable-function-entry=9,7"]),
    ("clang-pfe5", "clang-14", &["-fpatchable-function-entry=5"]),
    (
        "xray",
        "clang-14",
        &["-fxray-instrument", "-fxray-instruction-threshold=1"],
    ),
    ("fentry", "gcc", &["-pg", "-mfentry"]),
    (
        "nop-mcount",
        "gcc",
        &[
            "-fno-pie",
            "-no-pie",
            "-pg",
            "-mfentry",
            "-mnop-mcount",
            "-mrecord-mcount",
        ],
    ),
    ("pg", "gcc", &["-pg"]),
    ("cyg", "gcc", &["-finstrument-functions"]),
];

/// Builds the C target of `kind` into `dir`.
fn build(dir: &Path, kind: &str) -> PathBuf {
    let (_, cc, flags) = KINDS.iter().find(|k| k.0 == kind).unwrap();
    let out = dir.join(format!("target-{kind}"));
    // No sibling calls: `outer`'s call of `leaf_add` stays a call (XRay
    // would otherwise close `outer` before it, by design).
    let mut args: Vec<&str> = vec![
        "-O2",
        "-fno-optimize-sibling-calls",
        "-g",
        "-o",
        out.to_str().unwrap(),
        TARGET_C,
    ];
    args.extend(flags.iter());
    args.push("-lpthread");
    common::tool(cc, &args);
    out
}

/// The running target, talking on its standard input and output.
struct Target {
    child: Child,
    input: ChildStdin,
    output: BufReader<ChildStdout>,
    pid: i32,
}

impl Target {
    /// Starts `bin` paced (1 ms of sleep every 64 iterations per worker),
    /// which keeps the traces small.
    fn start(bin: &Path) -> Target {
        let mut child = Command::new(bin)
            .arg("64")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("{}: {e}", bin.display()));
        let input = child.stdin.take().unwrap();
        let mut output = BufReader::new(child.stdout.take().unwrap());
        let mut l = String::new();
        output.read_line(&mut l).unwrap();
        assert!(l.starts_with("ready "), "target said {l:?}");
        let pid = child.id() as i32;
        Target {
            child,
            input,
            output,
            pid,
        }
    }

    /// Sends a command, returns the answer line.
    fn ask(&mut self, cmd: &str) -> String {
        writeln!(self.input, "{cmd}").unwrap();
        self.input.flush().unwrap();
        let mut l = String::new();
        self.output.read_line(&mut l).unwrap();
        l.trim().to_string()
    }

    /// Work rate (iterations per second) over `d`.
    fn rate(&mut self, d: Duration) -> f64 {
        self.ask("rate");
        std::thread::sleep(d);
        let r = self.ask("rate");
        let f: Vec<f64> = r
            .split_whitespace()
            .skip(1)
            .map(|x| x.parse().unwrap())
            .collect();
        f[0] / (f[1] / 1e9)
    }

    /// Stops it; asserts its self-check, its exit status, and that it
    /// wrote nothing on standard error (fntrace's messages go to the
    /// controller, not into the program's output).
    fn quit(mut self) {
        let l = self.ask("quit");
        let st = self.child.wait().unwrap();
        let mut err = String::new();
        std::io::Read::read_to_string(&mut self.child.stderr.take().unwrap(), &mut err).unwrap();
        assert!(l.starts_with("ok ") && l.ends_with("errors=0"), "{l}");
        assert_eq!(st.code(), Some(0), "{l}");
        assert_eq!(err, "", "the program's standard error changed");
    }

    fn threads(&self) -> usize {
        std::fs::read_dir(format!("/proc/{}/task", self.pid))
            .unwrap()
            .count()
    }
}

/// `fntrace record -p PID --duration D -o OUT EXTRA...`.
fn attach_cmd(pid: i32, out: &Path, duration: Option<&str>, extra: &[&str]) -> Command {
    let mut c = Command::new(common::fntrace_bin());
    c.arg("record")
        .arg("-p")
        .arg(pid.to_string())
        .arg("-o")
        .arg(out)
        .args(extra)
        .env("FNTRACE_PRELOAD", common::preload());
    if let Some(d) = duration {
        c.args(["--duration", d]);
    }
    c
}

fn attach(pid: i32, out: &Path, duration: &str) -> String {
    let o = attach_cmd(pid, out, Some(duration), &[]).output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(o.status.success(), "record -p failed: {err}");
    err
}

/// The executable text and the hook GOT slots of process `pid`'s
/// executable, to compare before attach and after detach.
fn code_snapshot(pid: i32, bin: &Path) -> (Vec<u8>, Vec<u64>) {
    code_and_slots(pid, bin, &[])
}

/// [`code_snapshot`] with the GOT slots of `extra_slots` too (symbols the
/// program has already bound: a lazy binding during the window changes a
/// slot by itself).
fn code_and_slots(pid: i32, bin: &Path, extra_slots: &[&str]) -> (Vec<u8>, Vec<u64>) {
    use object::{Object, ObjectSymbol, ObjectSymbolTable};
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
    let exe = std::fs::canonicalize(bin).unwrap();
    let mine: Vec<(u64, u64, String, u64)> = maps
        .lines()
        .filter(|l| l.ends_with(exe.to_str().unwrap()))
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let (a, b) = f[0].split_once('-').unwrap();
            (
                u64::from_str_radix(a, 16).unwrap(),
                u64::from_str_radix(b, 16).unwrap(),
                f[1].to_string(),
                u64::from_str_radix(f[2], 16).unwrap(),
            )
        })
        .collect();
    let base = mine.iter().find(|m| m.3 == 0).unwrap().0;
    let mem = std::fs::File::open(format!("/proc/{pid}/mem")).unwrap();
    let read = |a: u64, n: usize| {
        use std::os::unix::fs::FileExt;
        let mut v = vec![0u8; n];
        mem.read_exact_at(&mut v, a).unwrap();
        v
    };
    let mut text = vec![];
    for m in mine.iter().filter(|m| m.2.contains('x')) {
        text.extend(read(m.0, (m.1 - m.0) as usize));
    }
    let data = std::fs::read(bin).unwrap();
    let obj = object::File::parse(&*data).unwrap();
    let bias = if obj.kind() == object::ObjectKind::Dynamic {
        base
    } else {
        0
    };
    let mut slots = vec![];
    if let (Some(relocs), Some(dynsym)) = (obj.dynamic_relocations(), obj.dynamic_symbol_table()) {
        for (off, r) in relocs {
            if let object::RelocationTarget::Symbol(i) = r.target() {
                let n = dynsym.symbol_by_index(i).unwrap().name().unwrap_or("");
                if [
                    "mcount",
                    "_mcount",
                    "__fentry__",
                    "__cyg_profile_func_enter",
                    "__cyg_profile_func_exit",
                ]
                .contains(&n)
                    || extra_slots.contains(&n)
                {
                    slots.push(u64::from_le_bytes(read(off + bias, 8).try_into().unwrap()));
                }
            }
        }
    }
    (text, slots)
}

/// Asserts that the code after detach is the code before attach, except
/// one-byte NOP runs that became one 5-byte NOP (or `66 90`), and (with
/// `xray`) the tails of XRay sleds, which stay as patched behind a head
/// that is back to its original bytes (the jump over the sled, or the
/// `ret` of an exit sled: unpatching never rewrites bytes a thread may be
/// executing); and that the hook slots hold what they held.
fn assert_code_restored(before: &(Vec<u8>, Vec<u64>), after: &(Vec<u8>, Vec<u64>), xray: bool) {
    assert_eq!(before.1, after.1, "GOT hook slots not restored");
    assert_eq!(before.0.len(), after.0.len());
    let (b, a) = (&before.0, &after.0);
    let mut i = 0;
    while i < b.len() {
        if b[i] == a[i] {
            i += 1;
            continue;
        }
        // Allowed: 90 90 90 90 90 -> 0f 1f 44 00 00, and 90 90 -> 66 90.
        let start = i.saturating_sub(4);
        let ok5 = (start..=i).any(|s| {
            s + 5 <= b.len() && b[s..s + 5] == [0x90; 5] && a[s..s + 5] == [0x0f, 0x1f, 0x44, 0, 0]
        });
        let ok2 = (i.saturating_sub(1)..=i)
            .any(|s| s + 2 <= b.len() && b[s..s + 2] == [0x90; 2] && a[s..s + 2] == [0x66, 0x90]);
        // Prefix NOPs before a `66 90` entry (`N,M` layouts) hold the jump
        // to the wrapper once a site was switched on; unreachable while the
        // entry is `66 90`.
        let prefix = b[i] == 0x90
            && (i + 1..=(i + 7).min(b.len() - 2)).any(|s| {
                a[s..s + 2] == [0x66, 0x90]
                    && (b[s..s + 2] == [0x90, 0x90] || b[s..s + 2] == [0x66, 0x90])
                    && b[i..s].iter().all(|&x| x == 0x90)
            });
        let sled_tail = xray
            && (i.saturating_sub(10)..i).any(|h| {
                (b[h..h + 2] == [0xeb, 0x09] && a[h..h + 2] == [0xeb, 0x09] && i - h < 11)
                    || (b[h] == 0xc3 && a[h] == 0xc3 && i - h < 11)
            });
        assert!(
            ok5 || ok2 || prefix || sled_tail,
            "code byte {i:#x} of the executable changed from {:#04x} to {:#04x} after detach",
            b[i],
            a[i]
        );
        i += 1;
    }
}

/// What a recorded thread looked like.
#[derive(Debug, Default)]
struct Shape {
    calls: HashMap<String, u64>,
    max_depth: usize,
    open_at_end: usize,
}

/// Walks every thread of `trace`, checking each call's parent against the
/// program's call graph (`parents`: function → allowed parents, "" for
/// none) and that a thread's depth-0 calls after its first `outer` are
/// `outer` itself or a thread root. Returns the shape of all threads.
fn check_structure(trace_path: &Path, parents: &[(&str, &[&str])]) -> Shape {
    let trace = Trace::open(trace_path).unwrap();
    let meta = trace.metadata().clone();
    let mut sym = fntrace_cli::symbols::Symbolizer::new(&meta);
    let short = |n: &str| n.rsplit("::").next().unwrap_or(n).to_string();
    let mut shape = Shape::default();
    let mut names: HashMap<u64, String> = HashMap::new();
    let known: HashMap<&str, &[&str]> = parents.iter().copied().collect();
    for tid in trace.thread_ids() {
        let mut stack: Vec<String> = vec![];
        let mut seen_outer_root = false;
        let mut last_tsc = 0u64;
        let mut starts: Vec<u64> = vec![];
        let mut r = trace.stream(tid);
        for rec in r.by_ref() {
            match rec {
                Record::Entry { tsc, func } => {
                    let name = names
                        .entry(func)
                        .or_insert_with(|| short(sym.name(func)))
                        .clone();
                    assert!(tsc >= last_tsc, "thread {tid}: time went back");
                    last_tsc = tsc;
                    let parent = stack.last().map(String::as_str).unwrap_or("");
                    if let Some(allowed) = known.get(name.as_str()) {
                        let root_ok = parent.is_empty() && !seen_outer_root;
                        assert!(
                            allowed.contains(&parent) || root_ok,
                            "thread {tid}: {name} called from {parent:?} (depth {}), which the \
                             program never does",
                            stack.len()
                        );
                    }
                    if stack.is_empty() && name == "outer" {
                        seen_outer_root = true;
                    }
                    stack.push(name.clone());
                    starts.push(tsc);
                    shape.max_depth = shape.max_depth.max(stack.len());
                    *shape.calls.entry(name).or_default() += 1;
                }
                Record::Exit { tsc } | Record::TailExit { tsc } => {
                    assert!(!stack.is_empty(), "thread {tid}: exit without entry");
                    stack.pop();
                    let s = starts.pop().unwrap();
                    assert!(tsc >= s, "thread {tid}: call ends before it starts");
                    last_tsc = tsc;
                }
                _ => {}
            }
        }
        shape.open_at_end += stack.len();
    }
    shape
}

/// The call graph of target.c and its Rust twin.
const PARENTS: &[(&str, &[&str])] = &[
    ("outer", &["", "short_lived"]),
    ("middle", &["outer"]),
    ("leaf_mul", &["middle"]),
    ("leaf_add", &["middle", "outer"]),
];

/// One attach of `bin`: a window, detached, everything checked.
fn attach_and_check(bin: &Path, tmp: &Path, kind: &str) {
    let mut t = Target::start(bin);
    let before_rate = t.rate(Duration::from_millis(200));
    let before = code_snapshot(t.pid, bin);
    let threads_before = t.threads();
    let out = tmp.join(format!("{kind}.data"));
    let mut child = attach_cmd(t.pid, &out, Some("400ms"), &[])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let mut err = String::new();
    stderr.read_line(&mut err).unwrap();
    assert!(err.contains("attached to process"), "{kind}: {err}");
    // A thread created and ending during the window is recorded.
    assert_eq!(t.ask("spawn"), "spawned");
    std::io::Read::read_to_string(&mut stderr, &mut err).unwrap();
    let st = child.wait().unwrap();
    assert!(st.success(), "{kind}: {err}");
    assert!(err.contains("detached from process"), "{kind}: {err}");
    let after = code_snapshot(t.pid, bin);
    assert_code_restored(&before, &after, kind.contains("xray"));
    let after_rate = t.rate(Duration::from_millis(200));
    eprintln!(
        "{kind}: work rate before attach {before_rate:.0}/s, after detach {after_rate:.0}/s \
         ({:.2}x)",
        after_rate / before_rate
    );
    // The attach and control threads are gone again.
    let deadline = Instant::now() + Duration::from_secs(5);
    while t.threads() > threads_before && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(t.threads(), threads_before, "{kind}: threads left behind");
    t.quit();
    let shape = check_structure(&out, PARENTS);
    for f in ["outer", "middle", "leaf_mul", "leaf_add"] {
        assert!(
            shape.calls.get(f).copied().unwrap_or(0) > 0,
            "{kind}: no calls of {f} in the window: {shape:?}"
        );
    }
    assert!(
        shape.calls.contains_key("short_lived"),
        "{kind}: the thread started in the window is missing: {shape:?}"
    );
    let c = |f: &str| shape.calls[f] as i64;
    // Every outer calls middle twice, every middle leaf_mul twice: exact
    // up to the calls cut by the window's two ends (a few per thread).
    assert!(
        (c("middle") - 2 * c("outer")).abs() <= 16,
        "{kind}: {shape:?}"
    );
    assert!(
        (c("leaf_mul") - 2 * c("middle")).abs() <= 16,
        "{kind}: {shape:?}"
    );
    let info = Command::new(common::fntrace_bin())
        .arg("info")
        .arg(&out)
        .output()
        .unwrap();
    let info = String::from_utf8_lossy(&info.stdout);
    assert!(info.contains("# attached"), "{info}");
    assert!(
        info.contains("duration elapsed or stopped by the user"),
        "{info}"
    );
    assert!(info.contains("# damage        none"), "{info}");
}

#[test]
fn attach_every_build_kind_records_a_window_and_leaves_the_program_as_it_was() {
    let d = tempfile::tempdir().unwrap();
    for (kind, _, _) in KINDS {
        let bin = build(d.path(), kind);
        attach_and_check(&bin, d.path(), kind);
    }
}

#[test]
fn attach_a_rust_program_built_with_cargo_fntrace_fentry() {
    common::preload();
    let d = tempfile::tempdir().unwrap();
    let proj = d.path().join("rtarget");
    std::fs::create_dir_all(proj.join("src")).unwrap();
    std::fs::write(
        proj.join("Cargo.toml"),
        "[package]\nname = \"rtarget\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n[workspace]\n",
    )
    .unwrap();
    std::fs::copy(
        concat!(env!("CARGO_MANIFEST_DIR"), "/tests/attach/target.rs"),
        proj.join("src/main.rs"),
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_cargo-fntrace"))
        .args(["fntrace", "build", "--release", "--instrument=fentry"])
        .current_dir(&proj)
        .env_remove("CARGO_TARGET_DIR")
        .env_remove("RUSTFLAGS")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let bin = walk(&proj.join("target"))
        .into_iter()
        .find(|p| p.file_name().is_some_and(|n| n == "rtarget") && p.is_file())
        .expect("the built rtarget binary");
    attach_and_check(&bin, d.path(), "rust-fentry");
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut v = vec![];
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            v.extend(walk(&p));
        } else {
            v.push(p);
        }
    }
    v
}

#[test]
fn attach_and_detach_fifty_times_in_a_row() {
    let d = tempfile::tempdir().unwrap();
    let bin = build(d.path(), "pfe5");
    let t = Target::start(&bin);
    let before = code_snapshot(t.pid, &bin);
    let threads = t.threads();
    for k in 0..50 {
        let out = d.path().join(format!("w{k}.data"));
        attach(t.pid, &out, "20ms");
        let info = Command::new(common::fntrace_bin())
            .arg("info")
            .arg(&out)
            .output()
            .unwrap();
        let info = String::from_utf8_lossy(&info.stdout);
        assert!(info.contains("# damage        none"), "attach {k}: {info}");
        let events: u64 = info
            .lines()
            .find_map(|l| l.strip_prefix("# events"))
            .and_then(|v| v.trim().parse().ok())
            .unwrap();
        assert!(events > 0, "attach {k}: no events");
    }
    let after = code_snapshot(t.pid, &bin);
    assert_code_restored(&before, &after, false);
    let deadline = Instant::now() + Duration::from_secs(5);
    while t.threads() > threads && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(
        t.threads(),
        threads,
        "threads left behind after 50 attaches"
    );
    // No trace stays mapped in the target after its detach.
    let maps = std::fs::read_to_string(format!("/proc/{}/maps", t.pid)).unwrap();
    let kept: Vec<&str> = maps.lines().filter(|l| l.contains(".data")).collect();
    assert!(
        kept.is_empty(),
        "traces still mapped after detach: {kept:?}"
    );
    t.quit();
}

/// Waits until `path`'s `fntrace info` contains `what`.
fn wait_info(path: &Path, what: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let o = Command::new(common::fntrace_bin())
            .arg("info")
            .arg(path)
            .output()
            .unwrap();
        let s = String::from_utf8_lossy(&o.stdout).into_owned();
        // The detach record is written before the session finishes: wait
        // for the end too, not only for the record.
        if s.contains(what) && !s.contains("# ending        unfinished") {
            return s;
        }
        assert!(
            Instant::now() < deadline,
            "{what:?} never appeared in:\n{s}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_second_controller_is_refused_and_a_killed_controller_detaches_by_itself() {
    let d = tempfile::tempdir().unwrap();
    let bin = build(d.path(), "fentry");
    let t = Target::start(&bin);
    let before = code_snapshot(t.pid, &bin);
    let first = d.path().join("first.data");
    let mut a = attach_cmd(t.pid, &first, None, &[])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = BufReader::new(a.stderr.take().unwrap());
    let mut l = String::new();
    err.read_line(&mut l).unwrap();
    assert!(l.contains("attached to process"), "{l}");
    // A second controller while the first is attached.
    let o = attach_cmd(t.pid, &d.path().join("second.data"), Some("100ms"), &[])
        .output()
        .unwrap();
    let e2 = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(e2.contains("already being recorded"), "{e2}");
    assert_eq!(e2.trim().lines().count(), 1, "{e2}");
    // `fntrace live` reaches the attached process.
    let live = Command::new(common::fntrace_bin())
        .args(["live", &t.pid.to_string(), "status"])
        .output()
        .unwrap();
    let ls = String::from_utf8_lossy(&live.stdout);
    assert!(
        live.status.success(),
        "{ls}{}",
        String::from_utf8_lossy(&live.stderr)
    );
    assert!(ls.contains("recording true"), "{ls}");
    // SIGKILL the first: the runtime notices and detaches by itself.
    a.kill().unwrap();
    a.wait().unwrap();
    let info = wait_info(&first, "the controller went away");
    assert!(info.contains("# ending        clean"), "{info}");
    let after = code_snapshot(t.pid, &bin);
    assert_code_restored(&before, &after, false);
    // And it can be attached again.
    attach(t.pid, &d.path().join("third.data"), "100ms");
    t.quit();
    check_structure(&first, PARENTS);
}

#[test]
fn the_process_exiting_during_the_window_ends_the_recording() {
    let d = tempfile::tempdir().unwrap();
    let bin = build(d.path(), "xray");
    let t = Target::start(&bin);
    let out = d.path().join("exit.data");
    let mut a = attach_cmd(t.pid, &out, Some("30s"), &[])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = BufReader::new(a.stderr.take().unwrap());
    let mut l = String::new();
    err.read_line(&mut l).unwrap();
    assert!(l.contains("attached to process"), "{l}");
    std::thread::sleep(Duration::from_millis(200));
    t.quit();
    let st = a.wait().unwrap();
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut err, &mut rest).unwrap();
    assert!(st.success(), "{rest}");
    assert!(
        rest.contains("ended (exit or exec) during the window"),
        "{rest}"
    );
    let info = wait_info(&out, "the process exited");
    assert!(info.contains("# damage        none"), "{info}");
    check_structure(&out, PARENTS);
}

#[test]
fn refusals_say_why_in_one_line() {
    let d = tempfile::tempdir().unwrap();
    // No instrumentation.
    let plain = d.path().join("plain");
    common::tool(
        "gcc",
        &["-O2", "-o", plain.to_str().unwrap(), TARGET_C, "-lpthread"],
    );
    let t = Target::start(&plain);
    let o = attach_cmd(t.pid, &d.path().join("x.data"), Some("100ms"), &[])
        .output()
        .unwrap();
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(
        e.contains("no instrumentation") && e.contains("-fpatchable-function-entry"),
        "{e}"
    );
    assert_eq!(e.trim().lines().count(), 1, "{e}");
    t.quit();

    // Under a debugger (here: this test, tracing it with ptrace).
    let bin = build(d.path(), "pfe5");
    let t = Target::start(&bin);
    // SAFETY: seizing a child process; no pointers.
    assert_eq!(unsafe { libc::ptrace(libc::PTRACE_SEIZE, t.pid, 0, 0) }, 0);
    let o = attach_cmd(t.pid, &d.path().join("y.data"), Some("100ms"), &[])
        .output()
        .unwrap();
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(e.contains("already traced by process"), "{e}");
    // SAFETY: detaching the thread seized above.
    unsafe { libc::ptrace(libc::PTRACE_DETACH, t.pid, 0, 0) };
    t.quit();

    // No such process.
    let o = attach_cmd(999_999_999, &d.path().join("z.data"), Some("100ms"), &[])
        .output()
        .unwrap();
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && e.contains("no such process"), "{e}");
}

#[test]
fn attaching_to_another_users_process_is_refused() {
    // SAFETY: geteuid cannot fail.
    let euid = unsafe { libc::geteuid() };
    assert_eq!(
        euid, 0,
        "this test needs root: it runs fntrace as user nobody against a process of root"
    );
    let d = tempfile::tempdir().unwrap();
    let bin = build(d.path(), "pfe5");
    let t = Target::start(&bin);
    let mut c = attach_cmd(t.pid, Path::new("/tmp/never.data"), Some("100ms"), &[]);
    // SAFETY: setuid/setgid in the child before exec; no allocation.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(&mut c, || {
            if libc::setgid(65534) != 0 || libc::setuid(65534) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let o = c.output().unwrap();
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(e.contains("belongs to uid 0"), "{e}");
    assert_eq!(e.trim().lines().count(), 1, "{e}");
    t.quit();
}

/// `record -p --ring`: the flight recorder on an attached process keeps a
/// bounded window that reads without damage, every thread's calls nested
/// as the program makes them (calls open at the window's start included).
#[test]
fn attach_with_a_ring_keeps_a_bounded_window() {
    let d = tempfile::tempdir().unwrap();
    let bin = build(d.path(), "fentry");
    // Unpaced workers: the 1 MiB ring wraps within the window.
    let mut child = Command::new(&bin)
        .arg("0")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut output = BufReader::new(child.stdout.take().unwrap());
    let mut l = String::new();
    output.read_line(&mut l).unwrap();
    assert!(l.starts_with("ready "), "{l}");
    let out = d.path().join("ring.data");
    let o = attach_cmd(child.id() as i32, &out, Some("2s"), &["--ring", "1M"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(err.contains("flight recorder: window"), "{err}");
    let t = Trace::open(&out).unwrap();
    assert!(t.damage().is_empty(), "{:?}", t.damage());
    assert!(t.file_len() <= 1 << 20);
    let w = fntrace_cli::info::ring_window(&t).unwrap();
    assert!(w.overwritten_chunks > 0, "the ring never wrapped");
    check_nesting(&t, 0);
    child.kill().unwrap();
    child.wait().unwrap();
}

/// Checks that every thread of `t` calls `middle` from `outer` and
/// `leaf_mul` from `middle` (or from a frame entered before the window),
/// and that every complete call lasted at least `min_ns`; returns the
/// number of complete `outer` calls.
fn check_nesting(t: &Trace, min_ns: u64) -> u64 {
    struct Nest<'m> {
        sym: fntrace_cli::symbols::Symbolizer<'m>,
        clock: fntrace_cli::analysis::Clock,
        stack: Vec<String>,
        min_ns: u64,
        outer: u64,
    }
    impl fntrace_cli::analysis::Visitor for Nest<'_> {
        fn enter(&mut self, func: u64, depth: usize, _tsc: u64) {
            let n = self
                .sym
                .name(func)
                .rsplit("::")
                .next()
                .unwrap_or("")
                .to_string();
            self.stack.truncate(depth);
            let parent = self.stack.last().cloned().unwrap_or_default();
            let ok = match n.as_str() {
                "middle" => parent == "outer" || parent == fntrace_cli::symbols::BEFORE_WINDOW,
                "leaf_mul" => parent == "middle" || parent == fntrace_cli::symbols::BEFORE_WINDOW,
                _ => true,
            };
            assert!(ok, "{n} called from {parent:?}");
            self.stack.push(n);
        }
        fn call(&mut self, c: &fntrace_cli::analysis::Call) {
            assert!(c.end >= c.start);
            if c.incomplete {
                return;
            }
            let name = self.sym.name(c.func);
            let ns = self.clock.ns(c.end - c.start);
            assert!(
                ns >= self.min_ns,
                "{name} lasted {ns} ns, under the filter's {} ns",
                self.min_ns
            );
            if name.ends_with("outer") {
                self.outer += 1;
            }
        }
    }
    let mut outer = 0;
    for tid in t.thread_ids() {
        let mut v = Nest {
            sym: fntrace_cli::symbols::Symbolizer::new(t.metadata()),
            clock: fntrace_cli::analysis::Clock::of(t),
            stack: vec![],
            min_ns,
            outer: 0,
        };
        let s = fntrace_cli::analysis::walk_thread(t, tid, &mut v);
        assert!(s.damage.is_empty(), "{:?}", s.damage);
        outer += v.outer;
    }
    outer
}

/// `record -p -t 100ns --ring 1M`: the time filter and the flight
/// recorder are handed over at run time like the other options: every
/// call in the window lasted at least 100 ns, nested as the program makes
/// them (an `outer` call, seven calls, lasts longer; most leaves do not),
/// and `info` says which filter was active.
#[test]
fn attach_with_a_time_filter_keeps_only_the_long_calls() {
    let d = tempfile::tempdir().unwrap();
    let bin = build(d.path(), "pfe5");
    let mut child = Command::new(&bin)
        .arg("0")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut output = BufReader::new(child.stdout.take().unwrap());
    let mut l = String::new();
    output.read_line(&mut l).unwrap();
    assert!(l.starts_with("ready "), "{l}");
    let out = d.path().join("t.data");
    let o = attach_cmd(
        child.id() as i32,
        &out,
        Some("1s"),
        &["-t", "100ns", "--ring", "1M"],
    )
    .output()
    .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(
        err.contains("only calls that lasted at least 100 ns"),
        "{err}"
    );
    let t = Trace::open(&out).unwrap();
    assert!(t.damage().is_empty(), "{:?}", t.damage());
    assert_eq!(t.metadata().time_filter_ns(), 100);
    let outer = check_nesting(&t, 100);
    assert!(outer > 1000, "only {outer} outer calls kept");
    let info = common::tool(
        common::fntrace_bin().to_str().unwrap(),
        &["info", out.to_str().unwrap()],
    );
    assert!(info.contains("-t 100 ns"), "{info}");
    child.kill().unwrap();
    child.wait().unwrap();
}

/// The `perf_event_open` descriptors process `pid` holds.
fn perf_fds(pid: i32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter(|l| l.to_string_lossy().contains("perf_event"))
        .count()
}

#[test]
fn attach_with_libcalls_and_sched_records_them_and_undoes_both_at_detach() {
    let d = tempfile::tempdir().unwrap();
    let bin = build(d.path(), "fentry");
    let mut t = Target::start(&bin);
    // The workers have called usleep (bound its GOT slot) by then.
    t.rate(Duration::from_millis(100));
    let before = code_and_slots(t.pid, &bin, &["usleep"]);
    let threads_before = t.threads();
    let out = d.path().join("ls.data");
    let o = attach_cmd(
        t.pid,
        &out,
        Some("500ms"),
        &["--libcalls=^usleep$", "--sched"],
    )
    .output()
    .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(!err.contains("--sched"), "off-CPU recording refused: {err}");
    // Detached: the usleep GOT slot and every site hold what they held,
    // the perf events are closed and the helper threads gone.
    let after = code_and_slots(t.pid, &bin, &["usleep"]);
    assert_code_restored(&before, &after, false);
    assert_eq!(perf_fds(t.pid), 0, "perf events left open");
    let deadline = Instant::now() + Duration::from_secs(5);
    while t.threads() > threads_before && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(t.threads(), threads_before, "threads left behind");
    t.quit();
    // usleep is recorded under the worker loop of each thread (the
    // workers sleep 1 ms every 64 iterations) and its time is off CPU.
    let tr = Trace::open(&out).unwrap();
    assert!(tr.damage().is_empty(), "{:?}", tr.damage());
    let tree = common::call_tree(&out);
    let usleep: Vec<(&(String, String), &u64)> = tree
        .edges
        .iter()
        .filter(|((_, c), _)| c == "usleep@libc.so.6")
        .collect();
    assert!(!usleep.is_empty(), "no usleep calls: {:?}", tree.edges);
    for ((caller, _), n) in &usleep {
        // Calls in flight at attach have no entry: a usleep at the window's
        // start has no recorded caller.
        assert!(
            caller == "worker" || caller.is_empty(),
            "usleep called from {caller} ({n})"
        );
    }
    let rows = fntrace_cli::report::report_rows(&tr, false, fntrace_cli::report::SortKey::Total);
    let u = rows
        .iter()
        .find(|r| r.function == "usleep@libc.so.6")
        .expect("usleep row");
    let wait = u.wait_ns.expect("a Wait column with --sched");
    assert!(
        wait * 2 >= u.total_ns,
        "usleep: {wait} ns off CPU of {} ns",
        u.total_ns
    );
    assert!(!tr.metadata().offcpu.is_empty());
}

/// CPU time (clock ticks) of the thread of `pid` named `name`.
fn thread_ticks(pid: i32, name: &str) -> Option<u64> {
    for e in std::fs::read_dir(format!("/proc/{pid}/task")).ok()? {
        let dir = e.ok()?.path();
        if std::fs::read_to_string(dir.join("comm")).ok()?.trim() != name {
            continue;
        }
        let stat = std::fs::read_to_string(dir.join("stat")).ok()?;
        // After the ")" of the name: state is field 3, utime 14, stime 15.
        let f: Vec<&str> = stat[stat.rfind(')')? + 2..].split(' ').collect();
        return Some(f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?);
    }
    None
}

/// A thread that existed when `--sched` started and then ended leaves an
/// event the kernel reports as hung up: the off-CPU helper must stop
/// polling it (it once spun on it for the rest of the recording, which in
/// a `-pg` program also sent the profiling timer's signals into sleeping
/// threads and cut their sleeps short), and the remaining threads' off-CPU
/// time is still recorded.
#[test]
fn sched_after_a_thread_ends_does_not_spin() {
    let d = tempfile::tempdir().unwrap();
    let bin = build(d.path(), "fentry");
    let mut t = Target::start(&bin);
    let out = d.path().join("s.data");
    let rec = attach_cmd(t.pid, &out, Some("2s"), &["--sched"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Attached once the off-CPU helper runs.
    let deadline = Instant::now() + Duration::from_secs(20);
    while thread_ticks(t.pid, "fntrace-sched").is_none() {
        assert!(Instant::now() < deadline, "no fntrace-sched thread");
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(t.ask("retire"), "retired 3");
    // The helper's CPU time over the next 600 ms: a 10 ms poll costs
    // microseconds; a spin costs most of a CPU (a third of one with both
    // CPUs busy elsewhere).
    let before = thread_ticks(t.pid, "fntrace-sched").expect("the helper runs");
    let t0 = Instant::now();
    std::thread::sleep(Duration::from_millis(600));
    let used = thread_ticks(t.pid, "fntrace-sched").expect("the helper runs") - before;
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as u64;
    let used_ms = used * 1000 / hz;
    let span_ms = t0.elapsed().as_millis() as u64;
    let o = rec.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(
        used_ms * 10 <= span_ms,
        "fntrace-sched used {used_ms} ms of CPU in {span_ms} ms after a thread ended"
    );
    t.quit();
    // The workers still running kept recording off-CPU time (they sleep
    // 1 ms every 64 iterations).
    let tr = Trace::open(&out).unwrap();
    assert!(tr.damage().is_empty(), "{:?}", tr.damage());
    let tids: Vec<u32> = tr.metadata().offcpu.keys().copied().collect();
    assert!(tids.len() >= 3, "off-CPU intervals on threads {tids:?}");
}

/// A program forking as fast as it can (one more thread, so that malloc
/// takes its locks; optionally a 1 kHz `ITIMER_REAL` whose handler does
/// nothing): glibc's `fork()` holds every malloc arena lock around its
/// `clone`, and an attach that borrowed a thread stopped in there had its
/// `dlopen` wait for that lock forever (in about one attach in two to
/// six), the program hung with an unreaped child, and with the timer's
/// signals `record -p` waited forever too. Ten attaches in a row must each
/// succeed, and the program must go on and end with its self-check.
#[test]
fn attach_to_a_program_that_keeps_forking() {
    const FORKER_C: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/attach/forker.c");
    let d = tempfile::tempdir().unwrap();
    let bin = d.path().join("forker");
    common::tool(
        "gcc",
        &[
            "-O2",
            "-g",
            "-pg",
            "-mfentry",
            "-o",
            bin.to_str().unwrap(),
            FORKER_C,
            "-lpthread",
        ],
    );
    for timer in [false, true] {
        let mut child = Command::new(&bin)
            .args(timer.then_some("timer"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let pid = child.id() as i32;
        let mut input = child.stdin.take().unwrap();
        let mut output = BufReader::new(child.stdout.take().unwrap());
        let mut l = String::new();
        output.read_line(&mut l).unwrap();
        assert!(l.starts_with("ready "), "forker said {l:?}");
        for k in 0..10 {
            let out = d.path().join(format!("f{k}.data"));
            let mut a = attach_cmd(pid, &out, Some("300ms"), &[])
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap();
            // A hung attach fails the test instead of hanging it.
            let deadline = Instant::now() + Duration::from_secs(30);
            let st = loop {
                if let Some(st) = a.try_wait().unwrap() {
                    break Some(st);
                }
                if Instant::now() > deadline {
                    let _ = a.kill();
                    let _ = a.wait();
                    break None;
                }
                std::thread::sleep(Duration::from_millis(20));
            };
            let mut err = String::new();
            std::io::Read::read_to_string(&mut a.stderr.take().unwrap(), &mut err).unwrap();
            let Some(st) = st else {
                give_up(
                    &mut child,
                    &format!("attach {k} (timer {timer}) did not end within 30 s: {err}"),
                );
            };
            if !st.success() {
                give_up(
                    &mut child,
                    &format!("attach {k} (timer {timer}) failed: {err}"),
                );
            }
            assert!(err.contains("attached to process"), "{err}");
        }
        // The program still runs: it answers and ends with its self-check.
        writeln!(input, "quit").unwrap();
        input.flush().unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        let st = loop {
            if let Some(st) = child.try_wait().unwrap() {
                break st;
            }
            if Instant::now() > deadline {
                give_up(
                    &mut child,
                    &format!("the forker (timer {timer}) hung after the attaches"),
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let mut l = String::new();
        output.read_line(&mut l).unwrap();
        let mut err = String::new();
        std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
        assert!(
            l.starts_with("ok ") && l.trim().ends_with("errors=0"),
            "{l}"
        );
        assert_eq!(st.code(), Some(0), "{l}");
        assert_eq!(err, "", "the program's standard error changed");
    }
}

/// Fails the forking test with `why` and where the forker and its
/// children wait (a child that never reaches its `_exit` hangs the
/// forker too), killing them all first so that none is left behind.
fn give_up(forker: &mut Child, why: &str) -> ! {
    let pid = forker.id() as i32;
    let mut pids = vec![pid];
    pids.extend(children(pid));
    let state: Vec<String> = pids
        .iter()
        .map(|p| {
            let wchan = std::fs::read_to_string(format!("/proc/{p}/wchan"));
            format!("{p} in {}", wchan.unwrap_or_default())
        })
        .collect();
    for &p in pids.iter().skip(1) {
        // SAFETY: kill has no memory preconditions; `p` is a child of the
        // forker, which has not reaped it.
        unsafe { libc::kill(p, libc::SIGKILL) };
    }
    let _ = forker.kill();
    let _ = forker.wait();
    panic!("{why} (waiting: {})", state.join(", "));
}

/// The children of process `pid`.
fn children(pid: i32) -> Vec<i32> {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("children")).ok())
        .flat_map(|c| {
            c.split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect::<Vec<i32>>()
        })
        .collect()
}
