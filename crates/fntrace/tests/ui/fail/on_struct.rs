#[fntrace::instrument_fn]
struct S {
    x: u8,
}

#[fntrace::instrument_fn]
struct T(u8);

fn main() {}
