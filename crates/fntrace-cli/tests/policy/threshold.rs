//! The program of `tests/threshold.rs`: `maybe_slow` has
//! `#[instrument_fn(threshold = "40ms")]`; for even `i` it sleeps 80 ms,
//! for odd `i` it returns at once. Both kinds call `inner` (which calls
//! `leaf`), and so does `plain`, which has no threshold.
use std::hint::black_box;
use std::time::Duration;

#[inline(never)]
fn leaf(x: u64) -> u64 {
    black_box(x) ^ 0x55
}

#[inline(never)]
fn inner(x: u64) -> u64 {
    leaf(x) + 1
}

#[fntrace::instrument_fn(threshold = "40ms")]
#[inline(never)]
fn maybe_slow(i: u64) -> u64 {
    if i % 2 == 0 {
        std::thread::sleep(Duration::from_millis(80));
    }
    inner(i)
}

#[inline(never)]
fn plain(i: u64) -> u64 {
    inner(i) * 2
}

#[inline(never)]
fn run(n: u64) -> u64 {
    let mut s = 0;
    for i in 0..n {
        s += maybe_slow(i);
        s += plain(i);
    }
    s
}

fn main() {
    let n: u64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(6);
    println!("{}", black_box(run(n)) > 0);
}
