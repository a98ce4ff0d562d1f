//! Markers inside the runtime: the code patcher for static-key markers
//! ([`keys`]), installed into `fntrace-markers` before `main`, and the
//! recording probe that writes marker events into the trace ([`record`]),
//! attached at start-up to the markers `-M` selects. A mechanism: it
//! records through the sink and patches through the `patch` leaf.
//!
//! Declaring, firing, probe arrays and the grace period live in the
//! `fntrace-markers` crate (it must build without `std`).

pub mod keys;
pub mod record;

pub use record::{MarkerError, record_markers};

/// Installs the static-key patcher (idempotent; also done before `main`).
pub fn init() {
    fntrace_markers::set_key_patcher(keys::patch_marker);
}

/// Runs at program start so that static-key markers can be enabled by any
/// code, including code that only uses `fntrace-markers`.
#[used]
#[unsafe(link_section = ".init_array")]
static INIT_MARKERS: extern "C" fn() = {
    extern "C" fn init_markers() {
        init();
    }
    init_markers
};
