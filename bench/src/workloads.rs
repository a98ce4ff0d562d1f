//! The workloads of the suite and how each is built with each
//! instrumentation mechanism (gcc, clang-14, rustc, `cargo fntrace`),
//! with a build cache under `target/bench-compare/build`.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;

use crate::Ctx;

/// Source language of a workload (decides compilers and the modes that
/// apply).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Lang {
    /// Built with gcc 12 (and clang-14 for XRay).
    C,
    /// Built with rustc / cargo.
    Rust,
}

/// One program the suite measures.
#[derive(Clone, Debug)]
pub struct Workload {
    /// Short name (`fib-c`, `fib-rs`, `vm-c`, `sqlite`, `ripgrep`, `regex`).
    pub id: &'static str,
    /// What it is, for the tables.
    pub title: String,
    /// Language.
    pub lang: Lang,
    /// A real program whose source nobody here wrote (slowdown target).
    pub real: bool,
    /// Arguments of the measured run.
    pub args: Vec<String>,
    /// Arguments of the start-up run (the same program doing no work).
    pub empty: Vec<String>,
    /// A larger input for the uninstrumented and not-patched runs, which
    /// are cheap: their ratio to each other needs long runs to rise above
    /// the noise of process start-up.
    pub large: Vec<String>,
}

/// How a binary is built: one per instrumentation mechanism.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, PartialOrd, Ord)]
pub enum BuildKind {
    /// gcc -O2 / rustc -O, no instrumentation.
    Plain,
    /// `-pg` (glibc mcount; Rust: `-Zinstrument-mcount`, linked with `-pg`).
    Pg,
    /// gcc `-pg -mfentry`.
    Fentry,
    /// gcc `-finstrument-functions`.
    Cyg,
    /// gcc `-fpatchable-function-entry=5`; rustc `-Zpatchable-function-entry=10,8`.
    Pfe,
    /// gcc `-fno-pie -pg -mfentry -mnop-mcount -mrecord-mcount`, linked `-no-pie` without `-pg`.
    NopMcount,
    /// clang-14 -O2, no instrumentation (the XRay baseline for C).
    Clang,
    /// clang-14 `-fxray-instrument -fxray-instruction-threshold=1`;
    /// rustc `-Zinstrument-xray=always`; compiler-rt's runtime linked in.
    Xray,
    /// `#[fntrace::instrument_fn]` (Rust source-level).
    Source,
}

impl BuildKind {
    /// Short name used for directories and JSON.
    pub fn name(self) -> &'static str {
        match self {
            BuildKind::Plain => "plain",
            BuildKind::Pg => "pg",
            BuildKind::Fentry => "fentry",
            BuildKind::Cyg => "cyg",
            BuildKind::Pfe => "patchable",
            BuildKind::NopMcount => "nop-mcount",
            BuildKind::Clang => "clang",
            BuildKind::Xray => "xray",
            BuildKind::Source => "source",
        }
    }

    /// The flags that make this build, for the tables.
    pub fn flags(self, lang: Lang) -> &'static str {
        match (lang, self) {
            (_, BuildKind::Plain) => "",
            (Lang::C, BuildKind::Pg) => "-pg",
            (Lang::Rust, BuildKind::Pg) => {
                "-Zinstrument-mcount -Cforce-frame-pointers=yes -Clink-arg=-pg"
            }
            (_, BuildKind::Fentry) => "-pg -mfentry",
            (_, BuildKind::Cyg) => "-finstrument-functions",
            (Lang::C, BuildKind::Pfe) => "-fpatchable-function-entry=5",
            (Lang::Rust, BuildKind::Pfe) => "-Zpatchable-function-entry=10,8",
            (_, BuildKind::NopMcount) => {
                "-fno-pie -pg -mfentry -mnop-mcount -mrecord-mcount (linked -no-pie)"
            }
            (_, BuildKind::Clang) => "clang-14",
            (Lang::C, BuildKind::Xray) => {
                "clang-14 -fxray-instrument -fxray-instruction-threshold=1"
            }
            (Lang::Rust, BuildKind::Xray) => "-Zinstrument-xray (compiler-rt runtime linked)",
            (_, BuildKind::Source) => "#[fntrace::instrument_fn]",
        }
    }

    /// The uninstrumented build this one is compared with.
    pub fn baseline(self, lang: Lang) -> BuildKind {
        match (lang, self) {
            (Lang::C, BuildKind::Xray | BuildKind::Clang) => BuildKind::Clang,
            _ => BuildKind::Plain,
        }
    }
}

