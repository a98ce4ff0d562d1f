//! `fntrace record`: runs a command with recording switched on through
//! the environment (the preload runtime injected when the program uses
//! compiler hooks), then says what it recorded and passes the command's
//! exit status through.

use std::io;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Command, ExitCode};

use fntrace_format::Trace;
use fntrace_rt::config::{self, Config};

use crate::{Error, Result, probe};

/// Largest `--max-size` and `--ring` (16 TiB): the runtime reserves
/// address space for the whole trace when it starts (x86-64 gives a
/// process 128 TiB), and 16 TiB is as large as a file on ext4 grows.
pub const MAX_TRACE_SIZE: u64 = 16 << 40;

/// Smallest `--max-size`: the file header and two chunks, the least the
/// runtime writes.
pub const MIN_MAX_SIZE: u64 = fntrace_format::layout::HEADER_SIZE as u64
    + 2 * fntrace_format::layout::DEFAULT_CHUNK_SIZE as u64;

/// The options of `fntrace record` passed to the runtime (see
/// [`Options::config`]).
#[derive(Debug, Clone, Default, clap::Args)]
pub struct Options {
    /// Largest trace size (e.g. 512M, 4G; from 132K, the header and two
    /// chunks, to 16384G); later events are counted as lost. Default: 16G.
    #[arg(long)]
    pub max_size: Option<String>,
    /// Record only these functions and what they call (regular
    /// expression on the demangled name; repeatable).
    #[arg(short = 'F', long = "filter", value_name = "REGEX")]
    pub filter: Vec<String>,
    /// Never record these functions nor what they call (repeatable).
    #[arg(short = 'N', long = "notrace", value_name = "REGEX")]
    pub notrace: Vec<String>,
    /// Record calls at most this deep (1 or more: calls at depth < N, as
    /// `report -D N` selects them). Default: no limit.
    #[arg(short = 'D', long)]
    pub depth: Option<u32>,
    /// XRay: patch only these functions (regular expression on the
    /// demangled name; repeatable). Default: all.
    #[arg(short = 'P', long = "patch", value_name = "REGEX")]
    pub patch: Vec<String>,
    /// Record the events of these markers, with their argument values
    /// (regular expression on the marker name; repeatable).
    #[arg(short = 'M', long = "markers", value_name = "REGEX")]
    pub markers: Vec<String>,
    /// Count call-graph arcs (caller site, callee) instead of recording
    /// timed events, like gprof (mcount, fentry and cyg_profile).
    #[arg(long)]
    pub count: bool,
    /// Record integer arguments: `FUNC@arg1[,arg2...]` (FUNC a name or a regular
    /// expression; arg1..arg6 or `args`); fentry-style entries
    /// (`-pg -mfentry`, patchable entries). Repeatable.
    #[arg(short = 'A', long = "argument", value_name = "FUNC@argN")]
    pub args: Vec<String>,
    /// Record integer return values (the rax register: a function returning
    /// a float or a struct in memory shows whatever rax held): `FUNC@retval`
    /// or `FUNC` (mcount, fentry, patchable entries). Repeatable.
    #[arg(short = 'R', long = "retval", value_name = "FUNC[@retval]")]
    pub retval: Vec<String>,
    /// Flight recorder: keep only the most recent events in a trace file
    /// of this size (e.g. 64M; from 1M to 16384G), overwriting the oldest
    /// chunks.
    #[arg(long, value_name = "SIZE")]
    pub ring: Option<String>,
    /// Flight recorder: on this signal (SIGUSR1, SIGUSR2 or a real-time
    /// signal number) the program writes a snapshot of its trace to
    /// `OUTPUT.snapshot.N` and goes on.
    #[arg(long, value_name = "SIGNAL")]
    pub snapshot_signal: Option<String>,
    /// Do not open the control socket `fntrace live` talks to.
    #[arg(long)]
    pub no_control: bool,
    /// Also record calls into shared libraries (`memcpy@libc.so.6`) made
    /// through the PLT/GOT of the executable and of instrumented
    /// libraries; with `=REGEX`, only functions whose symbol matches.
    /// Off by default (uftrace records them unless `--no-libcall`).
    #[arg(long, value_name = "REGEX", num_args = 0..=1, require_equals = true, default_missing_value = ".")]
    pub libcalls: Option<String>,
    /// Record when each thread is switched off and back onto a CPU
    /// (perf_event_open context-switch records; needs
    /// perf_event_paranoid <= 2 or CAP_PERFMON): `report` gets a Wait
    /// column, `replay` and the timeline exports show the switches.
    #[arg(long)]
    pub sched: bool,
    /// Keep only calls that last at least this long (10us, 1.5ms; bare
    /// numbers are nanoseconds), with the calls they happened in, like
    /// uftrace's --time-filter. The trace says so, and `report` counts
    /// only what was kept.
    #[arg(short = 't', long = "time-filter", value_name = "TIME")]
    pub time_filter: Option<String>,
    /// Stop recording after this long (5s, 250ms, 2m; bare numbers are
    /// seconds): the program runs on with every site switched off that
    /// can be. With -p: detach then. Default: until the program ends (or
    /// Ctrl-C with -p).
    #[arg(long, value_name = "TIME")]
    pub duration: Option<String>,
}

