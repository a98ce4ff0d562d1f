trait T {
    #[fntrace::instrument_fn]
    fn required(&self) -> u8;
}

#[fntrace::instrument_fn(off)]
trait U {
    #[instrument_fn = "on"]
    fn required(&self) -> u8;

    #[instrument_fn = "on"]
    fn provided(&self) -> u8 {
        1
    }
}

fn main() {}
