//! The runtime's layering, checked on its source: every `crate::x`
//! reference between top-level modules of `fntrace-rt` (outside
//! `#[cfg(test)]` code and comments) goes from a module to a module of a
//! lower layer (mechanisms never to each other; leaves and policy modules
//! to their own layer only without cycles), and the whole import graph
//! has no cycle. The layers are the ones `src/lib.rs` and
//! `docs/ARCHITECTURE.md` describe.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Layer of each top-level module, lowest first; `true`: modules of the
/// layer may import each other (without cycles).
const LAYERS: &[(&[&str], bool)] = &[
    (
        &[
            "clock", "config", "diag", "features", "ownfd", "patch", "procinfo", "ranges",
        ],
        true,
    ),
    (&["recorder"], false),
    (&["args", "count", "filter", "thresholds"], true),
    (&["calls"], false),
    (
        &[
            "site", "hooks", "xray", "dynamic", "markers", "libcalls", "sched",
        ],
        false,
    ),
    (&["control"], false),
    (&["session"], false),
];

fn layer_of(m: &str) -> Option<(usize, bool)> {
    LAYERS
        .iter()
        .enumerate()
        .find(|(_, (ms, _))| ms.contains(&m))
        .map(|(i, (_, same))| (i, *same))
}

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// Every `.rs` file under `dir`.
fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The top-level module a file belongs to (`None` for `lib.rs`).
fn module_of(path: &Path) -> Option<String> {
    let rel = path.strip_prefix(src()).unwrap();
    let first = rel.components().next()?.as_os_str().to_str()?.to_string();
    if first == "lib.rs" {
        return None;
    }
    Some(first.trim_end_matches(".rs").to_string())
}

/// Files included only in test builds (`#[cfg(... test ...)] mod x;`).
fn test_only_files(all: &[PathBuf]) -> BTreeSet<PathBuf> {
    let mut out = BTreeSet::new();
    for f in all {
        let text = std::fs::read_to_string(f).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        for w in lines.windows(2) {
            let (attr, decl) = (w[0].trim(), w[1].trim());
            if attr.starts_with("#[cfg(") && attr.contains("test") && decl.starts_with("mod ") {
                let name = decl.trim_start_matches("mod ").trim_end_matches(';');
                if decl.ends_with(';') {
                    let dir = if f.file_name().unwrap() == "mod.rs" || f.ends_with("lib.rs") {
                        f.parent().unwrap().to_path_buf()
                    } else {
                        f.with_extension("")
                    };
                    out.insert(dir.join(format!("{name}.rs")));
                    out.insert(dir.join(name).join("mod.rs"));
                }
            }
        }
    }
    out
}

/// The source without comments and without inline `#[cfg(test)]`
/// modules.
fn code_lines(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut skip_until: Option<String> = None;
    let mut pending_test_attr = false;
    for line in text.lines() {
        if let Some(end) = &skip_until {
            if line == end {
                skip_until = None;
            }
            continue;
        }
        let t = line.trim_start();
        if t.starts_with("//") {
            continue;
        }
        if t.starts_with("#[cfg(") && t.contains("test") && !t.contains("not(test") {
            pending_test_attr = true;
            continue;
        }
        if pending_test_attr {
            pending_test_attr = false;
            if t.starts_with("mod ") && t.ends_with('{') {
                let indent = &line[..line.len() - t.len()];
                skip_until = Some(format!("{indent}}}"));
                continue;
            }
            // A test-only item on one line (a statement or a `use`).
            if t.ends_with(';') {
                continue;
            }
        }
        let code = match line.find("//") {
            Some(i) if !line[..i].contains('"') => &line[..i],
            _ => line,
        };
        out.push(code.to_string());
    }
    out
}