/// The workloads, with their arguments for a quick or a full run.
pub fn all(quick: bool, work: &Path) -> Vec<Workload> {
    let s = |x: &str| vec![x.to_string()];
    // ripgrep: two threads printing the matching lines (with their
    // numbers) of a regex over a generated source-like tree of small files
    // (see `ripgrep_corpus`); the start-up run searches one file.
    let rg = |files: usize| {
        vec![
            "-j2".to_string(),
            "-n".to_string(),
            "-i".to_string(),
            RG_PATTERN.to_string(),
            ripgrep_corpus_dir(work, files).display().to_string(),
        ]
    };
    let rg_files = if quick { 4_000 } else { 20_000 };
    let (fib, rows, lines, vm) = if quick {
        ("28", "3000", "2500", "200")
    } else {
        ("30", "10000", "8000", "600")
    };
    let (fib_large, rows_large, lines_large, vm_large) = if quick {
        ("32", "12000", "10000", "1200")
    } else {
        ("34", "40000", "32000", "4000")
    };
    vec![
        Workload {
            id: "fib-c",
            title: format!("fib.c, fib({fib})"),
            lang: Lang::C,
            real: false,
            args: s(fib),
            empty: s("1"),
            large: s(fib_large),
        },
        Workload {
            id: "fib-rs",
            title: format!("fib.rs, fib({fib})"),
            lang: Lang::Rust,
            real: false,
            args: s(fib),
            empty: s("1"),
            large: s(fib_large),
        },
        Workload {
            id: "vm-c",
            title: format!("vm.c (stack VM interpreter, handlers called through a table), vm {vm}"),
            lang: Lang::C,
            real: false,
            args: s(vm),
            empty: s("0"),
            large: s(vm_large),
        },
        Workload {
            id: "sqlite",
            title: format!(
                "SQLite {SQLITE_VERSION} amalgamation (libsqlite3-sys {LIBSQLITE3_SYS}), sqlite_query {rows}"
            ),
            lang: Lang::C,
            real: true,
            args: s(rows),
            empty: s("0"),
            large: s(rows_large),
        },
        Workload {
            id: "ripgrep",
            title: format!(
                "ripgrep {RIPGREP} (crates.io source, all crates instrumented), rg -j2 -n -i over a generated tree of {rg_files} files"
            ),
            lang: Lang::Rust,
            real: true,
            args: rg(rg_files),
            empty: rg(1),
            large: rg(rg_files * 2),
        },
        Workload {
            id: "regex",
            title: format!("regex crate (all crates instrumented), regex-work {lines}"),
            lang: Lang::Rust,
            real: true,
            args: s(lines),
            empty: s("0"),
            large: s(lines_large),
        },
    ]
}

/// The ripgrep release measured (its crates.io source, fetched once).
pub const RIPGREP: &str = "14.1.1";
/// What the ripgrep workload searches for.
const RG_PATTERN: &str = r"\b(error|warn\w*)\s+\d+";

/// The generated tree ripgrep searches, shaped like a source tree (210
/// directories, two levels): `files` files of 40 lines of words from a
/// fixed list in a fixed pseudo-random order, about one line in six with
/// `error N` or `warning N`. Searching many small files is what ripgrep
/// spends its calls on (directory walking, ignore rules, per-file set-up,
/// printing matches): about 340 calls per file.
fn ripgrep_corpus_dir(work: &Path, files: usize) -> PathBuf {
    work.join(format!("rg-corpus-{files}"))
}

/// Writes the tree of [`ripgrep_corpus_dir`] (once).
pub fn ripgrep_corpus(work: &Path, files: usize) -> Result<(), String> {
    let dir = ripgrep_corpus_dir(work, files);
    let done = dir.join(".complete");
    if done.is_file() {
        return Ok(());
    }
    const WORDS: &[&str] = &[
        "alpha", "beta", "gamma", "delta", "request", "response", "cache", "queue", "worker",
        "timeout", "retry", "socket", "buffer", "parser", "token", "index", "merge", "commit",
    ];
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for f in 0..files {
        let sub = dir.join(format!("d{}", f % 30)).join(format!("e{}", f % 7));
        std::fs::create_dir_all(&sub).map_err(|e| e.to_string())?;
        let mut text = String::new();
        for _ in 0..40 {
            for w in 0..8 {
                if w > 0 {
                    text.push(' ');
                }
                let r = next();
                match r % 97 {
                    0 => text.push_str(&format!("error {}", r % 1000)),
                    1 => text.push_str(&format!("warning {}", r % 1000)),
                    _ => text.push_str(WORDS[(r % WORDS.len() as u64) as usize]),
                }
            }
            text.push('\n');
        }
        std::fs::write(sub.join(format!("f{f}.log")), text).map_err(|e| e.to_string())?;
    }
    std::fs::write(done, "").map_err(|e| e.to_string())
}

