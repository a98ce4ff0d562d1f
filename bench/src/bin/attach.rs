//! `cargo build --release -p fntrace-cli -p fntrace-preload && cargo run
//! --release -p fntrace-bench --bin attach`: what attaching
//! costs a running process. A generated C program with 10,000 patchable
//! functions (gcc `-fpatchable-function-entry=5`, one-byte NOP runs, the
//! case that needs the most work) runs 8 threads calling them; `fntrace
//! record -p` attaches for a window, `SIGINT` (Ctrl-C) ends it. Per round:
//!
//! - attach → first event: from starting `fntrace record -p` to the first
//!   event in the trace (wall clock: the trace's start time plus the
//!   event's offset);
//! - Ctrl-C → detached: from the `SIGINT` to the runtime's confirmation
//!   that every site is off again (reported by `record -p`);
//! - the longest pause of the target's threads while stopped by ptrace
//!   (all but one: from the first stop to their release), and the time the
//!   one borrowed thread spent loading the runtime.
//!
//! Targets (issue #16): both latencies under 50 ms, the pause under 5 ms.
//! No other tool attaches function tracing to a running process (uftrace
//! cannot), so there is no peer in the same run; `record -- PROG`'s start
//! (launching the same program under the tracer until its first event) is
//! printed next to it for scale.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

const FUNCS: usize = 10_000;
const THREADS: usize = 8;

fn generate(dir: &Path) -> PathBuf {
    let mut c = String::from(
        "#include <pthread.h>\n#include <stdio.h>\n#include <unistd.h>\n\
         typedef long (*fn)(long);\nstatic volatile int stop;\n",
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
    c.push_str(
        "};\nstatic void *work(void *a) { long s = (long)a, k = 0; \
         while (!stop) { s += table[k++ % (sizeof table / sizeof *table)](s) & 1; \
         if (k % 4096 == 0) usleep(100); } return (void *)s; }\n\
         int main(void) { pthread_t t[64]; for (long i = 0; i < ",
    );
    c.push_str(&format!(
        "{THREADS}; i++) pthread_create(&t[i], 0, work, (void *)i); \
         printf(\"ready\\n\"); fflush(stdout); char b[8]; while (read(0, b, sizeof b) > 0) {{}} \
         stop = 1; for (int i = 0; i < {THREADS}; i++) pthread_join(t[i], 0); return 0; }}\n"
    ));
    let src = dir.join("many.c");
    std::fs::write(&src, c).unwrap();
    let bin = dir.join("many");
    let st = Command::new("gcc")
        .args(["-O1", "-fpatchable-function-entry=5", "-o"])
        .arg(&bin)
        .arg(&src)
        .arg("-lpthread")
        .status()
        .expect("gcc is needed");
    assert!(st.success());
    bin
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

fn main() {
    let dir = std::env::temp_dir().join(format!("fntrace-attach-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bin = generate(&dir);
    let rounds = 7;
    let mut rows = vec![];
    for r in 0..rounds {
        let mut target = Command::new(&bin)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut out = BufReader::new(target.stdout.take().unwrap());
        let mut l = String::new();
        out.read_line(&mut l).unwrap();
        std::thread::sleep(Duration::from_millis(200));
        let data = dir.join(format!("r{r}.data"));
        let t0 = now_ns();
        let mut rec = Command::new(fntrace())
            .args(["record", "-p", &target.id().to_string(), "-o"])
            .arg(&data)
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut err = BufReader::new(rec.stderr.take().unwrap());
        let mut attached = String::new();
        err.read_line(&mut attached).unwrap();
        std::thread::sleep(Duration::from_millis(300));
        let sig = Instant::now();
        // SAFETY: signalling our own child.
        unsafe { libc::kill(rec.id() as i32, libc::SIGINT) };
        let mut rest = String::new();
        std::io::Read::read_to_string(&mut err, &mut rest).unwrap();
        rec.wait().unwrap();
        let exit_ms = sig.elapsed().as_secs_f64() * 1e3;
        let first = first_event_ns(&data).map(|f| (f as f64 - t0 as f64) / 1e6);
        rows.push((
            first.unwrap_or(f64::NAN),
            0.0,
            field(&rest, " in "),
            field(&rest, "stopped for at most "),
            field(&rest, "the borrowed thread for "),
            exit_ms,
        ));
        writeln!(target.stdin.take().unwrap(), "q").ok();
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
    let med = |k: usize| {
        let mut v: Vec<f64> = rows
            .iter()
            .map(|r| [r.0, r.1, r.2, r.3, r.4, r.5][k])
            .filter(|x| x.is_finite())
            .collect();
        v.sort_by(|a, b| a.partial_cmp(b).unwrap());
        (
            v.get(v.len() / 2).copied().unwrap_or(f64::NAN),
            v.last().copied().unwrap_or(f64::NAN),
        )
    };
    println!(
        "attach to a process with {FUNCS} patchable functions (gcc one-byte NOP runs) and \
         {THREADS} threads; {rounds} rounds, median (max):"
    );
    let (a, am) = med(0);
    println!("  record -p -> first recorded event   {a:8.1} ms ({am:.1})   target < 50 ms");
    let (d, dm) = med(2);
    println!("  Ctrl-C -> runtime detached           {d:8.1} ms ({dm:.1})   target < 50 ms");
    let (x, xm) = med(5);
    println!(
        "  Ctrl-C -> record -p exits            {x:8.1} ms ({xm:.1})   (includes the summary)"
    );
    let (p, pm) = med(3);
    println!("  pause of the stopped threads         {p:8.2} ms ({pm:.2})   target < 5 ms");
    let (b, bm) = med(4);
    println!("  borrowed thread (dlopen + hand-over) {b:8.2} ms ({bm:.2})");
    if let Some(l) = launch_first {
        println!(
            "  for scale: record -- PROG -> first event {l:.1} ms (attach/launch {:.2}x)",
            a / l
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
