//! `cargo build --release -p fntrace-cli -p fntrace-preload && cargo run
//! --release -p fntrace-bench --bin libcalls`: what `record --libcalls`
//! and `record --sched` cost (issue #20).
//!
//! 1. **Cost per library call recorded.** A generated C program
//!    (`gcc -O2 -pg -mfentry`) calls `leaf()`, a one-line function in a
//!    shared library of its own (not instrumented), `CALLS` times from one
//!    instrumented function, and measures the loop itself
//!    (`clock_gettime`). Per call: (loop time with `--libcalls` − loop time
//!    without) / `CALLS`. The peer in the same run: uftrace, which records
//!    library calls unless `--no-libcall`: (`uftrace record` −
//!    `uftrace record --no-libcall`) / `CALLS`. Runs are interleaved,
//!    median of `ROUNDS`.
//! 2. **Overhead of `--sched`.** A producer/consumer pair on a one-slot
//!    channel (mutex + condition variables: every item is a context switch
//!    on each side) passes `ITEMS` items; the program measures its own
//!    wall time and its process CPU time (which includes the helper thread
//!    that reads the context-switch records). `fntrace record --sched` against `fntrace record`, same
//!    binary, interleaved, median of `ROUNDS`; the number of off-CPU
//!    intervals the trace holds is printed with it.

use std::path::{Path, PathBuf};
use std::process::Command;

const CALLS: u64 = 2_000_000;
const ITEMS: u64 = 100_000;
const ROUNDS: usize = 7;

fn gcc(args: &[&str]) {
    let st = Command::new("gcc")
        .args(args)
        .status()
        .expect("gcc is needed");
    assert!(st.success(), "gcc {args:?}");
}

fn build(dir: &Path) -> (PathBuf, PathBuf) {
    let leaf = dir.join("leaf.c");
    std::fs::write(&leaf, "int leaf(int x) { return x + 1; }\n").unwrap();
    let lib = dir.join("libleaf.so");
    gcc(&[
        "-O2",
        "-shared",
        "-fPIC",
        "-o",
        lib.to_str().unwrap(),
        leaf.to_str().unwrap(),
    ]);
    let calls = dir.join("calls.c");
    std::fs::write(
        &calls,
        format!(
            "#include <stdio.h>\n#include <time.h>\nint leaf(int);\n\
             static long long now(void) {{ struct timespec t; clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t); \
             return t.tv_sec * 1000000000LL + t.tv_nsec; }}\n\
             __attribute__((noinline)) int work(long n) {{ int s = 0; for (long i = 0; i < n; i++) s = leaf(s); return s; }}\n\
             int main(void) {{ long long t0 = now(); int s = work({CALLS}); long long t1 = now(); \
             printf(\"ns %lld %d\\n\", t1 - t0, s); return 0; }}\n"
        ),
    )
    .unwrap();
    let calls_bin = dir.join("calls");
    gcc(&[
        "-O2",
        "-pg",
        "-mfentry",
        "-o",
        calls_bin.to_str().unwrap(),
        calls.to_str().unwrap(),
        &format!("-L{}", dir.display()),
        "-lleaf",
        &format!("-Wl,-rpath,{}", dir.display()),
    ]);
    let pc = dir.join("pc.c");
    std::fs::write(
        &pc,
        format!(
            "#include <pthread.h>\n#include <stdio.h>\n#include <time.h>\n\
             static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;\n\
             static pthread_cond_t full = PTHREAD_COND_INITIALIZER, empty = PTHREAD_COND_INITIALIZER;\n\
             static long slot; static int has;\n\
             static long long now(void) {{ struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); \
             return t.tv_sec * 1000000000LL + t.tv_nsec; }}\n\
             static long long cpu(void) {{ struct timespec t; clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t); \
             return t.tv_sec * 1000000000LL + t.tv_nsec; }}\n\
             __attribute__((noinline)) void put(long v) {{ pthread_mutex_lock(&m); while (has) pthread_cond_wait(&empty, &m); \
             slot = v; has = 1; pthread_cond_signal(&full); pthread_mutex_unlock(&m); }}\n\
             __attribute__((noinline)) long get(void) {{ pthread_mutex_lock(&m); while (!has) pthread_cond_wait(&full, &m); \
             long v = slot; has = 0; pthread_cond_signal(&empty); pthread_mutex_unlock(&m); return v; }}\n\
             __attribute__((noinline)) void *producer(void *a) {{ for (long i = 0; i < {ITEMS}; i++) put(i); return a; }}\n\
             int main(void) {{ long long t0 = now(), c0 = cpu(); pthread_t p; pthread_create(&p, 0, producer, 0); \
             long s = 0; for (long i = 0; i < {ITEMS}; i++) s += get(); pthread_join(p, 0); \
             long long t1 = now(), c1 = cpu(); printf(\"ns %lld %ld cpu %lld\\n\", t1 - t0, s, c1 - c0); return 0; }}\n"
        ),
    )
    .unwrap();
    let pc_bin = dir.join("pc");
    gcc(&[
        "-O2",
        "-pg",
        "-mfentry",
        "-o",
        pc_bin.to_str().unwrap(),
        pc.to_str().unwrap(),
        "-lpthread",
    ]);
    (calls_bin, pc_bin)
}

fn fntrace() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.parent().unwrap().join("fntrace")
}

/// Runs `cmd`, returns the time the program printed (`ns N ...`).
fn run(cmd: &mut Command) -> u64 {
    run2(cmd).0
}

