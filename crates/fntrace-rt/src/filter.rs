//! Record-time selection for compiler-instrumented functions: the call
//! depth limit (`--depth`) and the `-F`/`-N` function filters.
//!
//! Filters are resolved to address ranges when a session starts (and when
//! modules are loaded), so the hot path only classifies an address: a
//! direct-mapped cache in front of a sorted range table. Policy: used by
//! the mechanisms, above the event sink.

#![cfg_attr(not(feature = "compiler-hooks"), allow(dead_code))]

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU32, AtomicU64, Ordering};

use crate::config::PatternError;
use crate::features::{FEAT_DEPTH, FEAT_FILTERS, set_feature};

/// A function with no filter of its own.
pub(crate) const NORMAL: u8 = 0;
/// A `-F` function: it and its callees are recorded.
pub(crate) const TRACE: u8 = 1;
/// A `-N` function: neither it nor its callees are recorded.
pub(crate) const NOTRACE: u8 = 2;
/// Bits of a class: the `-F`/`-N` class.
pub(crate) const REGION: u8 = 3;
/// `#[instrument_fn(mcount = "off")]`: its `mcount` calls record nothing
/// (and open no region); its callees are recorded as usual.
pub(crate) const OFF_MCOUNT: u8 = 4;
/// `#[instrument_fn(fentry = "off")]`, for its `__fentry__` calls.
pub(crate) const OFF_FENTRY: u8 = 8;

/// Whether any `-F` filter is given (read by the assembly fast path).
pub(crate) static HAS_TRACE: AtomicBool = AtomicBool::new(false);
/// Whether the `#[instrument_fn]` policies are read (compiler hooks
/// record), and whether they alone turn the classification on
/// (`FNTRACE_KEEP_CALLS`: hook calls stay calls without `-F`/`-N`).
static USE_POLICY: AtomicBool = AtomicBool::new(false);
static POLICY_ALONE: AtomicBool = AtomicBool::new(false);
static MAX_DEPTH: AtomicU32 = AtomicU32::new(0);

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

/// The `-F`/`-N` functions and their class (runtime address ranges).
static RANGES: crate::ranges::RangeTable<u8> = crate::ranges::RangeTable::new();
/// Patterns given (`-F` first), kept for modules loaded later.
static PATTERNS: Mutex<Option<Patterns>> = Mutex::new(None);

const CACHE_SLOTS: usize = 4096;
/// Bits of a cache entry that hold the class.
const CLASS_BITS: u32 = 4;
/// Direct-mapped cache: `(addr << CLASS_BITS) | class`, 0 = empty; the
/// slot of `addr` is `((addr >> 4) ^ (addr >> 16)) % CACHE_SLOTS`.
///
/// The entry fast path of the trampolines (`calls::fast::fast_filter!`)
/// reads it too: with `-F`/`-N`, a call whose entry is exactly `addr <<
/// CLASS_BITS` (a hit of class [`NORMAL`]) is decided there (recorded, or
/// left alone without entering Rust); a miss or any other class takes the
/// Rust path, which fills the slot. The assertion below keeps the numbers
/// the assembly uses.
pub(crate) static CACHE: [AtomicU64; CACHE_SLOTS] = [const { AtomicU64::new(0) }; CACHE_SLOTS];

const _: () = assert!(CACHE_SLOTS == 4096 && CLASS_BITS == 4 && NORMAL == 0);

struct Patterns {
    trace: Vec<regex_lite::Regex>,
    notrace: Vec<regex_lite::Regex>,
}

impl Patterns {
    fn class(&self, name: &str) -> u8 {
        if self.notrace.iter().any(|r| r.is_match(name)) {
            NOTRACE
        } else if self.trace.iter().any(|r| r.is_match(name)) {
            TRACE
        } else {
            NORMAL
        }
    }
}

/// The filter class of function `func` (an address inside it).
#[inline(always)]
pub(crate) fn classify(func: u64) -> u8 {
    let i = ((func >> 4) ^ (func >> 16)) as usize & (CACHE_SLOTS - 1);
    let v = CACHE[i].load(Ordering::Relaxed);
    if v >> CLASS_BITS == func & (u64::MAX >> CLASS_BITS) && v != 0 {
        return (v & ((1 << CLASS_BITS) - 1)) as u8;
    }
    classify_slow(func, i)
}

#[cold]
#[inline(never)]
fn classify_slow(func: u64, i: usize) -> u8 {
    let class = RANGES.lookup(func).unwrap_or(NORMAL);
    CACHE[i].store(
        ((func & (u64::MAX >> CLASS_BITS)) << CLASS_BITS) | u64::from(class),
        Ordering::Relaxed,
    );
    class
}

