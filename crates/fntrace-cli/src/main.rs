//! The `fntrace` command: record a program, then report, replay or describe
//! the trace.

use std::io::{self, Write};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use anyhow::{Context, Result, bail};
use clap::{Parser, Subcommand};
use fntrace_cli::analysis::{NamePattern, parse_duration};
use fntrace_cli::commands::{
    CallGraph, Format, GraphFormat, ReplayOptions, SortKey, diff_rows, report_rows,
    report_rows_and_markers, write_diff, write_graph, write_info, write_marker_counts,
    write_replay, write_report,
};
use fntrace_cli::{export, probe};
use fntrace_format::Trace;

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
    Record {
        /// Output file (`{name}` in it stands for the program's name).
        #[arg(short, long, default_value = "fntrace.data")]
        output: PathBuf,
        /// Largest trace size (e.g. 512M, 4G); later events are counted as lost.
        #[arg(long)]
        max_size: Option<String>,
        /// Record only these functions and what they call (regular
        /// expression on the demangled name; repeatable).
        #[arg(short = 'F', long = "filter", value_name = "REGEX")]
        filter: Vec<String>,
        /// Never record these functions nor what they call (repeatable).
        #[arg(short = 'N', long = "notrace", value_name = "REGEX")]
        notrace: Vec<String>,
        /// Record calls at most this deep.
        #[arg(short = 'D', long)]
        depth: Option<u32>,
        /// XRay: patch only these functions (regular expression on the
        /// demangled name; repeatable). Default: all.
        #[arg(short = 'P', long = "patch", value_name = "REGEX")]
        patch: Vec<String>,
        /// Record the events of these markers, with their argument values
        /// (regular expression on the marker name; repeatable).
        #[arg(short = 'M', long = "markers", value_name = "REGEX")]
        markers: Vec<String>,
        /// Count call-graph arcs (caller site, callee) instead of recording
        /// timed events, like gprof (mcount, fentry and cyg_profile).
        #[arg(long)]
        count: bool,
        /// Record integer arguments: `FUNC@arg1[,arg2...]` (FUNC a name or a regular
        /// expression; arg1..arg6 or `args`); fentry-style entries
        /// (`-pg -mfentry`, patchable entries). Repeatable.
        #[arg(short = 'A', long = "argument", value_name = "FUNC@argN")]
        args: Vec<String>,
        /// Record return values: `FUNC@retval` or `FUNC` (mcount, fentry,
        /// patchable entries). Repeatable.
        #[arg(short = 'R', long = "retval", value_name = "FUNC[@retval]")]
        retval: Vec<String>,
        /// Do not open the control socket `fntrace live` talks to.
        #[arg(long)]
        no_control: bool,
        /// The command and its arguments.
        #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true)]
        command: Vec<String>,
    },
    /// Per-function totals: total, self, calls, avg, min, max.
    Report {
        /// Trace file.
        #[arg(default_value = "fntrace.data")]
        path: PathBuf,
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
    },
    /// The call tree with durations and thread ids.
    Replay {
        /// Trace file.
        #[arg(default_value = "fntrace.data")]
        path: PathBuf,
        /// Show this many levels.
        #[arg(short = 'D', long)]
        depth: Option<usize>,
        /// Only subtrees of these functions: a full name, a last path
        /// component (`fib`), or a regular expression (`^app::.*::run$`).
        #[arg(short = 'F', long)]
        filter: Option<String>,
        /// Hide calls shorter than this (e.g. 10us).
        #[arg(short = 't', long)]
        threshold: Option<String>,
        /// Only this thread.
        #[arg(long)]
        tid: Option<u32>,
        /// Show source locations.
        #[arg(long)]
        srcline: bool,
        /// Only calls entered in this window since the start of the
        /// recording, e.g. `1ms~2.5ms` (either side may be empty).
        #[arg(short = 'r', long, value_name = "START~END")]
        time_range: Option<String>,
        /// Colour long calls: auto (when stdout is a terminal), always, never.
        #[arg(long, value_enum, default_value = "auto")]
        color: ColorMode,
    },
    /// Callers (backtraces) and callees of functions, with totals and calls.
    Graph {
        /// The function(s): a name, a last path component or a regex.
        function: String,
        /// Trace file.
        #[arg(default_value = "fntrace.data")]
        path: PathBuf,
        /// Output format.
        #[arg(long, value_enum, default_value = "text")]
        format: GraphFormat,
        /// Show this many levels of callees.
        #[arg(short = 'D', long)]
        depth: Option<usize>,
    },
    /// Write the trace in another tool's format.
    Export {
        /// Trace file.
        #[arg(default_value = "fntrace.data")]
        path: PathBuf,
        /// Output format.
        #[arg(long, value_enum)]
        format: ExportFormat,
        /// Output file.
        #[arg(short, long)]
        output: PathBuf,
    },
    /// Describe a trace: program, threads, events, clock, damage.
    Info {
        /// Trace file.
        #[arg(default_value = "fntrace.data")]
        path: PathBuf,
    },
    /// List the markers declared in an executable or shared library (name,
    /// argument types, design, source location), read from the file.
    Markers {
        /// The executable or shared library.
        binary: PathBuf,
        /// Output format.
        #[arg(long, value_enum, default_value = "table")]
        format: Format,
    },
    /// Record the bundled instrumented example and show report and replay.
    Demo {
        /// Argument of the example's fib.
        #[arg(default_value_t = 20)]
        n: u64,
    },
    /// Change what a running, traced process has switched on (patchable
    /// entries, XRay sleds): `enable REGEX`, `disable REGEX`, `list`,
    /// `status`; without a command, read commands from standard input.
    #[command(visible_alias = "ctl")]
    Live {
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
    },
    #[command(hide = true, name = "__demo-workload")]
    DemoWorkload { n: u64 },
}

