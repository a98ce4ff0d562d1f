//! `bench/compare`: the side-by-side benchmark suite (issue 8). Builds
//! each workload with every mechanism, runs every mode on the same
//! binaries in one interleaved run (uninstrumented, glibc `-pg`, `uftrace
//! record`, compiler-rt XRay basic and FDR, fntrace timed, counting,
//! XRay, patchable and source-level), then prints per mode wall time, ns
//! per call, slowdowns and ratios against uftrace, trace bytes per call and
//! report throughput, checks call counts between tools, prints the
//! targets as pass/fail, writes `bench/results/<date>.json` and the
//! "Side-by-side suite" section of `docs/BENCHMARKS.md`.
//!
//! `--exports` runs the export benchmark instead (`exports.rs`).
//!
//! The table `MODES` drives everything: a mode is a build kind (how the
//! binary is compiled) and a way to run it.

mod counts;
mod exports;
mod output;
mod workloads;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use clap::Parser;
use serde::Serialize;

use counts::Counts;
use workloads::{BuildKind, Lang, Workload};

/// Command-line options.
#[derive(Parser, Debug)]
#[command(about = "fntrace against uftrace, LLVM XRay and gprof on the same binaries")]
pub struct Args {
    /// Short run (smaller inputs, 3 repetitions): under 2 minutes once
    /// the builds are cached.
    #[arg(long)]
    pub quick: bool,
    /// Repetitions per mode (default 3 with --quick, 7 otherwise).
    #[arg(long)]
    pub reps: Option<usize>,
    /// Only these workloads (comma-separated: fib-c,fib-rs,vm-c,sqlite,ripgrep,regex).
    #[arg(long, value_delimiter = ',')]
    pub only: Vec<String>,
    /// Results file (default `bench/results/<date>.json`, `<date>-quick.json`
    /// with --quick).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Update docs/BENCHMARKS.md (default: yes for a full run, no with --quick).
    #[arg(long)]
    pub docs: bool,
    /// Do not update docs/BENCHMARKS.md.
    #[arg(long, conflicts_with = "docs")]
    pub no_docs: bool,
    /// Instead of the suite: export speed and size (chrome, perfetto,
    /// html) on each workload's `-pg` trace, and the HTML page's load
    /// time in headless Chromium (tables printed, for docs/BENCHMARKS.md).
    #[arg(long)]
    pub exports: bool,
}

/// Which peer tools are installed.
#[derive(Debug, Default, Serialize)]
pub struct Tools {
    /// `uftrace` on PATH.
    pub uftrace: bool,
    /// `clang-14` on PATH.
    pub clang: bool,
    /// `gprof` on PATH.
    pub gprof: bool,
    /// `llvm-xray` on PATH.
    pub llvm_xray: bool,
    /// compiler-rt's runtime directory (XRay archives), if found.
    pub xray_rt_dir: Option<PathBuf>,
}

/// Paths and settings shared by every step.
pub struct Ctx {
    /// The workspace root.
    pub root: PathBuf,
    /// Scratch and cache directory (`target/bench-compare`).
    pub work: PathBuf,
    /// Where `fntrace`, `cargo-fntrace`, `libfntrace_preload.so` and
    /// `fib-source` are (the directory of this binary).
    pub bin_dir: PathBuf,
    /// `fntrace`.
    pub fntrace: PathBuf,
    /// `libfntrace_preload.so`.
    pub preload: PathBuf,
    /// `cargo-fntrace`.
    pub cargo_fntrace: PathBuf,
    /// Directory of the fetched `sqlite3.c`.
    pub sqlite_dir: Option<PathBuf>,
    /// Directory of the fetched ripgrep package.
    pub ripgrep_dir: Option<PathBuf>,
    /// Peer tools found.
    pub tools: Tools,
}

