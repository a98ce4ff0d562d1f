//! Dynamic tracing end to end: patchable entry sites (gcc
//! `-fpatchable-function-entry`, gcc `-pg -mfentry -mnop-mcount
//! -mrecord-mcount`, rustc `-Zpatchable-function-entry`) switched on by
//! `fntrace record`, selective patching with `-F`, switching 10,000 times
//! while 4 threads run, `fntrace live` on a running process (and a peer
//! of another user refused), arguments and return values. gcc and rustc
//! are required (a missing tool fails the test).

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use fntrace_cli::analysis::{Call, Visitor, walk_thread};
use fntrace_cli::report::{SortKey, report_rows};
use fntrace_format::Trace;

mod common;
use common::{FIB_C, FIB_RS, fntrace_bin, tool as run};

const SRC: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/dynamic");

/// The gcc builds with patchable sites: name and flags.
const GCC_MODES: [(&str, &[&str]); 4] = [
    ("pfe5", &["-fpatchable-function-entry=5"]),
    ("pfe10-8", &["-fpatchable-function-entry=10,8"]),
    (
        "nop-mcount",
        &[
            "-fno-pie",
            "-no-pie",
            "-pg",
            "-mfentry",
            "-mnop-mcount",
            "-mrecord-mcount",
        ],
    ),
    (
        "pfe5-cet",
        &["-fpatchable-function-entry=5", "-fcf-protection=full"],
    ),
];

fn gcc(dir: &Path, src: &str, name: &str, flags: &[&str]) -> PathBuf {
    let bin = dir.join(name);
    let mut a = vec!["-O2", "-fno-optimize-sibling-calls"];
    a.extend_from_slice(flags);
    a.extend_from_slice(&["-o", bin.to_str().unwrap(), src, "-lpthread", "-ldl"]);
    run("gcc", &a);
    bin
}

/// `fntrace record -o DIR/t.data OPTS -- BIN ARGS`: (stdout, stderr, trace).
fn record(dir: &Path, opts: &[&str], bin: &Path, args: &[&str]) -> (String, String, PathBuf) {
    let data = dir.join("t.data");
    let out = common::record_cmd(&data, opts, bin, args).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{err}");
    (String::from_utf8(out.stdout).unwrap(), err, data)
}

/// Calls per function; asserts the trace is undamaged and every thread's
/// stream well nested.
fn calls(data: &Path) -> std::collections::HashMap<String, u64> {
    let t = Trace::open(data).unwrap();
    assert!(t.damage().is_empty(), "{:?}", t.damage());
    struct Nest;
    impl Visitor for Nest {
        fn call(&mut self, c: &Call) {
            assert!(c.end >= c.start);
        }
    }
    for tid in t.thread_ids() {
        let s = walk_thread(&t, tid, &mut Nest);
        assert_eq!(s.unmatched_exits, 0, "thread {tid}");
        assert!(s.damage.is_empty());
    }
    report_rows(&t, false, SortKey::Name)
        .into_iter()
        .map(|r| (r.function, r.calls))
        .collect()
}

#[test]
fn fib_call_count_for_each_patchable_build() {
    let d = tempfile::tempdir().unwrap();
    let mut bins: Vec<(String, PathBuf, &str)> = GCC_MODES
        .iter()
        .map(|(n, f)| (n.to_string(), gcc(d.path(), FIB_C, n, f), "fib"))
        .collect();
    let rs = d.path().join("fib-rs");
    run(
        "rustc",
        &[
            "-O",
            "-Zpatchable-function-entry=10,8",
            "-o",
            rs.to_str().unwrap(),
            FIB_RS,
        ],
    );
    bins.push(("rustc 10,8".into(), rs, "fib::fib"));
    for (name, bin, func) in bins {
        let (out, err, data) = record(d.path(), &[], &bin, &["25"]);
        assert_eq!(out, "75025\n", "{name}: {err}");
        let c = calls(&data);
        assert_eq!(c.get(func).copied(), Some(242785), "{name}: {c:?}");
        // Unrecorded, the program is unchanged.
        let plain = Command::new(&bin).arg("20").output().unwrap();
        assert_eq!(String::from_utf8_lossy(&plain.stdout), "6765\n", "{name}");
    }
}