/// The top-level modules `line` names through `crate::`.
fn references(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = line;
    while let Some(i) = rest.find("crate::") {
        let before = &rest[..i];
        let after = &rest[i + "crate::".len()..];
        rest = after;
        // `$crate::x` is the same crate; anything else ending in an
        // identifier character is another path (`fntrace_rt::...`).
        if before
            .chars()
            .last()
            .is_some_and(|c| c.is_alphanumeric() || c == '_')
        {
            continue;
        }
        if let Some(group) = after.strip_prefix('{') {
            // `crate::{a, b::c, d}`: the first path segment of each entry.
            let mut depth = 0;
            let mut seg = String::new();
            let mut at_start = true;
            for c in group.chars() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        at_start = true;
                        if !seg.is_empty() {
                            out.push(std::mem::take(&mut seg));
                        }
                    }
                    c if at_start && (c.is_alphanumeric() || c == '_') => seg.push(c),
                    ':' | ' ' if at_start && !seg.is_empty() => at_start = false,
                    _ => {}
                }
            }
            if !seg.is_empty() {
                out.push(seg);
            }
            continue;
        }
        let name: String = after
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        if !name.is_empty() {
            out.push(name);
        }
    }
    out
}

/// `from -> {to}` over the top-level modules, outside test code.
fn import_graph() -> BTreeMap<String, BTreeSet<String>> {
    let mut all = Vec::new();
    files(&src(), &mut all);
    let tests = test_only_files(&all);
    let mut g: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for f in all.iter().filter(|f| !tests.contains(*f)) {
        let Some(m) = module_of(f) else { continue };
        let text = std::fs::read_to_string(f).unwrap();
        let e = g.entry(m.clone()).or_default();
        for line in code_lines(&text) {
            for r in references(&line) {
                if r != m {
                    e.insert(r);
                }
            }
        }
    }
    g
}

#[test]
fn every_import_goes_down_the_layers() {
    let g = import_graph();
    assert!(g.len() >= 18, "modules found: {:?}", g.keys());
    let mut bad = Vec::new();
    for (from, tos) in &g {
        let (lf, same) =
            layer_of(from).unwrap_or_else(|| panic!("module {from} is in no layer (LAYERS)"));
        for to in tos {
            let (lt, _) = layer_of(to).unwrap_or_else(|| panic!("module {to} is in no layer"));
            if lt > lf || (lt == lf && !same) {
                bad.push(format!("{from} -> {to}"));
            }
        }
    }
    assert!(bad.is_empty(), "imports against the layers: {bad:?}");
}

#[test]
fn the_import_graph_has_no_cycle() {
    let g = import_graph();
    // Depth-first search with colours; a grey successor closes a cycle.
    fn visit(
        m: &str,
        g: &BTreeMap<String, BTreeSet<String>>,
        colour: &mut BTreeMap<String, u8>,
        path: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        colour.insert(m.to_string(), 1);
        path.push(m.to_string());
        for n in g.get(m).into_iter().flatten() {
            match colour.get(n.as_str()).copied().unwrap_or(0) {
                1 => {
                    let i = path.iter().position(|p| p == n).unwrap();
                    let mut c = path[i..].to_vec();
                    c.push(n.clone());
                    return Some(c);
                }
                0 => {
                    if let Some(c) = visit(n, g, colour, path) {
                        return Some(c);
                    }
                }
                _ => {}
            }
        }
        path.pop();
        colour.insert(m.to_string(), 2);
        None
    }
    let mut colour = BTreeMap::new();
    for m in g.keys() {
        if colour.get(m.as_str()).copied().unwrap_or(0) == 0 {
            let cycle = visit(m, &g, &mut colour, &mut Vec::new());
            assert!(
                cycle.is_none(),
                "import cycle: {}",
                cycle.unwrap().join(" -> ")
            );
        }
    }
}

#[test]
fn the_reference_scanner_sees_grouped_and_plain_paths() {
    assert_eq!(
        references("use crate::{args, count::X, features::{a, b}, filter};"),
        ["args", "count", "features", "filter"]
    );
    assert_eq!(
        references("    crate::recorder::state(); $crate::clock::tsc()"),
        ["recorder", "clock"]
    );
    assert!(references("fntrace_rt::crate_name::x").is_empty());
    let code = code_lines(
        "use crate::a;\n// crate::b\n#[cfg(test)]\nmod tests {\n    use crate::c;\n}\nfn f() { crate::d::x(); }\n",
    );
    let refs: Vec<String> = code.iter().flat_map(|l| references(l)).collect();
    assert_eq!(refs, ["a", "d"]);
}