/// How a mode runs its binary.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Serialize)]
pub enum Run {
    /// The binary alone.
    Bare,
    /// The `-pg` binary alone: glibc's mcount collects arcs, gmon.out at exit.
    Gprof,
    /// `uftrace record --no-libcall`.
    Uftrace,
    /// compiler-rt XRay, basic mode, `func_duration_threshold_us=0`.
    XrayBasic,
    /// compiler-rt XRay, FDR mode, `func_duration_threshold_us=0`,
    /// initialised and flushed by the program (`xray_fdr_main.c`).
    XrayFdr,
    /// compiler-rt XRay, FDR mode selected from the environment only
    /// (`patch_premain=true xray_mode=xray-fdr`): never initialised, so
    /// the handler runs and records nothing.
    XrayFdrEnv,
    /// fntrace timed: `LD_PRELOAD` and `FNTRACE_OUTPUT` (what `fntrace
    /// record` sets, without its summary pass).
    Fntrace,
    /// fntrace counting: the same plus `FNTRACE_COUNT=1`.
    Count,
    /// Source-level: the runtime is linked in, `FNTRACE_OUTPUT` only.
    Source,
}

impl Run {
    /// An fntrace mode that writes a timed trace.
    pub fn fntrace_timed(self) -> bool {
        matches!(self, Run::Fntrace | Run::Source)
    }
}

/// One row of the suite: a build and how it runs.
#[derive(Debug)]
pub struct Mode {
    /// Identifier (JSON, `--only`-style references).
    pub id: &'static str,
    /// Row label.
    pub label: &'static str,
    /// The binary.
    pub build: BuildKind,
    /// How it runs.
    pub run: Run,
}

/// Every mode, in table order. A mode is measured on each workload that
/// has its build.
pub const MODES: &[Mode] = &[
    Mode {
        id: "plain",
        label: "uninstrumented",
        build: BuildKind::Plain,
        run: Run::Bare,
    },
    Mode {
        id: "gprof",
        label: "glibc mcount (-pg, gprof arcs)",
        build: BuildKind::Pg,
        run: Run::Gprof,
    },
    Mode {
        id: "uftrace",
        label: "uftrace record (mcount)",
        build: BuildKind::Pg,
        run: Run::Uftrace,
    },
    Mode {
        id: "fntrace-mcount",
        label: "fntrace timed (mcount)",
        build: BuildKind::Pg,
        run: Run::Fntrace,
    },
    Mode {
        id: "fntrace-count",
        label: "fntrace counting (mcount)",
        build: BuildKind::Pg,
        run: Run::Count,
    },
    Mode {
        id: "fntrace-fentry",
        label: "fntrace timed (-pg -mfentry)",
        build: BuildKind::Fentry,
        run: Run::Fntrace,
    },
    Mode {
        id: "fntrace-cyg",
        label: "fntrace timed (-finstrument-functions)",
        build: BuildKind::Cyg,
        run: Run::Fntrace,
    },
    Mode {
        id: "patchable-off",
        label: "patchable entries, not patched",
        build: BuildKind::Pfe,
        run: Run::Bare,
    },
    Mode {
        id: "fntrace-patchable",
        label: "fntrace patchable (all patched)",
        build: BuildKind::Pfe,
        run: Run::Fntrace,
    },
    Mode {
        id: "nop-mcount-off",
        label: "nop-mcount, not patched",
        build: BuildKind::NopMcount,
        run: Run::Bare,
    },
    Mode {
        id: "fntrace-nop-mcount",
        label: "fntrace patchable (nop-mcount)",
        build: BuildKind::NopMcount,
        run: Run::Fntrace,
    },
    Mode {
        id: "clang",
        label: "clang-14, uninstrumented",
        build: BuildKind::Clang,
        run: Run::Bare,
    },
    Mode {
        id: "xray-off",
        label: "XRay sleds, not patched",
        build: BuildKind::Xray,
        run: Run::Bare,
    },
    Mode {
        id: "xray-basic",
        label: "compiler-rt XRay basic",
        build: BuildKind::Xray,
        run: Run::XrayBasic,
    },
    Mode {
        id: "xray-fdr",
        label: "compiler-rt XRay FDR",
        build: BuildKind::Xray,
        run: Run::XrayFdr,
    },
    Mode {
        id: "xray-fdr-env",
        label: "compiler-rt XRay FDR, env only (records nothing)",
        build: BuildKind::Xray,
        run: Run::XrayFdrEnv,
    },
    Mode {
        id: "fntrace-xray",
        label: "fntrace XRay",
        build: BuildKind::Xray,
        run: Run::Fntrace,
    },
    Mode {
        id: "fntrace-source",
        label: "fntrace source-level",
        build: BuildKind::Source,
        run: Run::Source,
    },
];

