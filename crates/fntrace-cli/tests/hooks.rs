//! Compiler-hook recording end to end: C, C++ and Rust programs built with
//! `-pg`, `-pg -mfentry`, `-finstrument-functions` and
//! `-Zinstrument-mcount`, run under `fntrace record` (which injects the
//! preload runtime). Each test checks that the program's output is the
//! same as without tracing and that the trace is complete and well nested.
//! The compilers are required: a missing gcc, g++ or rustc fails the test.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use fntrace_cli::analysis::{Call, Visitor, walk_thread};
use fntrace_cli::report::{SortKey, report_rows};
use fntrace_format::Trace;

mod common;

/// The "called" field gprof prints for `func` (which must have an entry).
fn gprof_called(bin: &Path, gmon: &Path, func: &str) -> String {
    common::gprof_called(bin, gmon, func).unwrap_or_else(|| panic!("gprof has no entry for {func}"))
}
use common::{fntrace_bin, preload, tool as compile};

const SRC: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/hooks");

/// Builds `src` (in tests/hooks) with `flags` into `dir/name`.
fn build(dir: &Path, src: &str, name: &str, flags: &[&str]) -> PathBuf {
    let out = dir.join(name);
    let src = format!("{SRC}/{src}");
    let o = out.to_str().unwrap();
    if src.ends_with(".rs") {
        let mut a = vec!["-O", "--edition", "2021"];
        a.extend(flags);
        a.extend(["-o", o, &src]);
        let st = Command::new("rustc")
            .args(&a)
            .env("RUSTC_BOOTSTRAP", "1")
            .status()
            .expect("rustc is required");
        assert!(st.success(), "rustc {a:?} failed");
    } else {
        let tool = if src.ends_with(".cc") { "g++" } else { "gcc" };
        let mut a = vec!["-O2", "-fno-optimize-sibling-calls", "-g"];
        a.extend(flags);
        a.extend(["-o", o, &src, "-lpthread", "-ldl"]);
        compile(tool, &a);
    }
    out
}

fn run_plain(bin: &Path, args: &[&str]) -> String {
    let out = Command::new(bin).args(args).output().unwrap();
    assert!(out.status.success(), "{} failed", bin.display());
    String::from_utf8(out.stdout).unwrap()
}

/// Runs under `fntrace record -o DIR/t.data`; returns stdout. A binary
/// whose name contains "hijack" (the `*-hijack` modes) runs with
/// `FNTRACE_KEEP_CALLS=1`: its `mcount`/`__fentry__` calls stay calls,
/// whose exits are seen by return-address hijacking, instead of being
/// rewritten into patchable sites. One whose name contains "now" runs
/// with `FNTRACE_CONVERT_AT_START=1`: its `call __fentry__`s are rewritten
/// before it runs, not on a runtime thread while it runs (where a short
/// program's calls mostly go through the hooks).
fn run_traced(dir: &Path, bin: &Path, args: &[&str]) -> String {
    let name = bin
        .file_name()
        .map(|n| n.to_string_lossy().to_string())
        .unwrap_or_default();
    let hijack = name.contains("hijack");
    let now = name.contains("now");
    let later = name.contains("later");
    let at_start = match (now, later) {
        (true, _) => "1",
        (_, true) => "0",
        _ => "",
    };
    let out = common::record_cmd(&dir.join("t.data"), &[], bin, args)
        .env("FNTRACE_KEEP_CALLS", if hijack { "1" } else { "" })
        .env("FNTRACE_CONVERT_AT_START", at_start)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "traced {} failed ({}): {}",
        bin.display(),
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The traces of forked children and exec'd images (`DIR/t.data.PID`),
/// not those of the run before, which `record` keeps as
/// `t.data.old[.PID]`.
fn child_traces(dir: &Path) -> Vec<PathBuf> {
    fntrace_cli::tracefile::child_traces(&dir.join("t.data"))
}

/// Calls per function name, and calls without a recorded exit.
fn summary(path: &Path) -> (HashMap<String, u64>, u64) {
    let t = Trace::open(path).unwrap();
    assert!(t.damage().is_empty(), "{:?}", t.damage());
    let calls = report_rows(&t, false, SortKey::Name)
        .into_iter()
        .map(|r| (r.function, r.calls))
        .collect();
    struct Nop;
    impl Visitor for Nop {
        fn call(&mut self, _c: &Call) {}
    }
    let incomplete = t
        .thread_ids()
        .into_iter()
        .map(|tid| walk_thread(&t, tid, &mut Nop).incomplete)
        .sum();
    (calls, incomplete)
}

fn calls(m: &HashMap<String, u64>, f: &str) -> u64 {
    m.get(f).copied().unwrap_or(0)
}

/// Every C mechanism: the compiler hooks and the patchable entries fntrace
/// switches on (the same guarantees hold for both).
// Tests that take a few of these pick them by index: keep the first six in
// this order.
const C_MODES: [(&str, &[&str]); 14] = [
    ("pg", &["-pg"]),
    ("pg-nopie", &["-pg", "-no-pie", "-fno-pie"]),
    // The `call mcount`s converted on a runtime thread while the program
    // runs, as a large program's are (see `run_traced`).
    ("pg-later", &["-pg"]),
    ("pg-nopie-later", &["-pg", "-no-pie", "-fno-pie"]),
    ("fentry", &["-pg", "-mfentry"]),
    // The `call __fentry__`s rewritten before the program runs (see
    // `run_traced`), in a PIE (6-byte calls through the GOT) and not (5-byte
    // calls to the PLT).
    ("fentry-now", &["-pg", "-mfentry"]),
    (
        "fentry-nopie-now",
        &["-pg", "-mfentry", "-no-pie", "-fno-pie"],
    ),
    ("cyg", &["-finstrument-functions"]),
    (
        "cyg-nopie",
        &["-finstrument-functions", "-no-pie", "-fno-pie"],
    ),
    ("pfe5", &["-fpatchable-function-entry=5"]),
    ("pfe10-8", &["-fpatchable-function-entry=10,8"]),
    (
        "nop-mcount",
        &[
            "-pg",
            "-mfentry",
            "-mnop-mcount",
            "-mrecord-mcount",
            "-no-pie",
            "-fno-pie",
        ],
    ),
    // `-pg` and `-pg -mfentry` with the calls kept (see `run_traced`):
    // exits by return-address hijacking (what -F/-N and counting mode
    // use).
    ("pg-hijack", &["-pg"]),
    ("fentry-hijack", &["-pg", "-mfentry"]),
];

#[test]
fn fib_call_count_for_each_gcc_mechanism() {
    let d = tempfile::tempdir().unwrap();
    let fib = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../examples/workloads/fib.c"
    );
    for (name, flags) in C_MODES {
        let mut a = vec!["-O2", "-fno-optimize-sibling-calls"];
        a.extend(flags);
        let bin = d.path().join(format!("fib-{name}"));
        a.extend(["-o", bin.to_str().unwrap(), fib]);
        compile("gcc", &a);
        assert_eq!(run_traced(d.path(), &bin, &["20"]), "6765\n");
        let (m, inc) = summary(&d.path().join("t.data"));
        assert_eq!(calls(&m, "fib"), 21891, "{name}: {m:?}");
        assert_eq!(inc, 0, "{name}");
        // The runtime injected without recording (no FNTRACE_OUTPUT):
        // the program runs as without it. (Once crashed for
        // -finstrument-functions: a thread that never attached looked
        // attached to "no session".)
        let out = Command::new(&bin)
            .arg("20")
            .env("LD_PRELOAD", preload())
            .env_remove("FNTRACE_OUTPUT")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{name} not recording: {:?}",
            out.status
        );
        assert_eq!(String::from_utf8_lossy(&out.stdout), "6765\n", "{name}");
    }
}

