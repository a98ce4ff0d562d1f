//! Return types and control flow: `impl Iterator`, `impl Fn`, `-> !`, `?`
//! in `Result` and `Option` functions, early `return`, labelled loops,
//! panics unwinding through instrumented functions.
#![deny(warnings)]

#[path = "../support.rs"]
mod support;

use std::num::ParseIntError;

#[fntrace::instrument_fn]
fn evens(limit: u32) -> impl Iterator<Item = u32> {
    (0..limit).filter(|x| x % 2 == 0)
}

#[fntrace::instrument_fn]
fn chars_of<'a>(s: &'a str) -> impl Iterator<Item = char> + 'a {
    s.chars().rev()
}

#[fntrace::instrument_fn]
fn adder(k: i32) -> impl Fn(i32) -> i32 {
    move |x| x + k
}

#[fntrace::instrument_fn]
fn boxed_iter(v: Vec<u8>) -> Box<dyn Iterator<Item = u8>> {
    Box::new(v.into_iter().map(|x| x + 1))
}

#[fntrace::instrument_fn]
fn fail(msg: &str) -> ! {
    panic!("fail: {msg}")
}

#[fntrace::instrument_fn]
fn spin_until(n: u32) -> u32 {
    let mut i = 0;
    'outer: loop {
        loop {
            i += 1;
            if i >= n {
                break 'outer i;
            }
            if i % 2 == 0 {
                continue 'outer;
            }
        }
    }
}

#[fntrace::instrument_fn]
fn sum(a: &str, b: &str) -> Result<i32, ParseIntError> {
    let a: i32 = a.trim().parse()?;
    let b = b.trim().parse::<i32>()?;
    Ok(a + b)
}

#[fntrace::instrument_fn]
fn both(a: Option<u8>, b: Option<u8>) -> Option<u8> {
    a?.checked_add(b?)
}

#[fntrace::instrument_fn]
fn classify(n: i32) -> &'static str {
    if n < 0 {
        return "negative";
    }
    match n {
        0 => "zero",
        _ => "positive",
    }
}

#[fntrace::instrument_fn]
fn main_like() -> Result<(), Box<dyn std::error::Error>> {
    let v: u8 = "12".parse()?;
    assert_eq!(v, 12);
    Ok(())
}

fn main() {
    assert_eq!(
        support::traced(|| evens(7).collect::<Vec<_>>()),
        [0, 2, 4, 6]
    );
    assert_eq!(chars_of("abc").collect::<String>(), "cba");
    assert_eq!(adder(2)(40), 42);
    assert_eq!(boxed_iter(vec![1, 2]).collect::<Vec<_>>(), [2, 3]);
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let err = std::panic::catch_unwind(|| fail("x")).unwrap_err();
    std::panic::set_hook(hook);
    assert_eq!(
        err.downcast_ref::<String>().map(String::as_str),
        Some("fail: x")
    );
    assert_eq!(spin_until(5), 5);
    assert_eq!(sum("1", " 2 "), Ok(3));
    assert_eq!(
        sum("1", "z").unwrap_err().to_string(),
        "invalid digit found in string"
    );
    assert!(sum("", "1").is_err());
    assert_eq!(both(Some(1), Some(2)), Some(3));
    assert_eq!(both(None, Some(2)), None);
    assert_eq!(both(Some(255), Some(1)), None);
    assert_eq!(classify(-1), "negative");
    assert_eq!(classify(0), "zero");
    assert_eq!(classify(9), "positive");
    main_like().unwrap();
}
