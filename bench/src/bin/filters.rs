//! `cargo build --release -p fntrace-cli -p fntrace-preload && cargo run
//! --release -p fntrace-bench --bin filters`: what a call costs under the
//! `-F`/`-N` filters (issue #24, item 4), against recording everything, in
//! the same run.
//!
//! The shared fib workload (`examples/workloads/fib.c`) is built with each
//! mechanism (`-pg`, `-pg -mfentry`, `-finstrument-functions`,
//! `-fpatchable-function-entry=5`, clang's XRay) and run bare, recording
//! everything, with `-F` selecting no function that runs (every call is
//! outside the selection: the filter leaves it alone), and with `-F
//! '^main$'` (every call inside the selection, recorded under the
//! filter), alternating with the uninstrumented build of the same
//! compiler (the baseline), through the preload runtime directly (`LD_PRELOAD`
//! and the `FNTRACE_*` variables `record` would set), timed in CPU time
//! (user + system, from `wait4`). `FNTRACE_PRELOAD=PATH` measures another
//! build of the runtime. Printed per mechanism: the added CPU
//! nanoseconds per call of each (median of the rounds) and the ratios to
//! recording everything (target: a call outside the selection costs at
//! most a third of a recorded call).

use std::path::{Path, PathBuf};
use std::process::Command;

const ROUNDS: usize = 9;
const N: u32 = 33;

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
fn run(bin: &Path, env: &[(&str, String)]) -> f64 {
    let mut c = Command::new(bin);
    c.arg(N.to_string())
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    cputime::cpu_seconds(c)
}

fn main() {
    let root = root();
    // `FNTRACE_PRELOAD` measures another build of the runtime (an older
    // one, for a before/after comparison).
    let preload = std::env::var_os("FNTRACE_PRELOAD")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target/release/libfntrace_preload.so"));
    assert!(
        preload.is_file(),
        "build it first: cargo build --release -p fntrace-cli -p fntrace-preload"
    );
    let dir = std::env::temp_dir().join(format!("fntrace-filters-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let src = root.join("examples/workloads/fib.c");
    let data = dir.join("t.data");
    let env = |filter: Option<&str>| {
        let mut v = vec![
            ("LD_PRELOAD", preload.display().to_string()),
            ("FNTRACE_OUTPUT", data.display().to_string()),
        ];
        if let Some(f) = filter {
            v.push(("FNTRACE_FILTER", f.to_string()));
        }
        v
    };
    println!(
        "fib({N}) = {} calls per run, {ROUNDS} rounds each, median; added CPU ns (user+sys) per call over the uninstrumented build",
        calls(N)
    );
    println!(
        "{:<34} {:>8} {:>9} {:>8} {:>9} {:>8}",
        "mechanism", "all", "outside", "ratio", "inside", "ratio"
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
        let build = |bin: &Path, flags: &[&str]| {
            let st = Command::new(cc)
                .args(["-O2", "-fno-optimize-sibling-calls"])
                .args(flags)
                .arg("-o")
                .arg(bin)
                .arg(&src)
                .status()
                .expect(cc);
            assert!(st.success(), "{cc} failed");
        };
        // The baseline is the uninstrumented build of the same compiler
        // (a `-pg` binary run bare calls glibc's `mcount`).
        let (bin, plain) = (dir.join("fib"), dir.join("fib-plain"));
        build(&bin, flags);
        build(&plain, &[]);
        let (mut bare, mut all, mut out, mut inside) = (vec![], vec![], vec![], vec![]);
        for _ in 0..ROUNDS {
            bare.push(run(&plain, &[]));
            all.push(run(&bin, &env(None)));
            out.push(run(&bin, &env(Some("^no_such_function$"))));
            inside.push(run(&bin, &env(Some("^main$"))));
        }
        let per = |v: Vec<f64>, b: f64| (median(v) - b) * 1e9 / calls(N) as f64;
        let b = median(bare);
        let (a, o, i) = (per(all, b), per(out, b), per(inside, b));
        println!(
            "{name:<34} {a:>8.2} {o:>9.2} {:>7.2}x {i:>9.2} {:>7.2}x",
            o / a,
            i / a
        );
    }
    println!(
        "(patchable entries: -F switches on only the selected functions; the others stay NOPs)"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
