//! `#[instrument_fn(threshold = "10us")]`: functions whose calls are kept
//! only when they last at least that long (their whole call, callees
//! included, is dropped otherwise).
//!
//! The macro writes the threshold into the object's `fntrace_policy`
//! table (see [`crate::procinfo::policy`]); this module resolves the
//! tables of every loaded object into address ranges, like the `-A`/`-R`
//! captures of [`crate::args`]. The recorder's time filter
//! (`recorder::pending`) looks a function up when a call of it is entered,
//! and only while some loaded function has a threshold.
//!
//! Applied where the trace's key of a call is the function's address (the
//! compiler mechanisms: mcount, `__fentry__`, patchable entries, XRay,
//! `-finstrument-functions`); the source-level guard keys calls by their
//! site descriptor and is not covered (`fntrace functions` still lists the
//! option).

#![cfg_attr(not(feature = "compiler-hooks"), allow(dead_code))]

use std::sync::atomic::{AtomicBool, Ordering};

/// Functions with a threshold, and the threshold in nanoseconds.
static TABLE: crate::ranges::RangeTable<u64> = crate::ranges::RangeTable::new();

/// Whether the policy tables are read (a session of the runtime with
/// compiler hooks).
static USE_POLICY: AtomicBool = AtomicBool::new(false);

/// Some loaded function has a threshold.
static ANY: AtomicBool = AtomicBool::new(false);

/// Reads the thresholds of every loaded object (if `policy`); returns
/// whether any function has one.
pub fn set(policy: bool) -> bool {
    USE_POLICY.store(policy, Ordering::Release);
    TABLE.reset();
    ANY.store(false, Ordering::Release);
    scan_new_modules()
}

/// Reads the thresholds of objects loaded since the last scan; returns
/// whether any loaded function has one.
pub(crate) fn scan_new_modules() -> bool {
    if !USE_POLICY.load(Ordering::Acquire) {
        return false;
    }
    let found = TABLE.scan_new_objects(|path, bias| {
        crate::procinfo::policy::function_ranges(path, bias, |e| {
            (e.threshold_ns != 0).then_some(e.threshold_ns)
        })
    });
    if found {
        ANY.store(true, Ordering::Release);
    }
    ANY.load(Ordering::Acquire)
}

/// Whether some loaded function has a threshold.
#[inline(always)]
pub(crate) fn any() -> bool {
    ANY.load(Ordering::Relaxed)
}

/// Every function with a threshold: (its start address, the threshold in
/// nanoseconds), for the trace's setting records.
pub(crate) fn list() -> Vec<(u64, u64)> {
    TABLE
        .entries()
        .into_iter()
        .map(|(s, _, ns)| (s, ns))
        .collect()
}

/// The threshold in nanoseconds of the function starting at (or
/// containing) `func` (0: none): what the recorder's
/// `Options::fn_threshold` is given.
pub(crate) fn ns(func: u64) -> u64 {
    TABLE.lookup(func).unwrap_or(0)
}