/// A large `-pg -mfentry` (and `-pg`) program starts while its `call
/// __fentry__`s (`call mcount`s) are still being rewritten on a runtime
/// thread: calls made before go
/// through the hooks (exits by hijacked returns), calls made after through
/// the call wrappers, and calls made during the change may trap on a
/// half-written site. The program recurses from its first instruction
/// until well after the change, and the trace must hold every call with
/// its caller and depth as a simulation of the program gives them (in a
/// PIE, 6-byte calls through the GOT, and not, 5-byte calls to the PLT).
/// The program sets its own `SIGTRAP` handler (which must see its own
/// `raise` and none of the runtime's traps), then blocks every signal (as
/// programs that take signals with `sigwait` do: a thread that hits a half-written site with
/// `SIGTRAP` blocked was killed, and a `SIGPROF` of the profiling timer
/// taken by a runtime thread killed the program at exit). It also forks
/// at once (`fork` waits for the change to end), and its child loads a
/// library (which takes the locks the change held) and records its own
/// calls.
#[test]
fn hook_calls_converted_while_the_program_runs_keep_the_tree() {
    const FILLER: usize = 20_000;
    const ROUNDS: u64 = 100;
    const CHILD_ROUNDS: u64 = 10;
    let d = tempfile::tempdir().unwrap();
    let mut src = String::from(
        "#include <stdio.h>\n#include <stdlib.h>\n#include <dlfcn.h>\n#include <unistd.h>\n#include <sys/wait.h>\n",
    );
    for i in 0..FILLER {
        src += &format!("__attribute__((noinline)) int f{i}(int x) {{ return x + {i}; }}\n");
    }
    src +=
        "#include <signal.h>\ntypedef int (*fp)(int);\nstatic fp volatile tab[2] = { f0, f97 };\n";
    src += r#"
static volatile int traps;
static void on_trap(int sig) { (void)sig; traps++; }
__attribute__((noinline)) long fib(int n) { if (n < 2) return tab[n](n) - (n ? 97 : 0); return fib(n - 1) + fib(n - 2); }
__attribute__((noinline)) long outer(long rounds) { long s = 0; for (long i = 0; i < rounds; i++) s += fib(20); return s; }
int main(int argc, char **argv) {
    struct sigaction sa = { 0 };
    sa.sa_handler = on_trap;
    sigaction(SIGTRAP, &sa, 0);
    raise(SIGTRAP);
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, 0);
    long rounds = atol(argv[1]), child_rounds = atol(argv[2]);
    pid_t pid = fork();
    if (pid == 0) {
        if (!dlopen("libm.so.6", RTLD_NOW)) return 3;
        printf("child %ld\n", outer(child_rounds));
        fflush(stdout);
        exit(0);
    }
    long s = outer(rounds);
    int st = 0;
    waitpid(pid, &st, 0);
    printf("parent %ld, child status %d, program traps %d\n", s, st, traps);
    return 0;
}
"#;
    let c = d.path().join("conv.c");
    std::fs::write(&c, src).unwrap();
    // Expected calls: fib(20)'s recursion, simulated.
    fn sim(
        n: u32,
        depth: usize,
        e: &mut HashMap<(String, String), u64>,
        dep: &mut HashMap<String, std::collections::BTreeSet<usize>>,
    ) {
        dep.entry("fib".into()).or_default().insert(depth);
        if n < 2 {
            let leaf = if n == 0 { "f0" } else { "f97" };
            *e.entry(("fib".into(), leaf.into())).or_default() += 1;
            dep.entry(leaf.into()).or_default().insert(depth + 1);
            return;
        }
        for m in [n - 1, n - 2] {
            *e.entry(("fib".into(), "fib".into())).or_default() += 1;
            sim(m, depth + 1, e, dep);
        }
    }
    let mut one = HashMap::new();
    let mut depths = HashMap::new();
    // main at depth 0, outer at 1, the outermost fib at 2.
    sim(20, 2, &mut one, &mut depths);
    let nopie = &["-no-pie", "-fno-pie"][..];
    for (name, extra) in [
        ("pie", &["-mfentry"][..]),
        ("nopie", &["-mfentry", nopie[0], nopie[1]][..]),
        ("mcount-pie", &[][..]),
        ("mcount-nopie", nopie),
    ] {
        let bin = d.path().join(format!("conv-{name}"));
        let mut a = vec!["-O2", "-fno-optimize-sibling-calls", "-pg"];
        a.extend(extra);
        a.extend(["-o", bin.to_str().unwrap(), c.to_str().unwrap(), "-ldl"]);
        compile("gcc", &a);
        for p in child_traces(d.path()) {
            std::fs::remove_file(p).unwrap();
        }
        let (r, cr) = (ROUNDS.to_string(), CHILD_ROUNDS.to_string());
        // Converted on the thread whatever the program's size.
        let out = common::record_cmd(&d.path().join("t.data"), &[], &bin, &[&r, &cr])
            .env("FNTRACE_STARTUP_STEPS", "1")
            .env("FNTRACE_CONVERT_AT_START", "0")
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{name}: {}: {err}", out.status);
        let plain = run_plain(&bin, &[&r, &cr]);
        let mut got: Vec<&str> = std::str::from_utf8(&out.stdout).unwrap().lines().collect();
        let mut want: Vec<&str> = plain.lines().collect();
        got.sort();
        want.sort();
        assert_eq!(got, want, "{name}");
        assert!(
            err.contains("hook calls converted on a runtime thread"),
            "{name}: the calls were not converted while the program ran: {err}"
        );
        // `up`: how many frames above `outer` the trace holds (the child's
        // trace starts inside `main`, whose frame it does not record).
        let check = |what: &str, t: &common::CallTree, rounds: u64, up: usize| {
            assert_eq!(t.incomplete, 0, "{what}");
            for ((caller, callee), n) in &one {
                let got = t.edges.get(&(caller.clone(), callee.clone())).copied();
                assert_eq!(got, Some(n * rounds), "{what}: {caller} -> {callee}");
            }
            assert_eq!(
                t.edges.get(&("outer".into(), "fib".into())).copied(),
                Some(rounds),
                "{what}"
            );
            let callees: Vec<&(String, String)> = t
                .edges
                .keys()
                .filter(|(p, c)| {
                    p == "fib" || c == "fib" || c.starts_with('f') && c[1..].parse::<u32>().is_ok()
                })
                .collect();
            assert_eq!(callees.len(), one.len() + 1, "{what}: {:?}", t.edges);
            for (f, want) in &depths {
                let got: std::collections::BTreeSet<usize> =
                    t.depths[f].iter().map(|&(_, d)| d + 1 - up).collect();
                assert_eq!(&got, want, "{what}: depths of {f}");
            }
        };
        let t = common::call_tree(&d.path().join("t.data"));
        assert_eq!(
            t.edges.get(&("".into(), "main".into())).copied(),
            Some(1),
            "{name}: {:?}",
            t.edges
        );
        assert_eq!(
            t.edges.get(&("main".into(), "outer".into())).copied(),
            Some(1),
            "{name}"
        );
        check(&format!("{name} parent"), &t, ROUNDS, 1);
        let child = child_traces(d.path());
        assert_eq!(child.len(), 1, "{name}: {child:?}");
        let t = common::call_tree(&child[0]);
        check(&format!("{name} child"), &t, CHILD_ROUNDS, 0);
    }
}

