//! `fntrace record --libcalls`: calls into shared libraries recorded
//! through the callers' PLT/GOT slots. `tests/libcalls/libcalls.c` calls
//! `qsort` with an instrumented comparator, `memcpy`, and
//! `pthread_mutex_lock`/`unlock` from 4 contending threads, then dlopens
//! the instrumented `plugin.c`, which calls `memset` and `strlen`. Each
//! build (lazy binding and `-z now`, PLT and `-fno-plt`, call wrappers and
//! hijacked returns, fentry, mcount and cyg_profile) must give the exact
//! number of each library call, under its caller, with the comparator
//! nested inside `qsort@libc.so.6` and every worker at the root of its
//! own thread (not under `pthread_create`). gcc is required.

use std::path::{Path, PathBuf};
use std::process::Command;

use fntrace_cli::analysis::{Call, Visitor, walk_thread};
use fntrace_format::Trace;

mod common;
use common::{call_tree, tool};

const SRC: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/libcalls");

fn build(dir: &Path, name: &str, flags: &[&str]) -> (PathBuf, PathBuf) {
    let exe = dir.join(name);
    let plugin = dir.join(format!("{name}-plugin.so"));
    let mut a = vec!["-O2", "-g"];
    a.extend(flags);
    let (e, p) = (exe.to_str().unwrap(), plugin.to_str().unwrap());
    let main_src = format!("{SRC}/libcalls.c");
    let plugin_src = format!("{SRC}/plugin.c");
    let mut m = a.clone();
    m.extend(["-o", e, &main_src, "-lpthread", "-ldl"]);
    tool("gcc", &m);
    let mut s = a.clone();
    s.extend(["-shared", "-fPIC", "-o", p, &plugin_src]);
    tool("gcc", &s);
    (exe, plugin)
}

/// Records `exe 10 plugin` with `opts`; returns the trace and the
/// program's output.
fn record(
    dir: &Path,
    exe: &Path,
    plugin: &Path,
    opts: &[&str],
    env: &[(&str, &str)],
) -> (PathBuf, String) {
    let data = dir.join(format!(
        "{}-{}.data",
        exe.file_name().unwrap().to_str().unwrap(),
        opts.len()
    ));
    let mut c = common::record_cmd(&data, opts, exe, &["10", plugin.to_str().unwrap()]);
    for (k, v) in env {
        c.env(k, v);
    }
    let out = c.output().unwrap();
    assert!(
        out.status.success(),
        "{} failed: {}",
        exe.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    (data, String::from_utf8(out.stdout).unwrap())
}

/// The comparator count the program printed.
fn printed_cmp(out: &str) -> u64 {
    let l = out
        .lines()
        .find(|l| l.starts_with("cmp "))
        .expect("cmp line");
    l.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// Every library call's interval lies inside its caller's, and its
/// duration is positive: checked on every thread.
fn check_intervals(data: &Path) {
    struct V<'m> {
        sym: fntrace_cli::symbols::Symbolizer<'m>,
        open: Vec<(String, u64)>,
        seen: u64,
    }
    impl Visitor for V<'_> {
        fn enter(&mut self, func: u64, depth: usize, tsc: u64) {
            self.open.truncate(depth);
            self.open.push((self.sym.name(func).to_string(), tsc));
        }
        fn call(&mut self, c: &Call) {
            let name = self.sym.name(c.func).to_string();
            if name.contains('@') {
                self.seen += 1;
                assert!(c.end >= c.start, "{name}: exit before entry");
                if c.depth > 0 {
                    let parent_start = self.open[c.depth - 1].1;
                    assert!(c.start >= parent_start, "{name} starts before its caller");
                }
            }
            self.open.truncate(c.depth);
        }
    }
    let t = Trace::open(data).unwrap();
    let mut seen = 0;
    for tid in t.thread_ids() {
        let mut v = V {
            sym: fntrace_cli::symbols::Symbolizer::new(t.metadata()),
            open: vec![],
            seen: 0,
        };
        walk_thread(&t, tid, &mut v);
        seen += v.seen;
    }
    assert!(seen > 0, "no library call in {}", data.display());
}

