// `off` does not make the attribute valid on a non-function item.

#[fntrace::instrument_fn(off)]
struct S;

fn main() {}
