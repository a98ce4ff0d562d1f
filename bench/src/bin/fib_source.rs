//! `examples/workloads/fib.rs` with source-level instrumentation
//! (`#[fntrace::instrument_fn]`): the benchmark suite's "source" mode.
//! Records when `FNTRACE_OUTPUT` is set. fib(n) makes 2*fib(n+1)-1 calls.

#[fntrace::instrument_fn]
mod work {
    /// Recursive Fibonacci, as in `fib.rs`.
    #[inline(never)]
    pub fn fib(n: u64) -> u64 {
        if n < 2 {
            return n;
        }
        let a = fib(std::hint::black_box(n - 1));
        let b = fib(std::hint::black_box(n - 2));
        a + b
    }
}

fn main() {
    let n: u64 = std::env::args()
        .nth(1)
        .map(|s| s.parse().expect("n"))
        .unwrap_or(30);
    println!("{}", work::fib(n));
}
