//! `cargo fntrace build|run|test --instrument=MODE [options] [cargo args]`:
//! the RFC's unified instrumentation option for Cargo, mapped onto the
//! flags rustc has.
//!
//! The flags go to the workspace's own crates only (through
//! `RUSTC_WORKSPACE_WRAPPER`, this binary acting as the wrapper) unless
//! `--all-crates` is given; builds go to their own target directory
//! (`<target>/fntrace/<mode>`) so normal builds are not invalidated; `run`
//! and `test` run the binaries under `fntrace record` (a Cargo runner).

use std::ffi::{OsStr, OsString};
use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Command, ExitCode, Stdio};

use anyhow::{Context, Result, bail};
use clap::{Arg, ArgAction, ArgMatches, Args, FromArgMatches, Parser, Subcommand};

/// Set when this binary runs as rustc's wrapper: the flags to add.
const ENV_WRAP_FLAGS: &str = "FNTRACE_CARGO_RUSTFLAGS";

fn main() -> ExitCode {
    let args: Vec<OsString> = std::env::args_os().collect();
    if let Ok(flags) = std::env::var(ENV_WRAP_FLAGS) {
        if args.len() > 1 && looks_like_rustc(&args[1]) {
            return wrap_rustc(&args[1..], &flags);
        }
    }
    // Cargo runs `cargo-fntrace fntrace ARGS...`; run directly, the
    // binary may be given `ARGS...` alone.
    let mut argv = args;
    if argv.get(1).is_none_or(|a| a != "fntrace") {
        argv.insert(1, "fntrace".into());
    }
    let Cargo::Fntrace(cli) = Cargo::parse_from(argv);
    match run(cli.cmd) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("cargo-fntrace: {e:#}");
            ExitCode::from(2)
        }
    }
}

/// `cargo fntrace ...` as Cargo runs it (`cargo-fntrace fntrace ...`).
#[derive(Parser)]
#[command(name = "cargo", bin_name = "cargo")]
enum Cargo {
    /// Build, run or test a Cargo project instrumented for fntrace.
    #[command(version)]
    Fntrace(FntraceArgs),
}

/// The arguments of `cargo fntrace`.
#[derive(Args)]
#[command(after_help = MODES_HELP)]
struct FntraceArgs {
    #[command(subcommand)]
    cmd: Sub,
}

/// The Cargo commands `cargo fntrace` wraps.
#[derive(Subcommand)]
enum Sub {
    /// Build the project instrumented (into `<target>/fntrace/<MODE>`) and
    /// list the instrumented executables.
    Build(BuildArgs),
    /// Build and run a binary under `fntrace record` (one trace,
    /// `<target>/fntrace/<MODE>/fntrace.data` unless `-o`).
    Run(BuildArgs),
    /// Build and run the tests, each test binary under `fntrace record`
    /// (one trace each, `<target>/fntrace/<MODE>/NAME.data`).
    Test(BuildArgs),
}

impl Sub {
    /// Cargo's name of the command, and its arguments.
    fn parts(&self) -> (&'static str, &BuildArgs) {
        match self {
            Sub::Build(a) => ("build", a),
            Sub::Run(a) => ("run", a),
            Sub::Test(a) => ("test", a),
        }
    }
}