#[test]
fn longjmp_keeps_the_program_and_the_trace_right() {
    let d = tempfile::tempdir().unwrap();
    for (name, flags) in C_MODES {
        let bin = build(d.path(), "longjmp.c", &format!("lj-{name}"), flags);
        let plain = run_plain(&bin, &[]);
        assert_eq!(run_traced(d.path(), &bin, &[]), plain, "{name}");
        let (m, inc) = summary(&d.path().join("t.data"));
        assert_eq!(calls(&m, "work"), 100, "{name}: {m:?}");
        assert_eq!(calls(&m, "deep"), 600, "{name}: {m:?}");
        assert_eq!(calls(&m, "leaf"), 100, "{name}: {m:?}");
        assert_eq!(inc, 0, "{name}");
    }
}

#[test]
fn cpp_exceptions_through_instrumented_frames() {
    let d = tempfile::tempdir().unwrap();
    for (name, flags) in C_MODES {
        let bin = build(d.path(), "exception.cc", &format!("ex-{name}"), flags);
        let plain = run_plain(&bin, &[]);
        assert_eq!(plain, "10000 400\n");
        assert_eq!(run_traced(d.path(), &bin, &[]), plain, "{name}");
        let (m, inc) = summary(&d.path().join("t.data"));
        assert_eq!(calls(&m, "thrower(int)"), 400, "{name}: {m:?}");
        assert_eq!(calls(&m, "catcher(int)"), 100, "{name}: {m:?}");
        assert_eq!(calls(&m, "after(int)"), 100, "{name}: {m:?}");
        assert_eq!(inc, 0, "{name}");
    }
}

/// Calls after `main` returns (an `atexit` handler, an ELF destructor)
/// are recorded like the rest: the main thread's stream stays open through
/// `exit` until the session ends. (Its TLS destructor, which glibc runs
/// first, used to close it, and these calls were lost without a word.)
#[test]
fn calls_after_main_are_recorded() {
    let d = tempfile::tempdir().unwrap();
    for (name, flags) in C_MODES {
        let bin = build(d.path(), "atexit.c", &format!("ax-{name}"), flags);
        assert_eq!(
            run_traced(d.path(), &bin, &[]),
            "main ran\natexit ran\ndtor ran\n",
            "{name}"
        );
        let t = common::call_tree(&d.path().join("t.data"));
        for top in ["ctor", "main", "at_exit_fn", "dtor"] {
            t.expect(name, top, None, 1);
            assert_eq!(
                t.edges.get(&(String::new(), top.to_string())),
                Some(&1),
                "{name}: {top}"
            );
        }
        let mut helpers: Vec<_> = t
            .edges
            .iter()
            .filter(|((_, c), _)| c == "helper")
            .map(|((p, _), n)| (p.as_str(), *n))
            .collect();
        helpers.sort();
        assert_eq!(
            helpers,
            [("at_exit_fn", 1), ("ctor", 1), ("dtor", 1), ("main", 1)],
            "{name}"
        );
        assert_eq!(t.incomplete, 0, "{name}");
    }
}

/// What the pieces of one function's calls looked like in a trace of
/// `coro.c`.
#[derive(Default, Debug)]
struct Pieces {
    /// Pieces (a call suspended by a context switch has several).
    n: u64,
    /// Pieces that continue a suspended call.
    continued: u64,
    /// Pieces that ended in a context switch.
    suspended: u64,
    /// The function of each piece's parent ("" at the top).
    parents: std::collections::BTreeSet<String>,
    /// Threads it ran on.
    threads: std::collections::BTreeSet<u32>,
}

/// Every piece of every call in the trace at `path`, per function.
fn pieces(path: &Path) -> HashMap<String, Pieces> {
    struct V<'a, 'm> {
        sym: fntrace_cli::symbols::Symbolizer<'m>,
        tid: u32,
        open: Vec<String>,
        out: &'a mut HashMap<String, Pieces>,
    }
    impl Visitor for V<'_, '_> {
        fn enter(&mut self, func: u64, depth: usize, _tsc: u64) {
            self.open.truncate(depth);
            let name = self.sym.name(func);
            self.open
                .push(name.split('(').next().unwrap_or(name).to_string());
        }
        fn call(&mut self, c: &Call) {
            let name = self.sym.name(c.func);
            let name = name.split('(').next().unwrap_or(name).to_string();
            let parent = match c.depth {
                0 => String::new(),
                d => self.open.get(d - 1).cloned().unwrap_or_default(),
            };
            let p = self.out.entry(name).or_default();
            p.n += 1;
            p.continued += u64::from(c.continued);
            p.suspended += u64::from(c.suspended);
            p.parents.insert(parent);
            p.threads.insert(self.tid);
            self.open.truncate(c.depth);
        }
    }
    let t = Trace::open(path).unwrap();
    assert!(t.damage().is_empty(), "{:?}", t.damage());
    let mut out = HashMap::new();
    for tid in t.thread_ids() {
        let mut v = V {
            sym: fntrace_cli::symbols::Symbolizer::new(t.metadata()),
            tid,
            open: vec![],
            out: &mut out,
        };
        walk_thread(&t, tid, &mut v);
    }
    out
}

