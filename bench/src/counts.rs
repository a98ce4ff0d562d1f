//! Call counts per function as each tool reports them (fntrace `report
//! --format json`, `uftrace report`, gprof's call graph, `llvm-xray
//! account`), names normalised (Rust symbols demangled without hash), and
//! the comparison of two such tables.

use std::collections::BTreeMap;

use serde::Serialize;

/// Calls per function name.
pub type Counts = BTreeMap<String, u64>;

/// Demangles Rust (legacy and v0) names without their hash; other names
/// are returned unchanged.
pub fn normalise(name: &str) -> String {
    let mut name = name.trim();
    // LLVM's internal-symbol suffix (`.llvm.<digits>`, or ` (.llvm.<digits>)`
    // once demangled), which some tools keep and others drop.
    if let Some(i) = name.find(".llvm.") {
        let rest = name[i + 6..].trim_end_matches(')');
        if rest.bytes().all(|b| b.is_ascii_digit()) {
            name = name[..i].trim_end_matches('(').trim_end();
        }
    }
    match rustc_demangle::try_demangle(name) {
        Ok(d) => format!("{d:#}"),
        Err(_) => name.to_string(),
    }
}

fn add(c: &mut Counts, name: &str, n: u64) {
    *c.entry(normalise(name)).or_default() += n;
}

/// `fntrace report --format json`: `[{function, calls, ...}]`.
pub fn fntrace_json(text: &str) -> Result<Counts, String> {
    let v: serde_json::Value = serde_json::from_str(text).map_err(|e| e.to_string())?;
    let mut c = Counts::new();
    for r in v.as_array().ok_or("not an array")? {
        let f = r["function"].as_str().ok_or("no function")?;
        let n = r["calls"].as_u64().ok_or("no calls")?;
        add(&mut c, f, n);
    }
    Ok(c)
}

/// `uftrace report -f call` (0.13 has no JSON): a header, a `===` rule,
/// then `CALLS  NAME` lines. Kernel events (`linux:...`) are left out.
pub fn uftrace_text(text: &str) -> Counts {
    let mut c = Counts::new();
    let mut body = false;
    for line in text.lines() {
        if line.trim_start().starts_with("===") {
            body = true;
            continue;
        }
        if !body {
            continue;
        }
        let l = line.trim();
        let Some((n, name)) = l.split_once(char::is_whitespace) else {
            continue;
        };
        let name = name.trim();
        if name.starts_with("linux:") {
            continue;
        }
        if let Ok(n) = n.parse::<u64>() {
            add(&mut c, name, n);
        }
    }
    c
}

/// gprof's call graph (`gprof -b -q --no-demangle`): primary lines
/// `[i] %time self children called name [i]`, where `called` is `n`
/// or `n+r` (r recursive calls). The flat profile would show only `n`.
pub fn gprof_graph(text: &str) -> Counts {
    let mut c = Counts::new();
    for line in text.lines() {
        if !line.starts_with('[') {
            continue;
        }
        // Cycles (`<cycle 1 as a whole>`) are not functions.
        if line.contains("<cycle") {
            continue;
        }
        let t: Vec<&str> = line.split_whitespace().collect();
        // [i] %time self children [called] name [i]
        if t.len() < 6 {
            continue;
        }
        let name_end = t.len() - 1;
        let (called, name_start) = if t.len() >= 7 && is_called(t[4]) {
            (t[4], 5)
        } else {
            ("0", 4)
        };
        let name = t[name_start..name_end].join(" ");
        let n: u64 = called
            .split('+')
            .filter_map(|x| x.parse::<u64>().ok())
            .sum();
        add(&mut c, &name, n);
    }
    c
}

fn is_called(s: &str) -> bool {
    !s.is_empty()
        && s.split('+')
            .all(|x| !x.is_empty() && x.bytes().all(|b| b.is_ascii_digit()))
}

/// `llvm-xray account -demangle=false`: after the header line
/// `funcid count [ min, med, 90p, 99p, max] sum function`, rows with the
/// count second and the name after the closing `]` and the sum.
pub fn xray_account(text: &str) -> Counts {
    let mut c = Counts::new();
    for line in text.lines() {
        let t = line.trim();
        let Some((head, tail)) = t.split_once('[') else {
            continue;
        };
        let Some((_, after)) = tail.split_once(']') else {
            continue;
        };
        let h: Vec<&str> = head.split_whitespace().collect();
        if h.len() != 2 {
            continue;
        }
        let Ok(n) = h[1].parse::<u64>() else {
            continue;
        };
        // "  sum  FILE:LINE:COL: name"
        let after = after.trim_start();
        let Some((_sum, rest)) = after.split_once(char::is_whitespace) else {
            continue;
        };
        add(&mut c, strip_location(rest.trim()), n);
    }
    c
}

/// `FILE:LINE:COL: name` → `name` (llvm-xray prefixes the location).
fn strip_location(s: &str) -> &str {
    for (i, _) in s.match_indices(": ") {
        let head = &s[..i];
        let mut parts = head.rsplitn(3, ':');
        let col = parts.next().unwrap_or("");
        let line = parts.next().unwrap_or("");
        let digits = |x: &str| !x.is_empty() && x.bytes().all(|b| b.is_ascii_digit());
        if digits(col) && digits(line) && parts.next().is_some() {
            return &s[i + 2..];
        }
    }
    s
}

