// Rust panics caught by `catch_unwind` three traced frames up, on four
// threads: every other round `pc` panics through `pb` and `pa` into the
// `catch_unwind` of `guarded`, which then calls `noted`.
use std::hint::black_box;

const THREADS: u32 = 4;
const ROUNDS: u32 = 25;

#[inline(never)]
fn pc(i: u32) -> u32 {
    if i % 2 == 0 {
        panic!("even");
    }
    black_box(i)
}

#[inline(never)]
fn pb(i: u32) -> u32 {
    pc(black_box(i)) + 1
}

#[inline(never)]
fn pa(i: u32) -> u32 {
    pb(black_box(i)) + 1
}

#[inline(never)]
fn noted(i: u32) -> u32 {
    black_box(i) & 1
}

#[inline(never)]
fn guarded(i: u32) -> u32 {
    let r = std::panic::catch_unwind(|| pa(black_box(i)));
    // A traced call between the catch and the return: its caller must be
    // this function, not a frame the panic left.
    noted(black_box(i)) + r.unwrap_or(0)
}

#[inline(never)]
fn after(i: u32) -> u32 {
    black_box(i) + 1
}

#[inline(never)]
fn worker(rounds: u32) -> u32 {
    let mut sum = 0;
    let mut i = 0;
    while i < rounds {
        sum += guarded(black_box(i));
        sum += after(black_box(i));
        i += 1;
    }
    sum
}

fn main() {
    std::panic::set_hook(Box::new(|_| {}));
    let threads: Vec<_> = (0..THREADS)
        .map(|_| std::thread::spawn(|| worker(black_box(ROUNDS))))
        .collect();
    let sum: u32 = threads.into_iter().map(|t| t.join().unwrap()).sum();
    println!("{sum}");
}
