//! `#[instrument_fn(mcount = "off", fentry = "off", xray = "on", source =
//! "off", ...)]`: one crate (`tests/policy/demo.rs`) built under every
//! `cargo fntrace --instrument` mode and recorded; each function's count
//! and its callers follow its per-framework setting, and `fntrace
//! functions` lists the settings from the binary.

use std::collections::HashMap;
use std::process::Command;

use fntrace_cli::analysis::{Call, Visitor, walk_thread};
use fntrace_cli::symbols::Symbolizer;

mod common;

/// Calls per function per unit of the program's argument (see `run` in
/// the demo), and the settings it was given.
const FUNCS: [(&str, u64); 9] = [
    ("all_on", 1),
    ("no_mcount", 2),
    ("no_fentry", 3),
    ("no_xray", 4),
    ("no_source", 5),
    ("only_xray", 6),
    ("inner::mod_default", 7),
    ("inner::mod_override", 8),
    ("inner::S::method", 9),
];
const N: u64 = 10;

/// Which demo functions mode `mode` records (by `FUNCS` name).
fn recorded(mode: &str) -> Vec<&'static str> {
    let all: Vec<&str> = FUNCS.iter().map(|f| f.0).collect();
    let without = |out: &[&str]| all.iter().copied().filter(|f| !out.contains(f)).collect();
    match mode {
        "source" => without(&["no_source", "only_xray"]),
        "mcount" => without(&[
            "no_mcount",
            "only_xray",
            "inner::mod_default",
            "inner::mod_override",
            "inner::S::method",
        ]),
        "fentry" => without(&[
            "no_fentry",
            "only_xray",
            "inner::mod_default",
            "inner::S::method",
        ]),
        // Every function has sleds; `xray = "off"` ones are never patched.
        "xray" => without(&["no_xray", "inner::S::method"]),
        // Small functions lose their sleds; free functions with XRay on
        // keep a patchable entry (always-instrument), whatever their
        // fentry setting; methods cannot have one.
        "xray:instruction-threshold=200" => without(&["no_xray", "inner::S::method"]),
        _ => unreachable!(),
    }
}

/// Counts (function, caller) pairs of every call of a trace.
#[derive(Default)]
struct Parents {
    stack: Vec<u64>,
    pairs: HashMap<(u64, Option<u64>), u64>,
}

impl Visitor for Parents {
    fn enter(&mut self, func: u64, depth: usize, _tsc: u64) {
        self.stack.truncate(depth);
        self.stack.push(func);
    }
    fn call(&mut self, c: &Call) {
        let parent = c
            .depth
            .checked_sub(1)
            .and_then(|d| self.stack.get(d).copied());
        *self.pairs.entry((c.func, parent)).or_default() += 1;
    }
}

/// The demo's name of a function as the trace shows it.
fn short(name: &str) -> String {
    name.strip_prefix("<demo::inner::S>::")
        .map(|m| format!("inner::S::{m}"))
        .unwrap_or_else(|| name.strip_prefix("demo::").unwrap_or(name).to_string())
}

