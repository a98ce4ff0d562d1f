//! `cargo build --release -p fntrace-cli -p fntrace-preload && cargo run
//! --release -p fntrace-bench --bin lifecycle [-- CALLS]`: the chunk life
//! cycle (issues #17 and #24) measured on a C program (`gcc -O2 -pg
//! -mfentry`) making CALLS calls (default 600 M: a trace of ~2 GB), all in
//! the same run, alternating, best of 2:
//!
//! - `plain`: `fntrace record` as shipped (helper thread: trace memory
//!   pre-faulted ahead, full chunks written back and dropped);
//! - `no-helper`: the same with `FNTRACE_BUFFER=0` (the traced thread maps
//!   and faults its trace memory itself, every chunk stays resident: the
//!   behaviour before);
//! - `ring`: `record --ring 64M`.
//!
//! Printed per variant: added ns per call (against the bare program),
//! system time as a share of the added time (target ≤ 10 %), peak RSS of
//! the traced process (`VmHWM`, target ≤ 34 MB for one thread), and the
//! ring's cost per call against plain recording (target ≤ 1.05×).

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Instant;

const PROG: &str = "#include <stdio.h>\n#include <stdlib.h>\n\
    __attribute__((noinline)) long leaf(long x) { return x * 3 + 1; }\n\
    __attribute__((noinline)) long mid(long x) { return leaf(x) + leaf(x + 1); }\n\
    int main(int argc, char **argv) {\n\
      long n = atol(argv[1]) / 3; volatile long s = 0;\n\
      for (long i = 0; i < n; i++) s += mid(i);\n\
      FILE *f = fopen(\"/proc/self/status\", \"r\"); char line[256];\n\
      while (f && fgets(line, sizeof line, f)) if (line[0] == 'V' && line[2] == 'H') fputs(line, stderr);\n\
      return 0;\n\
    }\n";

fn fntrace() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.parent().unwrap().join("fntrace")
}

struct Run {
    wall: f64,
    sys: f64,
    peak_kb: u64,
}

fn children_sys() -> f64 {
    // SAFETY: getrusage fills the struct it is given.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut u) };
    u.ru_stime.tv_sec as f64 + u.ru_stime.tv_usec as f64 * 1e-6
}

fn run(mut c: Command) -> Run {
    let sys0 = children_sys();
    let t = Instant::now();
    let o = c.stdout(Stdio::null()).output().expect("run");
    let wall = t.elapsed().as_secs_f64();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let err = String::from_utf8_lossy(&o.stderr);
    let peak_kb = err
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .map(|v| v.trim().trim_end_matches("kB").trim().parse().unwrap_or(0))
        .unwrap_or(0);
    Run {
        wall,
        sys: children_sys() - sys0,
        peak_kb,
    }
}

fn main() {
    let calls: u64 = std::env::args()
        .nth(1)
        .map(|a| a.parse().expect("CALLS"))
        .unwrap_or(600_000_000);
    let dir = std::env::temp_dir().join(format!("fntrace-lifecycle-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join("p.c");
    std::fs::write(&src, PROG).unwrap();
    let bin = dir.join("p");
    let st = Command::new("gcc")
        .args(["-O2", "-pg", "-mfentry", "-o"])
        .arg(&bin)
        .arg(&src)
        .status()
        .expect("gcc is required");
    assert!(st.success());
    let data = dir.join("t.data");
    let rec = |opts: &[&str], env: Option<(&str, &str)>| {
        let mut c = Command::new(fntrace());
        c.arg("record")
            .arg("-o")
            .arg(&data)
            .args(opts)
            .arg("--")
            .arg(&bin);
        c.arg(calls.to_string());
        if let Some((k, v)) = env {
            c.env(k, v);
        }
        c
    };
    let bare = || {
        let mut c = Command::new(&bin);
        c.arg(calls.to_string());
        c
    };
    let names = ["bare", "plain", "no-helper", "ring"];
    let mut best: Vec<Option<Run>> = (0..names.len()).map(|_| None).collect();
    let mut bytes = 0;
    for _round in 0..2 {
        for (i, b) in best.iter_mut().enumerate() {
            let c = match i {
                0 => bare(),
                1 => rec(&[], None),
                2 => rec(&[], Some(("FNTRACE_BUFFER", "0"))),
                _ => rec(&["--ring", "64M"], None),
            };
            let r = run(c);
            if i == 1 {
                bytes = std::fs::metadata(&data).map(|m| m.len()).unwrap_or(0);
            }
            let _ = std::fs::remove_file(&data);
            if b.as_ref().is_none_or(|x| r.wall < x.wall) {
                *b = Some(r);
            }
        }
    }
    let best: Vec<Run> = best.into_iter().map(Option::unwrap).collect();
    println!(
        "{} calls, plain trace {:.2} GB; best of 2, same run",
        calls,
        bytes as f64 / 1e9
    );
    println!(
        "{:<10} {:>9} {:>12} {:>9} {:>11} {:>10}",
        "variant", "wall s", "added ns/call", "sys s", "sys/added", "peak RSS"
    );
    let base = best[0].wall;
    for (n, r) in names.iter().zip(&best) {
        let added = r.wall - base;
        println!(
            "{:<10} {:>9.3} {:>12.2} {:>9.3} {:>10.1}% {:>8} MB",
            n,
            r.wall,
            added * 1e9 / calls as f64,
            r.sys,
            if added > 0.0 {
                100.0 * r.sys / added
            } else {
                0.0
            },
            r.peak_kb / 1024
        );
    }
    let added = |i: usize| best[i].wall - base;
    println!(
        "ring / plain cost per call: {:.3}x (target <= 1.05)",
        added(3) / added(1)
    );
    println!(
        "no-helper / plain: cost per call {:.3}x, peak RSS {:.1}x",
        added(2) / added(1),
        best[2].peak_kb as f64 / best[1].peak_kb.max(1) as f64
    );
    let _ = std::fs::remove_dir_all(&dir);
}