/// The workload of `fntrace demo`, instrumented like user code.
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

/// Runs `f`, showing a progress bar on stderr (chunks read out of
/// `passes` passes over the trace) if it takes more than a second and
/// stderr is a terminal.
fn with_progress<R>(t: &Trace, passes: u64, label: &str, f: impl FnOnce() -> R) -> R {
    use std::io::IsTerminal;
    use std::sync::atomic::{AtomicBool, Ordering};
    if !io::stderr().is_terminal() {
        return f();
    }
    let total = t.stream_chunks() * passes;
    let base = t.chunks_read();
    let done = AtomicBool::new(false);
    std::thread::scope(|sc| {
        sc.spawn(|| {
            let start = std::time::Instant::now();
            while start.elapsed() < std::time::Duration::from_secs(1) {
                if done.load(Ordering::Acquire) {
                    return;
                }
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            let bar = indicatif::ProgressBar::new(total);
            bar.set_style(
                indicatif::ProgressStyle::with_template(
                    "{msg} [{bar:40}] {percent}% ({elapsed}, {eta} left)",
                )
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
                .progress_chars("=> "),
            );
            bar.set_message(label.to_string());
            while !done.load(Ordering::Acquire) {
                bar.set_position(t.chunks_read().saturating_sub(base).min(total));
                std::thread::sleep(std::time::Duration::from_millis(100));
            }
            bar.finish_and_clear();
        });
        let r = f();
        done.store(true, Ordering::Release);
        r
    })
}

fn open(path: &Path) -> Result<Trace> {
    Ok(Trace::open(path)?)
}

fn run() -> Result<ExitCode> {
    let cli = Cli::parse();
    let stdout = io::stdout();
    let mut out = stdout.lock();
    match cli.cmd {
        Cmd::Record {
            output,
            max_size,
            filter,
            notrace,
            depth,
            patch,
            markers,
            count,
            args,
            retval,
            no_control,
            command,
        } => {
            let o = RecordOptions {
                max_size,
                filter,
                notrace,
                depth,
                patch,
                markers,
                count,
                args,
                retval,
                no_control,
            };
            return record(&output, &o, &command);
        }
        Cmd::Report {
            path,
            sort,
            format,
            threads,
            diff,
        } => {
            let t = open(&path)?;
            warn_damage(&t);
            if let Some(other) = diff {
                let o = open(&other)?;
                warn_damage(&o);
                write_diff(&mut out, &diff_rows(&t, &o), format)?;
            } else {
                let (rows, markers) = with_progress(&t, 1, "reading", || {
                    report_rows_and_markers(&t, threads, sort)
                });
                write_report(&mut out, &rows, format)?;
                if format == Format::Table {
                    write_marker_counts(&mut out, &markers)?;
                }
            }
        }
        Cmd::Replay {
            path,
            depth,
            filter,
            threshold,
            tid,
            srcline,
            time_range,
            color,
        } => {
            let t = open(&path)?;
            warn_damage(&t);
            let threshold_ns = match threshold {
                Some(s) => parse_duration(&s)
                    .with_context(|| format!("bad --threshold {s:?} (use e.g. 10us, 1ms)"))?,
                None => 0,
            };
            let filter = match filter {
                Some(f) => {
                    Some(NamePattern::new(&f).with_context(|| format!("bad --filter {f:?}"))?)
                }
                None => None,
            };
            let time_range = match time_range {
                Some(r) => Some(parse_range(&r).with_context(|| {
                    format!("bad --time-range {r:?} (use e.g. 1ms~2.5ms, ~10ms, 5s~)")
                })?),
                None => None,
            };
            // SAFETY: isatty has no preconditions.
            let tty = unsafe { libc::isatty(1) } == 1;
            let o = ReplayOptions {
                depth,
                filter,
                threshold_ns,
                tid,
                srcline,
                time_range,
                color: color == ColorMode::Always || (color == ColorMode::Auto && tty),
            };
            write_replay(&mut out, &t, &o)?;
        }
        Cmd::Info { path } => write_info(&mut out, &open(&path)?)?,
        Cmd::Markers { binary, format } => {
            let list = fntrace_cli::markers::read(&binary)?;
            fntrace_cli::markers::write(&mut out, &list, format)?;
        }
        Cmd::Graph {
            function,
            path,
            format,
            depth,
        } => {
            let t = open(&path)?;
            warn_damage(&t);
            let p = NamePattern::new(&function)
                .with_context(|| format!("bad function pattern {function:?}"))?;
            let g = with_progress(&t, 1, "reading", || CallGraph::build(&t, &p));
            if g.is_empty() {
                bail!("{}: no calls of {function:?}", path.display());
            }
            write_graph(&mut out, &t, &g, format, depth)?;
        }
        Cmd::Export {
            path,
            format,
            output,
        } => {
            let t = open(&path)?;
            warn_damage(&t);
            let file = std::fs::File::create(&output)
                .with_context(|| format!("{}: cannot create", output.display()))?;
            let mut buf = io::BufWriter::with_capacity(1 << 20, file);
            match format {
                ExportFormat::Gmon => {
                    let s = export::write_gmon(&mut buf, &t)
                        .with_context(|| format!("{}: cannot export", path.display()))?;
                    eprintln!(
                        "fntrace: wrote {} arcs ({} calls, from {}) to {}",
                        s.arcs,
                        s.calls,
                        if s.counted {
                            "counted arcs"
                        } else {
                            "timed calls"
                        },
                        output.display()
                    );
                }
                ExportFormat::Chrome => {
                    let n = export::write_chrome(&mut buf, &t)?;
                    eprintln!("fntrace: wrote {n} events to {}", output.display());
                }
                ExportFormat::Folded => {
                    let n = export::write_folded(&mut buf, &t)?;
                    eprintln!("fntrace: wrote {n} stacks to {}", output.display());
                }
                ExportFormat::Flamegraph => {
                    let title = t
                        .metadata()
                        .process
                        .as_ref()
                        .map(|p| p.args.join(" "))
                        .unwrap_or_else(|| path.display().to_string());
                    let n = export::write_flamegraph(&mut buf, &t, &title)?;
                    eprintln!(
                        "fntrace: wrote a flame graph of {n} stacks to {}",
                        output.display()
                    );
                }
                ExportFormat::Html => {
                    export::write_html(&mut buf, &t)?;
                    eprintln!("fntrace: wrote {}", output.display());
                }
                ExportFormat::Xray => {
                    let s = export::write_xray(&mut buf, &t)
                        .with_context(|| format!("{}: cannot export", path.display()))?;
                    eprintln!(
                        "fntrace: wrote {} XRay records to {}{}",
                        s.records,
                        output.display(),
                        if s.skipped > 0 {
                            format!(
                                " ({} calls of functions without an XRay id left out)",
                                s.skipped
                            )
                        } else {
                            String::new()
                        }
                    );
                }
            }
            buf.flush()
                .with_context(|| format!("{}: cannot write", output.display()))?;
        }
        Cmd::Demo { n } => {
            let dir = std::env::temp_dir().join(format!("fntrace-demo-{}", std::process::id()));
            std::fs::create_dir_all(&dir)?;
            let data = dir.join("demo.data");
            let me = std::env::current_exe()?;
            let cmd = vec![
                me.display().to_string(),
                "__demo-workload".into(),
                n.to_string(),
            ];
            writeln!(
                out,
                "$ fntrace record -o {} -- fntrace-demo {n}",
                data.display()
            )?;
            out.flush()?;
            record(&data, &RecordOptions::default(), &cmd)?;
            let t = open(&data)?;
            writeln!(out, "\n$ fntrace report")?;
            write_report(
                &mut out,
                &report_rows(&t, false, SortKey::Total),
                Format::Table,
            )?;
            writeln!(out, "\n$ fntrace replay --depth 3")?;
            write_replay(
                &mut out,
                &t,
                &ReplayOptions {
                    depth: Some(3),
                    ..Default::default()
                },
            )?;
            let _ = std::fs::remove_dir_all(&dir);
        }
        Cmd::Live {
            pid,
            command,
            enable,
            disable,
        } => return live(pid, &command, &enable, &disable),
        Cmd::DemoWorkload { n } => {
            writeln!(out, "{}", demo::run(n))?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn warn_damage(t: &Trace) {
    if !t.damage().is_empty() {
        eprintln!(
            "fntrace: {}: {} damaged parts skipped (see `fntrace info`)",
            t.path().display(),
            t.damage().len()
        );
    }
}

/// Files `OUTPUT.PID` next to `output` (children and exec'd images).
fn child_traces(output: &Path) -> Vec<PathBuf> {
    let (Some(dir), Some(name)) = (output.parent(), output.file_name()) else {
        return vec![];
    };
    let prefix = format!("{}.", name.to_string_lossy());
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| {
            let n = e.file_name().to_string_lossy().into_owned();
            n.strip_prefix(&prefix)
                .is_some_and(|pid| !pid.is_empty() && pid.bytes().all(|b| b.is_ascii_digit()))
        })
        .map(|e| e.path())
        .collect();
    v.sort();
    v
}

/// When to colour output.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum ColorMode {
    /// When stdout is a terminal.
    Auto,
    /// Always.
    Always,
    /// Never.
    Never,
}

/// Parses `START~END` (durations; either side may be empty).
fn parse_range(s: &str) -> Option<(u64, u64)> {
    let (a, b) = s.split_once('~')?;
    let a = if a.trim().is_empty() {
        0
    } else {
        parse_duration(a)?
    };
    let b = if b.trim().is_empty() {
        u64::MAX
    } else {
        parse_duration(b)?
    };
    (a <= b).then_some((a, b))
}

/// Formats of `fntrace export`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum ExportFormat {
    /// glibc's gmon.out, for `gprof BINARY gmon.out`.
    Gmon,
    /// An llvm-xray basic-mode log, for `llvm-xray account -instr_map=BINARY`.
    Xray,
    /// Chrome Trace Event JSON, for Perfetto UI and chrome://tracing.
    Chrome,
    /// Collapsed stacks (self time in ns), for flame-graph tools; stacks
    /// deeper than 1,024 frames are cut there (their time is kept).
    Folded,
    /// A flame graph (SVG), of the same stacks.
    Flamegraph,
    /// One self-contained HTML page: summary, flame graph, top functions,
    /// call tree.
    Html,
}

/// Warns about `-M` patterns that match none of the markers the program
/// declares (read from the file; markers of shared libraries it loads are
/// not known here, hence a warning only).
fn warn_unmatched_markers(prog: &Path, patterns: &[String]) {
    if patterns.is_empty() {
        return;
    }
    let Ok(list) = fntrace_cli::markers::read(prog) else {
        return;
    };
    for p in patterns {
        let Ok(re) = regex::Regex::new(p) else {
            continue;
        };
        if !list.iter().any(|m| re.is_match(&m.name)) {
            eprintln!(
                "fntrace: warning: -M {p:?} matches none of the {} markers {} declares \
                 (see `fntrace markers {}`)",
                list.len(),
                prog.display(),
                prog.display()
            );
        }
    }
}

/// Options of `fntrace record` passed to the runtime.
#[derive(Default)]
struct RecordOptions {
    count: bool,
    max_size: Option<String>,
    filter: Vec<String>,
    notrace: Vec<String>,
    depth: Option<u32>,
    patch: Vec<String>,
    args: Vec<String>,
    retval: Vec<String>,
    no_control: bool,
    markers: Vec<String>,
}

/// `fntrace live PID ...`: sends commands to the control socket of a
/// traced process and prints the answers.
fn live(pid: u32, command: &[String], enable: &[String], disable: &[String]) -> Result<ExitCode> {
    use std::io::{BufRead, BufReader};
    use std::os::unix::net::UnixStream;
    let mut lines: Vec<String> = vec![];
    for p in enable {
        lines.push(format!("enable {p}"));
    }
    for p in disable {
        lines.push(format!("disable {p}"));
    }
    if !command.is_empty() {
        lines.push(command.join(" "));
    }
    for l in &lines {
        if let Some(p) = l
            .strip_prefix("enable ")
            .or_else(|| l.strip_prefix("disable "))
        {
            regex::Regex::new(p.trim()).with_context(|| format!("bad function pattern {p:?}"))?;
        }
    }
    let mut path = fntrace_rt::control::socket_path(pid);
    // Another user's process keeps its socket in that user's directory.
    if !path.exists() {
        use std::os::unix::fs::MetadataExt;
        if let Ok(m) = std::fs::metadata(format!("/proc/{pid}")) {
            // SAFETY: geteuid cannot fail.
            if m.uid() != unsafe { libc::geteuid() } {
                let u = m.uid();
                let run = PathBuf::from(format!("/run/user/{u}"));
                path = if run.is_dir() {
                    run.join(format!("fntrace/{pid}.sock"))
                } else {
                    PathBuf::from(format!("/tmp/fntrace-{u}/{pid}.sock"))
                };
            }
        } else {
            bail!("no process {pid}");
        }
    }
    let s = match UnixStream::connect(&path) {
        Ok(s) => s,
        Err(e) if e.kind() == io::ErrorKind::NotFound => bail!(
            "{}: process {pid} has no fntrace control socket (is it running under \
             `fntrace record` without --no-control, and does it have patchable code: \
             XRay sleds, patchable entries or NOP fentry sites?)",
            path.display()
        ),
        Err(e) if e.kind() == io::ErrorKind::PermissionDenied => bail!(
            "{}: refused: process {pid} belongs to another user (only its owner may control it)",
            path.display()
        ),
        Err(e) => bail!("{}: cannot connect: {e}", path.display()),
    };
    let mut w = s.try_clone()?;
    let mut r = BufReader::new(s);
    let mut hello = String::new();
    r.read_line(&mut hello)
        .with_context(|| format!("{}: no answer", path.display()))?;
    if let Some(e) = hello.trim_end().strip_prefix("error: ") {
        eprintln!("fntrace: process {pid}: {e}");
        return Ok(ExitCode::from(2));
    }
    if !hello.starts_with("ok") {
        bail!("{}: not an fntrace control socket", path.display());
    }
    let interactive = lines.is_empty();
    let mut failed = false;
    let stdin = io::stdin();
    let mut input = lines.into_iter();
    loop {
        let line = if interactive {
            let mut l = String::new();
            if stdin.lock().read_line(&mut l)? == 0 {
                break;
            }
            l.trim().to_string()
        } else {
            match input.next() {
                Some(l) => l,
                None => break,
            }
        };
        if line.is_empty() {
            continue;
        }
        writeln!(w, "{line}")?;
        loop {
            let mut a = String::new();
            if r.read_line(&mut a)? == 0 {
                bail!("{}: process {pid} closed the connection", path.display());
            }
            let a = a.trim_end();
            if let Some(e) = a.strip_prefix("error: ") {
                eprintln!("fntrace: process {pid}: {e}");
                failed = true;
                break;
            }
            println!("{a}");
            if a == "ok" || a.starts_with("ok ") {
                break;
            }
        }
    }
    Ok(if failed {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

/// Runs `command` with recording enabled through the environment (and the
/// preload runtime injected when the program uses compiler hooks), and
/// passes its exit status through.
fn record(output: &Path, o: &RecordOptions, command: &[String]) -> Result<ExitCode> {
    for r in o.filter.iter().chain(&o.notrace).chain(&o.patch) {
        regex::Regex::new(r).with_context(|| format!("bad function pattern {r:?}"))?;
    }
    for (specs, ret) in [(&o.args, false), (&o.retval, true)] {
        for sp in specs {
            let p = fntrace_rt::config::parse_spec(sp, ret)?.pattern;
            regex::Regex::new(&fntrace_rt::config::pattern_regex(&p))
                .with_context(|| format!("bad function pattern {p:?}"))?;
        }
    }
    for r in &o.markers {
        regex::Regex::new(r).with_context(|| format!("bad marker pattern {r:?}"))?;
    }
    let prog =
        probe::which(&command[0]).with_context(|| format!("{}: command not found", command[0]))?;
    let ins = probe::inspect(&prog);
    warn_unmatched_markers(&prog, &o.markers);
    let preload = match &ins {
        Some(i) if i.runtime && !i.needs_preload() => None,
        Some(i) if i.hooks_runtime => None,
        _ => Some(probe::preload_path().with_context(|| {
            format!(
                "cannot find {} (set FNTRACE_PRELOAD, or build it: cargo build --release -p fntrace-preload)",
                probe::PRELOAD_NAME
            )
        })?),
    };
    if let Some(i) = &ins {
        if !i.any() {
            eprintln!("fntrace: warning: {}", probe::build_advice(&command[0]));
        }
    }
    // `{name}` in the file name stands for the program's name (so that one
    // runner setting gives every program its own trace).
    let output = match output.file_name().and_then(|n| n.to_str()) {
        Some(n) if n.contains("{name}") => {
            let prog = Path::new(&command[0])
                .file_name()
                .map(|p| p.to_string_lossy().replace(['/', '\\'], "_"))
                .unwrap_or_else(|| "prog".into());
            output.with_file_name(n.replace("{name}", &prog))
        }
        _ => output.to_path_buf(),
    };
    let output = std::path::absolute(&output)?;
    match std::fs::remove_file(&output) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => bail!("{}: cannot replace: {e}", output.display()),
    }
    // Traces of forked children and exec'd images of an earlier run.
    for f in child_traces(&output) {
        let _ = std::fs::remove_file(f);
    }
    let mut cmd = Command::new(&command[0]);
    cmd.args(&command[1..])
        .env(fntrace::ENV_OUTPUT, &output)
        .env("FNTRACE_EXCLUSIVE", "1");
    if let Some(m) = &o.max_size {
        cmd.env(fntrace::ENV_MAX_SIZE, m);
    }
    if o.count {
        cmd.env("FNTRACE_COUNT", "1");
    }
    if let Some(d) = o.depth {
        cmd.env("FNTRACE_DEPTH", d.to_string());
    }
    if !o.filter.is_empty() {
        cmd.env("FNTRACE_FILTER", o.filter.join("\n"));
    }
    if !o.notrace.is_empty() {
        cmd.env("FNTRACE_NOTRACE", o.notrace.join("\n"));
    }
    if !o.markers.is_empty() {
        cmd.env("FNTRACE_MARKERS", o.markers.join("\n"));
    }
    if !o.patch.is_empty() {
        cmd.env("FNTRACE_PATCH", o.patch.join("\n"));
    }
    if !o.args.is_empty() {
        cmd.env(fntrace_rt::config::ENV_ARGS, o.args.join("\n"));
    }
    if !o.retval.is_empty() {
        cmd.env(fntrace_rt::config::ENV_RETVAL, o.retval.join("\n"));
    }
    // The control socket, for code fntrace can patch while it runs. That
    // includes `call mcount` and `call __fentry__`, which the runtime
    // rewrites into patchable sites when recording without -F/-N and
    // outside counting mode (unless FNTRACE_KEEP_CALLS=1).
    let call_sites = |i: &probe::Instrumentation| {
        (i.fentry || i.mcount)
            && o.filter.is_empty()
            && o.notrace.is_empty()
            && !o.count
            && std::env::var_os("FNTRACE_KEEP_CALLS").is_none_or(|v| v != "1")
    };
    let control = !o.no_control
        && ins
            .as_ref()
            .is_some_and(|i| i.patchable_code() || call_sites(i));
    if control {
        cmd.env(fntrace_rt::config::ENV_CONTROL, "1");
    }
    if let Some(p) = &preload {
        let mut v = std::ffi::OsString::from(p);
        if let Some(old) = std::env::var_os("LD_PRELOAD").filter(|v| !v.is_empty()) {
            v.push(":");
            v.push(old);
        }
        cmd.env("LD_PRELOAD", v);
    }
    // Ctrl-C goes to the child; we stay to report what it recorded.
    // SAFETY: setting SIGINT/SIGQUIT to ignored has no preconditions.
    unsafe {
        libc::signal(libc::SIGINT, libc::SIG_IGN);
        libc::signal(libc::SIGQUIT, libc::SIG_IGN);
    }
    let mut child = cmd
        .spawn()
        .with_context(|| format!("cannot run {:?}", command[0]))?;
    if control && std::io::IsTerminal::is_terminal(&io::stderr()) {
        eprintln!(
            "fntrace: switch functions on and off while it runs: fntrace live {} list|enable REGEX|disable REGEX",
            child.id()
        );
    }
    let status = child
        .wait()
        .with_context(|| format!("cannot run {:?}", command[0]))?;
    // SAFETY: restoring default dispositions.
    unsafe {
        libc::signal(libc::SIGINT, libc::SIG_DFL);
        libc::signal(libc::SIGQUIT, libc::SIG_DFL);
    }
    if output.exists() {
        match Trace::open(&output) {
            Ok(t) => {
                let events: u64 = t
                    .thread_ids()
                    .into_iter()
                    .map(|tid| {
                        // The fast path: compact events are not built
                        // into records.
                        let mut r = t.stream(tid);
                        let mut n = 0u64;
                        while let Some(it) = r.next_fast() {
                            n += match it {
                                fntrace_format::reader::FastItem::Other(o) => matches!(
                                    *o,
                                    fntrace_format::reader::StreamItem::Record(
                                        fntrace_format::Record::Entry { .. }
                                            | fntrace_format::Record::Exit { .. }
                                    )
                                )
                                    as u64,
                                _ => 1,
                            };
                        }
                        n
                    })
                    .sum();
                let arcs = t.metadata().arcs.len();
                let what = if arcs > 0 {
                    format!("{arcs} call-graph arcs")
                } else {
                    format!("{events} events from {} threads", t.thread_ids().len())
                };
                eprintln!(
                    "fntrace: recorded {} into {} ({} bytes){}",
                    what,
                    output.display(),
                    t.file_len(),
                    if t.damage().is_empty() {
                        ""
                    } else {
                        "; the trace has damage, see `fntrace info`"
                    }
                );
            }
            Err(e) => eprintln!("fntrace: {e}"),
        }
    } else {
        eprintln!(
            "fntrace: {} wrote no trace. {}",
            command[0],
            probe::build_advice(&command[0])
        );
    }
    let children = child_traces(&output);
    if !children.is_empty() {
        eprintln!(
            "fntrace: {} more trace(s) from child processes or exec'd images: {}",
            children.len(),
            children
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(" ")
        );
    }
    if let Some(sig) = status.signal() {
        // Die the same way, so our parent sees the same status.
        // SAFETY: resetting the handler and raising a signal at ourselves.
        unsafe {
            libc::signal(sig, libc::SIG_DFL);
            libc::raise(sig);
        }
        return Ok(ExitCode::from(128 + sig as u8));
    }
    Ok(ExitCode::from(status.code().unwrap_or(1) as u8))
}