#[test]
fn filter_patches_only_the_selected_function() {
    let d = tempfile::tempdir().unwrap();
    for (name, flags) in GCC_MODES {
        let bin = gcc(d.path(), &format!("{SRC}/live.c"), name, flags);
        let (mut child, mut w, mut r, pid) = record_live(&d.path().join("t.data"), "-F", &bin);
        round(&mut w, &mut r);
        // hot_b's entry is still a NOP (the compiler's, or the 5-byte or
        // 2-byte NOP fntrace rewrote a run of one-byte NOPs into at start).
        let (a, b) = (
            entry_bytes(pid, &bin, "hot_a"),
            entry_bytes(pid, &bin, "hot_b"),
        );
        assert!(is_nop_entry(&b), "{name}: hot_b was changed: {b:02x?}");
        assert!(!is_nop_entry(&a), "{name}: hot_a not patched: {a:02x?}");
        drop(w);
        assert!(child.wait().unwrap().success());
        let c = calls(&d.path().join("t.data"));
        assert_eq!(c.get("hot_a").copied(), Some(1000), "{name}: {c:?}");
        assert_eq!(c.get("hot_b"), None, "{name}: {c:?}");
        assert_eq!(c.get("main"), None, "{name}: {c:?}");
    }
}

/// Starts `fntrace record -o DATA SELECT ^hot_a$ -- BIN` on live.c with
/// piped stdin/stdout; returns the recorder, the program's input and
/// output, and the program's pid.
fn record_live(
    data: &Path,
    select: &str,
    bin: &Path,
) -> (
    std::process::Child,
    std::process::ChildStdin,
    BufReader<std::process::ChildStdout>,
    u32,
) {
    record_live_with(data, &[select, "^hot_a$"], &[], bin)
}