/// Report throughput of one trace.
#[derive(Debug, Serialize, Clone)]
pub struct ReportSpeed {
    /// The command timed (output discarded).
    pub tool: String,
    /// Best wall time, seconds.
    pub seconds: f64,
    /// Events in the trace (entry + exit per call).
    pub events: u64,
    /// Millions of events per second.
    pub meps: f64,
}

/// Everything measured for one mode on one workload.
#[derive(Debug, Serialize)]
pub struct ModeResult {
    /// Mode id.
    pub id: &'static str,
    /// Row label.
    pub label: &'static str,
    /// Build kind.
    pub build: &'static str,
    /// Build flags.
    pub flags: &'static str,
    /// How it ran.
    pub run: Run,
    /// The id of the uninstrumented mode it is compared with.
    pub baseline: &'static str,
    /// The binary that ran.
    pub binary: PathBuf,
    /// Wall times of the measured runs, seconds.
    pub times: Vec<f64>,
    /// Wall times of the start-up runs, seconds.
    pub empty_times: Vec<f64>,
    /// Wall times of the runs with the large input (uninstrumented and
    /// not-patched modes only), seconds.
    pub large_times: Vec<f64>,
    /// Why the mode has no numbers, if it has none.
    pub error: Option<String>,
    /// Trace bytes on disk after the last run.
    pub trace_bytes: Option<u64>,
    /// Calls of the instrumented functions in this binary (fntrace's
    /// count on the same binary; for uninstrumented builds, of the -pg or
    /// XRay build of the same compiler).
    pub calls: Option<u64>,
    /// Report throughput.
    pub report: Option<ReportSpeed>,
    /// Derived numbers.
    pub metrics: Option<Metrics>,
    /// Per-function call counts (not written to JSON).
    #[serde(skip)]
    pub counts: Option<Counts>,
    /// Counts from gprof on fntrace's exported gmon.out (counting mode).
    #[serde(skip)]
    pub gmon_counts: Option<Counts>,
}

/// The numbers printed for a mode.
#[derive(Debug, Serialize, Clone, Copy)]
pub struct Metrics {
    /// Fastest whole-process run, seconds.
    pub wall_min: f64,
    /// Median whole-process run, seconds.
    pub wall_median: f64,
    /// Fastest start-up run, seconds.
    pub startup_min: f64,
    /// wall_min − startup_min.
    pub net: f64,
    /// net / calls, ns.
    pub ns_per_call: Option<f64>,
    /// (net − baseline net) / calls, ns.
    pub added_ns_per_call: Option<f64>,
    /// wall_min / baseline wall_min (whole process).
    pub slowdown: f64,
    /// net / baseline net.
    pub net_slowdown: f64,
    /// With the large input (uninstrumented and not-patched modes):
    /// (large min − start-up) / the baseline's.
    pub large_net_slowdown: Option<f64>,
    /// added ns/call / uftrace's added ns/call on the same workload.
    pub vs_uftrace: Option<f64>,
    /// Trace bytes per call.
    pub bytes_per_call: Option<f64>,
}

/// One workload's results.
#[derive(Debug, Serialize)]
pub struct WorkloadResult {
    /// Workload id.
    pub id: &'static str,
    /// Description.
    pub title: String,
    /// Arguments of the measured run.
    pub args: Vec<String>,
    /// Arguments of the start-up run.
    pub empty_args: Vec<String>,
    /// Arguments of the large-input runs.
    pub large_args: Vec<String>,
    /// Real program (slowdown target applies).
    pub real: bool,
    /// The fib workload of the same language (`fib-c`, `fib-rs`), whose
    /// added ns per call this workload's are held to (issue #24: at most
    /// 1.3 times); `None` for the fib workloads themselves.
    pub fib: Option<&'static str>,
    /// Per mode.
    pub modes: Vec<ModeResult>,
    /// Modes that could not run, with the reason.
    pub skipped: Vec<(String, String)>,
}