/// Vendors the crates.io source of one dependency (`dependency`: its line
/// in `[dependencies]`) and everything it needs into `vendor`
/// (`cargo vendor --versioned-dirs`), through an empty package `name`
/// made in `work` for the purpose.
fn vendor_crate(work: &Path, name: &str, dependency: &str, vendor: &Path) -> Result<(), String> {
    let proj = work.join(name);
    std::fs::create_dir_all(proj.join("src")).map_err(|e| e.to_string())?;
    std::fs::write(
        proj.join("Cargo.toml"),
        format!(
            "[package]\nname = \"{name}\"\nversion = \"0.0.0\"\nedition = \"2021\"\n\n\
             [dependencies]\n{dependency}\n\n[workspace]\n"
        ),
    )
    .map_err(|e| e.to_string())?;
    std::fs::write(proj.join("src/main.rs"), "fn main() {}\n").map_err(|e| e.to_string())?;
    let mut c = Command::new("cargo");
    c.current_dir(&proj)
        .args(["vendor", "--versioned-dirs"])
        .arg(vendor);
    run(c)
}

/// Fetches ripgrep's crates.io source (with `cargo vendor`, once) into
/// `work` and returns the directory of its package, made a workspace of
/// its own.
pub fn fetch_ripgrep(work: &Path) -> Result<PathBuf, String> {
    let vendor = work.join("ripgrep-src");
    let dir = vendor.join(format!("ripgrep-{RIPGREP}"));
    let ready = dir.join(".fntrace-ready");
    if ready.is_file() {
        return Ok(dir);
    }
    eprintln!("compare: fetching ripgrep {RIPGREP} (cargo vendor)");
    vendor_crate(
        work,
        "ripgrep-fetch",
        &format!("ripgrep = \"={RIPGREP}\""),
        &vendor,
    )?;
    // A workspace of its own (it lies below this repository's), built
    // against crates.io (not the vendored copies, whose checksums a
    // changed manifest would not match).
    let manifest = dir.join("Cargo.toml");
    let mut m = std::fs::read_to_string(&manifest).map_err(|e| e.to_string())?;
    if !m.contains("\n[workspace]") {
        m.push_str("\n[workspace]\n");
    }
    std::fs::write(&manifest, m).map_err(|e| e.to_string())?;
    let _ = std::fs::remove_file(dir.join(".cargo-checksum.json"));
    std::fs::write(&ready, "").map_err(|e| e.to_string())?;
    Ok(dir)
}

/// The libsqlite3-sys release whose bundled amalgamation is measured.
pub const LIBSQLITE3_SYS: &str = "0.30.1";
/// The SQLite version it bundles.
pub const SQLITE_VERSION: &str = "3.46.0";

/// The build kinds a workload supports.
pub fn kinds(w: &Workload) -> &'static [BuildKind] {
    use BuildKind::*;
    match (w.lang, w.id) {
        (Lang::C, _) => &[Plain, Pg, Fentry, Cyg, Pfe, NopMcount, Clang, Xray],
        (Lang::Rust, "fib-rs") => &[Plain, Pg, Pfe, Xray, Source],
        (Lang::Rust, _) => &[Plain, Pg, Pfe, Xray],
    }
}