/// Records the built demo (`fntrace record OPTS`, environment `env`) and
/// checks every demo function's calls and callers; returns the
/// recording's standard error.
fn check_recording(
    mode: &str,
    exe: &std::path::Path,
    data: &std::path::Path,
    opts: &[&str],
    env: &[(&str, &str)],
) -> String {
    let run = common::record_cmd(data, opts, exe, &[&N.to_string()])
        .envs(env.iter().copied())
        .output()
        .unwrap();
    assert!(
        run.status.success(),
        "{mode}: {}",
        String::from_utf8_lossy(&run.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&run.stdout), "true\n", "{mode}");
    let t = fntrace_format::Trace::open(data).unwrap();
    let meta = t.metadata().clone();
    let mut sym = Symbolizer::new(&meta);
    let mut v = Parents::default();
    for tid in t.thread_ids() {
        walk_thread(&t, tid, &mut v);
    }
    // (function, caller) → calls, by demo name.
    let mut pairs: HashMap<(String, String), u64> = HashMap::new();
    for ((f, p), n) in &v.pairs {
        let f = short(sym.name(*f));
        let p = p.map_or("(root)".to_string(), |p| short(sym.name(p)));
        *pairs.entry((f, p)).or_default() += n;
    }
    let calls = |f: &str| -> u64 {
        pairs
            .iter()
            .filter(|((g, _), _)| g == f)
            .map(|(_, n)| n)
            .sum()
    };
    let on = recorded(mode);
    let mut leaf_under_run = 0;
    for (f, k) in FUNCS {
        if on.contains(&f) {
            assert_eq!(calls(f), k * N, "{mode}: {f}: {pairs:?}");
            // Every call of it has `run` as its caller.
            assert_eq!(
                pairs.get(&(f.to_string(), "run".to_string())),
                Some(&(k * N)),
                "{mode}: {f}'s caller: {pairs:?}"
            );
        } else {
            assert_eq!(calls(f), 0, "{mode}: {f} was recorded: {pairs:?}");
            leaf_under_run += k * N;
        }
        // `leaf` (no attribute: every compiler mechanism records it, the
        // source guard does not, a threshold drops its sleds) has the
        // function as its caller when that is recorded, else `run`.
        let leaf = pairs.get(&("leaf".to_string(), f.to_string())).copied();
        let leaf_recorded = matches!(mode, "mcount" | "fentry" | "xray");
        let want = (leaf_recorded && on.contains(&f)).then_some(k * N);
        assert_eq!(leaf, want, "{mode}: leaf under {f}: {pairs:?}");
    }
    assert_eq!(calls("run"), 1, "{mode}: {pairs:?}");
    if matches!(mode, "mcount" | "fentry" | "xray") {
        assert_eq!(
            pairs.get(&("leaf".to_string(), "run".to_string())).copied(),
            (leaf_under_run > 0).then_some(leaf_under_run),
            "{mode}: leaf under run: {pairs:?}"
        );
    } else {
        assert_eq!(calls("leaf"), 0, "{mode}: {pairs:?}");
    }

    String::from_utf8_lossy(&run.stderr).into_owned()
}