fn main() {
    let args = Args::parse();
    if let Err(e) = real_main(args) {
        eprintln!("compare: {e}");
        std::process::exit(1);
    }
}

fn which(tool: &str) -> bool {
    Command::new(tool)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok()
}

fn first_line(cmd: &str, args: &[&str]) -> String {
    Command::new(cmd)
        .args(args)
        .output()
        .ok()
        .map(|o| {
            let s = if o.stdout.is_empty() {
                o.stderr
            } else {
                o.stdout
            };
            String::from_utf8_lossy(&s)
                .lines()
                .next()
                .unwrap_or("")
                .to_string()
        })
        .unwrap_or_else(|| "not installed".into())
}

fn real_main(args: Args) -> Result<(), String> {
    let started = Instant::now();
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let bin_dir = exe.parent().unwrap().to_path_buf();
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf();
    let work = root.join("target/bench-compare");
    std::fs::create_dir_all(&work).map_err(|e| e.to_string())?;
    let xray_rt_dir = Command::new("clang-14")
        .arg("-print-runtime-dir")
        .output()
        .ok()
        .map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()))
        .filter(|d| d.join("libclang_rt.xray-x86_64.a").is_file());
    let tools = Tools {
        uftrace: which("uftrace"),
        clang: which("clang-14"),
        gprof: which("gprof"),
        llvm_xray: Command::new("llvm-xray")
            .arg("--help")
            .stdout(Stdio::null())
            .status()
            .is_ok(),
        xray_rt_dir,
    };
    let mut ws = workloads::all(args.quick, &work);
    if let Some(bad) = args.only.iter().find(|o| !ws.iter().any(|w| w.id == *o)) {
        let ids: Vec<&str> = ws.iter().map(|w| w.id).collect();
        return Err(format!(
            "--only: unknown workload {bad:?} (one of {})",
            ids.join(", ")
        ));
    }
    if !args.only.is_empty() {
        ws.retain(|w| args.only.iter().any(|o| o == w.id));
    }
    let sqlite_dir = if ws.iter().any(|w| w.id == "sqlite") {
        match workloads::fetch_sqlite(&work) {
            Ok(d) => Some(d),
            Err(e) => {
                eprintln!("compare: SQLite workload skipped: {e}");
                None
            }
        }
    } else {
        None
    };
    let ripgrep_dir = if ws.iter().any(|w| w.id == "ripgrep") {
        let corpus = ws
            .iter()
            .filter(|w| w.id == "ripgrep")
            .flat_map(|w| [&w.args, &w.empty, &w.large])
            .filter_map(|a| a.last()?.rsplit("rg-corpus-").next()?.parse().ok())
            .try_for_each(|n: usize| workloads::ripgrep_corpus(&work, n));
        match corpus.and_then(|()| workloads::fetch_ripgrep(&work)) {
            Ok(d) => Some(d),
            Err(e) => {
                eprintln!("compare: ripgrep workload skipped: {e}");
                None
            }
        }
    } else {
        None
    };
    let ctx = Ctx {
        fntrace: bin_dir.join("fntrace"),
        preload: bin_dir.join("libfntrace_preload.so"),
        cargo_fntrace: bin_dir.join("cargo-fntrace"),
        root,
        work,
        bin_dir,
        sqlite_dir,
        ripgrep_dir,
        tools,
    };
    for p in [&ctx.fntrace, &ctx.preload, &ctx.cargo_fntrace] {
        if !p.is_file() {
            return Err(format!(
                "{} missing: run bench/compare (it builds fntrace first)",
                p.display()
            ));
        }
    }
    let reps = args.reps.unwrap_or(if args.quick { 3 } else { 7 }).max(1);
    let machine = output::machine(&ctx);
    eprintln!(
        "compare: building {} workloads (cached in {})",
        ws.len(),
        ctx.work.join("build").display()
    );
    let t_build = Instant::now();
    let built = workloads::build_all(&ctx, &ws, args.exports.then_some(BuildKind::Pg));
    let build_secs = t_build.elapsed().as_secs_f64();
    let mut bins: BTreeMap<(String, BuildKind), PathBuf> = BTreeMap::new();
    let mut build_errors: BTreeMap<(String, BuildKind), String> = BTreeMap::new();
    for (w, k, r) in built {
        match r {
            Ok(p) => {
                bins.insert((w, k), p);
            }
            Err(e) => {
                eprintln!("compare: {w}: build {} failed: {e}", k.name());
                build_errors.insert((w, k), e);
            }
        }
    }
    eprintln!("compare: builds done in {build_secs:.1} s");
    if args.exports {
        return exports::run(&ctx, &ws, &bins, reps);
    }

    // Every (workload, mode) that can run.
    let mut results: Vec<WorkloadResult> = vec![];
    for w in &ws {
        let mut modes = vec![];
        let mut skipped = vec![];
        for m in MODES {
            if !workloads::kinds(w).contains(&m.build) {
                continue;
            }
            if let Some(why) = unavailable(&ctx, w, m) {
                skipped.push((m.label.to_string(), why));
                continue;
            }
            if let Some(e) = build_errors.get(&(w.id.to_string(), m.build)) {
                skipped.push((
                    m.label.to_string(),
                    format!("build failed: {}", e.lines().last().unwrap_or("")),
                ));
                continue;
            }
            modes.push(ModeResult {
                id: m.id,
                label: m.label,
                build: m.build.name(),
                flags: m.build.flags(w.lang),
                run: m.run,
                baseline: if m.build.baseline(w.lang) == BuildKind::Clang {
                    "clang"
                } else {
                    "plain"
                },
                binary: bins
                    .get(&(w.id.to_string(), m.build))
                    .cloned()
                    .unwrap_or_default(),
                times: vec![],
                empty_times: vec![],
                large_times: vec![],
                error: None,
                trace_bytes: None,
                calls: None,
                report: None,
                metrics: None,
                counts: None,
                gmon_counts: None,
            });
        }
        results.push(WorkloadResult {
            id: w.id,
            title: w.title.clone(),
            args: w.args.clone(),
            empty_args: w.empty.clone(),
            large_args: w.large.clone(),
            real: w.real,
            fib: (!w.id.starts_with("fib-")).then_some(match w.lang {
                workloads::Lang::C => "fib-c",
                workloads::Lang::Rust => "fib-rs",
            }),
            modes,
            skipped,
        });
    }

    // Timing: repetitions outermost, so every mode sees the same spells of
    // machine noise; in each, the start-up run first and the measured run
    // last (its outputs are what the analysis below reads).
    for rep in 0..reps {
        eprintln!("compare: repetition {}/{reps}", rep + 1);
        for (w, wr) in ws.iter().zip(results.iter_mut()) {
            for mr in wr.modes.iter_mut().filter(|m| m.error.is_none()) {
                let bin = &bins[&(w.id.to_string(), build_of(mr.id))];
                let dir = run_dir(&ctx, w.id, mr.id);
                let once = |a: &[String]| time_run(&ctx, bin, a, mr.run, &dir);
                let large = || {
                    if mr.run == Run::Bare {
                        once(&w.large).map(Some)
                    } else {
                        Ok(None)
                    }
                };
                match once(&w.empty)
                    .and_then(|e| large().map(|l| (e, l)))
                    .and_then(|(e, l)| once(&w.args).map(|t| (e, l, t)))
                {
                    Ok((e, l, t)) => {
                        mr.empty_times.push(e);
                        mr.large_times.extend(l);
                        mr.times.push(t);
                    }
                    Err(e) => {
                        eprintln!("compare: {} / {}: {e}", w.id, mr.label);
                        mr.error = Some(e);
                    }
                }
            }
        }
    }

    // What the last runs left behind: traces, counts, report speed.
    eprintln!("compare: reading traces and reports");
    for (w, wr) in ws.iter().zip(results.iter_mut()) {
        for mr in wr.modes.iter_mut().filter(|m| m.error.is_none()) {
            let bin = &bins[&(w.id.to_string(), build_of(mr.id))];
            let dir = run_dir(&ctx, w.id, mr.id);
            if let Err(e) = analyse(&ctx, bin, &dir, mr, if args.quick { 1 } else { 3 }) {
                eprintln!("compare: {} / {}: {e}", w.id, mr.label);
            }
        }
        output::derive(w, wr);
    }
    let checks = output::count_checks(&ws, &results);
    let targets = output::targets(&results);
    let date = output::date("+%Y-%m-%d");
    let command = format!(
        "bench/compare{}",
        std::env::args()
            .skip(1)
            .map(|a| format!(" {a}"))
            .collect::<String>()
    );
    let report = output::Report {
        date: date.clone(),
        time: output::date("+%Y-%m-%dT%H:%M:%SZ"),
        command,
        quick: args.quick,
        reps,
        machine,
        tools: ctx.tools,
        build_seconds: build_secs,
        total_seconds: 0.0,
        workloads: results,
        count_checks: checks,
        targets,
    };
    println!("{}", output::render(&report, true));
    let mut report = report;
    report.total_seconds = started.elapsed().as_secs_f64();
    let out = args.out.clone().unwrap_or_else(|| {
        ctx.root.join("bench/results").join(if args.quick {
            format!("{date}-quick.json")
        } else {
            format!("{date}.json")
        })
    });
    if let Some(d) = out.parent() {
        std::fs::create_dir_all(d).map_err(|e| e.to_string())?;
    }
    std::fs::write(
        &out,
        serde_json::to_string_pretty(&report).map_err(|e| e.to_string())? + "\n",
    )
    .map_err(|e| e.to_string())?;
    eprintln!("compare: results in {}", out.display());
    let docs = if args.quick { args.docs } else { !args.no_docs };
    if docs {
        let p = ctx.root.join("docs/BENCHMARKS.md");
        output::update_docs(&p, &report)?;
        eprintln!("compare: updated {}", p.display());
    }
    eprintln!(
        "compare: done in {:.0} s (builds {:.0} s)",
        report.total_seconds, build_secs
    );
    Ok(())
}