/// `ucontext` coroutines (`tests/hooks/coro.c`): a generator, a coroutine
/// suspended 40 calls deep, one ending with `setcontext`, one suspended on
/// the main thread and resumed on another, one never resumed, and a retry
/// loop that `setcontext`s back to a `getcontext` up its stack. The program
/// runs as without tracing; `report` counts every function as the program
/// counted it (a call suspended and resumed is one call); every piece of a
/// call sits under its caller's piece (a coroutine's outermost function at
/// the top); each suspension and resumption is where the program switched.
/// Once the first return in a switched-back context aborted the program
/// ("no shadow frame for return slot") on every mechanism that takes over
/// return addresses, and explicit-exit traces were nested wrongly.
#[test]
fn ucontext_coroutines_keep_the_program_and_the_tree() {
    let d = tempfile::tempdir().unwrap();
    let callers: &[(&str, &[&str])] = &[
        ("main", &[""]),
        ("run_gen", &["main"]),
        ("run_deep", &["main"]),
        ("run_fin", &["main"]),
        ("run_roam", &["main"]),
        ("run_stuck", &["main"]),
        ("next_value", &["run_gen"]),
        ("gen_body", &[""]),
        ("produce", &["gen_body"]),
        ("yield_value", &["produce"]),
        ("deep_body", &[""]),
        ("dive", &["deep_body", "dive"]),
        ("fin_body", &[""]),
        ("finish", &["fin_body"]),
        ("roam_body", &[""]),
        ("hop", &["roam_body"]),
        ("carrier", &[""]),
        ("stuck_body", &[""]),
        ("stuck", &["stuck_body"]),
        ("run_retry", &["main"]),
        ("fail_deep", &["run_retry"]),
        ("fail_deeper", &["fail_deep"]),
    ];
    // (function, pieces that continue a suspended call, pieces that end in
    // a switch): a generator step is suspended once and resumed once; the
    // deep coroutine twice with its 41 dive frames and deep_body; hop
    // three times, resumed on the other thread; finish by setcontext and
    // stuck for good, never resumed; the callers of swapcontext on the
    // main thread's own stack each time.
    let switches: &[(&str, u64, u64)] = &[
        ("yield_value", 50, 50),
        ("produce", 50, 50),
        ("gen_body", 50, 50),
        ("next_value", 50, 50),
        ("dive", 82, 82),
        ("deep_body", 2, 2),
        ("hop", 3, 3),
        ("roam_body", 3, 3),
        ("finish", 0, 1),
        ("fin_body", 0, 1),
        ("stuck", 0, 1),
        ("stuck_body", 0, 1),
        // Suspended at each of the main thread's 57 switches, by
        // run_gen at 51 (the last runs the generator to its end); the
        // retry loop's setcontext is a jump on the same stack, not a
        // switch.
        ("main", 57, 57),
        ("run_retry", 0, 0),
        ("fail_deep", 0, 0),
        ("fail_deeper", 0, 0),
        ("run_gen", 51, 51),
    ];
    // Every gcc mechanism, and clang's XRay.
    let xray = d.path().join("co-xray");
    compile(
        "clang-14",
        &[
            "-O2",
            // Tail calls stay calls (XRay ends the caller at a tail call).
            "-fno-optimize-sibling-calls",
            "-g",
            "-fxray-instrument",
            "-fxray-instruction-threshold=1",
            "-o",
            xray.to_str().unwrap(),
            &format!("{SRC}/coro.c"),
            "-lpthread",
        ],
    );
    let builds = C_MODES
        .iter()
        .map(|(name, flags)| {
            let bin = build(d.path(), "coro.c", &format!("co-{name}"), flags);
            (*name, bin)
        })
        .chain([("xray", xray)]);
    for (name, bin) in builds {
        let plain = run_plain(&bin, &[]);
        assert_eq!(run_traced(d.path(), &bin, &[]), plain, "{name}");
        let data = d.path().join("t.data");
        let (m, inc) = summary(&data);
        assert_eq!(inc, 0, "{name}");
        for l in plain.lines().skip(1) {
            let (f, n) = l.split_once(' ').unwrap();
            assert_eq!(
                calls(&m, f),
                n.parse::<u64>().unwrap(),
                "{name}: {f}: {m:?}"
            );
        }
        let p = pieces(&data);
        for (f, want) in callers {
            let got = &p[*f];
            let want: std::collections::BTreeSet<String> =
                want.iter().map(|s| s.to_string()).collect();
            assert!(
                got.parents.is_subset(&want),
                "{name}: {f}'s pieces under {:?}, expected under {want:?}",
                got.parents
            );
        }
        for &(f, continued, suspended) in switches {
            let got = &p[f];
            assert_eq!(
                (got.continued, got.suspended),
                (continued, suspended),
                "{name}: {f}: {got:?}"
            );
        }
        // graph counts a suspended call once too.
        let g = Command::new(fntrace_bin())
            .args(["graph", "gen_body"])
            .arg(&data)
            .output()
            .unwrap();
        let g = String::from_utf8_lossy(&g.stdout);
        for (f, n) in [("gen_body", 1), ("+-produce", 50), ("+-yield_value", 50)] {
            // "  TIME us  CALLS  FUNCTION"
            assert!(
                g.lines()
                    .any(|l| l.split_whitespace().rev().take(2).eq([f, &n.to_string()])),
                "{name}: graph: {f} {n}:\n{g}"
            );
        }
        // hop's resumed pieces ran on the carrier's thread.
        let main_tid = p["main"].threads.iter().next().copied().unwrap();
        assert_eq!(p["hop"].threads.len(), 2, "{name}: {:?}", p["hop"]);
        assert!(
            p["carrier"].threads.iter().all(|&t| t != main_tid),
            "{name}"
        );
    }
}

/// Coroutines switched by the program's own assembly (`tests/hooks/fctx.c`,
/// as Boost.Context does), which the runtime does not see: driven by the
/// main thread with the coroutine's stack below the thread's stack, and by
/// another thread with the coroutine's stack above it. Switching back
/// makes the coroutine's frames look unwound; when the coroutine runs
/// again, their returns through the exit trampoline find their return
/// addresses among the frames popped as unwound. The program runs as
/// without tracing (it aborted with "no shadow frame for return slot" on
/// every mechanism that takes over return addresses) and every call is
/// counted once; the nesting across switches is not checked (the frames'
/// exits are recorded when they look unwound).
#[test]
fn coroutines_switched_by_their_own_assembly_keep_the_program() {
    let d = tempfile::tempdir().unwrap();
    for (name, flags) in C_MODES {
        let bin = build(d.path(), "fctx.c", &format!("fc-{name}"), flags);
        let plain = run_plain(&bin, &[]);
        assert_eq!(plain, "main 590\nthread 590\n");
        assert_eq!(run_traced(d.path(), &bin, &[]), plain, "{name}");
        let (m, _) = summary(&d.path().join("t.data"));
        for (f, n) in [
            ("drive", 2),
            ("next_value", 40),
            ("yield_value", 40),
            ("produce", 40),
            ("gen_body", 2),
        ] {
            assert_eq!(calls(&m, f), n, "{name}: {f}: {m:?}");
        }
    }
}