/// Builds every supported kind (or only the kind `only`) of every
/// workload (C builds in parallel, Cargo builds alongside) and returns the
/// binaries; failures are reported and leave the kind out.
pub fn build_all(
    ctx: &Ctx,
    ws: &[Workload],
    only: Option<BuildKind>,
) -> Vec<(String, BuildKind, Result<PathBuf, String>)> {
    let mut c_jobs = vec![];
    let mut rust_jobs = vec![];
    for w in ws {
        for &k in kinds(w).iter().filter(|&&k| only.is_none_or(|o| o == k)) {
            if w.lang == Lang::C {
                c_jobs.push((w.clone(), k));
            } else {
                rust_jobs.push((w.clone(), k));
            }
        }
    }
    let out = Mutex::new(vec![]);
    let queue = Mutex::new(c_jobs);
    let workers = std::thread::available_parallelism().map_or(2, |n| n.get());
    std::thread::scope(|s| {
        for _ in 0..workers {
            s.spawn(|| {
                loop {
                    let job = queue.lock().unwrap().pop();
                    let Some((w, k)) = job else { break };
                    let r = build_c(ctx, &w, k);
                    out.lock().unwrap().push((w.id.to_string(), k, r));
                }
            });
        }
        for (w, k) in &rust_jobs {
            let r = build_rust(ctx, w, *k);
            out.lock().unwrap().push((w.id.to_string(), *k, r));
        }
    });
    let mut v = out.into_inner().unwrap();
    v.sort_by(|a, b| (&a.0, a.1).cmp(&(&b.0, b.1)));
    v
}

/// Runs a build command; its stderr is returned on failure.
fn run(mut c: Command) -> Result<(), String> {
    let o = c
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .map_err(|e| format!("{c:?}: {e}"))?;
    if o.status.success() {
        Ok(())
    } else {
        let err = String::from_utf8_lossy(&o.stderr);
        let tail: Vec<&str> = err.lines().rev().take(8).collect();
        Err(format!(
            "{c:?} failed:\n{}",
            tail.into_iter().rev().collect::<Vec<_>>().join("\n")
        ))
    }
}

/// A stamp of the inputs of a build (command line, source sizes and
/// modification times): the cached output is reused when it matches.
fn stamp(cmds: &str, srcs: &[PathBuf]) -> String {
    let mut s = cmds.to_string();
    for p in srcs {
        let m = std::fs::metadata(p).ok();
        s.push_str(&format!(
            "\n{} {:?} {:?}",
            p.display(),
            m.as_ref().map(|m| m.len()),
            m.and_then(|m| m.modified().ok())
        ));
    }
    s
}

fn cached(out: &Path, stamp_text: &str) -> bool {
    out.is_file()
        && std::fs::read_to_string(out.with_extension("stamp")).is_ok_and(|s| s == stamp_text)
}

