//! `-A`/`-R`: which functions get their integer arguments and return value
//! recorded.
//!
//! Specs are `FUNC@arg1,arg3` (arguments 1–6, the System V integer
//! argument registers) and `FUNC@retval`, over demangled names (FUNC is a
//! name, matching it whole or as the last path components, or a regular
//! expression; see [`crate::config::pattern_regex`]; parsed by `config`), resolved
//! to address ranges per loaded object like the `-F`/`-N` filters. The hot
//! path looks here only when `features::FEAT_ARGS` is set, and only
//! for calls that are recorded.
//!
//! Arguments are available where the hook runs before the callee's
//! prologue with the argument registers intact: `__fentry__` and
//! patchable entries. Return values are available for every mechanism
//! whose exit goes through the exit trampoline (mcount, fentry, patchable
//! entries).

#![cfg_attr(not(feature = "compiler-hooks"), allow(dead_code))]

use std::sync::Mutex;

use crate::config::PatternError;
use crate::config::{CaptureSpec, pattern_regex};
use crate::features;

/// Mask bit for the return value (bits 0–5 are arguments 1–6).
pub(crate) const RETVAL: u8 = crate::config::CAPTURE_RETVAL;

/// Functions with something to capture, and their masks.
static TABLE: crate::ranges::RangeTable<u8> = crate::ranges::RangeTable::new();
static SPECS: Mutex<Vec<(regex_lite::Regex, u8)>> = Mutex::new(Vec::new());

/// Sets the specs (already split into pattern and mask) and resolves them
/// in the loaded objects.
pub fn set_specs(specs: &[CaptureSpec]) -> Result<(), PatternError> {
    let mut v = vec![];
    for s in specs {
        let re = regex_lite::Regex::new(&pattern_regex(&s.pattern))
            .map_err(|e| PatternError::new(&s.pattern, &e))?;
        v.push((re, s.mask));
    }
    let any = !v.is_empty();
    *SPECS.lock().unwrap_or_else(|e| e.into_inner()) = v;
    TABLE.reset();
    scan_new_modules();
    features::set_feature(features::FEAT_ARGS, any);
    Ok(())
}

/// Resolves the specs in objects loaded since the last scan.
pub(crate) fn scan_new_modules() {
    let specs = SPECS.lock().unwrap_or_else(|e| e.into_inner());
    if specs.is_empty() {
        return;
    }
    TABLE.scan_new(|name| {
        let m = specs
            .iter()
            .filter(|(re, _)| re.is_match(name))
            .fold(0u8, |a, (_, m)| a | m);
        (m != 0).then_some(m)
    });
}

/// The capture mask of the function starting at (or containing) `func`.
#[cold]
pub(crate) fn mask(func: u64) -> u8 {
    TABLE.lookup(func).unwrap_or(0)
}