/// Function symbols of a binary by address (`nm --defined-only`), to
/// give every alias of one address (identical-code folding, mergefunc,
/// `.llvm.` copies) one canonical name: tools pick different aliases.
pub struct Aliases {
    addr_of: BTreeMap<String, u64>,
    canonical: BTreeMap<u64, String>,
}

impl Aliases {
    /// Reads the symbols of `bin` (empty when `nm` fails).
    pub fn of(bin: &std::path::Path) -> Aliases {
        let text = std::process::Command::new("nm")
            .arg("--defined-only")
            .arg(bin)
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default();
        let mut addr_of = BTreeMap::new();
        let mut canonical: BTreeMap<u64, String> = BTreeMap::new();
        for line in text.lines() {
            let mut t = line.splitn(3, ' ');
            let (Some(a), Some(ty), Some(name)) = (t.next(), t.next(), t.next()) else {
                continue;
            };
            if !matches!(ty, "t" | "T" | "W" | "w") {
                continue;
            }
            let Ok(a) = u64::from_str_radix(a, 16) else {
                continue;
            };
            let n = normalise(name);
            addr_of.insert(n.clone(), a);
            let c = canonical.entry(a).or_insert_with(|| n.clone());
            if n < *c {
                *c = n;
            }
        }
        Aliases { addr_of, canonical }
    }

    /// The table with every name replaced by its address's canonical name.
    pub fn apply(&self, c: &Counts) -> Counts {
        let mut out = Counts::new();
        for (name, n) in c {
            let k = self
                .addr_of
                .get(name)
                .and_then(|a| self.canonical.get(a))
                .unwrap_or(name);
            *out.entry(k.clone()).or_default() += n;
        }
        out
    }
}

/// One comparison of two tools' counts on the same binary.
#[derive(Serialize, Debug, Clone)]
pub struct Check {
    /// Workload id.
    pub workload: String,
    /// The two sides, e.g. `fntrace timed (-pg)` and `uftrace record (-pg)`.
    pub left: String,
    /// Right-hand tool.
    pub right: String,
    /// Functions compared (the union of both tables).
    pub functions: usize,
    /// Total calls on each side.
    pub total: (u64, u64),
    /// Functions whose counts differ: (name, left, right).
    pub mismatches: Vec<(String, u64, u64)>,
    /// Why differences are expected, if they are.
    pub note: String,
}

/// Compares two tables over the union of their functions (a function
/// missing on one side counts 0 there).
pub fn compare(workload: &str, left: (&str, &Counts), right: (&str, &Counts), note: &str) -> Check {
    let mut names: Vec<&String> = left.1.keys().chain(right.1.keys()).collect();
    names.sort();
    names.dedup();
    let mut mismatches = vec![];
    for n in &names {
        let a = left.1.get(*n).copied().unwrap_or(0);
        let b = right.1.get(*n).copied().unwrap_or(0);
        if a != b {
            mismatches.push(((*n).clone(), a, b));
        }
    }
    Check {
        workload: workload.into(),
        left: left.0.into(),
        right: right.0.into(),
        functions: names.len(),
        total: (left.1.values().sum(), right.1.values().sum()),
        mismatches,
        note: note.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strips_llvm_suffixes() {
        assert_eq!(normalise("a::b (.llvm.123)"), "a::b");
        assert_eq!(normalise("finish_grow.llvm.42"), "finish_grow");
        assert_eq!(normalise("x.llvm.y"), "x.llvm.y");
    }

    #[test]
    fn parses_gprof_graph() {
        let t = "index % time    self  children    called     name\n\
                 [1]      0.0    0.00    0.00       1+21890   fib [1]\n\
                 [8]      0.0    0.00    0.00       6         _RNvCsfLfy6EI15iL_7___rustc12___rust_alloc [8]\n";
        let c = gprof_graph(t);
        assert_eq!(c["fib"], 21891);
        assert_eq!(c["__rustc::__rust_alloc"], 6);
    }

    #[test]
    fn parses_uftrace() {
        let t = "       Calls  Function\n  ==========  ====================\n           1  main\n       21891  fib\n           3  linux:schedule (pre-empted)\n";
        let c = uftrace_text(t);
        assert_eq!(c.len(), 2);
        assert_eq!(c["fib"], 21891);
    }

    #[test]
    fn parses_xray_account() {
        let t = "Functions with latencies: 2\n   funcid      count [      min,       med,       90p,       99p,       max]       sum  function\n        1      21891 [ 0.000000,  0.000000,  0.000000,  0.000000,  0.000000]  0.000100  fib.c:8:0: fib\n        2          1 [ 0.1, 0.1, 0.1, 0.1, 0.1]  0.1  <invalid>:0:0: a::b::<c: d>\n";
        let c = xray_account(t);
        assert_eq!(c["a::b::<c: d>"], 1);
        assert_eq!(c["fib"], 21891);
        assert_eq!(c.len(), 2);
    }
}
