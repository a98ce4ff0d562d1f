// Standalone, the `= "..."` form is rejected by rustc itself (attribute
// macros take no key-value form); the message should still be usable.

#[fntrace::instrument_fn = "off"]
fn off() {}

#[fntrace::instrument_fn = 1]
fn one() {}

fn main() {}
