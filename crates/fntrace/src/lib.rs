//! fntrace facade.
pub use fntrace_macros::instrument_fn;

#[doc(hidden)]
pub mod __private {
    pub use fntrace_rt::site::{Guard, Instrumented, Site, enter, enter_method, instrument_future};
}
