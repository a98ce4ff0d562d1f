//! Helpers shared by the integration tests: the `fntrace` binary under
//! test and the preload library of the same profile next to it.

#![allow(dead_code)]

use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

/// The shared C workload (`fib(n)` makes 2*fib(n+1)-1 calls).
pub const FIB_C: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../examples/workloads/fib.c"
);
/// The same workload in Rust.
pub const FIB_RS: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../examples/workloads/fib.rs"
);

/// The `fntrace` binary built for these tests.
pub fn fntrace_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_fntrace"))
}

/// Builds `libfntrace_preload.so` of the same profile next to the binaries
/// (once per test binary; tests run in any order and a clean checkout has
/// none yet) and returns its path.
pub fn preload() -> PathBuf {
    static P: OnceLock<PathBuf> = OnceLock::new();
    P.get_or_init(|| {
        let dir = fntrace_bin().parent().unwrap().to_path_buf();
        let mut c = Command::new(env!("CARGO"));
        c.args(["build", "-q", "-p", "fntrace-preload"]);
        if dir.ends_with("release") {
            c.arg("--release");
        }
        let st = c.status().expect("cargo");
        assert!(st.success(), "building fntrace-preload failed");
        let p = dir.join("libfntrace_preload.so");
        assert!(p.is_file(), "{} missing", p.display());
        p
    })
    .clone()
}

/// `fntrace record -o DATA OPTS -- BIN ARGS` with this profile's preload
/// library, ready to run.
pub fn record_cmd(
    data: &std::path::Path,
    opts: &[&str],
    bin: &std::path::Path,
    args: &[&str],
) -> Command {
    let mut c = Command::new(fntrace_bin());
    c.arg("record")
        .arg("-o")
        .arg(data)
        .args(opts)
        .arg("--")
        .arg(bin)
        .args(args)
        .env("FNTRACE_PRELOAD", preload());
    c
}

