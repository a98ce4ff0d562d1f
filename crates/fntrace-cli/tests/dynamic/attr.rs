// One function with a patchable entry from the attribute (prefix 8, entry
// 2: the layout fntrace switches with one store), one without.
#![feature(patchable_function_entry)]
use std::hint::black_box;

#[patchable_function_entry(prefix_nops = 8, entry_nops = 2)]
#[inline(never)]
fn traced(n: u64) -> u64 {
    if n < 2 { n } else { traced(black_box(n - 1)) + traced(black_box(n - 2)) }
}

#[inline(never)]
fn untraced(n: u64) -> u64 {
    black_box(n) * 2
}

fn main() {
    let n: u64 = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(10);
    println!("{}", traced(n) + untraced(n));
}