/// Threads that end (`tests/hooks/threadexit.c`, 600 threads one after
/// another): the calls a pthread key destructor makes as the thread ends
/// are recorded (the thread's stream was closed before glibc ran them),
/// and each thread gives its shadow stack back (4 MB of address space and
/// a page table page stayed behind per thread ever started: a program
/// that starts thousands of threads over its life grew by gigabytes and
/// its forks slowed down 70 times).
#[test]
fn threads_that_end_keep_their_last_calls_and_give_memory_back() {
    let d = tempfile::tempdir().unwrap();
    for (name, flags) in [C_MODES[0], C_MODES[4], C_MODES[7], C_MODES[9]] {
        let bin = build(d.path(), "threadexit.c", &format!("te-{name}"), flags);
        let out = common::record_cmd(&d.path().join("t.data"), &[], &bin, &["600"])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{name}: {err}");
        let text = String::from_utf8_lossy(&out.stdout);
        let (m, inc) = summary(&d.path().join("t.data"));
        assert_eq!(inc, 0, "{name}");
        for l in text.lines() {
            let (f, n) = l.split_once(' ').unwrap();
            assert_eq!(
                calls(&m, f),
                n.parse::<u64>().unwrap(),
                "{name}: {f}: {m:?}"
            );
        }
        let grew: i64 = err
            .lines()
            .find_map(|l| l.strip_prefix("grew "))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("{name}: {err}"));
        assert!(
            grew < 64 * 1024,
            "{name}: the address space grew by {grew} kB over 500 threads"
        );
    }
}

/// A signal handler that leaves with `siglongjmp` while the recorder was
/// writing an event (its `busy` flag set) gives the thread back to the
/// recorder: every later call is recorded, in the right place, and the
/// calls the handler made meanwhile are counted as dropped, not lost
/// silently. Once the thread stopped recording for good at the first such
/// jump (and a jump out of the file's growth deadlocked on its lock).
#[test]
fn siglongjmp_out_of_an_interrupted_recorder() {
    let d = tempfile::tempdir().unwrap();
    for (name, flags) in C_MODES {
        let bin = build(d.path(), "sigjump.c", &format!("sj-{name}"), flags);
        assert_eq!(
            run_traced(d.path(), &bin, &[]),
            "jumps=20 after=1\n",
            "{name}"
        );
        let t = common::call_tree(&d.path().join("t.data"));
        t.expect(name, "sigjump_loop", Some("main"), 1);
        t.expect(name, "after", Some("main"), 1);
        // A signal that lands between a function's first instruction and
        // the recording of its entry abandons a call that was never
        // recorded: `busy` and `busy_inner` may miss an entry or two, and
        // what they called then sits one level up. Nothing else moves.
        let callers = |callee: &str| -> Vec<(&str, u64)> {
            let mut v: Vec<_> = t
                .edges
                .iter()
                .filter(|((_, c), _)| c == callee)
                .map(|((p, _), n)| (p.as_str(), *n))
                .collect();
            v.sort();
            v
        };
        let busy = callers("busy");
        assert!(
            busy.len() == 1 && busy[0].0 == "sigjump_loop" && busy[0].1 >= 15,
            "{name}: busy under {busy:?}"
        );
        let inner = callers("busy_inner");
        assert!(
            inner
                .iter()
                .all(|(p, _)| ["busy", "sigjump_loop"].contains(p))
                && inner.iter().map(|c| c.1).sum::<u64>() >= 15,
            "{name}: busy_inner under {inner:?}"
        );
        let leaf = callers("leaf");
        assert!(
            leaf.iter()
                .all(|(p, _)| ["busy_inner", "busy", "handler", "after"].contains(p)),
            "{name}: leaf under {leaf:?}"
        );
        assert_eq!(t.incomplete, 0, "{name}");
    }
}

/// GNU C nested functions (a static chain in r10, saved by gcc around
/// the hook) keep their results and their place in the tree on every
/// mechanism, also with `-fcf-protection` (where gcc puts the push before
/// the `endbr64`) and in counting mode.
#[test]
fn nested_functions_keep_their_static_chain() {
    let d = tempfile::tempdir().unwrap();
    let cet: [(&str, &[&str]); 3] = [
        ("fentry-cet", &["-pg", "-mfentry", "-fcf-protection"]),
        ("fentry-hijack-cet", &["-pg", "-mfentry", "-fcf-protection"]),
        (
            "nop-mcount-cet",
            &[
                "-pg",
                "-mfentry",
                "-mnop-mcount",
                "-mrecord-mcount",
                "-no-pie",
                "-fno-pie",
                "-fcf-protection",
            ],
        ),
    ];
    for (name, flags) in C_MODES.iter().chain(cet.iter()) {
        let mut f = flags.to_vec();
        f.push("-Wl,-z,execstack");
        let bin = build(d.path(), "nested.c", &format!("nest-{name}"), &f);
        assert_eq!(run_plain(&bin, &[]), "780\n");
        assert_eq!(run_traced(d.path(), &bin, &[]), "780\n", "{name}");
        let t = common::call_tree(&d.path().join("t.data"));
        t.expect(name, "use_nested", Some("main"), 5);
        t.expect(name, "apply", Some("use_nested"), 5);
        // add.0 and leaf sit at two depths (called directly and through
        // apply): every (caller, callee) pair is checked instead.
        let mut edges: Vec<_> = t
            .edges
            .iter()
            .filter(|((_, c), _)| c == "add.0" || c == "leaf")
            .map(|((p, c), n)| (p.as_str(), c.as_str(), *n))
            .collect();
        edges.sort();
        assert_eq!(
            edges,
            [
                ("add.0", "leaf", 35),
                ("apply", "add.0", 20),
                ("use_nested", "add.0", 15)
            ],
            "{name}"
        );
        assert_eq!(t.incomplete, 0, "{name}");
        if name.starts_with("fentry") && !name.contains("hijack") {
            // Counting mode takes the hook's other path.
            let out = common::record_cmd(&d.path().join("c.data"), &["--count"], &bin, &[])
                .output()
                .unwrap();
            assert!(out.status.success(), "{name} --count: {out:?}");
            assert_eq!(
                String::from_utf8_lossy(&out.stdout),
                "780\n",
                "{name} --count"
            );
        }
    }
}

#[test]
fn unwound_frames_are_closed_on_every_mechanism() {
    let d = tempfile::tempdir().unwrap();
    for (name, flags) in C_MODES {
        let bin = build(d.path(), "unwind.cc", &format!("uw-{name}"), flags);
        let plain = run_plain(&bin, &[]);
        assert_eq!(run_traced(d.path(), &bin, &[]), plain, "{name}");
        common::check_unwind_tree(name, &d.path().join("t.data"));
    }
}