impl Options {
    /// The runtime configuration these options ask for (without the
    /// output file and the control socket, which `record` decides), every
    /// pattern and spec checked; `keep_calls` comes from this process's
    /// `ENV_KEEP_CALLS` (`1`), as the child inherits it.
    pub fn config(&self) -> Result<Config> {
        let max_size = match &self.max_size {
            Some(s) => match config::parse_size(s) {
                Some(n) if (MIN_MAX_SIZE..=MAX_TRACE_SIZE).contains(&n) => n,
                Some(_) => {
                    return Err(Error::Invalid(format!(
                        "bad --max-size {s:?}: the trace size must be from 132K (the header \
                         and two chunks) to 16384G (16 TiB)"
                    )));
                }
                None => {
                    return Err(Error::Invalid(format!(
                        "bad --max-size {s:?}: not a size (bytes, or a number with K, M or G)"
                    )));
                }
            },
            None => config::DEFAULT_MAX_SIZE,
        };
        let ring = match &self.ring {
            Some(s) => match config::parse_size(s) {
                Some(n) if (1 << 20..=MAX_TRACE_SIZE).contains(&n) => n,
                Some(n) if n > MAX_TRACE_SIZE => {
                    return Err(Error::Invalid(format!(
                        "bad --ring {s:?}: larger than the largest trace, 16384G (16 TiB)"
                    )));
                }
                _ => {
                    return Err(Error::Invalid(format!(
                        "bad --ring {s:?}: not a size of at least 1M (bytes, or a number with K, M or G)"
                    )));
                }
            },
            None => 0,
        };
        if self.depth == Some(0) {
            return Err(Error::Invalid(
                "bad -D/--depth 0: it would record no call (give 1 or more; without -D there is \
                 no depth limit)"
                    .into(),
            ));
        }
        let snapshot_signal = match &self.snapshot_signal {
            Some(s) => config::parse_signal(s).ok_or_else(|| {
                Error::Invalid(format!(
                    "bad --snapshot-signal {s:?}: expected SIGUSR1, SIGUSR2 or a real-time signal number (34 to 64)"
                ))
            })?,
            None => 0,
        };
        for r in self.filter.iter().chain(&self.notrace).chain(&self.patch) {
            regex::Regex::new(r).map_err(Error::pattern(format!("bad function pattern {r:?}")))?;
        }
        let mut capture = vec![];
        for (specs, ret) in [(&self.args, false), (&self.retval, true)] {
            for sp in specs {
                let spec = config::parse_spec(sp, ret)?;
                regex::Regex::new(&config::pattern_regex(&spec.pattern)).map_err(
                    Error::pattern(format!("bad function pattern {:?}", spec.pattern)),
                )?;
                capture.push(spec);
            }
        }
        for r in &self.markers {
            regex::Regex::new(r).map_err(Error::pattern(format!("bad marker pattern {r:?}")))?;
        }
        if self.sched && self.ring.is_some() {
            return Err(Error::Invalid(
                "--sched and --ring do not go together: off-CPU intervals go into the metadata \
                 stream, which the ring never overwrites, so a long run would fill the ring with them"
                    .into(),
            ));
        }
        if let Some(r) = &self.libcalls {
            if r.is_empty() {
                return Err(Error::Invalid(
                    "--libcalls=: empty pattern (use --libcalls for every function)".into(),
                ));
            }
            if let Err(e) = regex::Regex::new(r) {
                // regex's message spans several lines; its last says what.
                let e = e.to_string();
                let why = e.lines().last().unwrap_or("").trim_start_matches("error: ");
                return Err(Error::Invalid(format!(
                    "bad --libcalls pattern {r:?}: {why}"
                )));
            }
        }
        let time_filter_ns = match &self.time_filter {
            Some(s) => config::parse_duration(s, 1)
                .filter(|&ns| ns > 0)
                .ok_or_else(|| {
                    Error::Invalid(format!(
                        "bad -t/--time-filter {s:?}: a positive duration like 10us, 1.5ms or 2s"
                    ))
                })?,
            None => 0,
        };
        let duration_ns = match &self.duration {
            Some(s) => config::parse_duration(s, 1_000_000_000)
                .filter(|&ns| ns > 0)
                .ok_or_else(|| {
                    Error::Invalid(format!(
                        "bad --duration {s:?}: a positive duration like 5s, 250ms or 2m"
                    ))
                })?,
            None => 0,
        };
        if time_filter_ns > 0 && self.count {
            return Err(Error::Invalid(
                "-t/--time-filter and --count do not go together: counting mode keeps no times"
                    .into(),
            ));
        }
        Ok(Config {
            output: None,
            max_size,
            exclusive: true,
            depth: self.depth.unwrap_or(0),
            filter: self.filter.clone(),
            notrace: self.notrace.clone(),
            patch: self.patch.clone(),
            capture,
            count: self.count,
            markers: self.markers.clone(),
            control: false,
            keep_calls: std::env::var_os(config::ENV_KEEP_CALLS).is_some_and(|v| v == "1"),
            libcalls: self.libcalls.clone(),
            sched: self.sched,
            time_filter_ns,
            duration_ns,
            ring,
            snapshot_signal,
            ..Config::default()
        })
    }
}