/// Builds a C workload: each source compiled to an object with the
/// mechanism's flags, then linked.
fn build_c(ctx: &Ctx, w: &Workload, k: BuildKind) -> Result<PathBuf, String> {
    let dir = ctx.work.join("build").join(w.id);
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let cc = if matches!(k, BuildKind::Clang | BuildKind::Xray) {
        "clang-14"
    } else {
        "gcc"
    };
    if cc == "clang-14" && !ctx.tools.clang {
        return Err("clang-14 not installed".into());
    }
    let mut cflags: Vec<String> = vec!["-O2".into()];
    let mut srcs: Vec<PathBuf> = vec![];
    let mut libs: Vec<String> = vec![];
    match w.id {
        "fib-c" => {
            cflags.push("-fno-optimize-sibling-calls".into());
            srcs.push(ctx.root.join("examples/workloads/fib.c"));
        }
        "vm-c" => srcs.push(ctx.root.join("bench/workloads/vm.c")),
        "sqlite" => {
            let sq = ctx
                .sqlite_dir
                .as_ref()
                .ok_or("the SQLite amalgamation could not be fetched")?;
            cflags.extend([
                "-DSQLITE_THREADSAFE=0".into(),
                "-DSQLITE_OMIT_LOAD_EXTENSION".into(),
                format!("-I{}", sq.display()),
            ]);
            srcs.push(sq.join("sqlite3.c"));
            srcs.push(ctx.root.join("bench/workloads/sqlite_query.c"));
            libs.push("-lm".into());
        }
        other => return Err(format!("unknown C workload {other}")),
    }
    let (cf, lf): (&[&str], &[&str]) = match k {
        BuildKind::Plain | BuildKind::Clang => (&[], &[]),
        BuildKind::Pg => (&["-pg"], &["-pg"]),
        BuildKind::Fentry => (&["-pg", "-mfentry"], &["-pg"]),
        BuildKind::Cyg => (&["-finstrument-functions"], &[]),
        BuildKind::Pfe => (&["-fpatchable-function-entry=5"], &[]),
        // Linked without -pg: gcrt1.o would profile the program itself
        // (a profil timer and gmon.out), which is not the cost of the NOPs.
        BuildKind::NopMcount => (
            &[
                "-fno-pie",
                "-pg",
                "-mfentry",
                "-mnop-mcount",
                "-mrecord-mcount",
            ],
            &["-no-pie"],
        ),
        BuildKind::Xray => (
            &["-fxray-instrument", "-fxray-instruction-threshold=1"],
            &["-fxray-instrument"],
        ),
        BuildKind::Source => return Err("no source-level mode for C".into()),
    };
    if k == BuildKind::Xray {
        // FDR is initialised and flushed by the program (see the file).
        srcs.push(ctx.root.join("bench/workloads/xray_fdr_main.c"));
        libs.push("-Wl,--wrap=main".into());
    }
    let out = dir.join(k.name());
    let mut objs = vec![];
    let mut cmds = vec![];
    for s in &srcs {
        let stem = s.file_stem().unwrap().to_string_lossy();
        let obj = dir.join(format!("{}-{stem}.o", k.name()));
        let mut c = Command::new(cc);
        c.args(&cflags)
            .args(cf)
            .arg("-c")
            .arg("-o")
            .arg(&obj)
            .arg(s);
        cmds.push((format!("{c:?}"), c, obj.clone(), s.clone()));
        objs.push(obj);
    }
    let mut link = Command::new(cc);
    link.args(lf).arg("-o").arg(&out).args(&objs).args(&libs);
    let all_cmds = cmds
        .iter()
        .map(|c| c.0.clone())
        .chain([format!("{link:?}")])
        .collect::<Vec<_>>()
        .join("\n");
    let st = stamp(&all_cmds, &srcs);
    if cached(&out, &st) {
        return Ok(out);
    }
    for (text, c, obj, src) in cmds {
        // Objects are cached on their own: the amalgamation takes a
        // while to compile and its flags rarely change.
        let ost = stamp(&text, std::slice::from_ref(&src));
        if cached(&obj, &ost) {
            continue;
        }
        run(c)?;
        std::fs::write(obj.with_extension("stamp"), ost).map_err(|e| e.to_string())?;
    }
    run(link)?;
    std::fs::write(out.with_extension("stamp"), st).map_err(|e| e.to_string())?;
    Ok(out)
}

/// compiler-rt's XRay runtime, linked into Rust XRay builds so that the
/// same binary serves compiler-rt's modes and fntrace's (rustc emits
/// sleds but links no runtime). `--no-gc-sections` keeps the sled tables.
/// With it, `bench/workloads/xray_fdr_main.c` (wrapping `main`) so that
/// compiler-rt's FDR mode can be initialised and flushed.
fn xray_runtime_link_args(ctx: &Ctx) -> Result<Vec<String>, String> {
    let Some(dir) = &ctx.tools.xray_rt_dir else {
        return Ok(vec![]);
    };
    let src = ctx.root.join("bench/workloads/xray_fdr_main.c");
    let obj = ctx.work.join("build/xray_fdr_main.o");
    let mut c = Command::new("clang-14");
    c.args(["-O2", "-c", "-o"]).arg(&obj).arg(&src);
    let st = stamp(&format!("{c:?}"), std::slice::from_ref(&src));
    if !cached(&obj, &st) {
        std::fs::create_dir_all(obj.parent().unwrap()).map_err(|e| e.to_string())?;
        run(c)?;
        std::fs::write(obj.with_extension("stamp"), st).map_err(|e| e.to_string())?;
    }
    let mut v = vec![
        format!("-Clink-arg={}", obj.display()),
        "-Clink-arg=-Wl,--wrap=main".to_string(),
        "-Clink-arg=-Wl,--no-gc-sections".to_string(),
    ];
    v.push("-Clink-arg=-Wl,--whole-archive".into());
    for lib in ["xray", "xray-basic", "xray-fdr"] {
        v.push(format!(
            "-Clink-arg={}/libclang_rt.{lib}-x86_64.a",
            dir.display()
        ));
    }
    v.push("-Clink-arg=-Wl,--no-whole-archive".into());
    for l in ["-lpthread", "-lrt", "-lm", "-ldl"] {
        v.push(format!("-Clink-arg={l}"));
    }
    Ok(v)
}