#[test]
fn eight_threads_fork_exec_and_deep_recursion() {
    let d = tempfile::tempdir().unwrap();
    for (name, flags) in C_MODES {
        let bin = build(d.path(), "threads_fork.c", &format!("tf-{name}"), flags);
        // 8 threads, each a complete stream.
        assert_eq!(run_traced(d.path(), &bin, &["threads"]), "4880\n");
        let t = Trace::open(d.path().join("t.data")).unwrap();
        let mut workers = 0;
        for tid in t.thread_ids() {
            struct Count(u64, u64);
            impl Visitor for Count {
                fn call(&mut self, c: &Call) {
                    self.0 += 1;
                    self.1 = self.1.max(c.depth as u64);
                }
            }
            let mut c = Count(0, 0);
            let s = walk_thread(&t, tid, &mut c);
            assert_eq!(s.incomplete, 0, "{name}");
            if c.0 == 1974 {
                workers += 1;
                assert_eq!(c.1, 15, "{name}: depth");
            }
        }
        assert_eq!(workers, 8, "{name}");
        // fork: the child writes t.data.PID.
        for p in child_traces(d.path()) {
            std::fs::remove_file(p).unwrap();
        }
        let out = run_traced(d.path(), &bin, &["fork"]);
        assert_eq!(out, run_plain(&bin, &["fork"]), "{name}");
        let (m, inc) = summary(&d.path().join("t.data"));
        assert_eq!(calls(&m, "fib"), 465, "{name}: parent {m:?}");
        assert_eq!(inc, 0);
        let child = child_traces(d.path());
        assert_eq!(child.len(), 1, "{name}: child traces {child:?}");
        let (m, _) = summary(&child[0]);
        assert_eq!(calls(&m, "in_child"), 1, "{name}: child {m:?}");
        assert_eq!(calls(&m, "fib"), 177, "{name}: child {m:?}");
        std::fs::remove_file(&child[0]).unwrap();
        // exec: the new image records into t.data.PID.
        let out = run_traced(d.path(), &bin, &["exec"]);
        assert_eq!(out, "before exec 5\nafter exec 21\n", "{name}");
        let (m, _) = summary(&d.path().join("t.data"));
        assert_eq!(calls(&m, "fib"), 15, "{name}: before exec {m:?}");
        let after = child_traces(d.path());
        assert_eq!(after.len(), 1, "{name}: {after:?}");
        let (m, _) = summary(&after[0]);
        assert_eq!(calls(&m, "fib"), 67, "{name}: after exec {m:?}");
        std::fs::remove_file(&after[0]).unwrap();
        // Recursion 100,000 deep is recorded whole; 300,000 deep is
        // recorded as far as the shadow stack goes, without crashing.
        assert_eq!(run_traced(d.path(), &bin, &["deep"]), "100000\n300000\n");
        let t = Trace::open(d.path().join("t.data")).unwrap();
        let rows = report_rows(&t, true, SortKey::Name);
        let rec: Vec<_> = rows.iter().filter(|r| r.function == "rec").collect();
        assert_eq!(rec.len(), 2, "{name}");
        let counts: Vec<u64> = rec.iter().map(|r| r.calls).collect();
        assert!(counts.contains(&100_001), "{name}: {counts:?}");
        let big = counts.iter().copied().find(|&c| c != 100_001).unwrap();
        assert!(big > 100_000 && big < 300_001, "{name}: {big}");
    }
}

/// A `-pg` program's profiling timer survives `exec`, and the new image's
/// `SIGPROF` handler comes only with glibc's start-up code, after the
/// runtime's. The program here runs the timer at 1 ms before it `exec`s
/// itself; every traced run must survive (before the fix, about 6 in 100
/// runs died of `SIGPROF`; uninstrumented, none).
#[test]
fn exec_with_a_running_profiling_timer() {
    let d = tempfile::tempdir().unwrap();
    for (name, flags) in C_MODES.iter().filter(|(_, f)| f.contains(&"-pg")) {
        let bin = build(d.path(), "threads_fork.c", &format!("tp-{name}"), flags);
        for _ in 0..25 {
            let out = run_traced(d.path(), &bin, &["prof"]);
            assert_eq!(out, "before exec 5\nafter exec 21\n", "{name}");
            let after = child_traces(d.path());
            assert_eq!(after.len(), 1, "{name}: {after:?}");
            let (m, _) = summary(&after[0]);
            assert_eq!(calls(&m, "fib"), 67, "{name}: after exec {m:?}");
            std::fs::remove_file(&after[0]).unwrap();
        }
    }
}

/// The runtime ignores `SIGPROF` across an `exec` while the profiling
/// timer runs (so the new image's start-up cannot die of a tick), but
/// only for an image that installs the handler again: a program that is
/// not `-pg`, `exec`'d with the timer armed, still dies of `SIGPROF` as it
/// does without fntrace, and a `-pg` one still survives.
#[test]
fn exec_under_the_profiling_timer_keeps_the_programs_fate() {
    use std::os::unix::process::ExitStatusExt;
    let d = tempfile::tempdir().unwrap();
    let launcher = build(d.path(), "prof_exec.c", "pe-pg", &["-pg"]);
    let plain = build(d.path(), "prof_exec.c", "pe-plain", &[]);
    let pg = build(d.path(), "prof_exec.c", "pe-pg2", &["-pg"]);
    for (target, dies) in [(&plain, true), (&pg, false)] {
        let bare = Command::new(&launcher).arg(target).output().unwrap();
        let traced = common::record_cmd(&d.path().join("t.data"), &[], &launcher, &[])
            .arg(target)
            .output()
            .unwrap();
        for (how, out) in [("bare", &bare), ("traced", &traced)] {
            if dies {
                assert_eq!(
                    out.status.signal(),
                    Some(libc::SIGPROF),
                    "{how} {}: {}",
                    target.display(),
                    out.status
                );
            } else {
                assert!(
                    out.status.success(),
                    "{how} {}: {}",
                    target.display(),
                    out.status
                );
                assert_eq!(String::from_utf8_lossy(&out.stdout), "spun\n");
            }
        }
    }
}

#[test]
fn backtraces_and_signal_handlers_inside_traced_code() {
    let d = tempfile::tempdir().unwrap();
    for (name, flags) in C_MODES {
        let mut f = flags.to_vec();
        f.push("-rdynamic");
        let bin = build(d.path(), "backtrace_signal.c", &format!("bt-{name}"), &f);
        let plain = run_plain(&bin, &[]);
        assert!(
            plain.starts_with("show\nlevel\nlevel\nlevel\nlevel\nmain\n"),
            "{plain}"
        );
        assert_eq!(run_traced(d.path(), &bin, &[]), plain, "{name}");
        let (m, inc) = summary(&d.path().join("t.data"));
        assert_eq!(calls(&m, "in_handler"), 177, "{name}: {m:?}");
        assert_eq!(calls(&m, "level"), 4, "{name}: {m:?}");
        assert_eq!(inc, 0, "{name}");
    }
}