/// Runs `command` with recording enabled through the environment (and the
/// preload runtime injected when the program uses compiler hooks), and
/// passes its exit status through.
pub fn run(output: &Path, o: &Options, command: &[String]) -> Result<ExitCode> {
    let mut cfg = o.config()?;
    let prog = probe::which(&command[0])
        .ok_or_else(|| Error::Invalid(format!("{}: command not found", command[0])))?;
    let ins = probe::inspect(&prog);
    let preload = match &ins {
        Some(i) if i.runtime && !i.needs_preload() => None,
        Some(i) if i.hooks_runtime => None,
        _ => Some(probe::preload_path().ok_or_else(|| {
            Error::Invalid(format!(
                "cannot find {} (set {}, or build it: cargo build --release -p fntrace-preload)",
                probe::PRELOAD_NAME,
                config::ENV_PRELOAD
            ))
        })?),
    };
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
    // An earlier trace at the same path is kept as `PATH.old`.
    if let Some(old) = crate::tracefile::keep_old(&output)? {
        eprintln!("fntrace: the previous trace is kept as {}", old.display());
    }
    check_writable(&output)?;
    warn_unmatched_markers(&prog, &o.markers);
    warn_unmatched_functions(&prog, o);
    if let Some(i) = &ins {
        if !i.any() {
            eprintln!("fntrace: warning: {}", probe::build_advice(&command[0]));
        }
    }
    cfg.output = Some(output.clone());
    // The control socket, for code fntrace can patch while it runs. That
    // includes `call mcount` and `call __fentry__`, which the runtime
    // rewrites into patchable sites when recording without -F/-N and
    // outside counting mode (unless the calls are kept, `ENV_KEEP_CALLS`).
    let call_sites = |i: &probe::Instrumentation| (i.fentry || i.mcount) && cfg.converts_calls();
    cfg.control = !o.no_control
        && ins
            .as_ref()
            .is_some_and(|i| i.patchable_code() || call_sites(i));
    let control = cfg.control;
    let mut cmd = Command::new(&command[0]);
    cmd.args(&command[1..]).envs(cfg.to_env());
    if let Some(p) = &preload {
        let mut v = std::ffi::OsString::from(p);
        if let Some(old) = std::env::var_os("LD_PRELOAD").filter(|v| !v.is_empty()) {
            v.push(":");
            v.push(old);
        }
        cmd.env("LD_PRELOAD", v);
    }
    // SIGINT, SIGTERM, SIGHUP and SIGQUIT go to the child (the terminal's
    // reach it directly); we stay to report what it recorded.
    crate::signals::install();
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            crate::signals::restore();
            return Err(Error::io_at(format!("cannot run {:?}", command[0]))(e));
        }
    };
    crate::signals::set_child(child.id());
    if control && std::io::IsTerminal::is_terminal(&io::stderr()) {
        eprintln!(
            "fntrace: switch functions on and off while it runs: fntrace live {} list|enable REGEX|disable REGEX",
            child.id()
        );
    }
    // Progress on a terminal, from the live counters the runtime keeps in
    // the trace file's header page.
    let progress = std::io::IsTerminal::is_terminal(&io::stderr())
        .then(|| crate::progress::Progress::start(output.clone()));
    // Stop forwarding before the child is reaped (its pid could be reused).
    crate::signals::wait_exited(child.id());
    drop(progress);
    crate::signals::restore();
    let status = child
        .wait()
        .map_err(Error::io_at(format!("cannot run {:?}", command[0])))?;
    // Whether there is a trace to read: when the runtime could not set it
    // up (no memory for its reservation, a full disk), the program ran
    // untraced, and that is a failure of `record`.
    let traced = match std::fs::metadata(&output) {
        Ok(m) if m.len() == 0 => {
            // What the runtime created before failing: nothing to keep.
            let _ = std::fs::remove_file(&output);
            eprintln!(
                "fntrace: no trace recorded into {}: the runtime could not set it up (see \
                 above), so {:?} ran untraced ({})",
                output.display(),
                command[0],
                describe_status(status)
            );
            false
        }
        Ok(_) => print_summary(&output),
        // An instrumented program whose trace is not there: removed while
        // it ran (by the program itself, a cleanup script), or the program
        // ended before any of its instrumented code ran.
        Err(_) if ins.as_ref().is_some_and(|i| i.any()) => {
            eprintln!(
                "fntrace: {} ended ({}) and its trace {} is not there: it was removed while \
                 the program ran, or no instrumented code ran",
                command[0],
                describe_status(status),
                output.display()
            );
            false
        }
        Err(_) => {
            eprintln!(
                "fntrace: {} wrote no trace ({}). {}",
                command[0],
                describe_status(status),
                probe::build_advice(&command[0])
            );
            false
        }
    };
    let children = crate::tracefile::child_traces(&output);
    if !children.is_empty() {
        // A process tree (a shell script, `make`) can leave hundreds: the
        // first few are named, `report --children` reads them all.
        const SHOWN: usize = 8;
        let mut names: Vec<String> = children
            .iter()
            .take(SHOWN)
            .map(|p| p.display().to_string())
            .collect();
        if children.len() > SHOWN {
            names.push(format!(
                "... and {} more (fntrace report --children {} reads them all)",
                children.len() - SHOWN,
                output.display()
            ));
        }
        eprintln!(
            "fntrace: {} more trace(s) from child processes or exec'd images: {}",
            children.len(),
            names.join(" ")
        );
    }
    if let Some(sig) = status.signal() {
        // Die the same way, so our parent sees the same status (without a
        // core of the recorder in place of the program's).
        crate::signals::die_like(sig);
        return Ok(ExitCode::from(128 + sig as u8));
    }
    if !traced {
        return Ok(ExitCode::from(2));
    }
    Ok(ExitCode::from(status.code().unwrap_or(1) as u8))
}

