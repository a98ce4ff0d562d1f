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
//! Functions marked `#[instrument_fn(args = "1,2", retval)]` get the same
//! capture without `-A`/`-R`: the macro's `fntrace_policy` table (read
//! with the objects, see [`crate::procinfo::policy`]) is merged into the
//! same ranges, OR-ed with the specs.
//!
//! Arguments are available where the hook runs before the callee's
//! prologue with the argument registers intact: `__fentry__` and
//! patchable entries. Return values are available for every mechanism
//! whose exit goes through the exit trampoline (mcount, fentry, patchable
//! entries).

#![cfg_attr(not(feature = "compiler-hooks"), allow(dead_code))]

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::config::PatternError;
use crate::config::{CaptureSpec, pattern_regex};
use crate::features;

/// Mask bit for the return value (bits 0–5 are arguments 1–6).
pub(crate) const RETVAL: u8 = crate::config::CAPTURE_RETVAL;

/// Functions with something to capture, and their masks.
static TABLE: crate::ranges::RangeTable<u8> = crate::ranges::RangeTable::new();
static SPECS: Mutex<Vec<(regex_lite::Regex, u8)>> = Mutex::new(Vec::new());

/// Whether the `fntrace_policy` tables are read too (a session of the
/// runtime with compiler hooks, whose mechanisms can capture).
static USE_POLICY: AtomicBool = AtomicBool::new(false);

/// Sets the specs (already split into pattern and mask) and resolves them
/// in the loaded objects, with the `#[instrument_fn]` captures if `policy`.
pub fn set_specs(specs: &[CaptureSpec], policy: bool) -> Result<(), PatternError> {
    let mut v = vec![];
    for s in specs {
        let re = regex_lite::Regex::new(&pattern_regex(&s.pattern))
            .map_err(|e| PatternError::new(&s.pattern, &e))?;
        v.push((re, s.mask));
    }
    let any = !v.is_empty();
    *SPECS.lock().unwrap_or_else(|e| e.into_inner()) = v;
    USE_POLICY.store(policy, Ordering::Release);
    TABLE.reset();
    let found = scan_new_modules();
    features::set_feature(features::FEAT_ARGS, any || found);
    Ok(())
}

/// Resolves the specs and policies in objects loaded since the last scan;
/// returns whether any function got a capture (then the feature is on).
pub(crate) fn scan_new_modules() -> bool {
    let specs = SPECS.lock().unwrap_or_else(|e| e.into_inner());
    let policy = USE_POLICY.load(Ordering::Acquire);
    if specs.is_empty() && !policy {
        return false;
    }
    let found = TABLE.scan_new_objects(|path, bias| {
        let mut v: Vec<(u64, u64, u8)> = if specs.is_empty() {
            vec![]
        } else {
            crate::procinfo::module_functions(path, bias)
                .into_iter()
                .filter_map(|(s, e, name)| {
                    let m = specs
                        .iter()
                        .filter(|(re, _)| re.is_match(&name))
                        .fold(0u8, |a, (_, m)| a | m);
                    (m != 0).then_some((s, e, m))
                })
                .collect()
        };
        if policy {
            for (s, e, m) in policy_captures(path, bias) {
                match v.iter_mut().find(|r| r.0 == s) {
                    Some(r) => r.2 |= m,
                    None => v.push((s, e, m)),
                }
            }
        }
        v
    });
    if found {
        features::set_feature(features::FEAT_ARGS, true);
    }
    found
}

/// The `#[instrument_fn(args = ..., retval)]` functions of an object:
/// (start, end, mask).
fn policy_captures(path: &std::path::Path, bias: u64) -> Vec<(u64, u64, u8)> {
    crate::procinfo::policy::function_ranges(path, bias, |e| (e.capture != 0).then_some(e.capture))
}

/// The capture mask of the function starting at (or containing) `func`.
#[cold]
pub(crate) fn mask(func: u64) -> u8 {
    TABLE.lookup(func).unwrap_or(0)
}
