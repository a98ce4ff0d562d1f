//! The `fntrace` command: record a program, then report, replay or describe
//! the trace. This file holds the command line (one argument struct per
//! command) and dispatches each command to its module of the library
//! (`fntrace_cli`), plus the instrumented workload `fntrace demo` records.

use std::io::{self, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use clap::{Args, Parser, Subcommand};
use fntrace_cli::export::ExportFormat;
use fntrace_cli::graph::GraphFormat;
use fntrace_cli::report::{Format, SortKey};
use fntrace_cli::tracefile::TraceFile;
use fntrace_cli::{attach, export, graph, info, live, markers, record, replay, report};

#[derive(Parser)]
#[command(
    name = "fntrace",
    version,
    about = "Trace every function call of a program"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run a command and record its function calls.
    Record(Box<RecordArgs>),
    /// Per-function totals: total, self, calls, avg, min, max.
    Report(ReportArgs),
    /// The call tree with durations and thread ids.
    Replay(ReplayArgs),
    /// Callers (backtraces) and callees of functions, with totals and calls.
    Graph(GraphArgs),
    /// Write the trace in another tool's format.
    Export(ExportArgs),
    /// Describe a trace: program, threads, events, clock, damage.
    Info(InfoArgs),
    /// Browse a trace in the terminal: call tree, report, callers and
    /// callees, info (keys: `?`).
    Tui(TuiArgs),
    /// List the markers declared in an executable or shared library (name,
    /// argument types, design, source location), read from the file.
    Markers(MarkersArgs),
    /// List what `#[instrument_fn]` decided for each function of an
    /// executable or shared library: per framework (source, mcount,
    /// fentry, xray) and its options (args, retval, threshold), read from
    /// the file.
    Functions(FunctionsArgs),
    /// Record the bundled instrumented example and show report and replay.
    Demo(DemoArgs),
    /// Change what a running, traced process has switched on (patchable
    /// entries, XRay sleds): `enable REGEX`, `disable REGEX`, `list`,
    /// `status`; without a command, read commands from standard input.
    #[command(visible_alias = "ctl")]
    Live(LiveArgs),
    #[command(hide = true, name = fntrace_cli::demo::WORKLOAD_COMMAND)]
    DemoWorkload(WorkloadArgs),
}

// `fntrace record`.
#[derive(Args)]
struct RecordArgs {
    /// Output file (`{name}` in it stands for the program's name).
    #[arg(short, long, default_value = "fntrace.data")]
    output: PathBuf,
    #[command(flatten)]
    options: record::Options,
    /// Attach to this running process instead of starting a command:
    /// record a window, then detach (see README, "Attaching to a running
    /// process").
    #[arg(short = 'p', long = "pid", conflicts_with = "command")]
    pid: Option<i32>,
    /// The command and its arguments.
    #[arg(
        required_unless_present = "pid",
        trailing_var_arg = true,
        allow_hyphen_values = true
    )]
    command: Vec<String>,
}

// `fntrace report`.
#[derive(Args)]
struct ReportArgs {
    #[command(flatten)]
    trace: TraceFile,
    /// Sort key.
    #[arg(long, value_enum, default_value = "total")]
    sort: SortKey,
    /// Output format.
    #[arg(long, value_enum, default_value = "table")]
    format: Format,
    /// One row per function and thread.
    #[arg(long)]
    threads: bool,
    /// Compare with another trace: changes of total time and calls per
    /// function, largest first (PATH is the base, a; OTHER is b).
    #[arg(long, value_name = "OTHER")]
    diff: Option<PathBuf>,
    /// Also read the traces of the recording's other processes (forked
    /// children `PATH.PID`, `exec`'d images `PATH.PID` and `PATH.PID.N`)
    /// and merge their rows.
    #[arg(long, conflicts_with = "diff")]
    children: bool,
    #[command(flatten)]
    select: fntrace_cli::select::SelectArgs,
}

// `fntrace replay`.
#[derive(Args)]
struct ReplayArgs {
    #[command(flatten)]
    trace: TraceFile,
    #[command(flatten)]
    options: replay::CliOptions,
}

// `fntrace graph`.
#[derive(Args)]
struct GraphArgs {
    /// The function(s): a name or a last path component (`operator()`,
    /// `{closure#0}`), or a regex when it has `^ $ \ | .* .+ .?` or a
    /// `[class]`.
    function: String,
    #[command(flatten)]
    trace: TraceFile,
    /// Output format.
    #[arg(long, value_enum, default_value = "text")]
    format: GraphFormat,
    /// Show this many levels of callees (`-D/--depth` is the selection's
    /// depth, as on replay).
    #[arg(short = 'L', long)]
    levels: Option<usize>,
    #[command(flatten)]
    select: fntrace_cli::select::SelectArgs,
}

// `fntrace export`.
#[derive(Args)]
struct ExportArgs {
    #[command(flatten)]
    trace: TraceFile,
    /// Output format.
    #[arg(long, value_enum)]
    format: ExportFormat,
    /// Output file (`-`: standard output).
    #[arg(short, long)]
    output: PathBuf,
    #[command(flatten)]
    select: fntrace_cli::select::SelectArgs,
    /// Folded stacks and flame graph: what a stack's value measures: its
    /// function's self time (wall), or only the part on CPU or off CPU
    /// (blocked or preempted; a trace recorded with --sched).
    #[arg(long, value_enum, default_value = "wall")]
    weight: fntrace_cli::export::Weight,
}