/// How the program ended, for messages: "exit status 3".
fn describe_status(status: std::process::ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(c), _) => format!("exit status {c}"),
        (None, Some(sig)) => format!("killed by signal {sig}"),
        (None, None) => "status unknown".into(),
    }
}

/// Fails, before the program runs, when the trace cannot be created at
/// `output` (a missing directory, no permission): the runtime would
/// otherwise run the program untraced. The file is created and removed
/// again (the runtime creates its own).
fn check_writable(output: &Path) -> Result<()> {
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(output)
        .map_err(Error::io_at(format!(
            "cannot write the trace to {}",
            output.display()
        )))?;
    std::fs::remove_file(output).map_err(Error::io_at(format!(
        "cannot write the trace to {}",
        output.display()
    )))
}

/// Warns about `-F`, `-N`, `-P`, `-A` and `-R` patterns that match none of
/// the functions the program's symbol tables name (functions of shared
/// libraries it loads are not known here, hence a warning only; a program
/// without symbols is not checked).
fn warn_unmatched_functions(prog: &Path, o: &Options) {
    let mut pats: Vec<(&str, String, &str)> = vec![];
    for (opt, list) in [("-F", &o.filter), ("-N", &o.notrace), ("-P", &o.patch)] {
        for p in list {
            pats.push((opt, p.clone(), p));
        }
    }
    for (opt, list, ret) in [("-A", &o.args, false), ("-R", &o.retval, true)] {
        for sp in list {
            if let Ok(spec) = config::parse_spec(sp, ret) {
                pats.push((opt, config::pattern_regex(&spec.pattern), sp));
            }
        }
    }
    if pats.is_empty() {
        return;
    }
    let funcs = fntrace_rt::procinfo::module_functions(prog, 0);
    if funcs.is_empty() {
        return;
    }
    for (opt, re, shown) in pats {
        let Ok(re) = regex::Regex::new(&re) else {
            continue;
        };
        if !funcs.iter().any(|f| re.is_match(&f.2)) {
            eprintln!(
                "fntrace: warning: {opt} {shown:?} matches none of the {} functions of {} \
                 (shared libraries it loads are not checked)",
                funcs.len(),
                prog.display()
            );
        }
    }
}