fn check_mode(mode: &str) {
    let d = tempfile::tempdir().unwrap();
    common::preload();
    let proj = d.path().join("demo");
    std::fs::create_dir_all(proj.join("src")).unwrap();
    let facade = concat!(env!("CARGO_MANIFEST_DIR"), "/../fntrace");
    std::fs::write(
        proj.join("Cargo.toml"),
        format!(
            "[package]\nname = \"demo\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n\
             [dependencies]\nfntrace = {{ path = \"{facade}\" }}\n\n[workspace]\n"
        ),
    )
    .unwrap();
    std::fs::copy(
        concat!(env!("CARGO_MANIFEST_DIR"), "/tests/policy/demo.rs"),
        proj.join("src/main.rs"),
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_cargo-fntrace"))
        .args(["fntrace", "build", &format!("--instrument={mode}")])
        .current_dir(&proj)
        .env_remove("CARGO_TARGET_DIR")
        .env_remove("RUSTFLAGS")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{mode}: {err}");
    let dir = mode.replace([':', ',', '='], "-");
    let exe = proj.join(format!("target/fntrace/{dir}/debug/demo"));
    // `cargo fntrace` read the policies: it names what the mode leaves out.
    let framework = match mode {
        m if m.starts_with("xray") => "xray",
        m => m,
    };
    let off = FUNCS.len() - recorded(mode).len();
    if framework != "xray" || mode == "xray" {
        assert!(
            err.contains(&format!(
                "{off} functions not instrumented under {framework} by #[instrument_fn]"
            )),
            "{mode}: {err}"
        );
    }

    // Argument and return value capture (`args = "1,2", retval`) where
    // the mechanism can; a message where it cannot.
    let cannot = "#[instrument_fn(args/retval)] on demo::with_options cannot be honoured";
    assert_eq!(
        err.contains(cannot),
        matches!(framework, "source" | "xray") && mode != "xray:instruction-threshold=200",
        "{mode}: {err}"
    );

    let data = d.path().join("t.data");
    let stderr = check_recording(mode, &exe, &data, &[], &[]);
    let replay = Command::new(common::fntrace_bin())
        .arg("replay")
        .arg(&data)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&replay.stdout);
    // A call with children, or a leaf on one line.
    let captured = (text.contains("demo::with_options(1, 2) {")
        && text.contains("} = 6 /* demo::with_options */"))
        || text.contains("demo::with_options(1, 2) = 6;");
    assert_eq!(
        captured,
        matches!(mode, "mcount" | "fentry" | "xray:instruction-threshold=200"),
        "{mode}: {text}"
    );
    assert_eq!(
        stderr.contains("marked #[instrument_fn(args/retval)] are recorded through XRay sleds"),
        mode == "xray",
        "{mode}: {stderr}"
    );
    if mode == "mcount" {
        // Hook calls that stay calls (`-F`, `FNTRACE_KEEP_CALLS`) follow
        // the same settings.
        check_recording(
            mode,
            &exe,
            &d.path().join("f.data"),
            &["-F", "^demo::run$"],
            &[],
        );
        check_recording(
            mode,
            &exe,
            &d.path().join("k.data"),
            &[],
            &[("FNTRACE_KEEP_CALLS", "1")],
        );
    }

    // `fntrace functions` shows the settings, from the file.
    let list = Command::new(common::fntrace_bin())
        .args(["functions", "--format", "json"])
        .arg(&exe)
        .output()
        .unwrap();
    assert!(
        list.status.success(),
        "{}",
        String::from_utf8_lossy(&list.stderr)
    );
    let rows: serde_json::Value = serde_json::from_slice(&list.stdout).unwrap();
    let row = |f: &str| {
        rows.as_array()
            .unwrap()
            .iter()
            .find(|r| r["function"] == format!("demo::{f}"))
            .unwrap_or_else(|| panic!("{f} not listed: {rows:#}"))
            .clone()
    };
    let fw = |f: &str| {
        let r = row(f);
        [&r["source"], &r["mcount"], &r["fentry"], &r["xray"]]
            .map(|v| v.as_str().unwrap().to_string())
    };
    assert_eq!(fw("no_mcount"), ["on", "off", "on", "always"]);
    assert_eq!(fw("no_fentry"), ["on", "on", "off", "always"]);
    assert_eq!(fw("no_xray"), ["on", "on", "on", "off"]);
    assert_eq!(fw("no_source"), ["off", "on", "on", "always"]);
    assert_eq!(fw("only_xray"), ["off", "off", "off", "always"]);
    assert_eq!(fw("inner::mod_default"), ["on", "off", "off", "always"]);
    assert_eq!(fw("inner::mod_override"), ["on", "off", "on", "always"]);
    assert_eq!(fw("inner::S::method"), ["on", "off", "off", "off"]);
    // `--all`: every function, the others with the defaults.
    let all = Command::new(common::fntrace_bin())
        .args(["functions", "--all", "--format", "json"])
        .arg(&exe)
        .output()
        .unwrap();
    assert!(
        all.status.success(),
        "{}",
        String::from_utf8_lossy(&all.stderr)
    );
    let all: serde_json::Value = serde_json::from_slice(&all.stdout).unwrap();
    let in_all = |f: &str| {
        let r = all
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["function"] == format!("demo::{f}"))
            .unwrap_or_else(|| panic!("{f} not in --all"));
        [&r["source"], &r["mcount"], &r["fentry"], &r["xray"]]
            .map(|v| v.as_str().unwrap().to_string())
    };
    assert_eq!(in_all("leaf"), ["-", "on", "on", "on"]);
    assert_eq!(in_all("all_on"), ["on", "on", "on", "on"]);
    assert_eq!(in_all("no_mcount"), fw("no_mcount"));
    let opts = row("with_options");
    assert_eq!(opts["args"], serde_json::json!([1, 2]), "{opts:#}");
    assert_eq!(opts["retval"], true, "{opts:#}");
    assert_eq!(opts["threshold_ns"], 10_000, "{opts:#}");
}

#[test]
fn per_framework_policy_source() {
    check_mode("source");
}

#[test]
fn per_framework_policy_mcount() {
    check_mode("mcount");
}

#[test]
fn per_framework_policy_fentry() {
    check_mode("fentry");
}

#[test]
fn per_framework_policy_xray() {
    check_mode("xray");
}

#[test]
fn per_framework_policy_xray_threshold() {
    check_mode("xray:instruction-threshold=200");
}
