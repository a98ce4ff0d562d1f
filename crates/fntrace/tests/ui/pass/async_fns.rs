//! `async fn`: returning a value, `impl Trait`, `Result` with `?`,
//! borrowing arguments, methods with receivers, async fns in traits and
//! trait impls, a future that is pending in between.
#![deny(warnings)]

#[path = "../support.rs"]
mod support;

use std::fmt::Display;
use support::{YieldOnce, block_on};

#[fntrace::instrument_fn]
async fn answer() -> u32 {
    YieldOnce(false).await;
    42
}

#[fntrace::instrument_fn]
async fn shown(x: u32) -> impl Display {
    format!("#{x}")
}

#[fntrace::instrument_fn]
async fn unit(out: &mut Vec<u8>) {
    out.push(1);
    YieldOnce(false).await;
    out.push(2);
}

#[fntrace::instrument_fn]
async fn parse_sum(a: &str, b: &str) -> Result<i64, std::num::ParseIntError> {
    let a: i64 = a.parse()?;
    YieldOnce(false).await;
    let b: i64 = b.parse()?;
    Ok(a + b)
}

#[fntrace::instrument_fn]
async fn first_word(s: &str) -> &str {
    s.split(' ').next().unwrap_or(s)
}

#[fntrace::instrument_fn]
async fn early(flag: bool) -> &'static str {
    if flag {
        return "early";
    }
    "late"
}

// Return types whose names contain "impl" must not lose their type.
type ImplResult<T> = Result<T, Box<dyn std::error::Error>>;

#[fntrace::instrument_fn]
async fn simple(s: &str) -> ImplResult<u8> {
    let v = s.parse::<u8>()?;
    Ok(v)
}

#[fntrace::instrument_fn]
async fn simple_inferred(s: &str) -> ImplResult<u8> {
    Ok(s.parse()?)
}

struct Account {
    balance: i64,
}

impl Account {
    #[fntrace::instrument_fn]
    async fn deposit(&mut self, v: i64) -> i64 {
        YieldOnce(false).await;
        self.balance += v;
        self.balance
    }

    #[fntrace::instrument_fn]
    async fn close(self) -> i64 {
        self.balance
    }
}

#[fntrace::instrument_fn]
trait Source {
    async fn fetch(&self) -> u32;

    async fn fetch_twice(&self) -> u32 {
        self.fetch().await + self.fetch().await
    }
}

struct Const(u32);

#[fntrace::instrument_fn]
impl Source for Const {
    async fn fetch(&self) -> u32 {
        YieldOnce(false).await;
        self.0
    }
}

fn main() {
    assert_eq!(support::traced(|| block_on(answer())), 42);
    // Creating the future does not run (or record) anything.
    let fut = support::untraced(answer);
    assert_eq!(block_on(fut), 42);
    assert_eq!(block_on(shown(7)).to_string(), "#7");
    let mut v = vec![];
    block_on(unit(&mut v));
    assert_eq!(v, [1, 2]);
    assert_eq!(block_on(parse_sum("40", "2")), Ok(42));
    assert!(block_on(parse_sum("x", "2")).is_err());
    assert!(block_on(parse_sum("1", "y")).is_err());
    assert_eq!(block_on(first_word("hello world")), "hello");
    assert_eq!(block_on(early(true)), "early");
    assert_eq!(block_on(early(false)), "late");
    assert_eq!(block_on(simple("7")).unwrap(), 7);
    assert!(block_on(simple("700")).is_err());
    assert_eq!(block_on(simple_inferred("8")).unwrap(), 8);

    let mut acc = Account { balance: 1 };
    assert_eq!(support::traced(|| block_on(acc.deposit(2))), 3);
    assert_eq!(support::traced(|| block_on(acc.close())), 3);

    let c = Const(5);
    assert_eq!(support::traced(|| block_on(c.fetch_twice())), 10);
}
