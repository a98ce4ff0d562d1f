//! The program of `tests/instrument_policy.rs`: functions with different
//! per-framework `#[instrument_fn]` settings, each called a distinct number
//! of times from `run`, each calling the unattributed `leaf` once.
use std::hint::black_box;

#[inline(never)]
fn leaf(x: u64) -> u64 {
    black_box(x) ^ 0x55
}

#[fntrace::instrument_fn]
#[inline(never)]
fn all_on(x: u64) -> u64 {
    leaf(x) + 1
}

#[fntrace::instrument_fn(mcount = "off")]
#[inline(never)]
fn no_mcount(x: u64) -> u64 {
    leaf(x) + 2
}

#[fntrace::instrument_fn(fentry = "off")]
#[inline(never)]
fn no_fentry(x: u64) -> u64 {
    leaf(x) + 3
}

#[fntrace::instrument_fn(xray = "off")]
#[inline(never)]
fn no_xray(x: u64) -> u64 {
    leaf(x) + 4
}

#[fntrace::instrument_fn(source = "off")]
#[inline(never)]
fn no_source(x: u64) -> u64 {
    leaf(x) + 5
}

#[fntrace::instrument_fn(off, xray = "on")]
#[inline(never)]
fn only_xray(x: u64) -> u64 {
    leaf(x) + 6
}

#[fntrace::instrument_fn(mcount = "off", fentry = "off")]
mod inner {
    #[inline(never)]
    pub fn mod_default(x: u64) -> u64 {
        super::leaf(x) + 7
    }

    #[instrument_fn(fentry = "on")]
    #[inline(never)]
    pub fn mod_override(x: u64) -> u64 {
        super::leaf(x) + 8
    }

    pub struct S(pub u64);

    #[instrument_fn(xray = "off")]
    impl S {
        #[inline(never)]
        pub fn method(&self) -> u64 {
            super::leaf(self.0) + 9
        }
    }
}

/// Per-function options, listed by `fntrace functions` (called once; it
/// lasts longer than its threshold, so its call is kept).
#[fntrace::instrument_fn(args = "1,2", retval, threshold = "10us")]
#[inline(never)]
fn with_options(a: u64, b: u64, c: u64) -> u64 {
    std::thread::sleep(std::time::Duration::from_micros(200));
    a + b + c
}

macro_rules! times {
    ($acc:ident, $k:expr, $n:expr, $f:expr) => {
        for i in 0..$k * $n {
            $acc = $acc.wrapping_add($f(black_box(i)));
        }
    };
}

#[fntrace::instrument_fn]
#[inline(never)]
fn run(n: u64) -> u64 {
    let mut acc = 0u64;
    times!(acc, 1, n, all_on);
    times!(acc, 2, n, no_mcount);
    times!(acc, 3, n, no_fentry);
    times!(acc, 4, n, no_xray);
    times!(acc, 5, n, no_source);
    times!(acc, 6, n, only_xray);
    times!(acc, 7, n, inner::mod_default);
    times!(acc, 8, n, inner::mod_override);
    for i in 0..9 * n {
        acc = acc.wrapping_add(inner::S(black_box(i)).method());
    }
    acc.wrapping_add(with_options(black_box(1), black_box(2), 3))
}

fn main() {
    let n: u64 = std::env::args().nth(1).unwrap().parse().unwrap();
    println!("{}", run(n) != 0);
}