fn build_of(id: &str) -> BuildKind {
    MODES.iter().find(|m| m.id == id).unwrap().build
}

/// Why a mode cannot run here, if it cannot.
fn unavailable(ctx: &Ctx, w: &Workload, m: &Mode) -> Option<String> {
    let t = &ctx.tools;
    match m.run {
        Run::Uftrace if !t.uftrace => Some("uftrace not installed".into()),
        Run::Gprof if !t.gprof => Some("gprof not installed".into()),
        Run::XrayBasic | Run::XrayFdr | Run::XrayFdrEnv
            if w.lang == Lang::Rust && t.xray_rt_dir.is_none() =>
        {
            Some("compiler-rt XRay runtime not found".into())
        }
        _ if matches!(m.build, BuildKind::Clang | BuildKind::Xray) && !t.clang => {
            Some("clang-14 not installed".into())
        }
        _ => None,
    }
}

/// The working directory of one mode's runs (its outputs land there).
fn run_dir(ctx: &Ctx, w: &str, mode: &str) -> PathBuf {
    ctx.work.join("run").join(w).join(mode)
}

/// The command that runs `bin args` in mode `run` inside `dir`.
fn command(ctx: &Ctx, bin: &Path, args: &[String], run: Run, dir: &Path) -> Command {
    let mut c = if run == Run::Uftrace {
        let mut c = Command::new("uftrace");
        c.args(["record", "--no-libcall", "-d"])
            .arg(dir.join("uftrace.data"))
            .arg(bin);
        c
    } else {
        Command::new(bin)
    };
    c.args(args).current_dir(dir);
    match run {
        Run::Bare | Run::Gprof | Run::Uftrace => {}
        Run::XrayBasic => {
            c.env(
                "XRAY_OPTIONS",
                "patch_premain=true xray_mode=xray-basic verbosity=0",
            )
            .env("XRAY_BASIC_OPTIONS", "func_duration_threshold_us=0");
        }
        Run::XrayFdrEnv => {
            c.env(
                "XRAY_OPTIONS",
                "patch_premain=true xray_mode=xray-fdr verbosity=0",
            )
            .env("XRAY_FDR_OPTIONS", "func_duration_threshold_us=0");
        }
        Run::XrayFdr => {
            // xray_fdr_main.c initialises FDR (threshold 0), patches, and
            // flushes at exit.
            c.env("XRAY_OPTIONS", "xray_mode=xray-fdr verbosity=0")
                .env("BENCH_XRAY_FDR", "1");
        }
        Run::Fntrace | Run::Count => {
            c.env("LD_PRELOAD", &ctx.preload)
                .env("FNTRACE_OUTPUT", dir.join("t.data"))
                .env("FNTRACE_EXCLUSIVE", "1");
            if run == Run::Count {
                c.env("FNTRACE_COUNT", "1");
            }
        }
        Run::Source => {
            c.env("FNTRACE_OUTPUT", dir.join("t.data"));
        }
    }
    c
}

