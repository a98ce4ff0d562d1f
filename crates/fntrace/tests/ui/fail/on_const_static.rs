#[fntrace::instrument_fn]
const C: u8 = 1;

#[fntrace::instrument_fn]
static S: u8 = 2;

fn main() {}
