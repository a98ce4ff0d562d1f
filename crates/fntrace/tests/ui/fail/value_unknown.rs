// Values of the attribute that are neither on nor off.

#[fntrace::instrument_fn(maybe)]
fn list_maybe() {}

#[fntrace::instrument_fn("maybe")]
fn list_quoted() {}

#[fntrace::instrument_fn(on, off)]
fn list_two() {}

#[fntrace::instrument_fn(off = true)]
fn list_assign() {}

#[fntrace::instrument_fn]
mod m {
    #[instrument_fn = "maybe"]
    fn eq_maybe() {}

    #[instrument_fn = 1]
    fn eq_int() {}

    #[instrument_fn = true]
    fn eq_bool() {}

    #[instrument_fn(maybe)]
    fn inner_list() {}

    #[instrument_fn = "OFF"]
    fn eq_upper() {}
}

fn main() {}
