//! Per-framework and per-function options compile on every kind of item
//! the attribute takes; `source = "off"` leaves out the source guard only,
//! inner settings override outer ones.
#![deny(warnings)]

#[path = "../support.rs"]
mod support;

use support::{traced, untraced};

#[fntrace::instrument_fn(mcount = "off", xray = "on", fentry = "off", source = "on")]
fn all_keys() -> u8 {
    1
}

#[fntrace::instrument_fn(source = "off")]
fn no_source() -> u8 {
    2
}

#[fntrace::instrument_fn(off, xray = "on")]
fn only_xray() -> u8 {
    3
}

#[fntrace::instrument_fn(args = "1, 2", retval, threshold = "1.5ms")]
fn options(a: u64, b: u64) -> u64 {
    a + b
}

#[fntrace::instrument_fn(mcount = off, patchable = "off", retval = "off", threshold = "250ns")]
fn bare_words_and_alias() -> u8 {
    4
}

#[fntrace::instrument_fn(source = "off")]
mod quiet {
    pub fn a() -> u8 {
        5
    }

    #[instrument_fn(source = "on")]
    pub fn loud() -> u8 {
        6
    }

    pub struct S(pub u8);

    #[instrument_fn(xray = "off", source = "on")]
    impl S {
        pub fn get(&self) -> u8 {
            self.0
        }

        #[instrument_fn(source = "off")]
        pub fn silent(&self) -> u8 {
            self.0 + 1
        }
    }

    pub trait T {
        #[instrument_fn(source = "on")]
        fn twice(&self) -> u8 {
            14
        }
    }

    impl T for S {}

    // Impl headers with lifetimes or `Self` are not registered (a static
    // inside the method could not name them); the source guard applies.
    pub struct Borrow<'a>(pub &'a u8);

    #[instrument_fn(source = "on")]
    impl Borrow<'_> {
        pub fn get(&self) -> u8 {
            *self.0
        }
    }

    #[instrument_fn(source = "on")]
    impl PartialEq<Self> for S {
        fn eq(&self, other: &Self) -> bool {
            self.0 == other.0
        }
    }

    // Generic and async functions take the source setting.
    #[instrument_fn(source = "on")]
    pub fn generic<X: Copy>(x: X) -> X {
        x
    }
}

use quiet::T as _;

fn main() {
    assert_eq!(traced(all_keys), 1);
    assert_eq!(untraced(no_source), 2);
    assert_eq!(untraced(only_xray), 3);
    assert_eq!(traced(|| options(1, 2)), 3);
    assert_eq!(traced(bare_words_and_alias), 4);
    assert_eq!(untraced(quiet::a), 5);
    assert_eq!(traced(quiet::loud), 6);
    let s = quiet::S(7);
    assert_eq!(traced(|| s.get()), 7);
    assert_eq!(untraced(|| s.silent()), 8);
    assert_eq!(traced(|| s.twice()), 14);
    assert_eq!(traced(|| quiet::generic(9u8)), 9);
    assert_eq!(traced(|| quiet::Borrow(&10).get()), 10);
    assert!(traced(|| quiet::S(1) == quiet::S(1)));
    // A local impl inside a function body.
    struct L(u8);
    #[fntrace::instrument_fn(mcount = "off")]
    impl L {
        fn get(&self) -> u8 {
            self.0
        }
    }
    assert_eq!(traced(|| L(11).get()), 11);
}
