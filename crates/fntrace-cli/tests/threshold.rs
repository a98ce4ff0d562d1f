//! `#[instrument_fn(threshold = "40ms")]` applied at record time: a crate
//! (`tests/policy/threshold.rs`) built with `cargo fntrace build` under
//! the fentry and mcount modes. Of `maybe_slow`'s calls only the 80 ms
//! ones are in the trace, each with its callee `inner` (and `leaf` under
//! it); the quick ones are gone with what they called; `plain`, which has
//! no threshold, keeps every call with its callees. Then the same with
//! `-t 1ms` on top: `plain` and the quick `inner`/`leaf` calls go too.
//! `record`'s summary and `info` name the function and its threshold.

use std::collections::HashMap;
use std::process::Command;

mod common;

/// Calls of the program (`run(N)`): even `i` sleep in `maybe_slow`.
const N: u64 = 6;

fn build(mode: &str, dir: &std::path::Path) -> std::path::PathBuf {
    let proj = dir.join("thr");
    std::fs::create_dir_all(proj.join("src")).unwrap();
    let facade = concat!(env!("CARGO_MANIFEST_DIR"), "/../fntrace");
    std::fs::write(
        proj.join("Cargo.toml"),
        format!(
            "[package]\nname = \"thr\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n\
             [dependencies]\nfntrace = {{ path = \"{facade}\" }}\n\n[workspace]\n"
        ),
    )
    .unwrap();
    std::fs::copy(
        concat!(env!("CARGO_MANIFEST_DIR"), "/tests/policy/threshold.rs"),
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
    assert!(
        out.status.success(),
        "{mode}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    proj.join(format!("target/fntrace/{mode}/debug/thr"))
}

/// (caller, callee) → calls of the demo's functions (`thr::` prefixes
/// removed; the caller of an outermost call is "").
fn edges(data: &std::path::Path) -> HashMap<(String, String), u64> {
    let t = common::call_tree(data);
    let strip = |s: &str| s.strip_prefix("thr::").unwrap_or(s).to_string();
    t.edges
        .iter()
        .map(|((a, b), n)| ((strip(a), strip(b)), *n))
        .filter(|((_, b), _)| ["run", "maybe_slow", "plain", "inner", "leaf"].contains(&b.as_str()))
        .collect()
}

fn check(mode: &str, exe: &std::path::Path, dir: &std::path::Path, opts: &[&str]) {
    let data = dir.join(format!("{mode}-{}.data", opts.len()));
    let out = common::record_cmd(&data, opts, exe, &[&N.to_string()])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{mode}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "true\n", "{mode}");
    // The trace says which functions' counts are of their long calls only
    // (record's summary and info, from the trace's setting records).
    let said = "#[instrument_fn(threshold)]: calls of thr::maybe_slow 40.000 ms shorter than that were not recorded";
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(said), "{mode}: {err}");
    let info = Command::new(env!("CARGO_BIN_EXE_fntrace"))
        .args(["info", data.to_str().unwrap()])
        .output()
        .unwrap();
    let info = String::from_utf8_lossy(&info.stdout);
    assert!(info.contains(said), "{mode}: {info}");
    let e = edges(&data);
    let get = |a: &str, b: &str| e.get(&(a.to_string(), b.to_string())).copied();
    let slow = N.div_ceil(2);
    // Only the long calls of maybe_slow.
    assert_eq!(
        get("run", "maybe_slow"),
        Some(slow),
        "{mode} {opts:?}: {e:?}"
    );
    if opts.is_empty() {
        // With their callees.
        assert_eq!(get("maybe_slow", "inner"), Some(slow), "{mode}: {e:?}");
        // plain keeps every call; leaf under every recorded inner.
        assert_eq!(get("run", "plain"), Some(N), "{mode}: {e:?}");
        assert_eq!(get("plain", "inner"), Some(N), "{mode}: {e:?}");
        assert_eq!(get("inner", "leaf"), Some(slow + N), "{mode}: {e:?}");
    } else {
        // With -t 1ms too: what is quick is gone whatever its function,
        // inner and leaf under a kept maybe_slow as well.
        assert_eq!(get("maybe_slow", "inner"), None, "{mode} {opts:?}: {e:?}");
        assert_eq!(get("run", "plain"), None, "{mode} {opts:?}: {e:?}");
        assert_eq!(get("inner", "leaf"), None, "{mode} {opts:?}: {e:?}");
    }
    assert_eq!(
        e.keys().filter(|(_, b)| b == "maybe_slow").count(),
        1,
        "{mode}: maybe_slow has run as its only caller: {e:?}"
    );
}

#[test]
fn a_function_threshold_keeps_only_its_long_calls_with_their_callees() {
    let d = tempfile::tempdir().unwrap();
    common::preload();
    for mode in ["fentry", "mcount"] {
        let dir = d.path().join(mode);
        std::fs::create_dir_all(&dir).unwrap();
        let exe = build(mode, &dir);
        check(mode, &exe, &dir, &[]);
        check(mode, &exe, &dir, &["-t", "1ms"]);
    }
}