#[test]
fn instrumented_shared_libraries_dlopened_and_linked() {
    let d = tempfile::tempdir().unwrap();
    for (name, flags) in [C_MODES[0], C_MODES[4], C_MODES[5]] {
        let mut f = flags.to_vec();
        f.extend(["-shared", "-fPIC"]);
        let lib = build(d.path(), "dl_plugin.c", &format!("plugin-{name}.so"), &f);
        let bin = build(d.path(), "dl_main.c", &format!("dl-{name}"), flags);
        let l = lib.to_str().unwrap();
        assert_eq!(run_traced(d.path(), &bin, &[l]), run_plain(&bin, &[l]));
        let (m, inc) = summary(&d.path().join("t.data"));
        assert_eq!(calls(&m, "plugin_helper"), 10, "{name}: {m:?}");
        assert_eq!(calls(&m, "local_fn"), 10, "{name}: {m:?}");
        assert_eq!(inc, 0);
        // The same library linked at start (DT_NEEDED).
        let rpath = format!("-Wl,-rpath,{}", d.path().display());
        let bin = d.path().join(format!("linked-{name}"));
        let src = format!("{SRC}/dl_linked.c");
        let mut a = vec!["-O2", "-fno-optimize-sibling-calls"];
        a.extend(flags);
        a.extend(["-o", bin.to_str().unwrap(), &src, l, &rpath]);
        compile("gcc", &a);
        assert_eq!(run_traced(d.path(), &bin, &[]), run_plain(&bin, &[]));
        let (m, inc) = summary(&d.path().join("t.data"));
        assert_eq!(calls(&m, "plugin_helper"), 10, "{name} linked: {m:?}");
        assert_eq!(calls(&m, "plugin_work"), 10, "{name} linked: {m:?}");
        assert_eq!(inc, 0);
    }
}

#[test]
fn rust_mcount_and_patchable_caught_panics_and_backtraces() {
    let d = tempfile::tempdir().unwrap();
    for (name, flag) in [
        ("mcount", "-Zinstrument-mcount"),
        ("patchable", "-Zpatchable-function-entry=10,8"),
    ] {
        let bin = build(
            d.path(),
            "panic.rs",
            &format!("panic-{name}"),
            &[flag, "-g"],
        );
        let plain = run_plain(&bin, &[]);
        assert!(plain.starts_with("2500\n"), "{plain}");
        assert!(
            plain.contains("panic::frames,panic::outer,panic::main"),
            "{plain}"
        );
        assert_eq!(run_traced(d.path(), &bin, &[]), plain, "{name}");
        let (m, inc) = summary(&d.path().join("t.data"));
        assert_eq!(calls(&m, "panic::boom"), 200, "{name}: {m:?}");
        assert_eq!(calls(&m, "panic::guarded"), 50, "{name}: {m:?}");
        assert_eq!(calls(&m, "panic::after"), 50, "{name}: {m:?}");
        assert_eq!(inc, 0, "{name}");
    }
}

/// A Rust `-Zinstrument-mcount` program whose `call mcount`s are
/// converted while it runs: rustc saves the callee-saved registers and
/// moves arguments into them before the call, so the stub a converted
/// call jumps to must reload them before the prologue runs again. Its
/// output depends on every register surviving every call; the trace must
/// hold each call under its caller, as many as the program counted.
#[test]
fn rust_mcount_calls_converted_while_the_program_runs_keep_registers_and_tree() {
    let d = tempfile::tempdir().unwrap();
    let bin = build(d.path(), "regs.rs", "regs", &["-Zinstrument-mcount"]);
    let plain = run_plain(&bin, &["300"]);
    // A small program's `call mcount`s are converted at start unless
    // asked otherwise.
    let out = common::record_cmd(&d.path().join("t.data"), &[], &bin, &["300"])
        .env("FNTRACE_STARTUP_STEPS", "1")
        .env("FNTRACE_CONVERT_AT_START", "0")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), plain);
    assert!(
        err.contains("hook calls converted on a runtime thread") && err.contains(" 0 left to"),
        "{err}"
    );
    let v: Vec<u64> = plain
        .split_whitespace()
        .map(|w| w.parse().unwrap())
        .collect();
    let (walks, leaves) = (v[1], v[2]);
    let t = common::call_tree(&d.path().join("t.data"));
    assert_eq!(t.incomplete, 0);
    let edge = |p: &str, c: &str| t.edges.get(&(p.into(), c.into())).copied();
    assert_eq!(edge("regs::main", "regs::round"), Some(300));
    assert_eq!(edge("regs::round", "regs::walk"), Some(300));
    assert_eq!(edge("regs::walk", "regs::walk"), Some(walks - 300));
    assert_eq!(edge("regs::walk", "regs::leaf"), Some(leaves));
}

/// Rust panics caught by `catch_unwind` three traced frames up, on four
/// threads, with each Rust mechanism: the frames the panic leaves are
/// closed (checked for callers, depths and counts).
#[test]
fn rust_panics_close_the_frames_they_unwind() {
    let d = tempfile::tempdir().unwrap();
    for (name, flag) in [
        ("mcount", "-Zinstrument-mcount"),
        ("patchable", "-Zpatchable-function-entry=10,8"),
        ("xray", "-Zinstrument-xray=always"),
    ] {
        let bin = build(d.path(), "unwind.rs", &format!("uwrs-{name}"), &[flag]);
        let plain = run_plain(&bin, &[]);
        assert_eq!(plain, "2020\n");
        assert_eq!(run_traced(d.path(), &bin, &[]), plain, "{name}");
        let t = common::call_tree(&d.path().join("t.data"));
        let n = 4 * 25;
        t.expect(name, "unwind::guarded", Some("unwind::worker"), n);
        t.expect(name, "unwind::after", Some("unwind::worker"), n);
        t.expect(name, "unwind::noted", Some("unwind::guarded"), n);
        t.expect(name, "unwind::pa", None, n);
        t.expect(name, "unwind::pb", Some("unwind::pa"), n);
        t.expect(name, "unwind::pc", Some("unwind::pb"), n);
        assert_eq!(t.incomplete, 0, "{name}");
    }
}

#[test]
fn uninstrumented_program_gets_build_advice() {
    let d = tempfile::tempdir().unwrap();
    let bin = build(d.path(), "longjmp.c", "plain", &[]);
    let out = Command::new(fntrace_bin())
        .args(["record", "-o"])
        .arg(d.path().join("t.data"))
        .arg("--")
        .arg(&bin)
        .env("FNTRACE_PRELOAD", preload())
        .output()
        .unwrap();
    assert!(out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("has no instrumentation"), "{err}");
    assert!(err.contains("-finstrument-functions"), "{err}");
}