/// Builds a Rust workload: `fib.rs` with rustc directly, the regex
/// workload with `cargo fntrace build --all-crates`, the source-level
/// build is the `fib-source` binary of this crate.
fn build_rust(ctx: &Ctx, w: &Workload, k: BuildKind) -> Result<PathBuf, String> {
    if w.id == "fib-rs" {
        if k == BuildKind::Source {
            let p = ctx.bin_dir.join("fib-source");
            return if p.is_file() {
                Ok(p)
            } else {
                Err(format!(
                    "{} missing: cargo build --release -p fntrace-bench",
                    p.display()
                ))
            };
        }
        let dir = ctx.work.join("build").join(w.id);
        std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        let src = ctx.root.join("examples/workloads/fib.rs");
        let out = dir.join(k.name());
        let mut c = Command::new("rustc");
        // opt-level 3, as the Cargo release profile of the source build.
        c.args(["-Copt-level=3", "-o"]).arg(&out);
        match k {
            BuildKind::Plain => {}
            BuildKind::Pg => {
                c.args([
                    "-Zinstrument-mcount",
                    "-Cforce-frame-pointers=yes",
                    "-Clink-arg=-pg",
                ]);
            }
            BuildKind::Pfe => {
                c.arg("-Zpatchable-function-entry=10,8");
            }
            BuildKind::Xray => {
                c.arg("-Zinstrument-xray=always")
                    .args(xray_runtime_link_args(ctx)?);
            }
            _ => return Err(format!("{} not built for Rust", k.name())),
        }
        c.arg(&src).env("RUSTC_BOOTSTRAP", "1");
        let st = stamp(&format!("{c:?}"), &[src]);
        if cached(&out, &st) {
            return Ok(out);
        }
        run(c)?;
        std::fs::write(out.with_extension("stamp"), st).map_err(|e| e.to_string())?;
        return Ok(out);
    }
    // The regex and ripgrep workloads, through cargo fntrace (flags on
    // every crate).
    let (mode, mode_dir) = match k {
        BuildKind::Plain => ("never", "never"),
        BuildKind::Pg => ("mcount", "mcount"),
        BuildKind::Pfe => ("patchable", "patchable"),
        BuildKind::Xray => (
            "xray:instruction-threshold=1",
            "xray-instruction-threshold-1",
        ),
        _ => return Err(format!("{} not built for Rust", k.name())),
    };
    let (proj, bin) = match w.id {
        "ripgrep" => (
            ctx.ripgrep_dir
                .clone()
                .ok_or("the ripgrep source could not be fetched")?,
            "rg",
        ),
        _ => (ctx.root.join("bench/workloads/regex_work"), "regex-work"),
    };
    let target = ctx.work.join("cargo").join(w.id);
    let mut c = Command::new(&ctx.cargo_fntrace);
    c.current_dir(&proj)
        .args(["fntrace", "build"])
        .arg(format!("--instrument={mode}"))
        .args(["--all-crates", "--release", "-q"])
        .env("CARGO_TARGET_DIR", &target)
        .env_remove("RUSTFLAGS");
    if k == BuildKind::Pg {
        c.arg("--gprof");
    }
    if k == BuildKind::Xray {
        c.env("RUSTFLAGS", xray_runtime_link_args(ctx)?.join(" "));
    }
    run(c)?;
    let out = target
        .join("fntrace")
        .join(mode_dir)
        .join("release")
        .join(bin);
    if out.is_file() {
        Ok(out)
    } else {
        Err(format!("{} not built", out.display()))
    }
}

/// Fetches the SQLite amalgamation shipped in the crates.io package
/// libsqlite3-sys (with `cargo vendor` into `target/bench-compare`, once)
/// and returns the directory holding `sqlite3.c`.
pub fn fetch_sqlite(work: &Path) -> Result<PathBuf, String> {
    let vendor = work.join("sqlite-src");
    let dir = vendor
        .join(format!("libsqlite3-sys-{LIBSQLITE3_SYS}"))
        .join("sqlite3");
    if dir.join("sqlite3.c").is_file() {
        return Ok(dir);
    }
    eprintln!("compare: fetching libsqlite3-sys {LIBSQLITE3_SYS} (cargo vendor)");
    vendor_crate(
        work,
        "sqlite-fetch",
        &format!(
            "libsqlite3-sys = {{ version = \"={LIBSQLITE3_SYS}\", features = [\"bundled\"] }}"
        ),
        &vendor,
    )?;
    if dir.join("sqlite3.c").is_file() {
        Ok(dir)
    } else {
        Err(format!("{} not found after cargo vendor", dir.display()))
    }
}
