//! Cost of patchable entry sites, measured in one run on the same
//! binaries: each build against the uninstrumented build of the same
//! source (sites never patched, and recording with nothing
//! selected), patched and recording, and a program with two hot
//! functions recorded with `-F` selecting one. Times are whole-process, best of
//! several runs, net of process start-up (time of the workload minus time
//! of a trivial argument). Asserts nothing.
//!
//! Run: `cargo bench -p fntrace-cli --bench dynamic` (needs gcc, rustc).

use std::path::{Path, PathBuf};

use std::process::Command;

mod common;
use common::{best, build_src, preload};

const FIB_C: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../examples/workloads/fib.c"
);
const FIB_RS: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../examples/workloads/fib.rs"
);
const TWO: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/benches/two_hot.c");

/// fib(32): 7,049,155 calls.
const N: &str = "32";
const CALLS: f64 = 7_049_155.0;

/// A baseline build and the instrumented builds measured against it.
type Group = (&'static str, PathBuf, Vec<(&'static str, PathBuf)>);

fn rustc(dir: &Path, name: &str, flags: &[&str]) -> PathBuf {
    let out = dir.join(name);
    let st = Command::new("rustc")
        .args(["-O", "-o"])
        .arg(&out)
        .args(flags)
        .arg(FIB_RS)
        .env("RUSTC_BOOTSTRAP", "1")
        .status()
        .expect("rustc");
    assert!(st.success());
    out
}

/// `fib.c` compiled with `-fno-pie` and `flags` but linked `-no-pie`
/// without them: with `-pg` in the link, glibc's gcrt1.o also profiles
/// the program (a `profil` timer and gmon.out at exit), which is not the
/// cost of the NOPs.
fn gcc_unlinked_pg(dir: &Path, name: &str, flags: &[&str]) -> PathBuf {
    let obj = dir.join(format!("{name}.o"));
    let out = dir.join(name);
    let st = Command::new("gcc")
        .args(["-c", "-O2", "-fno-optimize-sibling-calls", "-fno-pie"])
        .args(flags)
        .arg("-o")
        .arg(&obj)
        .arg(FIB_C)
        .status()
        .expect("gcc");
    assert!(st.success());
    let st = Command::new("gcc")
        .arg("-no-pie")
        .arg("-o")
        .arg(&out)
        .arg(&obj)
        .status()
        .expect("gcc");
    assert!(st.success());
    out
}

fn main() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path();
    let preload = preload();
    let data = dir.join("t.data");
    // How a binary is run: bare, or with the runtime recording, set up
    // through the environment as `fntrace record` does (without its
    // summary, which decodes the trace after the run), `-F` patterns
    // given.
    let cmd = |bin: &Path, args: &[&str], record: Option<&[&str]>| -> Command {
        let mut c = Command::new(bin);
        c.args(args);
        if let Some(filters) = record {
            c.env("LD_PRELOAD", &preload)
                .env("FNTRACE_OUTPUT", &data)
                .env("FNTRACE_EXCLUSIVE", "1");
            if !filters.is_empty() {
                c.env("FNTRACE_FILTER", filters.join("\n"));
            }
        }
        c
    };
    // Net time of fib(N): run(N) - run(1).
    let net = |bin: &Path, record: Option<&[&str]>| {
        best(dir, || cmd(bin, &[N], record)) - best(dir, || cmd(bin, &["1"], record))
    };
    let gcc = |name: &str, flags: &[&str]| build_src("gcc", dir, name, FIB_C, flags);
    let nopie = ["-fno-pie", "-no-pie"];
    let nop_mcount = ["-pg", "-mfentry", "-mnop-mcount", "-mrecord-mcount"];
    let groups: Vec<Group> = vec![
        (
            "gcc (PIE)",
            gcc("plain", &[]),
            vec![
                (
                    "-fpatchable-function-entry=5",
                    gcc("pfe5", &["-fpatchable-function-entry=5"]),
                ),
                (
                    "-fpatchable-function-entry=10,8",
                    gcc("pfe10", &["-fpatchable-function-entry=10,8"]),
                ),
            ],
        ),
        (
            "gcc -no-pie",
            gcc("plain-nopie", &nopie),
            vec![
                (
                    "-pg -mfentry -mnop-mcount -mrecord-mcount",
                    gcc("nopmc", &[&nopie[..], &nop_mcount[..]].concat()),
                ),
                (
                    "the same, linked without -pg",
                    gcc_unlinked_pg(dir, "nopmc-nopg", &nop_mcount),
                ),
            ],
        ),
        (
            "rustc",
            rustc(dir, "rs-plain", &[]),
            vec![(
                "-Zpatchable-function-entry=10,8",
                rustc(dir, "rs-pfe", &["-Zpatchable-function-entry=10,8"]),
            )],
        ),
    ];
    let none: &[&str] = &["^nothing_matches_this$"];
    println!(
        "fib({N}): {CALLS} calls; whole process, best of {} runs, net of start-up\n",
        common::RUNS
    );
    println!("| build | run | ns/call | × uninstrumented |");
    println!("|---|---|---:|---:|");
    for (group, plain, builds) in &groups {
        let base = net(plain, None);
        println!(
            "| {group}, uninstrumented | bare | {:.2} | 1.000 |",
            base / CALLS * 1e9
        );
        for (name, bin) in builds {
            for (how, rec) in [
                ("bare (sites never patched)", None),
                ("recording, `-F` selects nothing", Some(none)),
                ("recording, all patched", Some(&[][..])),
            ] {
                let t = net(bin, rec);
                println!(
                    "| {name} | {how} | {:.2} | {:.3} |",
                    t / CALLS * 1e9,
                    t / base
                );
            }
        }
        if *group == "gcc (PIE)" {
            // The same recording through `__fentry__`, whose exit is a
            // hijacked return (the patched sites use call wrappers).
            let fentry = gcc("fentry", &["-pg", "-mfentry"]);
            let t = net(&fentry, Some(&[][..]));
            println!(
                "| -pg -mfentry (`__fentry__`, hijacked return), for reference | recording | {:.2} | {:.3} |",
                t / CALLS * 1e9,
                t / base
            );
        }
    }

    // Two hot functions, hot_a(12) (465 calls) and hot_b(N): recording
    // only hot_a must leave hot_b at unpatched speed.
    let two = build_src("gcc", dir, "two", TWO, &["-fpatchable-function-entry=5"]);
    let two_plain = build_src("gcc", dir, "two-plain", TWO, &[]);
    let run2 = |bin: &Path, rec: Option<&[&str]>| {
        best(dir, || cmd(bin, &["12", N], rec)) - best(dir, || cmd(bin, &["1", "1"], rec))
    };
    let base = run2(&two_plain, None);
    let bare = run2(&two, None);
    let only_a = run2(&two, Some(&["^hot_a$"]));
    let both = run2(&two, Some(&[]));
    println!("\nTwo hot functions, hot_a(12) and hot_b({N}), gcc -fpatchable-function-entry=5\n");
    println!("| run | ms | × uninstrumented | × bare patchable build |");
    println!("|---|---:|---:|---:|");
    for (what, t) in [
        ("uninstrumented build", base),
        ("patchable build, bare", bare),
        ("recording, `-F '^hot_a$'`", only_a),
        ("recording both", both),
    ] {
        println!(
            "| {what} | {:.2} | {:.3} | {:.3} |",
            t * 1e3,
            t / base,
            t / bare
        );
    }
}
