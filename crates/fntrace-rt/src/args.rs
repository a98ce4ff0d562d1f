//! `-A`/`-R`: which functions get their integer arguments and return value
//! recorded.
//!
//! Specs are `FUNC@arg1,arg3` (arguments 1–6, the System V integer
//! argument registers) and `FUNC@retval`, over demangled names (FUNC is a
//! name, matching it whole or as the last path components, or a regular
//! expression; see [`pattern_regex`]), resolved
//! to address ranges per loaded object like the `-F`/`-N` filters. The hot
//! path looks here only when `filter::FEAT_ARGS` is set, and only
//! for calls that are recorded.
//!
//! Arguments are available where the hook runs before the callee's
//! prologue with the argument registers intact: `__fentry__` and
//! patchable entries. Return values are available for every mechanism
//! whose exit goes through the exit trampoline (mcount, fentry, patchable
//! entries).

#![cfg_attr(not(feature = "compiler-hooks"), allow(dead_code))]

use std::sync::Mutex;

/// Mask bit for the return value (bits 0–5 are arguments 1–6).
pub(crate) const RETVAL: u8 = 0x80;

/// Environment variable with `-A` specs (one per line).
pub const ENV_ARGS: &str = "FNTRACE_ARGS";
/// Environment variable with `-R` specs (one per line).
pub const ENV_RETVAL: &str = "FNTRACE_RETVAL";

/// Functions with something to capture, and their masks.
static TABLE: crate::ranges::RangeTable<u8> = crate::ranges::RangeTable::new();
static SPECS: Mutex<Vec<(regex_lite::Regex, u8)>> = Mutex::new(Vec::new());

/// Parses one spec: `REGEX@arg1,arg2`, `REGEX@retval`, or (for `-R`) a
/// bare `REGEX`. Returns the pattern and its mask.
pub fn parse_spec(spec: &str, retval: bool) -> Result<(String, u8), String> {
    let (pat, what) = match spec.rsplit_once('@') {
        Some((p, w)) => (p, w),
        None if retval => (spec, "retval"),
        None => {
            return Err(format!(
                "bad argument spec {spec:?}: expected FUNC@arg1[,argN...]"
            ));
        }
    };
    if pat.is_empty() {
        return Err(format!("bad spec {spec:?}: no function pattern before '@'"));
    }
    let mut mask = 0u8;
    for w in what.split(',') {
        let w = w.trim();
        if w == "retval" {
            mask |= RETVAL;
        } else if w == "args" {
            mask |= 0x3f;
        } else if let Some(n) = w.strip_prefix("arg").and_then(|n| n.parse::<u8>().ok()) {
            if !(1..=6).contains(&n) {
                return Err(format!(
                    "bad spec {spec:?}: {w} is not an integer register argument (arg1 to arg6)"
                ));
            }
            mask |= 1 << (n - 1);
        } else {
            return Err(format!(
                "bad spec {spec:?}: {w:?} is not arg1..arg6, args or retval"
            ));
        }
    }
    Ok((pat.to_string(), mask))
}

/// The regular expression a spec's function pattern stands for: a plain
/// name (letters, digits, `_`, `::`) matches that full name or a name
/// ending in `::NAME` (so `fib` is `fib::fib` but not `fib::main`);
/// anything else is a regular expression as written.
pub fn pattern_regex(p: &str) -> String {
    if !p.is_empty()
        && p.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
    {
        format!("(^|::){p}$")
    } else {
        p.to_string()
    }
}

/// Sets the specs (already split into pattern and mask) and resolves them
/// in the loaded objects.
pub fn set_specs(specs: &[(String, u8)]) -> Result<(), String> {
    let mut v = vec![];
    for (p, m) in specs {
        let re = regex_lite::Regex::new(&pattern_regex(p))
            .map_err(|e| format!("bad function pattern {p:?}: {e}"))?;
        v.push((re, *m));
    }
    let any = !v.is_empty();
    *SPECS.lock().unwrap_or_else(|e| e.into_inner()) = v;
    TABLE.reset();
    scan_new_modules();
    crate::filter::set_feature(crate::filter::FEAT_ARGS, any);
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

/// Reads `FNTRACE_ARGS` and `FNTRACE_RETVAL`.
pub(crate) fn init_from_env() {
    let mut specs = vec![];
    for (var, ret) in [(ENV_ARGS, false), (ENV_RETVAL, true)] {
        for l in std::env::var(var).unwrap_or_default().lines() {
            if l.trim().is_empty() {
                continue;
            }
            match parse_spec(l.trim(), ret) {
                Ok(s) => specs.push(s),
                Err(e) => eprintln!("fntrace: {e}"),
            }
        }
    }
    if !specs.is_empty()
        && let Err(e) = set_specs(&specs)
    {
        eprintln!("fntrace: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_parse_and_bad_ones_say_why() {
        assert_eq!(parse_spec("fib@arg1", false).unwrap(), ("fib".into(), 1));
        assert_eq!(parse_spec("^a::b$@arg2,arg6", false).unwrap().1, 0b10_0010);
        assert_eq!(parse_spec("fib@retval", true).unwrap().1, RETVAL);
        assert_eq!(parse_spec("fib", true).unwrap().1, RETVAL);
        assert_eq!(parse_spec("f@args", false).unwrap().1, 0x3f);
        assert!(parse_spec("fib", false).unwrap_err().contains("FUNC@arg1"));
        assert!(parse_spec("fib@arg7", false).unwrap_err().contains("arg7"));
        assert!(
            parse_spec("@arg1", false)
                .unwrap_err()
                .contains("no function")
        );
        assert!(parse_spec("f@ret", false).unwrap_err().contains("\"ret\""));
        let re = |p: &str| regex_lite::Regex::new(&pattern_regex(p)).unwrap();
        assert!(re("fib").is_match("fib") && re("fib").is_match("fib::fib"));
        assert!(!re("fib").is_match("fib::main") && !re("fib").is_match("myfib"));
        assert!(re("work::fib").is_match("app::work::fib"));
        assert!(re("^fib").is_match("fib::main"));
    }
}