/// Warns about `-M` patterns that match none of the markers the program
/// declares (read from the file; markers of shared libraries it loads are
/// not known here, hence a warning only).
fn warn_unmatched_markers(prog: &Path, patterns: &[String]) {
    if patterns.is_empty() {
        return;
    }
    let Ok(list) = crate::markers::read(prog) else {
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

/// Prints what the trace at `output` holds (events, threads, size,
/// damage), from the counts the writer keeps (the final block, else the
/// chunk headers; only chunks without a count are decoded). Returns
/// whether the trace could be read (else it printed why not).
pub(crate) fn print_summary(output: &Path) -> bool {
    match Trace::open(output) {
        Ok(t) => {
            let events = t.event_count(None).events;
            let arcs = t.metadata().arcs.len();
            let what = if arcs > 0 {
                format!("{arcs} call-graph arcs")
            } else {
                format!("{events} events from {} threads", t.thread_ids().len())
            };
            let ring = crate::info::ring_window(&t)
                .map(|w| format!("; flight recorder: {}", w.summary()))
                .unwrap_or_default();
            eprintln!(
                "fntrace: recorded {} into {} ({} bytes){}{}",
                what,
                output.display(),
                t.file_len(),
                ring,
                if t.damage().is_empty() {
                    ""
                } else {
                    "; the trace has damage, see `fntrace info`"
                }
            );
            for n in crate::limits::notes(&t) {
                eprintln!("fntrace: {n}");
            }
            true
        }
        Err(e) => {
            eprintln!("fntrace: {e}");
            false
        }
    }
}