/// `fntrace record -o DATA OPTS -- BIN` on live.c with the environment
/// `env` added, as [`record_live`].
fn record_live_with(
    data: &Path,
    opts: &[&str],
    env: &[(&str, &str)],
    bin: &Path,
) -> (
    std::process::Child,
    std::process::ChildStdin,
    BufReader<std::process::ChildStdout>,
    u32,
) {
    let mut child = common::record_cmd(data, opts, bin, &[])
        .envs(env.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let w = child.stdin.take().unwrap();
    let mut r = BufReader::new(child.stdout.take().unwrap());
    let pid = read_pid(&mut r);
    (child, w, r, pid)
}

/// One "run" of live.c: both hot functions 1,000 times.
fn round(w: &mut impl Write, r: &mut impl BufRead) {
    writeln!(w, "run").unwrap();
    let mut l = String::new();
    r.read_line(&mut l).unwrap();
    assert!(l.starts_with("ran "), "{l}");
}

fn read_pid(r: &mut impl BufRead) -> u32 {
    let mut l = String::new();
    r.read_line(&mut l).unwrap();
    l.trim()
        .strip_prefix("pid ")
        .unwrap_or_else(|| panic!("no pid line: {l:?}"))
        .parse()
        .unwrap()
}

/// The first 8 bytes of function `f` of `bin` in the running process
/// `pid` (after an `endbr64`, if any).
fn entry_bytes(pid: u32, bin: &Path, f: &str) -> Vec<u8> {
    use object::{Object, ObjectSymbol};
    let data = std::fs::read(bin).unwrap();
    let obj = object::File::parse(&*data).unwrap();
    let sym = obj
        .symbols()
        .find(|s| s.name() == Ok(f))
        .unwrap_or_else(|| panic!("no symbol {f}"));
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
    let base = if obj.kind() == object::ObjectKind::Dynamic {
        let l = maps
            .lines()
            .find(|l| l.ends_with(bin.to_str().unwrap()))
            .unwrap();
        u64::from_str_radix(l.split('-').next().unwrap(), 16).unwrap()
    } else {
        0
    };
    let mut b = vec![0u8; 32];
    let f = std::fs::File::open(format!("/proc/{pid}/mem")).unwrap();
    std::os::unix::fs::FileExt::read_exact_at(&f, &mut b, base + sym.address()).unwrap();
    if b[..4] == [0xf3, 0x0f, 0x1e, 0xfa] {
        b.drain(..4);
    }
    b.truncate(24);
    b
}

/// The bytes after the frame set-up of a `gcc -pg` function's entry (as
/// [`entry_bytes`] reads them): `push rbp; mov rbp, rsp`, then any pushes
/// and `sub rsp`, then where its `call mcount` was.
fn after_prologue(b: &[u8]) -> &[u8] {
    assert_eq!(
        b[..4],
        [0x55, 0x48, 0x89, 0xe5],
        "not a -pg prologue: {b:02x?}"
    );
    let mut p = 4;
    loop {
        p += match b[p..] {
            [0x50..=0x57, ..] => 1,
            [0x41, 0x50..=0x57, ..] => 2,
            [0x48, 0x83, 0xec, ..] => 4,
            [0x48, 0x81, 0xec, ..] => 7,
            _ => return &b[p..],
        };
    }
}

fn is_nop_entry(b: &[u8]) -> bool {
    b[..5] == [0x90; 5]
        || b[..5] == [0x0f, 0x1f, 0x44, 0x00, 0x00]
        || b[..2] == [0x90, 0x90]
        || b[..2] == [0x66, 0x90]
}

#[test]
fn mcount_and_fentry_calls_become_switchable_sites() {
    let d = tempfile::tempdir().unwrap();
    let modes: [(&str, &[&str]); 6] = [
        ("fentry", &["-pg", "-mfentry"]),
        ("fentry-nopie", &["-pg", "-mfentry", "-no-pie", "-fno-pie"]),
        ("fentry-cet", &["-pg", "-mfentry", "-fcf-protection=full"]),
        ("mcount", &["-pg"]),
        ("mcount-nopie", &["-pg", "-no-pie", "-fno-pie"]),
        ("mcount-cet", &["-pg", "-fcf-protection=full"]),
    ];
    // A small mcount program's prologues are moved at start by default;
    // with FNTRACE_CONVERT_AT_START=0 its calls are converted in place on
    // a runtime thread, as a large program's are.
    let runs = modes.iter().flat_map(|&(name, flags)| {
        let later = name.starts_with("mcount").then_some((name, flags, true));
        [(name, flags, false)].into_iter().chain(later)
    });
    for (name, flags, later) in runs {
        let mcount = name.starts_with("mcount");
        let bin = gcc(d.path(), &format!("{SRC}/live.c"), name, flags);
        let env: &[(&str, &str)] = if later {
            &[("FNTRACE_CONVERT_AT_START", "0")]
        } else {
            &[]
        };
        let name = &format!("{name}{}", if later { " later" } else { "" });
        let data = d.path().join("t.data");
        let (mut child, mut w, mut r, pid) = record_live_with(&data, &[], env, &bin);
        round(&mut w, &mut r);
        let o = Command::new(fntrace_bin())
            .args(["live", &pid.to_string(), "status"])
            .output()
            .unwrap();
        assert!(o.status.success(), "{name}: {o:?}");
        // A switched-on site is a jump: at an fentry function's entry or
        // an mcount function's moved prologue; at an mcount function's
        // `call mcount` converted in place while the program runs (its
        // prologue stays).
        let site = |f: &str| {
            let b = entry_bytes(pid, &bin, f);
            if later {
                after_prologue(&b).to_vec()
            } else {
                b
            }
        };
        for f in ["hot_a", "hot_b", "main"] {
            let b = site(f);
            assert_eq!(b[0], 0xe9, "{name}: {f} not switched on: {b:02x?}");
        }
        // Wrappers and stubs are mapped near the code, but never near
        // address 0 (a non-PIE program sits at 4 MiB; null pointers must
        // keep faulting even when the program runs as root).
        let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
        for l in maps.lines() {
            let lo = u64::from_str_radix(l.split('-').next().unwrap(), 16).unwrap();
            assert!(lo >= 1 << 20, "{name}: mapping near 0: {l}");
        }
        // fntrace live switches one off: its entry becomes a NOP and its
        // calls are no longer recorded.
        let o = Command::new(fntrace_bin())
            .args(["live", &pid.to_string(), "disable", "^hot_b$"])
            .output()
            .unwrap();
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(
            o.status.success(),
            "{name}: {out} {}",
            String::from_utf8_lossy(&o.stderr)
        );
        assert!(out.contains("ok 1 functions disabled"), "{name}: {out}");
        let b = site("hot_b");
        if mcount && !later {
            // Off, a moved prologue's entry jumps to the prologue instead
            // of the wrapper.
            let a = site("hot_a");
            assert!(
                b[0] == 0xe9 && a[1..5] != b[1..5],
                "{name}: {a:02x?} {b:02x?}"
            );
        } else {
            assert!(is_nop_entry(&b), "{name}: hot_b still on: {b:02x?}");
        }
        round(&mut w, &mut r);
        drop(w);
        assert!(child.wait().unwrap().success());
        let c = calls(&data);
        assert_eq!(c.get("hot_a").copied(), Some(2000), "{name}: {c:?}");
        assert_eq!(c.get("hot_b").copied(), Some(1000), "{name}: {c:?}");
        assert_eq!(c.get("main").copied(), Some(1), "{name}: {c:?}");
        // FNTRACE_KEEP_CALLS=1 keeps the calls (return-address hijacking).
        let (mut child, mut w, mut r, pid) =
            record_live_with(&data, &[], &[("FNTRACE_KEEP_CALLS", "1")], &bin);
        round(&mut w, &mut r);
        let b = entry_bytes(pid, &bin, "hot_a");
        let kept = |b: &[u8]| {
            let b = if mcount { after_prologue(b) } else { b };
            b[0] == 0xe8 || b[..2] == [0xff, 0x15]
        };
        assert!(kept(&b), "{name}: {b:02x?}");
        drop(w);
        assert!(child.wait().unwrap().success());
        assert_eq!(calls(&data).get("hot_a").copied(), Some(1000), "{name}");
        // With -F the calls stay too (-F keeps its region semantics there).
        let (mut child, mut w, mut r, pid) = record_live(&data, "-F", &bin);
        round(&mut w, &mut r);
        let b = entry_bytes(pid, &bin, "hot_b");
        assert!(kept(&b), "{name}: {b:02x?}");
        drop(w);
        assert!(child.wait().unwrap().success());
        let c = calls(&data);
        assert_eq!(c.get("hot_a").copied(), Some(1000), "{name}: {c:?}");
        assert_eq!(c.get("hot_b"), None, "{name}: {c:?}");
    }
}

#[test]
fn switching_10000_times_while_four_threads_run() {
    let d = tempfile::tempdir().unwrap();
    // Also gcc -pg and -pg -mfentry, whose calls fntrace rewrote into sites.
    let hooks: [(&str, &[&str]); 2] = [("mcount", &["-pg"]), ("fentry", &["-pg", "-mfentry"])];
    for (name, flags) in GCC_MODES.into_iter().chain(hooks) {
        let bin = gcc(d.path(), &format!("{SRC}/stress.c"), name, flags);
        // The workers record as fast as they can while the switching
        // lasts; a size limit keeps the trace small enough to check (the
        // switching goes on after the space is used up).
        let (out, err, data) = record(d.path(), &["--max-size", "48M"], &bin, &[]);
        assert_eq!(out, "switching ok 1, workers ok 4\n", "{name}: {err}");
        let t = Trace::open(&data).unwrap();
        let c = calls(&data);
        assert!(c.get("work").copied().unwrap_or(0) > 1000, "{name}: {c:?}");
        // Every worker recorded while switched on.
        struct Count(u64);
        impl Visitor for Count {
            fn call(&mut self, _c: &Call) {
                self.0 += 1;
            }
        }
        let busy = t
            .thread_ids()
            .into_iter()
            .filter(|&tid| {
                let mut v = Count(0);
                walk_thread(&t, tid, &mut v);
                v.0 > 1000
            })
            .count();
        assert_eq!(busy, 4, "{name}");
    }
}

#[test]
fn arguments_and_return_values() {
    let d = tempfile::tempdir().unwrap();
    for (name, flags) in &GCC_MODES[..3] {
        let bin = gcc(d.path(), FIB_C, name, flags);
        let (out, _, data) = record(
            d.path(),
            &["-A", "fib@arg1", "-R", "fib@retval"],
            &bin,
            &["20"],
        );
        assert_eq!(out, "6765\n");
        let r = Command::new(fntrace_bin())
            .args(["replay", "--depth", "2"])
            .arg(&data)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&r.stdout);
        assert!(text.contains("fib(20) = 6765"), "{name}: {text}");
    }
    // Bad specs are refused before the program runs, naming the problem.
    let out = Command::new(fntrace_bin())
        .args(["record", "-A", "fib@arg9", "--", "true"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("arg9"));
}

#[test]
fn live_changes_a_running_process_and_refuses_other_users() {
    let d = tempfile::tempdir().unwrap();
    let bin = gcc(
        d.path(),
        &format!("{SRC}/live.c"),
        "live",
        &["-fpatchable-function-entry=5"],
    );
    live_session(d.path(), &bin, "-F", true);
    // The same with XRay sleds (`-P` selects what is patched there).
    let x = d.path().join("live-xray");
    common::xray_cc(
        "clang-14",
        &["-o", x.to_str().unwrap(), &format!("{SRC}/live.c")],
    );
    live_session(d.path(), &x, "-P", false);
}

/// Records `bin` (live.c) with `SELECT ^hot_a$`, switches hot_a off and
/// hot_b on with `fntrace live`, and checks the trace; `others`: also
/// check that another user is refused.
fn live_session(dir: &Path, bin: &Path, select: &str, others: bool) {
    let data = dir.join("t.data");
    let (mut child, mut w, mut r, pid) = record_live(&data, select, bin);
    let mut round = || round(&mut w, &mut r);
    round();
    let live = |args: &[&str]| {
        let o = Command::new(fntrace_bin())
            .arg("live")
            .arg(pid.to_string())
            .args(args)
            .output()
            .unwrap();
        (
            o.status.success(),
            String::from_utf8_lossy(&o.stdout).into_owned(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        )
    };
    // The control socket may take a moment after start-up.
    let (ok, out, err) = live(&["status"]);
    assert!(ok, "{err}");
    assert!(out.contains("enabled 1"), "{out}");
    let (ok, out, err) = live(&["-N", "^hot_a$", "-F", "^hot_b$"]);
    assert!(ok, "{err}");
    assert!(out.contains("ok 1 functions disabled"), "{out}");
    assert!(out.contains("ok 1 functions enabled"), "{out}");
    let (ok, out, _) = live(&["list"]);
    assert!(ok && out.starts_with("hot_b\nok 1"), "{out}");
    let (ok, _, err) = live(&["enable", "("]);
    assert!(!ok && err.contains("bad function pattern"), "{err}");
    // Without a command, commands come from standard input.
    let mut c = Command::new(fntrace_bin())
        .arg("ctl")
        .arg(pid.to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    c.stdin
        .take()
        .unwrap()
        .write_all(b"status\nbogus\nlist\n")
        .unwrap();
    let o = c.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(!o.status.success(), "an unknown command is an error");
    assert!(
        text.contains(&format!("ok pid {pid} enabled 1 "))
            && text.contains("hot_b\nok 1 functions enabled"),
        "{text}"
    );
    round();
    if others {
        refused_for_other_users(pid);
    }
    let (ok, _, err) = live(&["disable", "hot_b"]);
    assert!(ok, "{err}");
    round();
    drop(w);
    assert!(child.wait().unwrap().success());
    let c = calls(&data);
    assert_eq!(c.get("hot_a").copied(), Some(1000), "{c:?}");
    assert_eq!(c.get("hot_b").copied(), Some(1000), "{c:?}");
    // The socket is gone with the process.
    assert!(!fntrace_rt::control::socket_path(pid).exists());
    let (ok, _, err) = live(&["status"]);
    assert!(!ok && err.contains(&pid.to_string()), "{err}");
}

/// Another user (nobody) cannot reach the socket: the private directory
/// stops it, and with the directory opened up the runtime's SO_PEERCRED
/// check refuses it. Needs root (to act as another user).
fn refused_for_other_users(pid: u32) {
    // SAFETY: geteuid cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("not root: the other-user check needs root to run as nobody");
        return;
    }
    // A copy of fntrace that nobody can run.
    let dir = tempfile::Builder::new().tempdir_in("/tmp").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let exe = dir.path().join("fntrace");
    std::fs::copy(fntrace_bin(), &exe).unwrap();
    let as_nobody = || {
        let o = Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(&exe)
            .args(["live", &pid.to_string(), "disable", "."])
            .env_remove("XDG_RUNTIME_DIR")
            .output()
            .expect("setpriv (util-linux) is required");
        (
            o.status.success(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        )
    };
    let (ok, err) = as_nobody();
    assert!(!ok, "nobody could control the process");
    assert!(err.contains("refused"), "{err}");
    // Open the directory and the socket: the runtime itself refuses.
    let sock = fntrace_rt::control::socket_path(pid);
    let sdir = sock.parent().unwrap().to_path_buf();
    let mode = std::fs::metadata(&sdir).unwrap().permissions().mode();
    std::fs::set_permissions(&sdir, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(&sock, std::fs::Permissions::from_mode(0o666)).unwrap();
    let (ok, err) = as_nobody();
    std::fs::set_permissions(&sdir, std::fs::Permissions::from_mode(mode)).unwrap();
    std::fs::set_permissions(&sock, std::fs::Permissions::from_mode(0o600)).unwrap();
    assert!(!ok, "nobody could control the process");
    assert!(err.contains("peer uid 65534"), "{err}");
}

#[test]
fn shared_objects_loaded_at_start_and_by_dlopen() {
    let d = tempfile::tempdir().unwrap();
    let hooks = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/hooks");
    for (name, flags) in &GCC_MODES[..2] {
        let lib = d.path().join(format!("libplugin-{name}.so"));
        let mut a = vec!["-O2", "-fPIC", "-shared"];
        a.extend_from_slice(flags);
        let src = format!("{hooks}/dl_plugin.c");
        a.extend_from_slice(&["-o", lib.to_str().unwrap(), &src]);
        run("gcc", &a);
        let l = lib.to_str().unwrap();
        let bin = gcc(d.path(), &format!("{hooks}/dl_main.c"), "dl_main", flags);
        let plain = Command::new(&bin).arg(l).output().unwrap();
        let (out, err, data) = record(d.path(), &[], &bin, &[l]);
        assert_eq!(out.as_bytes(), plain.stdout, "{name}: {err}");
        let c = calls(&data);
        assert_eq!(c.get("plugin_helper").copied(), Some(10), "{name}: {c:?}");
        assert_eq!(c.get("local_fn").copied(), Some(10), "{name}: {c:?}");
        // Selection applies to objects loaded later too.
        let (_, _, data) = record(d.path(), &["-F", "^plugin_helper$"], &bin, &[l]);
        let c = calls(&data);
        assert_eq!(c.get("plugin_helper").copied(), Some(10), "{name}: {c:?}");
        assert_eq!(c.get("plugin_work"), None, "{name}: {c:?}");
        assert_eq!(c.get("local_fn"), None, "{name}: {c:?}");
        // Linked at start (DT_NEEDED).
        let rpath = format!("-Wl,-rpath,{}", d.path().display());
        let linked = d.path().join("linked");
        let src = format!("{hooks}/dl_linked.c");
        let mut a = vec!["-O2"];
        a.extend_from_slice(flags);
        a.extend_from_slice(&["-o", linked.to_str().unwrap(), &src, l, &rpath]);
        run("gcc", &a);
        let (_, err, data) = record(d.path(), &[], &linked, &[]);
        let c = calls(&data);
        assert_eq!(
            c.get("plugin_work").copied(),
            Some(10),
            "{name}: {err} {c:?}"
        );
    }
}

#[test]
fn rust_patchable_function_entry_attribute() {
    let d = tempfile::tempdir().unwrap();
    let bin = d.path().join("attr");
    run(
        "rustc",
        &["-O", "-o", bin.to_str().unwrap(), &format!("{SRC}/attr.rs")],
    );
    let (out, err, data) = record(d.path(), &[], &bin, &["10"]);
    assert_eq!(out, "75\n", "{err}");
    let c = calls(&data);
    assert_eq!(c.get("attr::traced").copied(), Some(177), "{c:?}");
    assert_eq!(c.get("attr::untraced"), None, "{c:?}");
}
