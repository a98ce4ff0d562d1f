// Inside an instrumented container, the attribute on an item that is not a
// function, module, impl or trait.

#[fntrace::instrument_fn]
mod m {
    #[instrument_fn = "off"]
    pub struct S;

    #[instrument_fn]
    pub const C: u8 = 1;

    pub struct P;

    impl P {
        #[instrument_fn = "off"]
        const K: u8 = 2;
    }

    pub trait T {
        #[instrument_fn]
        type A;
    }

    #[instrument_fn = "off"]
    unsafe extern "C" {
        pub safe fn abs(x: i32) -> i32;
    }

    unsafe extern "C" {
        #[instrument_fn]
        pub fn labs(x: i64) -> i64;
    }
}

fn main() {}
