//! Cost of an instrumented call (entry + exit recorded) against the same
//! code uninstrumented, measured in one run; also the cost when not
//! recording and the bytes per call on disk. Prints ratios, asserts nothing.
//!
//! Run: `cargo bench -p fntrace --bench call_cost`

use std::hint::black_box;
use std::time::Instant;

#[inline(never)]
fn plain_fib(n: u64) -> u64 {
    if n < 2 {
        n
    } else {
        plain_fib(black_box(n - 1)) + plain_fib(black_box(n - 2))
    }
}

#[fntrace::instrument_fn]
mod traced {
    use std::hint::black_box;
    #[inline(never)]
    pub fn fib(n: u64) -> u64 {
        if n < 2 {
            n
        } else {
            fib(black_box(n - 1)) + fib(black_box(n - 2))
        }
    }
}

fn best_of(runs: usize, f: impl Fn() -> u64) -> f64 {
    (0..runs)
        .map(|_| {
            let t = Instant::now();
            black_box(f());
            t.elapsed().as_secs_f64()
        })
        .fold(f64::INFINITY, f64::min)
}

fn main() {
    let n = 27u64;
    let calls = (2 * plain_fib(n + 1) - 1) as f64;
    let plain = best_of(5, || plain_fib(black_box(n))) / calls * 1e9;
    let off = best_of(5, || traced::fib(black_box(n))) / calls * 1e9;
    let dir = std::env::temp_dir().join(format!("fntrace-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("bench.data");
    let mut on = f64::INFINITY;
    let mut bytes = 0u64;
    for _ in 0..5 {
        fntrace::start(&path).unwrap();
        let t = Instant::now();
        black_box(traced::fib(black_box(n)));
        on = on.min(t.elapsed().as_secs_f64() / calls * 1e9);
        bytes = fntrace::stop().unwrap().bytes;
    }
    let _ = std::fs::remove_dir_all(&dir);
    // The floor: two timestamps per call.
    let reads = 1_000_000u32;
    let tsc = best_of(5, || {
        let mut x = 0u64;
        for _ in 0..reads {
            // SAFETY: rdtsc has no preconditions on x86_64.
            x = x.wrapping_add(unsafe { core::arch::x86_64::_rdtsc() });
        }
        x
    }) / f64::from(reads)
        * 1e9;
    println!("fib({n}): {calls} calls per run, best of 5");
    println!(
        "rdtsc                      {tsc:8.2} ns (two per recorded call: {:.2} ns)",
        2.0 * tsc
    );
    println!("uninstrumented             {plain:8.2} ns/call");
    println!(
        "instrumented, not recording {off:7.2} ns/call  ({:.2}x uninstrumented)",
        off / plain
    );
    println!(
        "instrumented, recording    {on:8.2} ns/call  ({:.2}x uninstrumented, +{:.2} ns)",
        on / plain,
        on - plain
    );
    println!(
        "trace size                 {:8.2} bytes/call (whole file: header, metadata, chunk headers)",
        bytes as f64 / calls
    );
}