fn check(what: &str, data: &Path, out: &str) {
    let cmp = printed_cmp(out);
    assert!(out.contains("counter 800"), "{what}: {out}");
    let t = call_tree(data);
    t.expect(what, "sort_numbers", Some("main"), 1);
    t.expect(what, "qsort@libc.so.6", Some("sort_numbers"), 1);
    // The comparator, called back from inside libc, nests under qsort.
    t.expect(what, "compare_ints", Some("qsort@libc.so.6"), cmp);
    t.expect(what, "copy_block", Some("main"), 10);
    t.expect(what, "memcpy@libc.so.6", Some("copy_block"), 10);
    t.expect(what, "bump", Some("worker"), 800);
    t.expect(what, "pthread_mutex_lock@libc.so.6", Some("bump"), 800);
    t.expect(what, "pthread_mutex_unlock@libc.so.6", Some("bump"), 800);
    t.expect(what, "pthread_create@libc.so.6", Some("main"), 4);
    t.expect(what, "pthread_join@libc.so.6", Some("main"), 4);
    // Start routines are the roots of their threads.
    t.expect(what, "worker", Some(""), 4);
    // The dlopen'd plugin's own library calls.
    t.expect(what, "plugin_fill", Some("main"), 3);
    t.expect(what, "memset@libc.so.6", Some("plugin_fill"), 3);
    t.expect(what, "strlen@libc.so.6", Some("plugin_fill"), 3);
    // Never recorded: the runtime's own interposed functions and the
    // ones that read their return address.
    for (_, callee) in t.edges.keys() {
        assert!(
            !callee.starts_with("dlopen@") && !callee.starts_with("dlsym@"),
            "{what}: {callee} recorded"
        );
    }
    assert_eq!(t.incomplete, 0, "{what}: calls without an exit");
    check_intervals(data);
}

#[test]
fn library_calls_in_every_mechanism_and_binding() {
    let dir = tempfile::tempdir().unwrap();
    /// (name, gcc flags, environment of the recording)
    type Mode<'a> = (&'a str, &'a [&'a str], &'a [(&'a str, &'a str)]);
    let modes: &[Mode] = &[
        ("fentry-lazy", &["-pg", "-mfentry", "-Wl,-z,lazy"], &[]),
        (
            "fentry-hijack-now",
            &["-pg", "-mfentry", "-Wl,-z,now"],
            &[("FNTRACE_KEEP_CALLS", "1")],
        ),
        ("mcount-lazy", &["-pg", "-Wl,-z,lazy"], &[]),
        (
            "cyg-noplt-now",
            &["-finstrument-functions", "-fno-plt", "-Wl,-z,now"],
            &[],
        ),
    ];
    for (name, flags, env) in modes {
        let (exe, plugin) = build(dir.path(), name, flags);
        let (data, out) = record(dir.path(), &exe, &plugin, &["--libcalls"], env);
        check(name, &data, &out);
    }
}

#[test]
fn a_pattern_selects_library_functions_and_the_default_records_none() {
    let dir = tempfile::tempdir().unwrap();
    let (exe, plugin) = build(dir.path(), "fentry", &["-pg", "-mfentry"]);
    let (data, out) = record(
        dir.path(),
        &exe,
        &plugin,
        &["--libcalls=^(qsort|memset)$"],
        &[],
    );
    let t = call_tree(&data);
    t.expect("pattern", "qsort@libc.so.6", Some("sort_numbers"), 1);
    t.expect(
        "pattern",
        "compare_ints",
        Some("qsort@libc.so.6"),
        printed_cmp(&out),
    );
    t.expect("pattern", "memset@libc.so.6", Some("plugin_fill"), 3);
    let libs: Vec<&String> = t
        .edges
        .keys()
        .map(|e| &e.1)
        .filter(|c| c.contains('@'))
        .collect();
    assert!(
        libs.iter()
            .all(|c| *c == "qsort@libc.so.6" || *c == "memset@libc.so.6"),
        "{libs:?}"
    );
    // Without the option: no library function at all.
    let (data, _) = record(dir.path(), &exe, &plugin, &[], &[]);
    let t = call_tree(&data);
    assert!(
        t.edges.keys().all(|e| !e.1.contains('@')),
        "library calls recorded without --libcalls: {:?}",
        t.edges
            .keys()
            .filter(|e| e.1.contains('@'))
            .collect::<Vec<_>>()
    );
    t.expect(
        "default",
        "compare_ints",
        Some("sort_numbers"),
        printed_cmp(&out),
    );
}