/// Removes what earlier runs wrote in `dir` (as `fntrace record` and
/// `uftrace record` replace their outputs).
fn clean(dir: &Path) {
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            let p = e.path();
            if p.is_dir() {
                let _ = std::fs::remove_dir_all(&p);
            } else {
                let _ = std::fs::remove_file(&p);
            }
        }
    }
}

/// Longest a single run may take.
const RUN_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(120);

/// One timed run: whole process wall time, seconds.
fn time_run(ctx: &Ctx, bin: &Path, args: &[String], run: Run, dir: &Path) -> Result<f64, String> {
    std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
    clean(dir);
    let mut c = command(ctx, bin, args, run, dir);
    c.stdout(Stdio::null()).stderr(Stdio::piped());
    let t = Instant::now();
    let child = c.spawn().map_err(|e| format!("{c:?}: {e}"))?;
    let pid = child.id();
    // A hung run (a tracer deadlocking) must not hang the suite: it is
    // killed after RUN_TIMEOUT and the mode reported as failed.
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    let o = match rx.recv_timeout(RUN_TIMEOUT) {
        Ok(r) => r.map_err(|e| format!("{c:?}: {e}"))?,
        Err(_) => {
            let _ = Command::new("kill").arg("-9").arg(pid.to_string()).status();
            return Err(format!(
                "{} {} killed after {} s",
                bin.display(),
                args.join(" "),
                RUN_TIMEOUT.as_secs()
            ));
        }
    };
    let secs = t.elapsed().as_secs_f64();
    if !o.status.success() {
        let err = String::from_utf8_lossy(&o.stderr);
        return Err(format!(
            "{} {} exited with {}: {}",
            bin.display(),
            args.join(" "),
            o.status,
            err.lines().last().unwrap_or("")
        ));
    }
    Ok(secs)
}

