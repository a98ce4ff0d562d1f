// One item, several #[instrument_fn] attributes.

#[fntrace::instrument_fn]
#[fntrace::instrument_fn]
fn twice() {}

#[fntrace::instrument_fn]
#[fntrace::instrument_fn(off)]
fn conflicting() {}

#[fntrace::instrument_fn]
mod m {
    #[instrument_fn = "on"]
    #[instrument_fn = "off"]
    fn inner_conflict() {}

    #[instrument_fn]
    #[instrument_fn]
    fn inner_twice() {}
}

fn main() {}
