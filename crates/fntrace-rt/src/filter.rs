//! Record-time selection for compiler-instrumented functions: the call
//! depth limit (`--depth`) and the `-F`/`-N` function filters.
//!
//! Filters are resolved to address ranges when a session starts (and when
//! modules are loaded), so the hot path only classifies an address: a
//! direct-mapped cache in front of a sorted range table.

#![cfg_attr(not(feature = "compiler-hooks"), allow(dead_code))]

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

/// A function with no filter of its own.
pub(crate) const NORMAL: u8 = 0;
/// A `-F` function: it and its callees are recorded.
pub(crate) const TRACE: u8 = 1;
/// A `-N` function: neither it nor its callees are recorded.
pub(crate) const NOTRACE: u8 = 2;

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
static HAS_TRACE: AtomicBool = AtomicBool::new(false);
static MAX_DEPTH: AtomicU32 = AtomicU32::new(0);

/// Environment variable with the maximum recorded call depth.
pub const ENV_DEPTH: &str = "FNTRACE_DEPTH";

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
/// Direct-mapped cache: `(addr << 2) | class`, 0 = empty.
static CACHE: [AtomicU64; CACHE_SLOTS] = [const { AtomicU64::new(0) }; CACHE_SLOTS];

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
    if v >> 2 == func & (u64::MAX >> 2) && v != 0 {
        return (v & 3) as u8;
    }
    classify_slow(func, i)
}

#[cold]
#[inline(never)]
fn classify_slow(func: u64, i: usize) -> u8 {
    let class = RANGES.lookup(func).unwrap_or(NORMAL);
    CACHE[i].store(
        ((func & (u64::MAX >> 2)) << 2) | u64::from(class),
        Ordering::Relaxed,
    );
    class
}

/// The `-F`/`-N` class of a source-instrumented site, by its name (cached
/// in the site).
pub(crate) fn site_class(site: &crate::site::Site) -> u8 {
    let c = site.class.load(Ordering::Relaxed);
    if c != u8::MAX {
        return c;
    }
    let pats = PATTERNS.lock().unwrap_or_else(|e| e.into_inner());
    let c = pats.as_ref().map_or(NORMAL, |p| p.class(site.name));
    site.class.store(c, Ordering::Relaxed);
    c
}

/// Feature bit: `-A`/`-R` argument or return-value capture is configured.
pub(crate) const FEAT_ARGS: u32 = 8;

/// Adds the filtered functions of modules not scanned yet to the table.
pub(crate) fn scan_new_modules() {
    let pats = PATTERNS.lock().unwrap_or_else(|e| e.into_inner());
    let Some(pats) = pats.as_ref() else { return };
    if RANGES.scan_new(|name| Some(pats.class(name)).filter(|&c| c != NORMAL)) {
        for c in CACHE.iter() {
            c.store(0, Ordering::Relaxed);
        }
    }
}

/// Sets the depth limit (0 = none).
pub fn set_max_depth(depth: u32) {
    MAX_DEPTH.store(depth, Ordering::Relaxed);
    set_feature(FEAT_DEPTH, depth != 0);
}

/// Sets `-F` (record only inside these) and `-N` (never record inside
/// these) regular expressions over demangled names, and resolves them in
/// the modules loaded now. A bad expression is an error naming it.
pub fn set_filters(trace: &[&str], notrace: &[&str]) -> Result<(), String> {
    let compile = |v: &[&str]| {
        v.iter()
            .map(|p| {
                regex_lite::Regex::new(p).map_err(|e| format!("bad function pattern {p:?}: {e}"))
            })
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
    set_feature(FEAT_FILTERS, any);
    Ok(())
}

/// Environment variable with `-F` patterns (one per line).
pub const ENV_FILTER: &str = "FNTRACE_FILTER";
/// Environment variable with `-N` patterns (one per line).
pub const ENV_NOTRACE: &str = "FNTRACE_NOTRACE";

/// Reads the environment (`FNTRACE_DEPTH`, `FNTRACE_FILTER`,
/// `FNTRACE_NOTRACE`).
pub(crate) fn init_from_env() {
    if let Some(d) = std::env::var(ENV_DEPTH)
        .ok()
        .and_then(|v| v.trim().parse::<u32>().ok())
    {
        set_max_depth(d);
    }
    let f = std::env::var(ENV_FILTER).unwrap_or_default();
    let n = std::env::var(ENV_NOTRACE).unwrap_or_default();
    let f: Vec<&str> = f.lines().filter(|l| !l.is_empty()).collect();
    let n: Vec<&str> = n.lines().filter(|l| !l.is_empty()).collect();
    if !f.is_empty() || !n.is_empty() {
        if let Err(e) = set_filters(&f, &n) {
            eprintln!("fntrace: {e}");
        }
    }
}