/// Runs `cmd`, returns the times the program printed: `ns N` and, when
/// printed, `cpu N` (process CPU time).
fn run2(cmd: &mut Command) -> (u64, u64) {
    let out = cmd.output().expect("run");
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let s = String::from_utf8_lossy(&out.stdout);
    let line = s
        .lines()
        .find(|l| l.starts_with("ns "))
        .unwrap_or_else(|| panic!("no timing in {s:?}"));
    let f: Vec<&str> = line.split_whitespace().collect();
    let ns = f[1].parse().unwrap();
    let cpu = f
        .iter()
        .position(|w| *w == "cpu")
        .and_then(|i| f.get(i + 1)?.parse().ok())
        .unwrap_or(0);
    (ns, cpu)
}

fn median(mut v: Vec<u64>) -> u64 {
    v.sort_unstable();
    v[v.len() / 2]
}

fn main() {
    if let Ok(l) = std::fs::read_to_string("/proc/loadavg") {
        println!("load average: {}", l.trim());
    }
    let dir = std::env::temp_dir().join(format!("fntrace-libcalls-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (calls, pc) = build(&dir);
    let data = dir.join("t.data");
    let rec = |extra: &[&str], bin: &Path| {
        let mut c = Command::new(fntrace());
        c.arg("record")
            .arg("-o")
            .arg(&data)
            .args(extra)
            .arg("--")
            .arg(bin);
        c
    };
    let uftrace = Command::new("uftrace").arg("--version").output().is_ok();
    let udir = dir.join("uftrace.data");
    let urec = |extra: &[&str]| {
        let mut c = Command::new("uftrace");
        c.arg("record").arg("-d").arg(&udir).args(extra).arg(&calls);
        c
    };

    // 1. Library calls.
    let (mut plain, mut without, mut with, mut u_without, mut u_with) =
        (vec![], vec![], vec![], vec![], vec![]);
    for _ in 0..ROUNDS {
        plain.push(run(&mut Command::new(&calls)));
        without.push(run(&mut rec(&[], &calls)));
        with.push(run(&mut rec(&["--libcalls"], &calls)));
        if uftrace {
            u_without.push(run(&mut urec(&["--no-libcall"])));
            u_with.push(run(&mut urec(&[])));
        }
    }
    let t = fntrace_format::Trace::open(&data).unwrap();
    let recorded: u64 = t
        .thread_ids()
        .into_iter()
        .map(|tid| {
            t.stream(tid)
                .filter(|r| matches!(r, fntrace_format::Record::Entry { .. }))
                .count() as u64
        })
        .sum();
    let per = |a: &[u64], b: &[u64]| {
        (median(a.to_vec()) as f64 - median(b.to_vec()) as f64) / CALLS as f64
    };
    println!(
        "library calls: {CALLS} calls of leaf() from one instrumented loop, median of {ROUNDS}"
    );
    println!(
        "  uninstrumented loop                 {:>8.2} ns/call",
        median(plain.clone()) as f64 / CALLS as f64
    );
    println!(
        "  fntrace record (no --libcalls)      {:>8.2} ns/call",
        median(without.clone()) as f64 / CALLS as f64
    );
    println!(
        "  fntrace record --libcalls           {:>8.2} ns/call ({recorded} entries in the last trace)",
        median(with.clone()) as f64 / CALLS as f64
    );
    let f = per(&with, &without);
    println!("  => fntrace: {f:.2} ns per library call recorded");
    if uftrace {
        println!(
            "  uftrace record --no-libcall         {:>8.2} ns/call",
            median(u_without.clone()) as f64 / CALLS as f64
        );
        println!(
            "  uftrace record                      {:>8.2} ns/call",
            median(u_with.clone()) as f64 / CALLS as f64
        );
        let u = per(&u_with, &u_without);
        println!(
            "  => uftrace: {u:.2} ns per library call recorded; fntrace/uftrace = {:.2}",
            f / u
        );
    } else {
        println!("  (uftrace not on PATH: no peer)");
    }

    // 2. --sched on a producer/consumer.
    let (mut off, mut on, mut off_cpu, mut on_cpu) = (vec![], vec![], vec![], vec![]);
    for _ in 0..ROUNDS {
        let (w, c) = run2(&mut rec(&[], &pc));
        off.push(w);
        off_cpu.push(c);
        let (w, c) = run2(&mut rec(&["--sched"], &pc));
        on.push(w);
        on_cpu.push(c);
    }
    let t = fntrace_format::Trace::open(&data).unwrap();
    let intervals: usize = t.metadata().offcpu.values().map(Vec::len).sum();
    let (a, b) = (median(off), median(on));
    let (ac, bc) = (median(off_cpu), median(on_cpu));
    println!(
        "--sched: producer/consumer, {ITEMS} items through a one-slot channel, median of {ROUNDS}"
    );
    println!(
        "  fntrace record            {:>10.2} ms wall {:>10.2} ms process CPU",
        a as f64 / 1e6,
        ac as f64 / 1e6
    );
    println!(
        "  fntrace record --sched    {:>10.2} ms wall {:>10.2} ms process CPU ({intervals} off-CPU intervals in the last trace)",
        b as f64 / 1e6,
        bc as f64 / 1e6
    );
    println!(
        "  => --sched / without = {:.3} (wall), {:.3} (process CPU)",
        b as f64 / a as f64,
        bc as f64 / ac.max(1) as f64
    );
    let _ = std::fs::remove_dir_all(&dir);
}