// `fntrace info`.
#[derive(Args)]
struct InfoArgs {
    #[command(flatten)]
    trace: TraceFile,
}

// `fntrace tui`.
#[derive(Args)]
struct TuiArgs {
    #[command(flatten)]
    trace: TraceFile,
    #[command(flatten)]
    options: fntrace_cli::tui::Options,
}

// `fntrace markers`.
#[derive(Args)]
struct MarkersArgs {
    /// The executable or shared library.
    binary: PathBuf,
    /// Output format.
    #[arg(long, value_enum, default_value = "table")]
    format: Format,
}

// `fntrace functions`.
#[derive(Args)]
struct FunctionsArgs {
    /// The executable or shared library.
    binary: PathBuf,
    /// Output format.
    #[arg(long, value_enum, default_value = "table")]
    format: Format,
    /// Every function of the file, not only those the attribute
    /// registered (the others with the defaults; source `on` when the
    /// function has an `#[instrument_fn]` site).
    #[arg(long)]
    all: bool,
}

// `fntrace demo`.
#[derive(Args)]
struct DemoArgs {
    /// Argument of the example's fib.
    #[arg(default_value_t = 20)]
    n: u64,
}

// `fntrace __demo-workload`.
#[derive(Args)]
struct WorkloadArgs {
    n: u64,
}

// `fntrace live`.
#[derive(Args)]
struct LiveArgs {
    /// Process id of a program running under `fntrace record`.
    pid: u32,
    /// The command, e.g. `enable '^parse'`.
    command: Vec<String>,
    /// Switch these functions on (regular expression; repeatable).
    #[arg(short = 'F', long = "enable", value_name = "REGEX")]
    enable: Vec<String>,
    /// Switch these functions off (regular expression; repeatable).
    #[arg(short = 'N', long = "disable", value_name = "REGEX")]
    disable: Vec<String>,
    /// `snapshot`: where to write the copy of the trace (default
    /// `TRACE.snapshot.N`).
    #[arg(short, long)]
    output: Option<PathBuf>,
}

/// The workload of `fntrace demo`, instrumented like user code (it has to
/// be part of this binary: the demo records `fntrace __demo-workload`).
#[fntrace::instrument_fn]
mod demo {
    pub fn fib(n: u64) -> u64 {
        if n < 2 { n } else { fib(n - 1) + fib(n - 2) }
    }

    pub fn checksum(v: &[u64]) -> u64 {
        v.iter().fold(0, |a, &x| a.wrapping_mul(31).wrapping_add(x))
    }

    pub fn run(n: u64) -> u64 {
        let v: Vec<u64> = (0..4).map(|i| fib(n.saturating_sub(i))).collect();
        checksum(&v)
    }
}

fn main() -> ExitCode {
    // Like other Unix filters: `fntrace replay | head` ends quietly.
    // SAFETY: restoring the default disposition of SIGPIPE at start.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    match run() {
        Ok(code) => code,
        Err(e) => {
            eprintln!("fntrace: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn run() -> Result<ExitCode> {
    let cli = Cli::parse();
    let stdout = io::stdout();
    let mut out = stdout.lock();
    match cli.cmd {
        Cmd::Record(a) => {
            if let Some(pid) = a.pid {
                return Ok(attach::run(pid, &a.output, &a.options)?);
            }
            return Ok(record::run(&a.output, &a.options, &a.command)?);
        }
        Cmd::Report(a) => report::run(
            &mut out,
            &a.trace.path,
            a.sort,
            a.format,
            a.threads,
            report::With {
                diff: a.diff.as_deref(),
                children: a.children,
            },
            &a.select,
        )?,
        Cmd::Replay(a) => replay::run(&mut out, &a.trace.path, &a.options)?,
        Cmd::Graph(a) => graph::run(
            &mut out,
            &a.function,
            &a.trace.path,
            a.format,
            a.levels,
            &a.select,
        )?,
        Cmd::Export(a) => {
            export::run_weighted(&a.trace.path, a.format, &a.output, &a.select, a.weight)?
        }
        Cmd::Info(a) => info::run(&mut out, &a.trace.path)?,
        Cmd::Tui(a) => fntrace_cli::tui::run(&mut out, &a.trace.path, &a.options)?,
        Cmd::Markers(a) => markers::run(&mut out, &a.binary, a.format)?,
        Cmd::Functions(a) => fntrace_cli::functions::run(&mut out, &a.binary, a.format, a.all)?,
        Cmd::Demo(a) => fntrace_cli::demo::run(&mut out, a.n)?,
        Cmd::Live(a) if a.command.first().is_some_and(|c| c == "snapshot") => {
            if a.command.len() > 1 {
                return Err(fntrace_cli::Error::Invalid(format!(
                    "live PID snapshot takes no argument but -o PATH (got {:?})",
                    &a.command[1..]
                ))
                .into());
            }
            return Ok(fntrace_cli::snapshot::run(a.pid, a.output.as_deref())?);
        }
        Cmd::Live(a) => return Ok(live::run(a.pid, &a.command, &a.enable, &a.disable)?),
        Cmd::DemoWorkload(a) => writeln!(out, "{}", demo::run(a.n))?,
    }
    Ok(ExitCode::SUCCESS)
}