/// Size of a file, or of everything under a directory.
fn size(p: &Path) -> u64 {
    if p.is_dir() {
        std::fs::read_dir(p)
            .map(|d| d.filter_map(|e| e.ok()).map(|e| size(&e.path())).sum())
            .unwrap_or(0)
    } else {
        std::fs::metadata(p).map(|m| m.len()).unwrap_or(0)
    }
}

/// Runs a command, returns stdout (error with stderr's last line).
fn capture(mut c: Command) -> Result<String, String> {
    let o = c.output().map_err(|e| format!("{c:?}: {e}"))?;
    if !o.status.success() {
        return Err(format!(
            "{c:?}: {}",
            String::from_utf8_lossy(&o.stderr)
                .lines()
                .last()
                .unwrap_or("failed")
        ));
    }
    Ok(String::from_utf8_lossy(&o.stdout).into_owned())
}

/// Best wall time of `n` runs of a command, output discarded.
fn best_time(n: usize, mut make: impl FnMut() -> Command) -> Result<f64, String> {
    let mut best = f64::INFINITY;
    for _ in 0..n {
        let mut c = make();
        c.stdout(Stdio::null()).stderr(Stdio::null());
        let t = Instant::now();
        let st = c.status().map_err(|e| e.to_string())?;
        let s = t.elapsed().as_secs_f64();
        if !st.success() {
            return Err(format!("{c:?} failed"));
        }
        best = best.min(s);
    }
    Ok(best)
}

