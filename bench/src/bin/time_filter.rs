//! `cargo build --release -p fntrace-cli -p fntrace-preload && cargo run
//! --release -p fntrace-bench --bin time-filter`: what the record-time
//! time filter (`fntrace record -t`) costs and saves, against recording
//! everything, in the same run.
//!
//! The shared fib workload (`examples/workloads/fib.c`) is built with each
//! gcc mechanism (`-pg`, `-pg -mfentry`, `-finstrument-functions`,
//! `-fpatchable-function-entry=5`) and with clang's XRay (`clang-14
//! -fxray-instrument -fxray-instruction-threshold=1`), and run bare, recording everything,
//! and with `-t 10us`, alternating, through the preload runtime directly
//! (`LD_PRELOAD` and the `FNTRACE_*` variables `record` would set, so that
//! `record`'s own summary is not measured), timed in CPU time (user +
//! system, from `wait4`). Printed per mechanism: the added CPU
//! nanoseconds per call of each (median of the rounds), their ratio
//! (target, issue #17: `-t` at most 0.8 times recording everything), and
//! trace sizes; then the size of a run of more than 100 M calls with
//! `-t 10us`.

use std::path::{Path, PathBuf};
use std::process::Command;

const ROUNDS: usize = 7;
const N: u32 = 34;

fn calls(n: u32) -> u64 {
    let (mut a, mut b) = (0u64, 1u64);
    for _ in 0..n + 1 {
        (a, b) = (b, a + b);
    }
    2 * a - 1
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

#[path = "../cputime.rs"]
mod cputime;
use cputime::median;

/// CPU seconds (user + system) the run used.
fn run(bin: &Path, n: u32, env: &[(&str, String)]) -> f64 {
    let mut c = Command::new(bin);
    c.arg(n.to_string())
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())));
    cputime::cpu_seconds(c)
}

fn main() {
    let root = root();
    let preload = root.join("target/release/libfntrace_preload.so");
    assert!(
        preload.is_file(),
        "build it first: cargo build --release -p fntrace-cli -p fntrace-preload"
    );
    let dir = std::env::temp_dir().join(format!("fntrace-tf-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let src = root.join("examples/workloads/fib.c");
    let data = dir.join("t.data");
    let env = |filter: Option<&str>| {
        let mut v = vec![
            ("LD_PRELOAD", preload.display().to_string()),
            ("FNTRACE_OUTPUT", data.display().to_string()),
        ];
        if let Some(f) = filter {
            v.push(("FNTRACE_TIME_FILTER", f.to_string()));
        }
        v
    };
    println!(
        "fib({N}) = {} calls per run, {ROUNDS} rounds each, median; added CPU ns (user+sys) per call over the bare run",
        calls(N)
    );
    println!(
        "{:<32} {:>10} {:>10} {:>10} {:>12} {:>12}",
        "mechanism", "all", "-t 10us", "ratio", "size all", "size -t"
    );
    for (name, cc, flags) in [
        ("gcc -pg", "gcc", &["-pg"][..]),
        ("gcc -pg -mfentry", "gcc", &["-pg", "-mfentry"][..]),
        (
            "gcc -finstrument-functions",
            "gcc",
            &["-finstrument-functions"][..],
        ),
        (
            "gcc -fpatchable-function-entry=5",
            "gcc",
            &["-fpatchable-function-entry=5"][..],
        ),
        (
            "clang-14 -fxray-instrument",
            "clang-14",
            &["-fxray-instrument", "-fxray-instruction-threshold=1"][..],
        ),
    ] {
        let bin = dir.join("fib");
        let st = Command::new(cc)
            .args(["-O2", "-fno-optimize-sibling-calls"])
            .args(flags)
            .arg("-o")
            .arg(&bin)
            .arg(&src)
            .status()
            .expect(cc);
        assert!(st.success(), "{cc} failed");
        let (mut bare, mut all, mut tf) = (vec![], vec![], vec![]);
        let (mut size_all, mut size_tf) = (0, 0);
        for _ in 0..ROUNDS {
            bare.push(run(&bin, N, &[]));
            all.push(run(&bin, N, &env(None)));
            size_all = std::fs::metadata(&data).map(|m| m.len()).unwrap_or(0);
            tf.push(run(&bin, N, &env(Some("10us"))));
            size_tf = std::fs::metadata(&data).map(|m| m.len()).unwrap_or(0);
        }
        let per = |v: Vec<f64>, b: f64| (median(v) - b) * 1e9 / calls(N) as f64;
        let b = median(bare);
        let (a, t) = (per(all, b), per(tf, b));
        println!(
            "{name:<32} {a:>10.2} {t:>10.2} {:>9.2}x {:>12} {:>12}",
            t / a,
            size_all,
            size_tf
        );
    }
    let big = 38;
    let bin = dir.join("fib");
    let st = Command::new("gcc")
        .args([
            "-O2",
            "-fno-optimize-sibling-calls",
            "-pg",
            "-mfentry",
            "-o",
        ])
        .arg(&bin)
        .arg(&src)
        .status()
        .expect("gcc");
    assert!(st.success());
    let secs = run(&bin, big, &env(Some("10us")));
    println!(
        "fib({big}) with -t 10us (gcc -pg -mfentry): {} calls in {secs:.2} s of CPU, trace {} bytes",
        calls(big),
        std::fs::metadata(&data).map(|m| m.len()).unwrap_or(0)
    );
    let _ = std::fs::remove_dir_all(&dir);
}
