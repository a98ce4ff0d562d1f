//! `-F`/`-N` regions on every mechanism that keeps its calls under them
//! (`-pg`, `-pg -mfentry`, `-finstrument-functions`, XRay): the call
//! graph of a program whose selected and excluded functions call the same
//! functions as `main` does outside them is exactly the graph of the
//! calls inside the regions. Most of these calls are decided by the
//! trampolines' assembly (a function's class cached by the runtime), the
//! first of each function by the Rust path; both must agree.

mod common;

use std::collections::HashMap;
use std::path::Path;

use common::{call_tree, record_cmd, tool};

const REGIONS_C: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/filters/regions.c");

/// Iterations of `main`'s loop.
const N: u64 = 3000;

/// (caller, callee) → calls, from a list.
fn graph(edges: &[(&str, &str, u64)]) -> HashMap<(String, String), u64> {
    edges
        .iter()
        .map(|(p, c, n)| ((p.to_string(), c.to_string()), *n))
        .collect()
}

fn record(dir: &Path, bin: &Path, opts: &[&str]) -> HashMap<(String, String), u64> {
    let data = dir.join("t.data");
    let out = record_cmd(&data, opts, bin, &[&N.to_string()])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let t = call_tree(&data);
    assert_eq!(t.incomplete, 0, "{opts:?}: calls without exit");
    t.edges
}

#[test]
fn filter_regions_record_exactly_the_calls_inside_them() {
    let n = N;
    // -F sel: sel's subtree, skip's included (it is inside sel).
    let only_sel = graph(&[
        ("", "sel", n),
        ("sel", "mid", n),
        ("sel", "skip", n),
        ("sel", "rec", n),
        ("skip", "mid", n),
        ("skip", "rec", n),
        // sel's rec(2) → rec(1) → rec(0); skip's rec(1) → rec(0).
        ("rec", "rec", 3 * n),
        ("rec", "mid", 2 * n),
        ("mid", "leaf", 2 * 4 * n),
    ]);
    // -N skip: everything but skip and what it calls.
    let but_skip = graph(&[
        ("", "main", 1),
        ("main", "mid", n),
        ("main", "rec", n),
        ("main", "sel", n),
        ("sel", "mid", n),
        ("sel", "rec", n),
        // main's rec(3): 3 more; sel's rec(2): 2 more.
        ("rec", "rec", 5 * n),
        ("rec", "mid", 2 * n),
        ("mid", "leaf", 2 * 4 * n),
    ]);
    // -F sel -N skip: sel's subtree without skip's.
    let sel_but_skip = graph(&[
        ("", "sel", n),
        ("sel", "mid", n),
        ("sel", "rec", n),
        ("rec", "rec", 2 * n),
        ("rec", "mid", n),
        ("mid", "leaf", 2 * 2 * n),
    ]);
    let d = tempfile::tempdir().unwrap();
    for (name, cc, flags) in [
        ("pg", "gcc", &["-pg"][..]),
        ("fentry", "gcc", &["-pg", "-mfentry"][..]),
        ("cyg", "gcc", &["-finstrument-functions"][..]),
        (
            "xray",
            "clang-14",
            &["-fxray-instrument", "-fxray-instruction-threshold=1"][..],
        ),
    ] {
        let bin = d.path().join(name);
        let mut args = vec!["-O1", "-fno-optimize-sibling-calls", "-fno-inline"];
        args.extend_from_slice(flags);
        args.extend_from_slice(&["-o", bin.to_str().unwrap(), REGIONS_C]);
        tool(cc, &args);
        assert_eq!(
            record(d.path(), &bin, &["-F", "^sel$"]),
            only_sel,
            "{name} -F sel"
        );
        assert_eq!(
            record(d.path(), &bin, &["-N", "^skip$"]),
            but_skip,
            "{name} -N skip"
        );
        assert_eq!(
            record(d.path(), &bin, &["-F", "^sel$", "-N", "^skip$"]),
            sel_but_skip,
            "{name} -F sel -N skip"
        );
    }
}