/// Reads what a mode's last run left in `dir`: trace size, per-function
/// counts, and times the report of it.
fn analyse(ctx: &Ctx, bin: &Path, dir: &Path, mr: &mut ModeResult, n: usize) -> Result<(), String> {
    match mr.run {
        Run::Bare | Run::XrayFdrEnv => {}
        Run::XrayFdr => {
            // A flight recorder: only the last buffers are kept.
            mr.trace_bytes = Some(size(&xray_log(dir)?));
        }
        Run::Fntrace | Run::Source | Run::Count => {
            let data = dir.join("t.data");
            mr.trace_bytes = Some(size(&data));
            let mut c = Command::new(&ctx.fntrace);
            c.args(["report", "--format", "json"]).arg(&data);
            let counts = counts::fntrace_json(&capture(c)?)?;
            let calls: u64 = counts.values().sum();
            mr.calls = Some(calls);
            if mr.run == Run::Count {
                let gmon = dir.join("fntrace-gmon.out");
                let mut c = Command::new(&ctx.fntrace);
                c.args(["export", "--format", "gmon", "-o"])
                    .arg(&gmon)
                    .arg(&data);
                capture(c)?;
                if ctx.tools.gprof {
                    let mut c = Command::new("gprof");
                    c.args(["-b", "-q", "--no-demangle"]).arg(bin).arg(&gmon);
                    mr.gmon_counts = Some(counts::gprof_graph(&capture(c)?));
                }
            } else {
                let secs = best_time(n, || {
                    let mut c = Command::new(&ctx.fntrace);
                    c.arg("report").arg(&data);
                    c
                })?;
                mr.report = Some(speed("fntrace report", secs, 2 * calls));
            }
            mr.counts = Some(counts);
        }
        Run::Uftrace => {
            let d = dir.join("uftrace.data");
            mr.trace_bytes = Some(size(&d));
            let mut c = Command::new("uftrace");
            c.args(["report", "-f", "call", "-d"]).arg(&d);
            let counts = counts::uftrace_text(&capture(c)?);
            let calls: u64 = counts.values().sum();
            let secs = best_time(n, || {
                let mut c = Command::new("uftrace");
                c.args(["report", "-d"]).arg(&d);
                c
            })?;
            mr.report = Some(speed("uftrace report", secs, 2 * calls));
            mr.counts = Some(counts);
        }
        Run::Gprof => {
            let mut c = Command::new("gprof");
            c.args(["-b", "-q", "--no-demangle"])
                .arg(bin)
                .arg(dir.join("gmon.out"));
            mr.counts = Some(counts::gprof_graph(&capture(c)?));
        }
        Run::XrayBasic => {
            let log = xray_log(dir)?;
            mr.trace_bytes = Some(size(&log));
            if ctx.tools.llvm_xray {
                let mk = || {
                    let mut c = Command::new("llvm-xray");
                    c.arg("account")
                        .arg(format!("-instr_map={}", bin.display()))
                        .arg(&log);
                    c
                };
                let counts = counts::xray_account(&capture(mk())?);
                let calls: u64 = counts.values().sum();
                let secs = best_time(n, mk)?;
                mr.report = Some(speed("llvm-xray account", secs, 2 * calls));
                mr.counts = Some(counts);
            }
        }
    }
    Ok(())
}

/// The `xray-log.*` file compiler-rt wrote in `dir`.
fn xray_log(dir: &Path) -> Result<PathBuf, String> {
    std::fs::read_dir(dir)
        .map_err(|e| e.to_string())?
        .flatten()
        .map(|e| e.path())
        .find(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("xray-log."))
        })
        .ok_or_else(|| "no xray-log.* written".to_string())
}

fn speed(tool: &str, seconds: f64, events: u64) -> ReportSpeed {
    ReportSpeed {
        tool: tool.into(),
        seconds,
        events,
        meps: events as f64 / seconds / 1e6,
    }
}
