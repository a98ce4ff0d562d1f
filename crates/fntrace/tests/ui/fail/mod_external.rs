// `mod name;` (a module in another file): the module's contents are not in
// the attribute's input.

#[fntrace::instrument_fn]
mod ext_mod;

fn main() {}
