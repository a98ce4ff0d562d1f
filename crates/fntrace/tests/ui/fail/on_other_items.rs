#[fntrace::instrument_fn]
use std::fmt;

#[fntrace::instrument_fn]
type Alias = u8;

#[fntrace::instrument_fn]
union U {
    a: u8,
}

#[fntrace::instrument_fn]
unsafe extern "C" {
    fn abs(x: i32) -> i32;
}

#[fntrace::instrument_fn]
macro_rules! m {
    () => {};
}

fn main() {}
