// Caught panics through mcount-instrumented frames.
use std::hint::black_box;

#[inline(never)]
fn boom(n: u32) -> u32 {
    if n == 0 {
        panic!("boom");
    }
    boom(black_box(n - 1)) + 1
}

#[inline(never)]
fn guarded(i: u32) -> u32 {
    std::panic::catch_unwind(|| boom(black_box(3))).unwrap_or(i)
}

#[inline(never)]
fn after(i: u32) -> u32 {
    black_box(i) + 1
}

fn main() {
    std::panic::set_hook(Box::new(|_| {}));
    let mut sum = 0;
    for i in 0..50 {
        sum += guarded(i) + after(i);
    }
    println!("{sum}");
}