const MODES_HELP: &str = "MODE: never | mcount | fentry | xray[:ignore-loops,instruction-threshold=N,no-entry,no-exit] | patchable | source
  xray with a threshold (or ignore-loops): #[instrument_fn] functions whose sleds LLVM drops
  are recorded through a patchable entry instead (XRay's always-instrument)";

/// The options of `cargo fntrace build|run|test`.
#[derive(Args)]
#[command(after_help = MODES_HELP)]
// The field docs are clap's help text, where `[:OPTIONS]` is not a link.
#[allow(rustdoc::broken_intra_doc_links)]
struct BuildArgs {
    /// How to instrument: never, mcount, fentry, xray[:OPTIONS], patchable
    /// or source (see below).
    #[arg(long, value_name = "MODE")]
    instrument: String,
    /// Instrument every crate, dependencies included (default: the
    /// workspace's own crates).
    #[arg(long)]
    all_crates: bool,
    /// Link with `-pg`: glibc's profiler writes `gmon.out` (for gprof).
    #[arg(long)]
    gprof: bool,
    /// Trace file of `run` and `test` (`{name}` in it stands for the
    /// program's name).
    #[arg(short = 'o', long = "trace", value_name = "TRACE")]
    trace: Option<PathBuf>,
    #[command(flatten)]
    cargo: CargoOptions,
    /// Further arguments for Cargo (e.g. the test name filter of `test`).
    #[arg(value_name = "ARGS")]
    args: Vec<OsString>,
    /// Arguments after `--`: the program's (`run`) or the test harness's
    /// (`test`).
    #[arg(last = true, value_name = "PROGRAM_ARGS")]
    program_args: Vec<OsString>,
}

/// Cargo's options `cargo fntrace` accepts and passes on: (long name,
/// short name, whether it takes a value, help).
const CARGO_OPTIONS: &[(&str, Option<char>, bool, &str)] = &[
    ("release", Some('r'), false, "Build in release mode"),
    ("profile", None, true, "Build with this profile"),
    ("package", Some('p'), true, "Package(s) to build"),
    ("workspace", None, false, "All packages of the workspace"),
    ("exclude", None, true, "Exclude packages"),
    ("lib", None, false, "Only this package's library"),
    ("bin", None, true, "Only this binary"),
    ("bins", None, false, "All binaries"),
    ("example", None, true, "Only this example"),
    ("examples", None, false, "All examples"),
    ("test", None, true, "Only this test target"),
    ("tests", None, false, "All test targets"),
    ("bench", None, true, "Only this bench target"),
    ("benches", None, false, "All bench targets"),
    ("all-targets", None, false, "All targets"),
    ("doc", None, false, "Only the documentation tests (test)"),
    (
        "no-run",
        None,
        false,
        "Compile the tests, do not run them (test)",
    ),
    (
        "no-fail-fast",
        None,
        false,
        "Run every test whatever fails (test)",
    ),
    ("features", Some('F'), true, "Features to activate"),
    ("all-features", None, false, "Activate all features"),
    (
        "no-default-features",
        None,
        false,
        "Do not activate the default feature",
    ),
    ("target", None, true, "Build for this target triple"),
    ("jobs", Some('j'), true, "Number of parallel jobs"),
    ("keep-going", None, false, "Build as much as possible"),
    ("manifest-path", None, true, "Path to Cargo.toml"),
    ("locked", None, false, "Cargo.lock must be up to date"),
    ("offline", None, false, "Run without accessing the network"),
    ("frozen", None, false, "Both --locked and --offline"),
    (
        "verbose",
        Some('v'),
        false,
        "Verbose output (-vv: very verbose)",
    ),
    ("quiet", Some('q'), false, "No Cargo log messages"),
    ("color", None, true, "Coloring: auto, always, never"),
    ("message-format", None, true, "Cargo's message format"),
    ("config", None, true, "Override a Cargo configuration value"),
    ("", Some('Z'), true, "Unstable Cargo flags"),
];

/// The Cargo options given (see [`CARGO_OPTIONS`]), as Cargo's
/// arguments.
#[derive(Debug, Default)]
struct CargoOptions {
    args: Vec<OsString>,
    /// Whether `--message-format` is among them.
    message_format: bool,
}

/// The clap id of a Cargo option: its long name (`Z` for `-Z`).
fn cargo_option_id(long: &'static str) -> &'static str {
    if long.is_empty() { "Z" } else { long }
}

impl FromArgMatches for CargoOptions {
    fn from_arg_matches(m: &ArgMatches) -> Result<Self, clap::Error> {
        let mut o = CargoOptions::default();
        for &(long, short, value, _) in CARGO_OPTIONS {
            let id = cargo_option_id(long);
            let flag = if long.is_empty() {
                format!("-{}", short.unwrap_or('Z'))
            } else {
                format!("--{long}")
            };
            if !value {
                let n = if long == "verbose" {
                    m.get_count(id)
                } else {
                    m.get_flag(id) as u8
                };
                for _ in 0..n {
                    o.args.push(flag.clone().into());
                }
                continue;
            }
            for v in m.get_raw(id).into_iter().flatten() {
                o.args.push(flag.clone().into());
                o.args.push(v.to_os_string());
                o.message_format |= long == "message-format";
            }
        }
        for v in m.get_raw("cargo-arg").into_iter().flatten() {
            o.message_format |= v.to_string_lossy().starts_with("--message-format");
            o.args.push(v.to_os_string());
        }
        Ok(o)
    }

    fn update_from_arg_matches(&mut self, m: &ArgMatches) -> Result<(), clap::Error> {
        *self = CargoOptions::from_arg_matches(m)?;
        Ok(())
    }
}

impl Args for CargoOptions {
    fn augment_args(mut cmd: clap::Command) -> clap::Command {
        for &(long, short, value, help) in CARGO_OPTIONS {
            let mut a = Arg::new(cargo_option_id(long))
                .help(help)
                .help_heading("Cargo options (passed to cargo)");
            if !long.is_empty() {
                a = a.long(long);
            }
            if let Some(c) = short {
                a = a.short(c);
            }
            a = if value {
                a.action(ArgAction::Append)
                    .value_parser(clap::builder::OsStringValueParser::new())
                    .value_name("VALUE")
            } else if long == "verbose" {
                a.action(ArgAction::Count)
            } else {
                a.action(ArgAction::SetTrue)
            };
            cmd = cmd.arg(a);
        }
        cmd.arg(
            Arg::new("cargo-arg")
                .long("cargo-arg")
                .value_name("ARG")
                .help("Another argument for Cargo, passed as it is (repeatable)")
                .help_heading("Cargo options (passed to cargo)")
                .allow_hyphen_values(true)
                .action(ArgAction::Append)
                .value_parser(clap::builder::OsStringValueParser::new()),
        )
    }

    fn augment_args_for_update(cmd: clap::Command) -> clap::Command {
        CargoOptions::augment_args(cmd)
    }
}

fn looks_like_rustc(a: &OsString) -> bool {
    PathBuf::from(a)
        .file_name()
        .is_some_and(|n| n.to_string_lossy().starts_with("rustc"))
}

/// Environment variable listing the workspace members to instrument
/// (`\x1f`-separated package names).
const ENV_WRAP_MEMBERS: &str = "FNTRACE_CARGO_MEMBERS";

/// fntrace's own crates are never instrumented (the runtime would trace
/// itself).
const NEVER: [&str; 5] = [
    "fntrace",
    "fntrace-rt",
    "fntrace-format",
    "fntrace-macros",
    "fntrace-preload",
];

/// Runs rustc with our flags appended: only for the packages listed in
/// `FNTRACE_CARGO_MEMBERS` (Cargo also wraps path dependencies), never for
/// fntrace's own crates, and not for cargo's `-vV` and `--print` probes.
fn wrap_rustc(args: &[OsString], flags: &str) -> ExitCode {
    let mut c = Command::new(&args[0]);
    c.args(&args[1..]);
    let probe = args
        .iter()
        .any(|a| a == "-vV" || a == "-V" || a.to_string_lossy().starts_with("--print"));
    let pkg = std::env::var("CARGO_PKG_NAME").unwrap_or_default();
    let member = std::env::var(ENV_WRAP_MEMBERS)
        .map(|m| m.split('\x1f').any(|x| x == pkg))
        .unwrap_or(true);
    if !probe && member && !NEVER.contains(&pkg.as_str()) {
        c.args(flags.split('\x1f').filter(|f| !f.is_empty()));
        if flags.split('\x1f').any(|f| f == CFG_ALWAYS) {
            c.env(ENV_ALWAYS, "1");
        }
    }
    match c.status() {
        Ok(s) => ExitCode::from(s.code().unwrap_or(1) as u8),
        Err(e) => {
            eprintln!("cargo-fntrace: cannot run {:?}: {e}", args[0]);
            ExitCode::from(2)
        }
    }
}

/// The cfg that gives `#[instrument_fn]` functions a patchable entry
/// (XRay's always-instrument when a threshold drops their sleds).
const CFG_ALWAYS: &str = "fntrace_always_instrument";

/// Set in rustc's environment together with `--cfg fntrace_always_instrument`:
/// tells `#[instrument_fn]` that the cfg is declared (so it can emit its
/// `cfg_attr` without an `unexpected_cfgs` warning).
const ENV_ALWAYS: &str = "FNTRACE_ALWAYS_INSTRUMENT";

/// Flags added to an XRay mode that is not `always`: the feature gate of
/// `#[patchable_function_entry]`, the cfg `#[instrument_fn]` keys it on,
/// and the cfg's declaration for rustc's `unexpected_cfgs` lint.
const ALWAYS_INSTRUMENT: [&str; 4] = [
    "-Zcrate-attr=feature(patchable_function_entry)",
    "--cfg",
    CFG_ALWAYS,
    "--check-cfg=cfg(fntrace_always_instrument)",
];

/// The rustc flags for a mode, and whether they need `RUSTC_BOOTSTRAP`.
fn mode_flags(mode: &str) -> Result<(Vec<String>, bool)> {
    let (name, opts) = mode.split_once(':').unwrap_or((mode, ""));
    let opts: Vec<&str> = opts.split(',').filter(|o| !o.is_empty()).collect();
    if name != "xray" && !opts.is_empty() {
        bail!("--instrument={name} takes no options");
    }
    Ok(match name {
        "never" | "source" => (vec![], false),
        "mcount" => (
            vec![
                "-Zinstrument-mcount".into(),
                "-Cforce-frame-pointers=yes".into(),
            ],
            true,
        ),
        // rustc 1.95 has no `__fentry__` calls (`-Zinstrument-mcount=fentry`
        // is newer): patchable entries give the same semantics (the hook
        // runs before the prologue, arguments intact) once fntrace switches
        // them on, which `fntrace record` does at start.
        "fentry" | "patchable" => (vec!["-Zpatchable-function-entry=10,8".into()], true),
        "xray" => {
            let mut v = vec![];
            for o in opts {
                v.push(match o {
                    "ignore-loops" => "ignore-loops".to_string(),
                    "no-entry" => "skip-entry".to_string(),
                    "no-exit" => "skip-exit".to_string(),
                    "always" | "never" => o.to_string(),
                    _ if o.starts_with("instruction-threshold=") => {
                        let n = &o["instruction-threshold=".len()..];
                        if n.parse::<u32>().is_err() {
                            bail!("bad instruction-threshold {n:?}");
                        }
                        o.to_string()
                    }
                    _ => bail!("unknown xray option {o:?}"),
                });
            }
            if v.is_empty() {
                v.push("always".into());
            }
            let mut flags = vec![format!("-Zinstrument-xray={}", v.join(","))];
            if !v.iter().any(|o| o == "always") {
                // Not every function gets sleds: `#[instrument_fn]`
                // functions get a patchable entry instead (XRay's
                // always-instrument; see `fntrace-macros`).
                flags.extend(ALWAYS_INSTRUMENT.iter().map(|f| f.to_string()));
            }
            (flags, true)
        }
        _ => bail!("unknown --instrument mode {name:?}\n{MODES_HELP}"),
    })
}

/// Runs `cargo build|run|test` with the flags of the mode, in the mode's
/// target directory (`run` and `test` with `fntrace record` as the runner).
fn run(sub: Sub) -> Result<ExitCode> {
    let (sub, a) = sub.parts();
    let mode = &a.instrument;
    let (mut flags, bootstrap) = mode_flags(mode)?;
    if a.gprof {
        flags.push("-Clink-arg=-pg".into());
    }
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let meta = metadata(&cargo)?;
    let target = meta.target.clone();
    let mode_dir = mode.replace([':', ',', '='], "-");
    let target_dir = target.join("fntrace").join(&mode_dir);
    let mut c = Command::new(&cargo);
    c.arg(sub)
        .args(&a.cargo.args)
        .args(&a.args)
        .env("CARGO_TARGET_DIR", &target_dir);
    if !a.program_args.is_empty() {
        c.arg("--").args(&a.program_args);
    }
    if bootstrap {
        eprintln!(
            "cargo-fntrace: warning: --instrument={mode} uses unstable rustc flags ({}); \
             setting RUSTC_BOOTSTRAP=1 for this build",
            flags.join(" ")
        );
        c.env("RUSTC_BOOTSTRAP", "1");
    }
    if !flags.is_empty() {
        if a.all_crates {
            let mut rf = std::env::var("RUSTFLAGS").unwrap_or_default();
            for f in &flags {
                rf.push(' ');
                rf.push_str(f);
            }
            c.env("RUSTFLAGS", rf.trim());
            if flags.iter().any(|f| f == CFG_ALWAYS) {
                c.env(ENV_ALWAYS, "1");
            }
        } else {
            let me = std::env::current_exe().context("cannot find cargo-fntrace itself")?;
            c.env("RUSTC_WORKSPACE_WRAPPER", me)
                .env(ENV_WRAP_FLAGS, flags.join("\x1f"))
                .env(ENV_WRAP_MEMBERS, meta.members.join("\x1f"));
        }
    }
    // `test` runs several binaries: each gets its own trace.
    let default_name = if sub == "test" {
        "{name}.data"
    } else {
        "fntrace.data"
    };
    let trace = a
        .trace
        .clone()
        .unwrap_or_else(|| target_dir.join(default_name));
    if sub != "build" {
        let me = std::env::current_exe().context("cannot find cargo-fntrace itself")?;
        let fntrace = me.with_file_name("fntrace");
        if !fntrace.is_file() {
            bail!("{} not found next to cargo-fntrace", fntrace.display());
        }
        let runner = format!("{} record -o {} --", fntrace.display(), trace.display());
        c.env("CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_RUNNER", runner);
    }
    // A build lists the executables it made, from Cargo's artifact
    // messages (unless the caller chose the message format).
    let list = sub == "build" && !a.cargo.message_format;
    if list {
        c.arg("--message-format=json-render-diagnostics")
            .stdout(Stdio::piped());
    }
    let mut child = c.spawn().context("cannot run cargo")?;
    let executables = match child.stdout.take() {
        Some(out) => executables(BufReader::new(out))?,
        None => vec![],
    };
    let st = child.wait().context("cannot run cargo")?;
    if list && st.success() {
        let cwd = std::env::current_dir().unwrap_or_default();
        if executables.is_empty() {
            eprintln!("cargo-fntrace: no executables built");
        } else {
            eprintln!("cargo-fntrace: instrumented binaries:");
        }
        for e in &executables {
            eprintln!("  {}", e.strip_prefix(&cwd).unwrap_or(e).display());
        }
        for e in &executables {
            policy_summary(mode, e.strip_prefix(&cwd).unwrap_or(e));
        }
    }
    if sub != "build" && trace.exists() {
        eprintln!(
            "cargo-fntrace: trace in {} (fntrace report {})",
            trace.display(),
            trace.display()
        );
    } else if sub == "test" {
        eprintln!(
            "cargo-fntrace: one trace per test binary in {} (NAME.data)",
            target_dir.display()
        );
    }
    Ok(ExitCode::from(st.code().unwrap_or(1) as u8))
}

/// Says what the `#[instrument_fn]` policies of `exe` mean for `mode`:
/// how many functions the mode's framework leaves out, and the options it
/// cannot honour (argument and return value capture through the source
/// guard or XRay sleds, thresholds through the source guard).
fn policy_summary(mode: &str, exe: &std::path::Path) {
    let framework = match mode.split(':').next().unwrap_or(mode) {
        "never" => return,
        "patchable" => "fentry",
        f => f,
    };
    let list = match fntrace_cli::functions::read(exe) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("cargo-fntrace: warning: {e}");
            return;
        }
    };
    let off: Vec<&str> = list
        .iter()
        .filter(|p| p.is_off(framework))
        .map(|p| p.function.as_str())
        .collect();
    if !off.is_empty() {
        eprintln!(
            "cargo-fntrace: {}: {} function{} not instrumented under {framework} by #[instrument_fn] ({}{}; `fntrace functions {}` lists every policy)",
            exe.display(),
            off.len(),
            if off.len() == 1 { "" } else { "s" },
            off.iter().take(3).copied().collect::<Vec<_>>().join(", "),
            if off.len() > 3 { ", ..." } else { "" },
            exe.display()
        );
    }
    let captures: Vec<&str> = list
        .iter()
        .filter(|p| (!p.args.is_empty() || p.retval) && !p.is_off(framework))
        // A threshold build's always-instrument entry captures.
        .filter(|p| !(framework == "xray" && p.entry_is_xray))
        .map(|p| p.function.as_str())
        .collect();
    let why = match framework {
        "source" => Some("the source guard records no values"),
        "xray" => Some("XRay sleds pass no registers to the recorder"),
        _ => None,
    };
    if let (Some(why), false) = (why, captures.is_empty()) {
        eprintln!(
            "cargo-fntrace: warning: {}: #[instrument_fn(args/retval)] on {} cannot be honoured under {framework} ({why}); --instrument=fentry or mcount capture them",
            exe.display(),
            captures.join(", ")
        );
    }
    // Thresholds are applied where calls are keyed by function address
    // (the compiler mechanisms), not by the source guard's site.
    let thresholds: Vec<&str> = list
        .iter()
        .filter(|p| p.threshold_ns != 0 && !p.is_off(framework))
        .map(|p| p.function.as_str())
        .collect();
    if framework == "source" && !thresholds.is_empty() {
        eprintln!(
            "cargo-fntrace: warning: {}: #[instrument_fn(threshold)] on {} is not applied under source (the source guard's calls are kept whatever their length); --instrument=fentry, mcount or xray apply it",
            exe.display(),
            thresholds.join(", ")
        );
    }
}

