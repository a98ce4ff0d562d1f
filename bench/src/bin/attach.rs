//! `cargo build --release -p fntrace-cli -p fntrace-preload && cargo run
//! --release -p fntrace-bench --bin attach`: what attaching
//! costs a running process. A generated C program with 10,000 patchable
//! functions (gcc `-fpatchable-function-entry=5,0`, one-byte NOP runs, the
//! case that needs the most work) runs 8 threads calling them; `fntrace
//! record -p` attaches for a window, `SIGINT` (Ctrl-C) ends it. Per round:
//!
//! - (a) attach → first event: from starting `fntrace record -p` to the
//!   first event in the trace (wall clock: the trace's start time plus the
//!   event's offset);
//! - (b) Ctrl-C → detached: from `record -p` acting on the `SIGINT` to the
//!   runtime's `ok off` (every site back off; the trace file is completed
//!   after it);
//! - (c) the longest gap in a target thread's progress that overlaps the
//!   time `record -p` had the threads stopped (each thread reads the clock
//!   every 64 calls and logs intervals over 100 µs; `record -p` prints the
//!   stop window with `FNTRACE_ATTACH_STEPS=1`); for scale the same gap
//!   before attaching, from `record -p` to `attached`, and while
//!   detaching; `record -p`'s own view of the stop and of the borrowed
//!   thread.
//!
//! Targets (issue #16): (a) and (b) under 50 ms, (c) under 5 ms.
//! No other tool attaches function tracing to a running process (uftrace
//! cannot), so there is no peer in the same run; `record -- PROG`'s start
//! (launching the same program under the tracer until its first event) is
//! printed next to it for scale. `ATTACH_BENCH_VERBOSE=1` prints each
//! round with the steps of the attach and the detach,
//! `ATTACH_BENCH_ROUNDS=N` sets the rounds (7), `ATTACH_BENCH_DIR=D`
//! builds the program in `D` and keeps it.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

const FUNCS: usize = 10_000;
const THREADS: usize = 8;

fn generate(dir: &Path) -> PathBuf {
    let mut c = String::from(
        "#include <pthread.h>\n#include <stdio.h>\n#include <string.h>\n#include <time.h>\n\
         #include <unistd.h>\n\
         typedef long (*fn)(long);\nstatic volatile int stop;\n\
         /* Per thread: the longest gap in its progress since the last reset (ns), \
         and its last gaps over 100 us (start, end). */\n\
         static volatile long gap[64];\nstatic volatile int reset[64];\n\
         #define LOG 4096\nstatic volatile long logs[64][LOG][2];\nstatic volatile unsigned nlog[64];\n\
         static long now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); \
         return t.tv_sec * 1000000000L + t.tv_nsec; }\n",
    );
    for i in 0..FUNCS {
        c.push_str(&format!(
            "__attribute__((noinline)) long f{i}(long x) {{ return x * {} + {i}; }}\n",
            i % 7 + 1
        ));
    }
    c.push_str("static fn table[] = {");
    for i in 0..FUNCS {
        c.push_str(&format!("f{i},"));
    }
    // Each thread reads the clock every 64 calls and keeps the longest
    // interval between two reads (a short usleep every 4096 calls
    // included: a thread stopped while it sleeps is late too): a thread
    // stopped by ptrace sees the whole stop in one interval. Commands on
    // standard input: `r` resets the gaps, `g` prints the longest (ns),
    // `w A B` the longest over 100 us that overlaps CLOCK_MONOTONIC A..B
    // (ns), end of input stops the program.
    c.push_str(
        "};\nstatic void *work(void *a) { long i = (long)a, s = i, k = 0, last = now(); \
         while (!stop) { s += table[k++ % (sizeof table / sizeof *table)](s) & 1; \
         if (k % 64 == 0) { long t = now(); if (reset[i]) { reset[i] = 0; gap[i] = 0; } \
         else if (t - last > gap[i]) gap[i] = t - last; \
         if (t - last > 100000) { unsigned n = nlog[i] % LOG; logs[i][n][0] = last; logs[i][n][1] = t; nlog[i]++; } \
         last = t; } \
         if (k % 4096 == 0) usleep(100); } return (void *)s; }\n\
         int main(void) { pthread_t t[64]; for (long i = 0; i < ",
    );
    c.push_str(&format!(
        "{THREADS}; i++) pthread_create(&t[i], 0, work, (void *)i); \
         printf(\"ready\\n\"); fflush(stdout); char b[2]; \
         while (fgets(b, sizeof b, stdin)) {{ if (b[0] == 'r') for (int i = 0; i < {THREADS}; i++) reset[i] = 1; \
         if (b[0] == 'g') {{ long m = 0; for (int i = 0; i < {THREADS}; i++) if (gap[i] > m) m = gap[i]; \
         printf(\"%ld\\n\", m); fflush(stdout); }} \
         if (b[0] == 'w') {{ long a, z, m = 0; if (scanf(\"%ld %ld\", &a, &z) == 2) \
         for (int i = 0; i < {THREADS}; i++) for (int k = 0; k < LOG; k++) \
         if (logs[i][k][0] < z && logs[i][k][1] > a && logs[i][k][1] - logs[i][k][0] > m) m = logs[i][k][1] - logs[i][k][0]; \
         printf(\"%ld\\n\", m); fflush(stdout); }} }} \
         stop = 1; for (int i = 0; i < {THREADS}; i++) pthread_join(t[i], 0); return 0; }}\n"
    ));
    let src = dir.join("many.c");
    std::fs::write(&src, c).unwrap();
    let bin = dir.join("many");
    let st = Command::new("gcc")
        .args(["-O1", "-fpatchable-function-entry=5,0", "-o"])
        .arg(&bin)
        .arg(&src)
        .arg("-lpthread")
        .status()
        .expect("gcc is needed");
    assert!(st.success());
    bin
}

