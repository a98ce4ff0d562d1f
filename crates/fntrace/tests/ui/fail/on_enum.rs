#[fntrace::instrument_fn]
enum E {
    A,
    B(u8),
}

fn main() {}