/// gprof's flat profile of our gmon.out gives every function the self
/// time `report` gives it: each function's time is in histogram bins that
/// lie inside it as gprof sees it (2-byte units; at `-O1` functions start
/// at any byte, and a bin straddling two functions was once split between
/// them, and an odd start put half a bin's time on the neighbour), and a
/// function whose time does not fit 16-bit counts at microseconds (800 ms
/// in a 40-byte loop) gets a coarser rate instead of being cut (it was
/// cut to 65 ms per 4-byte bin, without a word).
#[test]
fn gmon_self_times_are_the_reports_in_gprof() {
    let d = tempfile::tempdir().unwrap();
    for (name, flags) in [
        ("cyg", &["-finstrument-functions"][..]),
        ("pg", &["-pg"][..]),
        ("pfe5", &["-fpatchable-function-entry=5"][..]),
    ] {
        let bin = d.path().join(format!("st-{name}"));
        let mut a = vec!["-O1", "-g"];
        a.extend(flags);
        let src = format!("{SRC}/selftime.c");
        a.extend(["-o", bin.to_str().unwrap(), &src]);
        compile("gcc", &a);
        assert_eq!(run_traced(d.path(), &bin, &[]), "1\n", "{name}");
        let data = d.path().join("t.data");
        let t = Trace::open(&data).unwrap();
        let want: HashMap<String, u64> = report_rows(&t, false, SortKey::Name)
            .into_iter()
            .map(|r| (r.function, r.self_ns))
            .collect();
        let gmon = d.path().join("st.gmon");
        let st = Command::new(fntrace_bin())
            .arg("export")
            .arg(&data)
            .args(["--format", "gmon", "-o"])
            .arg(&gmon)
            .output()
            .unwrap();
        assert!(
            st.status.success(),
            "{}",
            String::from_utf8_lossy(&st.stderr)
        );
        let out = Command::new("gprof")
            .args(["-b", "-p"])
            .arg(&bin)
            .arg(&gmon)
            .output()
            .expect("gprof (binutils) is required");
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        let total: u64 = want.values().sum();
        for f in ["spin_a", "spin_b", "spin_c", "busy", "main"] {
            // "  %time  cumulative  self ... name": the share of all the
            // self time, to 0.01 %.
            let got: f64 = text
                .lines()
                .find(|l| l.split_whitespace().last() == Some(f))
                .and_then(|l| l.split_whitespace().next())
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| panic!("{name}: no {f} in\n{text}"));
            let share = want[f] as f64 * 100.0 / total as f64;
            assert!(
                (got - share).abs() <= 0.3,
                "{name}: {f}: gprof {got} %, report {share:.2} % of the self time\n{text}"
            );
        }
    }
}

#[test]
fn gmon_export_is_read_by_gprof_with_glibc_counts() {
    let d = tempfile::tempdir().unwrap();
    let fib = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../examples/workloads/fib.c"
    );
    for (name, flags) in [C_MODES[0], C_MODES[1], C_MODES[4]] {
        let bin = d.path().join(format!("fib-{name}"));
        let mut a = vec!["-O2", "-fno-optimize-sibling-calls"];
        a.extend(flags);
        a.extend(["-o", bin.to_str().unwrap(), fib]);
        compile("gcc", &a);
        // glibc's own gmon.out, written into the working directory.
        let st = Command::new(&bin)
            .arg("18")
            .current_dir(d.path())
            .output()
            .unwrap();
        assert!(st.status.success());
        let glibc = gprof_called(&bin, &d.path().join("gmon.out"), "fib");
        assert_eq!(glibc, "1+8360", "{name}");
        for count in [true, false] {
            let data = d.path().join("t.data");
            let mut c = Command::new(fntrace_bin());
            c.args(["record", "-o"]).arg(&data);
            if count {
                c.arg("--count");
            }
            let st = c
                .arg("--")
                .arg(&bin)
                .arg("18")
                .current_dir(d.path())
                .env("FNTRACE_PRELOAD", preload())
                .output()
                .unwrap();
            assert!(st.status.success());
            assert_eq!(String::from_utf8_lossy(&st.stdout), "2584\n");
            let ours = d.path().join("ours.out");
            let st = Command::new(fntrace_bin())
                .arg("export")
                .arg(&data)
                .args(["--format", "gmon", "-o"])
                .arg(&ours)
                .status()
                .unwrap();
            assert!(st.success());
            assert_eq!(
                gprof_called(&bin, &ours, "fib"),
                glibc,
                "{name} count={count}"
            );
        }
    }
}

#[test]
fn record_time_filters_and_depth() {
    let d = tempfile::tempdir().unwrap();
    let fib = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../examples/workloads/fib.c"
    );
    for (name, flags) in [C_MODES[0], C_MODES[4], C_MODES[5]] {
        let bin = d.path().join(format!("fib-{name}"));
        let mut a = vec!["-O2", "-fno-optimize-sibling-calls"];
        a.extend(flags);
        a.extend(["-o", bin.to_str().unwrap(), fib]);
        compile("gcc", &a);
        let rec = |extra: &[&str]| {
            let out = Command::new(fntrace_bin())
                .args(["record", "-o"])
                .arg(d.path().join("t.data"))
                .args(extra)
                .arg("--")
                .arg(&bin)
                .arg("10")
                .env("FNTRACE_PRELOAD", preload())
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            assert_eq!(String::from_utf8_lossy(&out.stdout), "55\n");
            summary(&d.path().join("t.data"))
        };
        let (m, _) = rec(&["-F", "^fib$"]);
        assert_eq!((calls(&m, "fib"), calls(&m, "main")), (177, 0), "{name} -F");
        let (m, _) = rec(&["-N", "^fib$"]);
        assert_eq!((calls(&m, "fib"), calls(&m, "main")), (0, 1), "{name} -N");
        let (m, _) = rec(&["--depth", "3"]);
        assert_eq!(
            (calls(&m, "fib"), calls(&m, "main")),
            (3, 1),
            "{name} --depth"
        );
        let (m, _) = rec(&["-F", "fib", "--depth", "2"]);
        assert_eq!(
            (calls(&m, "fib"), calls(&m, "main")),
            (3, 0),
            "{name} -F --depth"
        );
    }
    let out = Command::new(fntrace_bin())
        .args(["record", "-F", "fib(", "--", "true"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("bad function pattern"));
}

#[test]
fn srcline_from_dwarf_names_inlined_frames() {
    let d = tempfile::tempdir().unwrap();
    // `fntrace replay --srcline` of inline_srcline.c built as `name`.
    let replay = |name: &str, flags: &[&str]| {
        let bin = build(d.path(), "inline_srcline.c", name, flags);
        assert_eq!(run_traced(d.path(), &bin, &["5"]), "17\n");
        let out = Command::new(fntrace_bin())
            .args(["replay", "--srcline"])
            .arg(d.path().join("t.data"))
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let main_line = |text: &str| {
        text.lines()
            .find(|l| l.contains("main() {"))
            .expect("main line")
            .to_string()
    };
    // -finstrument-functions: each function's own line.
    let text = replay("inl-cyg", &["-finstrument-functions"]);
    assert!(
        text.contains("outer() { /* ") && text.contains("inline_srcline.c:5 */"),
        "{text}"
    );
    // -pg, the call rewritten into a site: main is known by its start.
    let text = replay("inl-pg", &["-pg"]);
    let main = main_line(&text);
    assert!(
        main.contains("inline_srcline.c:6") && !main.contains("inlined"),
        "{text}"
    );
    // -pg, calls kept (FNTRACE_KEEP_CALLS=1, see `run_traced`): main is
    // known by mcount's return address, which lies in atoi, inlined into
    // main.
    let text = replay("inl-pg-hijack", &["-pg"]);
    let main = main_line(&text);
    assert!(
        main.contains("inlined into main at ") && main.contains("inline_srcline.c:6"),
        "{text}"
    );
}