/// Asks the target for its threads' longest gap since the last reset (ms).
fn gap_ms(stdin: &mut impl Write, out: &mut impl BufRead) -> f64 {
    writeln!(stdin, "g").unwrap();
    stdin.flush().unwrap();
    let mut l = String::new();
    out.read_line(&mut l).unwrap();
    l.trim().parse::<f64>().unwrap_or(f64::NAN) / 1e6
}

/// The longest gap of a target thread overlapping `a..b` (CLOCK_MONOTONIC
/// ns), in ms.
fn gap_in_ms(stdin: &mut impl Write, out: &mut impl BufRead, a: u64, b: u64) -> f64 {
    writeln!(stdin, "w {a} {b}").unwrap();
    stdin.flush().unwrap();
    let mut l = String::new();
    out.read_line(&mut l).unwrap();
    l.trim().parse::<f64>().unwrap_or(f64::NAN) / 1e6
}

/// Resets the target's gaps, and waits until every thread has seen it.
fn reset_gaps(stdin: &mut impl Write) {
    writeln!(stdin, "r").unwrap();
    stdin.flush().unwrap();
    std::thread::sleep(Duration::from_millis(20));
}

fn fntrace() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.parent().unwrap().join("fntrace")
}

/// Wall-clock ns of the first event of the trace at `p`.
fn first_event_ns(p: &Path) -> Option<u64> {
    let t = fntrace_format::Trace::open(p).ok()?;
    let h = t.header();
    let hz = t.tsc_hz() as f64;
    let mut first = u64::MAX;
    for tid in t.thread_ids() {
        for r in t.stream(tid) {
            if let fntrace_format::Record::Entry { tsc, .. } = r {
                first = first.min(tsc);
                break;
            }
        }
    }
    (first != u64::MAX)
        .then(|| h.start_realtime_ns + ((first - h.start_tsc) as f64 * 1e9 / hz) as u64)
}

fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
}

fn field(s: &str, after: &str) -> f64 {
    s.split(after)
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(f64::NAN)
}

