//! An example program traced with `#[fntrace::instrument_fn]`: recursive
//! Fibonacci in an instrumented module, plus a few helpers, so that
//! `fntrace record -- fib-example 25` shows a report and a call tree.
//! fib(n) makes exactly 2*fib(n+1)-1 calls of `fib`.

#[fntrace::instrument_fn]
mod work {
    /// Recursive Fibonacci (not turned into a loop: both calls are real).
    pub fn fib(n: u64) -> u64 {
        if n < 2 {
            return n;
        }
        fib(std::hint::black_box(n - 1)) + fib(std::hint::black_box(n - 2))
    }

    /// Parses the argument.
    pub fn parse(arg: Option<String>) -> Result<u64, std::num::ParseIntError> {
        arg.as_deref().unwrap_or("25").trim().parse::<u64>()
    }

    /// Not traced.
    #[instrument_fn = "off"]
    pub fn untraced(x: u64) -> u64 {
        x + 1
    }

    /// The program.
    pub fn run(arg: Option<String>) -> u64 {
        let n = match parse(arg) {
            Ok(n) => n,
            Err(e) => {
                eprintln!("fib-example: bad argument: {e}");
                std::process::exit(2);
            }
        };
        untraced(fib(n)) - 1
    }
}

fn main() {
    println!("{}", work::run(std::env::args().nth(1)));
}
