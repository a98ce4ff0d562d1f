//! `cargo build --release -p fntrace-cli -p fntrace-preload && cargo run
//! --release -p fntrace-bench --bin scaling`: whether recording scales
//! with threads (issue #24, item 6): the per-call cost with 1, 2, 4 and 8
//! threads recording at once must stay within 1.3 times the single-thread
//! figure (no cache line shared between threads is written per event).
//!
//! A generated C program runs N threads, each computing fib(K) (the same
//! calls per thread), built with `gcc -pg -mfentry` and with
//! `-fpatchable-function-entry=5`. Each configuration runs bare and under
//! the preload runtime (`LD_PRELOAD`, `FNTRACE_OUTPUT`), alternating;
//! the cost is the *CPU time* the program used (user + system, from
//! `wait4`), so that threads waiting for one of the machine's cores do not
//! count: added CPU nanoseconds per call, median of the rounds, and its
//! ratio to the one-thread figure of the same run.

use std::path::{Path, PathBuf};
use std::process::Command;

const K: u32 = 30;
const ROUNDS: usize = 5;

const SRC: &str = r#"
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
__attribute__((noinline)) long fib(long n) { return n < 2 ? n : fib(n - 1) + fib(n - 2); }
static long k;
static void *work(void *a) { (void)a; return (void *)fib(k); }
int main(int argc, char **argv) {
    int n = atoi(argv[1]);
    k = atol(argv[2]);
    pthread_t t[64];
    for (int i = 0; i < n; i++) pthread_create(&t[i], 0, work, 0);
    long s = 0;
    for (int i = 0; i < n; i++) { void *r; pthread_join(t[i], &r); s += (long)r; }
    printf("%ld\n", s);
    return 0;
}
"#;

fn calls(n: u32) -> u64 {
    let (mut a, mut b) = (0u64, 1u64);
    for _ in 0..n + 1 {
        (a, b) = (b, a + b);
    }
    2 * a - 1
}

#[path = "../cputime.rs"]
mod cputime;
use cputime::median;

/// CPU seconds (user + system) the command used.
fn cpu(bin: &Path, threads: usize, env: &[(&str, String)]) -> f64 {
    let mut c = Command::new(bin);
    c.arg(threads.to_string())
        .arg(K.to_string())
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())));
    cputime::cpu_seconds(c)
}

fn main() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let preload = root.join("target/release/libfntrace_preload.so");
    assert!(
        preload.is_file(),
        "build it first: cargo build --release -p fntrace-cli -p fntrace-preload"
    );
    let dir = std::env::temp_dir().join(format!("fntrace-scaling-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join("threads.c");
    std::fs::write(&src, SRC).unwrap();
    let data = dir.join("t.data");
    let env = vec![
        ("LD_PRELOAD", preload.display().to_string()),
        ("FNTRACE_OUTPUT", data.display().to_string()),
    ];
    println!(
        "fib({K}) = {} calls per thread; added CPU ns per call (user+sys, median of {ROUNDS}), ratio to 1 thread",
        calls(K)
    );
    for (name, flags) in [
        ("gcc -pg -mfentry", &["-pg", "-mfentry"][..]),
        (
            "gcc -fpatchable-function-entry=5",
            &["-fpatchable-function-entry=5"][..],
        ),
    ] {
        let bin = dir.join("threads");
        let st = Command::new("gcc")
            .args(["-O2", "-fno-optimize-sibling-calls", "-pthread"])
            .args(flags)
            .arg("-o")
            .arg(&bin)
            .arg(&src)
            .status()
            .expect("gcc");
        assert!(st.success());
        let mut one = 0.0;
        for threads in [1usize, 2, 4, 8] {
            let (mut bare, mut rec) = (vec![], vec![]);
            for _ in 0..ROUNDS {
                bare.push(cpu(&bin, threads, &[]));
                rec.push(cpu(&bin, threads, &env));
            }
            let per = (median(rec) - median(bare)) * 1e9 / (calls(K) * threads as u64) as f64;
            if threads == 1 {
                one = per;
            }
            println!(
                "{name:<34} {threads} threads: {per:>7.2} ns/call  {:>5.2}x",
                per / one
            );
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}
