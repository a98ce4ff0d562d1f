#[fntrace::instrument_fn]
const fn c() -> u8 {
    1
}

struct S;

impl S {
    #[fntrace::instrument_fn]
    pub const fn m(&self) -> u8 {
        2
    }
}

// Inside a container a const fn is left alone, but explicitly turning the
// attribute on for it is an error.
#[fntrace::instrument_fn]
mod m {
    pub const fn skipped() -> u8 {
        3
    }

    #[instrument_fn = "on"]
    pub const fn explicit() -> u8 {
        4
    }

    pub struct T;

    impl T {
        #[instrument_fn]
        pub const fn method(&self) -> u8 {
            5
        }
    }
}

fn main() {}