#[test]
fn a_bad_pattern_is_one_line_naming_the_option() {
    let out = Command::new(common::fntrace_bin())
        .args(["record", "--libcalls=(", "--", "true"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--libcalls"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
}

#[test]
fn arguments_in_every_register_reach_the_library_function() {
    // Integer, floating-point, variadic (rax) and 256-bit vector
    // arguments, 150,000 library calls (many chunk switches on the fast
    // path): the traced program computes exactly what it computes
    // untraced, and every call is recorded under its caller.
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let lib = d.join("libvlib.so");
    tool(
        "gcc",
        &[
            "-O2",
            "-mavx",
            "-shared",
            "-fPIC",
            "-o",
            lib.to_str().unwrap(),
            &format!("{SRC}/vlib.c"),
        ],
    );
    // Each save width the trampolines have, whatever this CPU's widest
    // is (FNTRACE_VECTOR_WIDTH caps it): zmm (unset, on an AVX-512 CPU),
    // ymm, and xmm with a program that passes no 256-bit vector.
    for (name, flags, width) in [
        ("vec-fentry", &["-pg", "-mfentry"][..], None),
        (
            "vec-cyg-noplt",
            &["-finstrument-functions", "-fno-plt"][..],
            None,
        ),
        ("vec-fentry-avx", &["-pg", "-mfentry"][..], Some("avx")),
        (
            "vec-cyg-noplt-avx",
            &["-finstrument-functions", "-fno-plt"][..],
            Some("avx"),
        ),
        (
            "vec-fentry-sse",
            &["-pg", "-mfentry", "-DSSE_ONLY"][..],
            Some("sse"),
        ),
    ] {
        let exe = d.join(name);
        let mut a = vec!["-O2", "-mavx", "-g"];
        a.extend(flags);
        let libdir = format!("-L{}", d.display());
        let rpath = format!("-Wl,-rpath,{}", d.display());
        let src = format!("{SRC}/vecargs.c");
        a.extend(["-o", exe.to_str().unwrap(), &src, &libdir, "-lvlib", &rpath]);
        tool("gcc", &a);
        let plain = Command::new(&exe).output().unwrap();
        assert!(plain.status.success());
        let data = d.join(format!("{name}.data"));
        let mut cmd = common::record_cmd(&data, &["--libcalls=^(mix|add4|vsum)$"], &exe, &[]);
        if let Some(w) = width {
            cmd.env("FNTRACE_VECTOR_WIDTH", w);
        }
        let out = cmd.output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&plain.stdout),
            "{name}: a traced library call got different arguments"
        );
        let t = call_tree(&data);
        let funcs: &[&str] = if width == Some("sse") {
            &["mix", "vsum"]
        } else {
            &["mix", "add4", "vsum"]
        };
        for f in funcs {
            t.expect(name, &format!("{f}@libvlib.so"), Some("round_trip"), 50_000);
        }
    }
}

#[test]
fn cpp_exceptions_threads_and_futures_through_library_calls() {
    // tests/hooks/unwind.cc (exceptions through traced frames, rethrow,
    // futures, longjmp, signal handlers on alternate stacks) with every
    // library call recorded: same output as untraced, every call closed,
    // C++ library functions demangled. Built with gcc's fentry hooks and
    // with clang's XRay sleds: under XRay, a library call that tail-calls
    // a traced function (libstdc++'s `__once_proxy`, which `std::async`
    // reaches through `std::call_once`) once had its frame closed by that
    // function's entry, and the return through its slot aborted.
    let dir = tempfile::tempdir().unwrap();
    let builds: [(&str, &str, &[&str]); 2] = [
        ("fentry", "g++", &["-O2", "-g", "-pg", "-mfentry"]),
        (
            "xray",
            "clang++-14",
            &[
                "-O2",
                "-g",
                "-fxray-instrument",
                "-fxray-instruction-threshold=1",
            ],
        ),
    ];
    for (name, cc, flags) in builds {
        let exe = dir.path().join(format!("unwind-{name}"));
        let mut args = flags.to_vec();
        args.extend(["-o", exe.to_str().unwrap(), common::UNWIND_CC, "-lpthread"]);
        tool(cc, &args);
        let plain = Command::new(&exe).output().unwrap();
        assert!(plain.status.success(), "{name}");
        let data = dir.path().join("u.data");
        let out = common::record_cmd(&data, &["--libcalls"], &exe, &[])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(out.stdout, plain.stdout, "{name}");
        let t = call_tree(&data);
        assert_eq!(t.incomplete, 0, "{name}");
        t.expect(name, "pthread_create@libc.so.6", Some("main"), 4);
        assert!(
            t.edges
                .keys()
                .any(|e| e.1 == "__cxa_allocate_exception@libstdc++.so.6"),
            "{name}: exceptions are allocated through a library call"
        );
        // `std::thread::join()@libstdc++.so.6`, cut at its argument list.
        assert!(
            t.edges.keys().any(|e| e.1 == "std::thread::join"),
            "{name}: {:?}",
            t.edges.keys().map(|e| &e.1).collect::<Vec<_>>()
        );
        // The futures' functions run under `__once_proxy`, inside
        // `pthread_once`.
        assert!(
            t.edges
                .keys()
                .any(|e| e.0 == "pthread_once@libc.so.6" && e.1 == "__once_proxy@libstdc++.so.6"),
            "{name}: {:?}",
            t.edges
                .keys()
                .filter(|e| e.1.contains("once"))
                .collect::<Vec<_>>()
        );
    }
}