/// The `-F`/`-N` class of a source-instrumented function by its `name`
/// (cached in `cache`, `u8::MAX` until known).
pub(crate) fn site_class(name: &str, cache: &AtomicU8) -> u8 {
    let c = cache.load(Ordering::Relaxed);
    if c != u8::MAX {
        return c;
    }
    let pats = PATTERNS.lock().unwrap_or_else(|e| e.into_inner());
    let c = pats.as_ref().map_or(NORMAL, |p| p.class(name));
    cache.store(c, Ordering::Relaxed);
    c
}

/// Adds the filtered functions of modules not scanned yet to the table:
/// `-F`/`-N` by name, and the functions whose `#[instrument_fn]` turns
/// mcount or fentry off (when the policies are read).
pub(crate) fn scan_new_modules() {
    let pats = PATTERNS.lock().unwrap_or_else(|e| e.into_inner());
    // The policies matter where addresses are classified: with `-F`/`-N`,
    // or alone (`FNTRACE_KEEP_CALLS`).
    let policy = USE_POLICY.load(Ordering::Acquire)
        && (pats.is_some() || POLICY_ALONE.load(Ordering::Acquire));
    if pats.is_none() && !policy {
        return;
    }
    let added = RANGES.scan_new_objects(|path, bias| {
        let mut v: Vec<(u64, u64, u8)> = match pats.as_ref() {
            Some(p) => crate::procinfo::module_functions(path, bias)
                .into_iter()
                .filter_map(|(s, e, name)| Some((s, e, p.class(&name))).filter(|r| r.2 != NORMAL))
                .collect(),
            None => vec![],
        };
        if policy {
            use crate::procinfo::policy::{FENTRY_OFF, MCOUNT_OFF};
            let off = crate::procinfo::policy::function_ranges(path, bias, |e| {
                let mut c = 0;
                if e.flags & MCOUNT_OFF != 0 {
                    c |= OFF_MCOUNT;
                }
                if e.flags & FENTRY_OFF != 0 {
                    c |= OFF_FENTRY;
                }
                (c != 0).then_some(c)
            });
            for (s, e, c) in off {
                match v.iter_mut().find(|r| r.0 == s) {
                    Some(r) => r.2 |= c,
                    None => v.push((s, e, c)),
                }
            }
        }
        v
    });
    if added {
        for c in CACHE.iter() {
            c.store(0, Ordering::Relaxed);
        }
        if POLICY_ALONE.load(Ordering::Acquire) {
            set_feature(FEAT_FILTERS, true);
        }
    }
}

/// Reads the `#[instrument_fn]` policies from now on (a session whose
/// compiler hooks record): `alone` when they must be applied without
/// `-F`/`-N` too (hook calls kept as calls, `FNTRACE_KEEP_CALLS`). Call
/// before [`set_filters`].
pub fn use_policy(on: bool, alone: bool) {
    USE_POLICY.store(on, Ordering::Release);
    POLICY_ALONE.store(on && alone, Ordering::Release);
}

/// Sets the depth limit (0 = none).
pub fn set_max_depth(depth: u32) {
    MAX_DEPTH.store(depth, Ordering::Relaxed);
    set_feature(FEAT_DEPTH, depth != 0);
}

/// Sets `-F` (record only inside these) and `-N` (never record inside
/// these) regular expressions over demangled names, and resolves them in
/// the modules loaded now. A bad expression is an error naming it.
pub fn set_filters(trace: &[&str], notrace: &[&str]) -> Result<(), PatternError> {
    let compile = |v: &[&str]| {
        v.iter()
            .map(|p| regex_lite::Regex::new(p).map_err(|e| PatternError::new(p, &e)))
            .collect::<Result<Vec<_>, _>>()
    };
    let p = Patterns {
        trace: compile(trace)?,
        notrace: compile(notrace)?,
    };
    let any = !p.trace.is_empty() || !p.notrace.is_empty();
    set_feature(FEAT_FILTERS, false);
    HAS_TRACE.store(!p.trace.is_empty(), Ordering::Relaxed);
    // New patterns: every module is classified again (no filters: none is,
    // and nothing is scanned until filters are set).
    *PATTERNS.lock().unwrap_or_else(|e| e.into_inner()) = any.then_some(p);
    RANGES.reset();
    for c in CACHE.iter() {
        c.store(0, Ordering::Relaxed);
    }
    scan_new_modules();
    if any {
        set_feature(FEAT_FILTERS, true);
    }
    Ok(())
}