/// One round's numbers (ms).
#[derive(Default, Clone, Copy)]
struct Round {
    /// `record -p` start to the first event in the trace.
    first: f64,
    /// Ctrl-C noticed to the runtime's `ok detached`.
    detached: f64,
    /// Ctrl-C to `record -p`'s exit.
    exit: f64,
    /// The longest stop of a thread other than the borrowed one, as
    /// `record -p` measured it.
    stopped: f64,
    /// The borrowed thread's time away.
    borrowed: f64,
    /// The longest gap in a thread's progress, in the target: during
    /// the same time before attaching (the load's own noise), from
    /// `record -p`'s start to its `attached` line, and from Ctrl-C to its
    /// exit.
    gap_before: f64,
    gap_attach: f64,
    /// The longest gap overlapping the ptrace stop.
    gap_stop: f64,
    gap_detach: f64,
}

fn main() {
    let verbose = std::env::var_os("ATTACH_BENCH_VERBOSE").is_some();
    let rounds: usize = std::env::var("ATTACH_BENCH_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(7);
    // ATTACH_BENCH_DIR: build there and keep it (to profile by hand).
    let keep = std::env::var_os("ATTACH_BENCH_DIR").map(PathBuf::from);
    let dir = keep.clone().unwrap_or_else(|| {
        std::env::temp_dir().join(format!("fntrace-attach-bench-{}", std::process::id()))
    });
    std::fs::create_dir_all(&dir).unwrap();
    let bin = generate(&dir);
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let mut rows: Vec<Round> = vec![];
    for r in 0..rounds {
        let mut target = Command::new(&bin)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdin = target.stdin.take().unwrap();
        let mut out = BufReader::new(target.stdout.take().unwrap());
        let mut l = String::new();
        out.read_line(&mut l).unwrap();
        std::thread::sleep(Duration::from_millis(200));
        let mut row = Round::default();
        // The load's own gaps, over about as long as an attach takes.
        reset_gaps(&mut stdin);
        std::thread::sleep(Duration::from_millis(60));
        row.gap_before = gap_ms(&mut stdin, &mut out);
        reset_gaps(&mut stdin);
        let data = dir.join(format!("r{r}.data"));
        let t0 = now_ns();
        let mut rec = Command::new(fntrace())
            .args(["record", "-p", &target.id().to_string(), "-o"])
            .arg(&data)
            .env("FNTRACE_ATTACH_STEPS", "1")
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut err = BufReader::new(rec.stderr.take().unwrap());
        // Messages may come first: up to the `attached` line.
        let mut attached = String::new();
        while !attached.contains("attached to process") {
            attached.clear();
            if err.read_line(&mut attached).unwrap() == 0 {
                break;
            }
        }
        row.gap_attach = gap_ms(&mut stdin, &mut out);
        let mut steps = String::new();
        while !steps.contains("attach steps") {
            steps.clear();
            if err.read_line(&mut steps).unwrap() == 0 {
                break;
            }
        }
        // The longest gap overlapping the time `record -p` had the
        // threads stopped (it prints the window with its steps).
        if let Some((a, b)) = steps
            .split("stop-window ")
            .nth(1)
            .and_then(|w| w.trim().split_once(' '))
            .and_then(|(a, b)| Some((a.parse().ok()?, b.parse().ok()?)))
        {
            row.gap_stop = gap_in_ms(&mut stdin, &mut out, a, b);
        } else {
            row.gap_stop = f64::NAN;
        }
        std::thread::sleep(Duration::from_millis(300));
        reset_gaps(&mut stdin);
        let sig = Instant::now();
        // SAFETY: signalling our own child.
        unsafe { libc::kill(rec.id() as i32, libc::SIGINT) };
        let mut rest = String::new();
        std::io::Read::read_to_string(&mut err, &mut rest).unwrap();
        rec.wait().unwrap();
        row.exit = sig.elapsed().as_secs_f64() * 1e3;
        row.gap_detach = gap_ms(&mut stdin, &mut out);
        row.first = first_event_ns(&data)
            .map(|f| (f as f64 - t0 as f64) / 1e6)
            .unwrap_or(f64::NAN);
        row.detached = rest
            .lines()
            .find(|l| l.contains("detached from process "))
            .map_or(f64::NAN, |l| field(l, " in "));
        row.stopped = field(&rest, "stopped for at most ");
        row.borrowed = field(&rest, "the borrowed thread for ");
        if verbose {
            eprintln!(
                "round {r}: first event {:.1} ms, detached {:.1} ms, stopped {:.2} ms, \
                 gaps before/stop/attach/detach {:.2}/{:.2}/{:.2}/{:.2} ms",
                row.first,
                row.detached,
                row.stopped,
                row.gap_before,
                row.gap_stop,
                row.gap_attach,
                row.gap_detach
            );
            eprint!("  {}", steps);
            for l in rest.lines().filter(|l| l.contains("steps")) {
                eprintln!("  {l}");
            }
        }
        rows.push(row);
        drop(stdin);
        target.wait().unwrap();
        let _ = std::fs::remove_file(&data);
    }
    // Launch for scale: `fntrace record -- many` until its first event.
    let data = dir.join("launch.data");
    let t0 = now_ns();
    let mut launch = Command::new(fntrace())
        .args(["record", "-o"])
        .arg(&data)
        .arg("--")
        .arg(&bin)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(launch.stdout.take().unwrap());
    let mut l = String::new();
    out.read_line(&mut l).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    drop(launch.stdin.take());
    launch.wait().unwrap();
    let launch_first = first_event_ns(&data).map(|f| (f as f64 - t0 as f64) / 1e6);
    let med = |f: fn(&Round) -> f64| {
        let mut v: Vec<f64> = rows.iter().map(f).filter(|x| x.is_finite()).collect();
        v.sort_by(|a, b| a.partial_cmp(b).unwrap());
        (
            v.get(v.len() / 2).copied().unwrap_or(f64::NAN),
            v.last().copied().unwrap_or(f64::NAN),
        )
    };
    println!(
        "attach to a process with {FUNCS} patchable functions (gcc one-byte NOP runs) and \
         {THREADS} threads; {rounds} rounds, median (max); load average {}:",
        load.split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    );
    let (a, am) = med(|r| r.first);
    println!("  (a) record -p -> first recorded event    {a:8.1} ms ({am:.1})   target < 50 ms");
    let (d, dm) = med(|r| r.detached);
    println!("  (b) Ctrl-C -> runtime detached            {d:8.1} ms ({dm:.1})   target < 50 ms");
    let (p, pm) = med(|r| r.gap_stop);
    println!(
        "  (c) longest gap of a target thread over the ptrace stop {p:6.2} ms ({pm:.2})   target < 5 ms"
    );
    let (p, pm) = med(|r| r.gap_before);
    println!("      the same over 60 ms before attaching (noise) {p:6.2} ms ({pm:.2})");
    let (p, pm) = med(|r| r.gap_attach);
    println!("      the same from record -p to recording  {p:6.2} ms ({pm:.2})");
    let (p, pm) = med(|r| r.gap_detach);
    println!("      the same while detaching              {p:6.2} ms ({pm:.2})");
    let (p, pm) = med(|r| r.stopped);
    println!("      ptrace stop of the other threads      {p:6.2} ms ({pm:.2})");
    let (b, bm) = med(|r| r.borrowed);
    println!("      borrowed thread (dlopen + hand-over)  {b:6.2} ms ({bm:.2})");
    let (x, xm) = med(|r| r.exit);
    println!(
        "      Ctrl-C -> record -p exits             {x:6.1} ms ({xm:.1})   (includes the summary)"
    );
    if let Some(l) = launch_first {
        println!(
            "  for scale: record -- PROG -> first event {l:.1} ms (attach/launch {:.2}x)",
            a / l
        );
    }
    if keep.is_none() {
        let _ = std::fs::remove_dir_all(&dir);
    }
}
