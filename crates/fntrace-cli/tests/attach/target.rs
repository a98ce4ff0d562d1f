//! The Rust twin of `target.c` for `fntrace record -p`: four workers call
//! `outer` → `middle` → `leaf_mul`/`leaf_add` in a loop and check every
//! result; the main thread answers `rate`, `spawn` and `quit` on standard
//! input, and takes an optional pace argument (see target.c).

use std::io::{BufRead, Write};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Instant;

static STOP: AtomicBool = AtomicBool::new(false);
static ITERATIONS: AtomicU64 = AtomicU64::new(0);
static ERRORS: AtomicU64 = AtomicU64::new(0);

#[inline(never)]
fn leaf_add(a: i64, b: i64) -> i64 {
    std::hint::black_box(a + b)
}

#[inline(never)]
fn leaf_mul(a: i64, b: i64) -> i64 {
    std::hint::black_box(a * b)
}

#[inline(never)]
fn middle(i: i64) -> i64 {
    leaf_add(leaf_mul(i, 3), leaf_mul(i, i))
}

#[inline(never)]
fn outer(i: i64) -> i64 {
    leaf_add(middle(i), middle(i + 1))
}

fn want(i: i64) -> i64 {
    (3 * i + i * i) + (3 * (i + 1) + (i + 1) * (i + 1))
}

#[inline(never)]
fn worker(seed: i64, pace: u64) {
    let mut n: u64 = 0;
    while !STOP.load(Ordering::Relaxed) {
        let i = (n % 1000) as i64 + seed;
        if outer(i) != want(i) {
            ERRORS.fetch_add(1, Ordering::Relaxed);
        }
        n += 1;
        if n & 255 == 0 {
            ITERATIONS.fetch_add(256, Ordering::Relaxed);
        }
        if pace != 0 && n % pace == 0 {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }
}

#[inline(never)]
fn short_lived() {
    for i in 0..1000 {
        if outer(i) != want(i) {
            ERRORS.fetch_add(1, Ordering::Relaxed);
        }
    }
}

fn main() {
    let pace: u64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(0);
    let workers: Vec<_> = (0..4)
        .map(|k| std::thread::spawn(move || worker(k * 7, pace)))
        .collect();
    let mut out = std::io::stdout().lock();
    writeln!(out, "ready {}", std::process::id()).unwrap();
    out.flush().unwrap();
    let (mut last_n, mut last_t) = (0u64, Instant::now());
    for line in std::io::stdin().lock().lines() {
        let line = line.unwrap();
        match line.trim() {
            "rate" => {
                let n = ITERATIONS.load(Ordering::Relaxed);
                let t = Instant::now();
                writeln!(out, "rate {} {}", n - last_n, (t - last_t).as_nanos()).unwrap();
                (last_n, last_t) = (n, t);
            }
            "spawn" => {
                std::thread::spawn(short_lived).join().unwrap();
                writeln!(out, "spawned").unwrap();
            }
            "quit" => break,
            _ => {}
        }
        out.flush().unwrap();
    }
    STOP.store(true, Ordering::Relaxed);
    for w in workers {
        w.join().unwrap();
    }
    let e = ERRORS.load(Ordering::Relaxed);
    writeln!(out, "ok iterations={} errors={e}", ITERATIONS.load(Ordering::Relaxed)).unwrap();
    out.flush().unwrap();
    std::process::exit(if e == 0 { 0 } else { 3 });
}
