// Per-framework options and per-function options with unknown keys,
// unknown frameworks and bad values: each error points at the token.

#[fntrace::instrument_fn(mcount = "of")]
fn bad_switch() {}

#[fntrace::instrument_fn(cyg = "off")]
fn unknown_framework() {}

#[fntrace::instrument_fn(xray = "on", colour = "red")]
fn unknown_key() {}

#[fntrace::instrument_fn(fentry)]
fn framework_without_value() {}

#[fntrace::instrument_fn(args = "0,7")]
fn args_out_of_range() {}

#[fntrace::instrument_fn(args = "1,1")]
fn args_twice() {}

#[fntrace::instrument_fn(args = 2)]
fn args_not_a_string() {}

#[fntrace::instrument_fn(threshold = "10 parsecs")]
fn threshold_unit() {}

#[fntrace::instrument_fn(threshold = "0us")]
fn threshold_zero() {}

#[fntrace::instrument_fn(retval = "maybe")]
fn retval_value() {}

#[fntrace::instrument_fn(mcount = "off", mcount = "on")]
fn key_twice() {}

#[fntrace::instrument_fn(xray = "off", off)]
fn off_after_frameworks() {}

#[fntrace::instrument_fn(source = )]
fn missing_value() {}

#[fntrace::instrument_fn]
mod m {
    #[instrument_fn(mcount = "no")]
    fn inner_bad() {}

    #[instrument_fn(threshold = "fast")]
    fn inner_threshold() {}

    pub struct G<T>(pub T);

    impl<T: Copy> G<T> {
        // Options that need the function's address, on a function that
        // has none of its own.
        #[instrument_fn(mcount = "off")]
        pub fn get(&self) -> T {
            self.0
        }
    }

    pub trait Tr {
        #[instrument_fn(args = "1")]
        fn provided(&self) {}
    }
}

#[fntrace::instrument_fn(xray = "off")]
fn generic<T>(t: T) -> T {
    t
}

#[fntrace::instrument_fn(retval)]
async fn later() {}

fn main() {}
