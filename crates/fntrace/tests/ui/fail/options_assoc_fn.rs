// Options on a standalone associated function without `self`: its name
// does not resolve from inside its body; the error points at the options.

#[fntrace::instrument_fn(source = "off")]
fn free() {}
pub struct S;
impl S {
    #[fntrace::instrument_fn(mcount = "off")]
    pub fn new() -> S { S }
}
fn main() { free(); let _ = S::new(); }
