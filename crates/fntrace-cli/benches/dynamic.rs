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
use common::{best_of, build_src, preload};
use fntrace_rt::config;

/// Interleaved rounds (the best of them is kept).
const ROUNDS: usize = 9;

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
                .env(config::ENV_OUTPUT, &data)
                .env(config::ENV_EXCLUSIVE, "1");
            if !filters.is_empty() {
                c.env(config::ENV_FILTER, filters.join("\n"));
            }
        }
        c
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
    let all: &[&str] = &[];
    let fentry = gcc("fentry", &["-pg", "-mfentry"]);
    let two = build_src("gcc", dir, "two", TWO, &["-fpatchable-function-entry=5"]);
    let two_plain = build_src("gcc", dir, "two-plain", TWO, &[]);
    let hot_a: &[&str] = &["^hot_a$"];

    // Every measurement: (binary, workload args, trivial args, recording
    // filters). Rounds run every measurement once, interleaved, so a burst
    // of load from elsewhere hits all of them alike; the best of the
    // rounds is kept, net of start-up (workload minus trivial run).
    type M<'a> = (
        &'a Path,
        [&'static str; 2],
        [&'static str; 2],
        Option<&'a [&'a str]>,
    );
    let mut ms: Vec<M> = vec![];
    for (_, plain, builds) in &groups {
        ms.push((plain, [N, ""], ["1", ""], None));
        for (_, bin) in builds {
            for rec in [None, Some(none), Some(all)] {
                ms.push((bin, [N, ""], ["1", ""], rec));
            }
        }
    }
    ms.push((&fentry, [N, ""], ["1", ""], Some(all)));
    for (bin, rec) in [
        (&two_plain, None),
        (&two, None),
        (&two, Some(hot_a)),
        (&two, Some(all)),
    ] {
        ms.push((bin, ["12", N], ["1", "1"], rec));
    }
    let mut best_t = vec![(f64::INFINITY, f64::INFINITY); ms.len()];
    for _ in 0..ROUNDS {
        for (i, (bin, big, small, rec)) in ms.iter().enumerate() {
            let args = |a: [&'static str; 2]| -> Vec<&'static str> {
                a.into_iter().filter(|x| !x.is_empty()).collect()
            };
            let b = best_of(dir, 1, || cmd(bin, &args(*big), *rec));
            let s = best_of(dir, 1, || cmd(bin, &args(*small), *rec));
            best_t[i].0 = best_t[i].0.min(b);
            best_t[i].1 = best_t[i].1.min(s);
        }
    }
    let mut net = best_t.iter().map(|(b, s)| b - s);
    println!(
        "fib({N}): {CALLS} calls; whole process, best of {ROUNDS} interleaved rounds, net of start-up\n"
    );
    println!("| build | run | ns/call | × uninstrumented |");
    println!("|---|---|---:|---:|");
    for (group, _, builds) in &groups {
        let base = net.next().unwrap();
        println!(
            "| {group}, uninstrumented | bare | {:.2} | 1.000 |",
            base / CALLS * 1e9
        );
        for (name, _) in builds {
            for how in [
                "bare (sites never patched)",
                "recording, `-F` selects nothing",
                "recording, all patched",
            ] {
                let t = net.next().unwrap();
                println!(
                    "| {name} | {how} | {:.2} | {:.3} |",
                    t / CALLS * 1e9,
                    t / base
                );
            }
        }
    }
    // The same recording through `__fentry__`, whose exit is a hijacked
    // return (patched sites use call wrappers), against gcc PIE.
    let t = net.next().unwrap();
    let base = best_t[0].0 - best_t[0].1;
    println!(
        "| -pg -mfentry (`__fentry__`, hijacked return), for reference | recording | {:.2} | {:.3} |",
        t / CALLS * 1e9,
        t / base
    );

    // Two hot functions, hot_a(12) (465 calls) and hot_b(N): recording
    // only hot_a must leave hot_b at unpatched speed.
    let base = net.next().unwrap();
    let bare = net.next().unwrap();
    let only_a = net.next().unwrap();
    let both = net.next().unwrap();
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
