// Caught panics through mcount-instrumented frames, and a Rust backtrace
// taken inside traced code.
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

#[inline(never)]
fn frames() -> String {
    let bt = std::backtrace::Backtrace::force_capture();
    // Function names only (addresses differ between runs).
    format!("{bt:?}")
        .split("fn: \"")
        .skip(1)
        .map(|s| s.split('"').next().unwrap_or("?").to_string())
        .take_while(|n| !n.contains("lang_start_internal"))
        .collect::<Vec<_>>()
        .join(",")
}

#[inline(never)]
fn outer() -> String {
    let s = frames();
    black_box(s)
}

fn main() {
    std::panic::set_hook(Box::new(|_| {}));
    let mut sum = 0;
    for i in 0..50 {
        sum += guarded(i) + after(i);
    }
    println!("{sum}\n{}", outer());
}
