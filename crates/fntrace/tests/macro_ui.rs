//! Compile tests of `#[instrument_fn]` (through the `fntrace` facade):
//! `tests/ui/pass/*.rs` must compile without warnings and run successfully,
//! `tests/ui/fail/*.rs` must fail with the errors in the `.stderr` next to
//! them. Regenerate snapshots with `TRYBUILD=overwrite cargo test -p fntrace
//! --test macro_ui` and review the diff.

#[test]
fn ui() {
    let t = trybuild::TestCases::new();
    t.pass("tests/ui/pass/*.rs");
    t.compile_fail("tests/ui/fail/*.rs");
}