/// The executables of Cargo's `compiler-artifact` messages (JSON, one per
/// line); other lines are passed to stdout.
fn executables(out: impl BufRead) -> Result<Vec<PathBuf>> {
    let mut v = vec![];
    let stdout = std::io::stdout();
    for line in out.lines() {
        let line = line.context("reading cargo's messages")?;
        match serde_json::from_str::<serde_json::Value>(&line) {
            Ok(m) if m.get("reason").is_some() => {
                if m["reason"] == "compiler-artifact" {
                    if let Some(e) = m["executable"].as_str() {
                        let e = PathBuf::from(e);
                        if !v.contains(&e) {
                            v.push(e);
                        }
                    }
                }
            }
            _ => {
                let _ = writeln!(stdout.lock(), "{line}");
            }
        }
    }
    Ok(v)
}

/// What `cargo metadata` says about the workspace.
struct Meta {
    target: PathBuf,
    members: Vec<String>,
}

fn metadata(cargo: &OsStr) -> Result<Meta> {
    let out = Command::new(cargo)
        .args(["metadata", "--format-version", "1", "--no-deps"])
        .output()
        .context("cannot run cargo metadata")?;
    if !out.status.success() {
        bail!(
            "cargo metadata failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).context("cargo metadata")?;
    let target = match std::env::var_os("CARGO_TARGET_DIR") {
        Some(t) => PathBuf::from(t),
        None => v["target_directory"]
            .as_str()
            .map(PathBuf::from)
            .context("cargo metadata gave no target_directory")?,
    };
    let members = v["packages"]
        .as_array()
        .map(|p| {
            p.iter()
                .filter_map(|p| p["name"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    Ok(Meta { target, members })
}

#[cfg(test)]
mod tests {
    use super::mode_flags;

    #[test]
    fn modes_map_to_rustc_flags() {
        assert_eq!(mode_flags("never").unwrap().0, Vec::<String>::new());
        assert!(mode_flags("mcount").unwrap().0[0] == "-Zinstrument-mcount");
        assert_eq!(
            mode_flags("xray:ignore-loops,instruction-threshold=3,no-entry,no-exit")
                .unwrap()
                .0,
            vec![
                "-Zinstrument-xray=ignore-loops,instruction-threshold=3,skip-entry,skip-exit",
                "-Zcrate-attr=feature(patchable_function_entry)",
                "--cfg",
                "fntrace_always_instrument",
                "--check-cfg=cfg(fntrace_always_instrument)",
            ]
        );
        assert_eq!(
            mode_flags("xray").unwrap().0,
            vec!["-Zinstrument-xray=always"]
        );
        assert_eq!(
            mode_flags("xray:always,instruction-threshold=5").unwrap().0,
            vec!["-Zinstrument-xray=always,instruction-threshold=5"]
        );
        assert!(mode_flags("never").unwrap().0.is_empty());
        for m in ["mcount", "fentry", "patchable", "source"] {
            assert!(
                !mode_flags(m)
                    .unwrap()
                    .0
                    .iter()
                    .any(|f| f.contains("always")),
                "{m}"
            );
        }
        assert!(mode_flags("xray:bogus").is_err());
        assert!(mode_flags("mcount:x").is_err());
        assert_eq!(
            mode_flags("fentry").unwrap().0,
            vec!["-Zpatchable-function-entry=10,8"]
        );
        assert_eq!(
            mode_flags("fentry").unwrap(),
            mode_flags("patchable").unwrap()
        );
        assert!(mode_flags("maybe").is_err());
    }

    #[test]
    fn xray_without_always_gives_instrumented_functions_a_patchable_entry() {
        let extra = [
            "-Zcrate-attr=feature(patchable_function_entry)",
            "--cfg",
            "fntrace_always_instrument",
            "--check-cfg=cfg(fntrace_always_instrument)",
        ];
        for (mode, xray) in [
            (
                "xray:instruction-threshold=200",
                "-Zinstrument-xray=instruction-threshold=200",
            ),
            ("xray:ignore-loops", "-Zinstrument-xray=ignore-loops"),
            ("xray:no-exit", "-Zinstrument-xray=skip-exit"),
        ] {
            let (flags, bootstrap) = mode_flags(mode).unwrap();
            assert!(bootstrap, "{mode}");
            let mut want = vec![xray];
            want.extend(extra);
            assert_eq!(flags, want, "{mode}");
        }
        // Every function has sleds: nothing to add.
        for mode in ["xray", "xray:always", "xray:no-entry,always"] {
            let flags = mode_flags(mode).unwrap().0;
            assert_eq!(flags.len(), 1, "{mode}: {flags:?}");
        }
    }
}