/// Runs a build tool (`RUSTC_BOOTSTRAP=1` set for rustc's `-Z` flags) and
/// returns its standard output; a missing tool or a failure fails the
/// test, naming it.
pub fn tool(tool: &str, args: &[&str]) -> String {
    let out = Command::new(tool)
        .args(args)
        .env("RUSTC_BOOTSTRAP", "1")
        .output()
        .unwrap_or_else(|e| panic!("{tool} is required for this test: {e}"));
    assert!(
        out.status.success(),
        "{tool} {args:?} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The call structure of a trace: for every function (demangled name
/// without its argument list), the callers its calls had, the depths they
/// were at on each thread, and the calls without a recorded exit.
#[derive(Debug, Default)]
pub struct CallTree {
    /// (caller, callee) → calls; the caller of an outermost call is "".
    pub edges: std::collections::HashMap<(String, String), u64>,
    /// Function → the (thread, depth) pairs its calls were at.
    pub depths: std::collections::HashMap<String, std::collections::BTreeSet<(u32, usize)>>,
    /// Calls whose exit was not recorded.
    pub incomplete: u64,
    /// (innermost open function, "NAME TEXT") → markers.
    pub markers: std::collections::HashMap<(String, String), u64>,
    /// Function → its longest call, in microseconds.
    pub longest_us: std::collections::HashMap<String, f64>,
}

/// Reads the call structure of the trace at `path` (which must be
/// undamaged).
pub fn call_tree(path: &std::path::Path) -> CallTree {
    use fntrace_cli::analysis::{Call, Visitor, walk_thread};
    struct V<'a, 'm> {
        sym: fntrace_cli::symbols::Symbolizer<'m>,
        tid: u32,
        open: Vec<String>,
        tree: &'a mut CallTree,
        hz: f64,
    }
    impl Visitor for V<'_, '_> {
        fn enter(&mut self, func: u64, depth: usize, _tsc: u64) {
            let full = self.sym.name(func);
            let name = full.split('(').next().unwrap_or(full).to_string();
            self.open.truncate(depth);
            let caller = self.open.last().cloned().unwrap_or_default();
            *self.tree.edges.entry((caller, name.clone())).or_default() += 1;
            self.tree
                .depths
                .entry(name.clone())
                .or_default()
                .insert((self.tid, depth));
            self.open.push(name);
        }
        fn call(&mut self, c: &Call) {
            self.open.truncate(c.depth);
            let name = self.sym.name(c.func);
            let name = name.split('(').next().unwrap_or(name).to_string();
            let us = c.end.saturating_sub(c.start) as f64 * 1e6 / self.hz;
            let l = self.tree.longest_us.entry(name).or_default();
            *l = l.max(us);
        }
        fn marker(&mut self, name: &str, text: &str, _tsc: u64) {
            let at = self.open.last().cloned().unwrap_or_default();
            *self
                .tree
                .markers
                .entry((at, format!("{name} {text}")))
                .or_default() += 1;
        }
    }
    let t = fntrace_format::Trace::open(path).unwrap();
    assert!(t.damage().is_empty(), "{:?}", t.damage());
    let mut tree = CallTree::default();
    for tid in t.thread_ids() {
        let mut v = V {
            sym: fntrace_cli::symbols::Symbolizer::new(t.metadata()),
            tid,
            open: Vec::new(),
            tree: &mut tree,
            hz: t.tsc_hz() as f64,
        };
        let s = walk_thread(&t, tid, &mut v);
        tree.incomplete += s.incomplete;
    }
    tree
}

impl CallTree {
    /// Checks that every call of `callee` came from `caller` (`None`: any
    /// caller), `n` calls in all, each thread's calls at one depth.
    pub fn expect(&self, what: &str, callee: &str, caller: Option<&str>, n: u64) {
        let callers: Vec<(&str, u64)> = self
            .edges
            .iter()
            .filter(|((_, c), _)| c == callee)
            .map(|((p, _), k)| (p.as_str(), *k))
            .collect();
        let total: u64 = callers.iter().map(|c| c.1).sum();
        assert_eq!(total, n, "{what}: calls of {callee} (callers {callers:?})");
        if let Some(caller) = caller {
            assert_eq!(
                callers,
                [(caller, n)],
                "{what}: callers of {callee} (expected only {caller})"
            );
        }
        let depths = &self.depths[callee];
        let threads: std::collections::BTreeSet<u32> = depths.iter().map(|d| d.0).collect();
        assert_eq!(
            threads.len(),
            depths.len(),
            "{what}: {callee} at several depths on one thread: {depths:?}"
        );
    }
}

/// `tests/hooks/unwind.cc`, built by the hook and XRay tests.
pub const UNWIND_CC: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/hooks/unwind.cc");

/// The calls of `tests/hooks/unwind.cc` (4 workers × 30 rounds), checked
/// for their callers, their depth on each thread and their number: frames
/// left by exceptions (thrown, rethrown with `std::rethrow_exception`,
/// through a `std::future`, from a signal handler on a `sigaltstack` above
/// and below the thread's stack), `longjmp` and `siglongjmp` out of a
/// handler must be closed, not left open under the next call.
pub fn check_unwind_tree(what: &str, data: &std::path::Path) {
    let t = call_tree(data);
    let (w, r) = (4, 30);
    let every = w * r;
    let chains: [&[&str]; 7] = [
        &["worker", "process", "measure", "validate"],
        &["worker", "rethrow_top", "rethrow_mid", "rethrow_it"],
        &["worker", "lj_top", "lj_a", "lj_b", "lj_c"],
        &[
            "worker", "sig_top", "sig_poke", "on_throw", "sig_a", "sig_b",
        ],
        &[
            "worker",
            "quiet_top",
            "quiet_poke",
            "on_quiet",
            "quiet_leaf",
        ],
        &["worker", "sj_top", "sj_poke", "on_jump", "sj_a", "sj_b"],
        &["fut_a", "fut_b", "fut_c"],
    ];
    for chain in chains {
        let n = if chain[0] == "fut_a" { w * 6 } else { every };
        for pair in chain.windows(2) {
            t.expect(what, pair[1], Some(pair[0]), n);
        }
    }
    for (after, top) in [
        ("lj_after", "lj_top"),
        ("sig_after", "sig_top"),
        ("sj_after", "sj_top"),
    ] {
        t.expect(what, after, Some(top), every);
    }
    t.expect(what, "fut_a", None, w * 6);
    // Where each exception was caught, and its type.
    for (at, n) in [
        ("worker", w * 10 + every),
        ("sig_top", every),
        ("fut_wait", w * 6),
    ] {
        let k = t
            .markers
            .get(&(at.to_string(), "exception caught Bad".to_string()));
        assert_eq!(
            k,
            Some(&n),
            "{what}: exceptions caught in {at}: {:?}",
            t.markers
        );
    }
    t.expect(what, "fut_wait", Some("worker"), w * 6);
    // Catchers that return at once, called twice in a row from one call
    // site: siblings under `worker`, each with its own exit, recorded when
    // it returned (not at the worker's next traced call, after a 100 ms
    // sleep in the first round).
    t.expect(what, "quick_catch", Some("worker"), every * 2);
    t.expect(what, "quick_throw", Some("quick_catch"), every * 2);
    let longest = t.longest_us.get("quick_catch").copied().unwrap_or(0.0);
    assert!(
        longest < 50_000.0,
        "{what}: quick_catch lasted {longest} us: its exit was recorded late"
    );
    t.expect(what, "worker", Some("start"), w);
    assert_eq!(t.incomplete, 0, "{what}: calls without an exit");
}

/// The upstream Perfetto protos and our decoder of them.
pub const PERFETTO_PROTOS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/perfetto_protos");

/// Decodes a Perfetto trace with the upstream `perfetto_trace.proto`
/// (compiled by `protoc` into Python classes, read by
/// `perfetto_protos/decode.py`): the process, threads, slices and instants
/// it holds, as JSON. `protoc` and Python's protobuf package are required
/// (`scripts/test` installs them).
pub fn decode_perfetto(dir: &std::path::Path, trace: &std::path::Path) -> serde_json::Value {
    let gen_dir = dir.join("perfetto_pb2");
    std::fs::create_dir_all(&gen_dir).unwrap();
    let st = std::process::Command::new("protoc")
        .arg(format!("--python_out={}", gen_dir.display()))
        .arg(format!("-I{PERFETTO_PROTOS}"))
        .arg(format!("{PERFETTO_PROTOS}/perfetto_trace.proto"))
        .status()
        .expect("protoc (apt protobuf-compiler) is required");
    assert!(st.success(), "protoc failed on the upstream protos");
    // Debian's python3-protobuf is installed for the system interpreter.
    let python = if std::path::Path::new("/usr/bin/python3").exists() {
        "/usr/bin/python3"
    } else {
        "python3"
    };
    let out = std::process::Command::new(python)
        .arg(format!("{PERFETTO_PROTOS}/decode.py"))
        .arg(&gen_dir)
        .arg(trace)
        .output()
        .expect("python3 with protobuf (apt python3-protobuf) is required");
    assert!(
        out.status.success(),
        "decoding with the upstream protos failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        v["problems"],
        serde_json::json!([]),
        "decoder found problems"
    );
    v
}

/// The "called" field gprof prints for `func` in its call graph (none
/// when gprof has no entry for it).
pub fn gprof_called(bin: &std::path::Path, gmon: &std::path::Path, func: &str) -> Option<String> {
    let out = std::process::Command::new("gprof")
        .args(["-b", "-q"])
        .arg(bin)
        .arg(gmon)
        .output()
        .expect("gprof (binutils) is required");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let line = text
        .lines()
        .find(|l| l.starts_with('[') && l.contains(&format!(" {func} [")))?;
    // "[1]  0.0  0.00  0.00  1+21890  fib [1]": the field before the name.
    let fields: Vec<&str> = line.split_whitespace().collect();
    let i = fields.iter().position(|f| *f == func).unwrap();
    Some(fields[i - 1].to_string())
}

/// Compiles with clang's XRay instrumentation of every function
/// (`-O2 -fxray-instrument -fxray-instruction-threshold=1`, then `args`),
/// failing the test when the compiler is missing or fails.
pub fn xray_cc(compiler: &str, args: &[&str]) -> String {
    let mut a = vec!["-O2", "-fxray-instrument", "-fxray-instruction-threshold=1"];
    a.extend_from_slice(args);
    tool(compiler, &a)
}

/// Headless Chromium's window in the HTML tests: tall enough for every
/// lane of the threads program and the flame graph below them.
pub const WINDOW: (u32, u32) = (1280, 3000);

/// Headless Chromium with the tests' window, its profile under `home`.
pub fn chromium(home: &std::path::Path) -> std::process::Command {
    let mut c = std::process::Command::new("chromium");
    c.args([
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--hide-scrollbars",
        "--force-device-scale-factor=1",
    ])
    .arg(format!("--window-size={},{}", WINDOW.0, WINDOW.1))
    .env("HOME", home);
    c
}

/// The DOM of `url` after its scripts ran, and how long Chromium took.
pub fn chromium_dom(home: &std::path::Path, url: &str) -> (String, std::time::Duration) {
    let t = std::time::Instant::now();
    let out = chromium(home)
        .arg("--dump-dom")
        .arg(url)
        .output()
        .expect("chromium (Debian package) is required for this test");
    let took = t.elapsed();
    let dom = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        dom.contains("data-drawn=\"1\""),
        "the page did not finish drawing: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    (dom, took)
}

/// The `#selftest` listing an HTML export writes into its DOM (one line
/// per embedded call, marker and off-CPU interval), unescaped.
pub fn selftest_text(dom: &str) -> String {
    let i = dom
        .rfind("<pre id=\"selftest\">")
        .expect("#selftest listing");
    let text = &dom[i + "<pre id=\"selftest\">".len()..];
    let text = &text[..text.find("</pre>").unwrap()];
    text.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&amp;", "&")
}
