//! Items with other attributes and doc comments, in either order with
//! `#[instrument_fn]`; inner attributes in function bodies; `cfg`'d items;
//! the attribute by full path and after `use`.
#![deny(warnings)]
#![deny(missing_docs)]

#[path = "../support.rs"]
mod support;

use fntrace::instrument_fn;

/// Doubles.
#[inline]
#[must_use]
#[fntrace::instrument_fn]
pub fn double(x: u32) -> u32 {
    x * 2
}

/// Triples.
#[instrument_fn]
#[inline(never)]
#[must_use = "the result is the point"]
pub fn triple(x: u32) -> u32 {
    #![allow(unused_variables)]
    let unused = 0;
    x * 3
}

/// Tracks the caller.
#[track_caller]
#[instrument_fn]
pub fn caller_line() -> u32 {
    std::panic::Location::caller().line()
}

/// Deprecated but instrumented.
#[deprecated = "use double"]
#[instrument_fn]
pub fn old(x: u32) -> u32 {
    x
}

/// A documented module.
#[instrument_fn]
pub mod documented {
    //! Inner doc comment.

    /// Only on unix.
    #[cfg(unix)]
    pub fn platform() -> &'static str {
        "unix"
    }

    /// Elsewhere.
    #[cfg(not(unix))]
    pub fn platform() -> &'static str {
        "other"
    }

    /// Cold.
    #[cold]
    #[instrument_fn = "off"]
    #[allow(unused_variables)]
    pub fn cold(unused: u8) -> u8 {
        0
    }

    /// A type.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub struct P(pub u8);

    impl P {
        /// Inner.
        #[inline(always)]
        #[must_use]
        pub fn get(self) -> u8 {
            self.0
        }
    }
}

fn main() {
    assert_eq!(support::traced(|| double(2)), 4);
    assert_eq!(support::traced(|| triple(2)), 6);
    let line = caller_line();
    assert_eq!(line, line!() - 1);
    #[allow(deprecated)]
    let o = old(1);
    assert_eq!(o, 1);
    assert_eq!(support::traced(documented::platform), "unix");
    assert_eq!(support::untraced(|| documented::cold(1)), 0);
    assert_eq!(support::traced(|| documented::P(3).get()), 3);
}
