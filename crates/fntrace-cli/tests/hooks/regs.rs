// A recursion whose functions keep their arguments in callee-saved
// registers across calls (rustc moves them there before `call mcount`),
// run while fntrace converts the `call mcount`s on a runtime thread.
// Every value it prints depends on those registers surviving each call,
// and it counts its own calls for the test to compare with the trace.
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

static WALKS: AtomicU64 = AtomicU64::new(0);
static LEAVES: AtomicU64 = AtomicU64::new(0);

#[inline(never)]
fn leaf(a: u64, b: u64, c: u64) -> u64 {
    LEAVES.fetch_add(1, Relaxed);
    std::hint::black_box(a ^ b.rotate_left(7) ^ c)
}

#[inline(never)]
fn walk(n: u32, a: u64, b: u64, c: u64) -> u64 {
    WALKS.fetch_add(1, Relaxed);
    if n < 2 {
        return leaf(a, b, c);
    }
    let x = walk(n - 1, a.wrapping_mul(3), b ^ c, c.wrapping_add(1));
    let y = walk(n - 2, b, a, c ^ x);
    x.wrapping_add(y)
        .wrapping_mul(a | 1)
        .wrapping_add(b)
        .rotate_left((c % 63) as u32)
}

#[inline(never)]
fn round(i: u64) -> u64 {
    walk(18, i, i.wrapping_mul(0x9e37_79b9), !i)
}

fn main() {
    let n: u64 = std::env::args().nth(1).unwrap().parse().unwrap();
    let mut s = 0u64;
    for i in 0..n {
        s = s.wrapping_add(round(i));
    }
    println!("{s} {} {}", WALKS.load(Relaxed), LEAVES.load(Relaxed));
}
