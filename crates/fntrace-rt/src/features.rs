//! The feature word: one atomic whose bits say which optional work the
//! hot paths must look at (filters, a depth limit, counting, argument
//! capture). 0, the common case, is tested with one load; the assembly
//! fast paths read it by symbol. A leaf: set by policy, read everywhere.

use std::sync::atomic::{AtomicU32, Ordering};

/// Bits of the features the hook hot path must look at (0: none, the
/// common case, tested with one load).
pub(crate) static FEATURES: AtomicU32 = AtomicU32::new(0);
/// `-F`/`-N` filters are active.
pub(crate) const FEAT_FILTERS: u32 = 1;
/// A depth limit is set.
pub(crate) const FEAT_DEPTH: u32 = 2;
/// Counting mode.
pub(crate) const FEAT_COUNT: u32 = 4;

/// The features in force (see the `FEAT_*` bits).
#[inline(always)]
pub(crate) fn features() -> u32 {
    FEATURES.load(Ordering::Relaxed)
}

/// Turns a feature bit on or off.
pub(crate) fn set_feature(bit: u32, on: bool) {
    if on {
        FEATURES.fetch_or(bit, Ordering::Relaxed);
    } else {
        FEATURES.fetch_and(!bit, Ordering::Relaxed);
    }
}
/// Feature bit: `-A`/`-R` argument or return-value capture is configured.
pub(crate) const FEAT_ARGS: u32 = 8;
/// Feature bit: the record-time time filter (`record -t`) holds entries
/// back until their call proves long enough.
pub(crate) const FEAT_TIME: u32 = 16;
