//! The runtime's one configuration surface: every setting a session can
//! start with ([`Config`]), the names of the `FNTRACE_*` environment
//! variables that carry it (each defined here once), and the pure parsing
//! of those variables and of the values they hold (sizes, `-A`/`-R`
//! specs, patterns).
//!
//! A leaf: it imports nothing else of the runtime. Parsing has no side
//! effects; `session::start` applies a [`Config`]. `fntrace record`
//! builds a [`Config`] and hands it to the child with [`Config::to_env`];
//! a session started at run time (attach) can take one directly.

use std::ffi::{OsStr, OsString};
use std::path::PathBuf;

/// Output file; setting it makes any instrumented program record from its
/// first instrumented call.
pub const ENV_OUTPUT: &str = "FNTRACE_OUTPUT";
/// Maximum trace size (bytes, or with a `K`, `M` or `G` suffix).
pub const ENV_MAX_SIZE: &str = "FNTRACE_MAX_SIZE";
/// Trace memory kept ready ahead of the writers (bytes, or with a `K`,
/// `M` or `G` suffix; default [`DEFAULT_BUFFER`]): a helper thread maps
/// and pre-faults that much of the file ahead of use and drops full
/// chunks from memory after handing them to writeback. `0`: no helper
/// thread (threads fault their trace pages in themselves and every chunk
/// stays resident).
pub const ENV_BUFFER: &str = "FNTRACE_BUFFER";
/// Flight recorder: the trace file is a ring of this size (bytes, or with
/// a `K`, `M` or `G` suffix) whose oldest chunks are overwritten; unset or
/// `0`: keep everything (up to the maximum size).
pub const ENV_RING: &str = "FNTRACE_RING";
/// Flight recorder: a signal (`SIGUSR1`, `SIGUSR2` or a real-time signal
/// number 34..=64) on which the runtime writes a snapshot of the trace to
/// `PATH.snapshot.N` without stopping the program.
pub const ENV_SNAPSHOT_SIGNAL: &str = "FNTRACE_SNAPSHOT_SIGNAL";
/// `1`: create the output exclusively (if it exists, write `PATH.PID`)
/// and let forked children record into `PATH.PID` (what `fntrace record`
/// asks for).
pub const ENV_EXCLUSIVE: &str = "FNTRACE_EXCLUSIVE";
/// Maximum recorded call depth (`--depth`).
pub const ENV_DEPTH: &str = "FNTRACE_DEPTH";
/// `-F` patterns, one per line.
pub const ENV_FILTER: &str = "FNTRACE_FILTER";
/// `-N` patterns, one per line.
pub const ENV_NOTRACE: &str = "FNTRACE_NOTRACE";
/// `-P` patterns (functions whose patchable sites or XRay sleds are
/// patched), one per line.
pub const ENV_PATCH: &str = "FNTRACE_PATCH";
/// `-A` specs, one per line.
pub const ENV_ARGS: &str = "FNTRACE_ARGS";
/// `-R` specs, one per line.
pub const ENV_RETVAL: &str = "FNTRACE_RETVAL";
/// `1`: counting mode (gprof-style arc counts, no timestamps).
pub const ENV_COUNT: &str = "FNTRACE_COUNT";
/// Record-time time filter (`record -t`): only calls that last at least
/// this long, and their callers, are recorded (a duration, see
/// [`parse_duration`]; bare numbers are nanoseconds).
pub const ENV_TIME_FILTER: &str = "FNTRACE_TIME_FILTER";
/// Stop recording this long after the session starts (`record
/// --duration`); the program runs on with every site switched off that
/// can be (a duration, see [`parse_duration`]; bare numbers are
/// nanoseconds).
pub const ENV_DURATION: &str = "FNTRACE_DURATION";
/// `-M` marker patterns, one per line.
pub const ENV_MARKERS: &str = "FNTRACE_MARKERS";
/// `1`: open the control socket of `fntrace live`.
pub const ENV_CONTROL: &str = "FNTRACE_CONTROL";
/// `1`: keep the `call mcount` (`gcc -pg`, `rustc -Zinstrument-mcount`)
/// and `call __fentry__` (`gcc -pg -mfentry`) of instrumented functions
/// (exits by return-address hijacking) instead of rewriting them into
/// patchable sites with call wrappers.
pub const ENV_KEEP_CALLS: &str = "FNTRACE_KEEP_CALLS";
/// When a program's hook calls become patchable sites: `1` before it runs
/// (start-up waits for it); `0` on a runtime thread while it starts (the
/// hooks record meanwhile); unset: `call __fentry__`s on the thread, and
/// `call mcount`s on the thread for a large object (more than
/// [`LAZY_MCOUNT_SYMBOLS`] symbols), before the program runs otherwise
/// (see [`ConvertAt`]).
pub const ENV_CONVERT_AT_START: &str = "FNTRACE_CONVERT_AT_START";
/// Record calls from instrumented objects into shared libraries through
/// their PLT/GOT entries (`fntrace record --libcalls[=REGEX]`): a regex
/// matched anywhere in the symbol name (`.` for all). Unset or empty: off.
pub const ENV_LIBCALLS: &str = "FNTRACE_LIBCALLS";
/// `1`: record when each thread is switched off and back onto a CPU
/// (`fntrace record --sched`, `perf_event_open` context-switch records).
pub const ENV_SCHED: &str = "FNTRACE_SCHED";
/// Widest vector registers the trampolines save around the runtime's
/// own code: `sse` (xmm), `avx` (ymm) or `avx512` (zmm); unset: the widest
/// the CPU and the kernel enable. Lowering it only makes sense for
/// testing the narrower save paths on a wider CPU (a program that passes
/// or returns wider vectors through a recorded call then loses their
/// upper halves); it never raises the width above what the CPU has.
pub const ENV_VECTOR_WIDTH: &str = "FNTRACE_VECTOR_WIDTH";
/// `1`: set by the runtime itself in the environment of an `exec` across
/// which it ignored `SIGPROF` (see `session::exec`); read and removed by
/// the new image's runtime at start-up. Not a setting.
pub const ENV_PROF_EXEC: &str = "FNTRACE_PROF_EXEC";
/// Where `fntrace record` finds `libfntrace_preload.so` (read by the CLI,
/// not by the runtime).
pub const ENV_PRELOAD: &str = "FNTRACE_PRELOAD";
/// Hand-over only (never read from the environment): the abstract Unix
/// socket name through which an attached runtime talks to its controller
/// (`fntrace record -p`; see `session::attach`).
pub const HANDOVER_SOCKET: &str = "FNTRACE_ATTACH_SOCKET";
/// Hand-over only: the process id of the controller.
pub const HANDOVER_CONTROLLER: &str = "FNTRACE_ATTACH_CONTROLLER";
/// Hand-over only: `0` when no loaded object calls a compiler hook
/// (`mcount`, `__fentry__`, `__cyg_profile_func_*`), as the controller
/// found: the runtime then skips looking for their GOT slots.
pub const HANDOVER_HOOKS: &str = "FNTRACE_ATTACH_HOOKS";

/// `fntrace_attach` result: the attach thread was started.
pub const ATTACH_STARTED: i32 = 0;
/// `fntrace_attach` result: bad arguments.
pub const ATTACH_INVALID: i32 = -22;
/// `fntrace_attach` result: another controller is attached.
pub const ATTACH_BUSY: i32 = -16;
/// `fntrace_attach` result: the process already records (started under
/// `fntrace record`, or it called `fntrace::start`).
pub const ATTACH_RECORDING: i32 = -17;
/// `fntrace_attach` result: the attach thread could not be started.
pub const ATTACH_NO_THREAD: i32 = -11;

/// Encodes `NAME=VALUE` pairs for a hand-over at run time (what `fntrace
/// record -p` writes into a running process): each pair followed by a NUL
/// byte. Names and values must not contain NUL (patterns and paths never
/// do; such a pair is dropped).
pub fn encode_handover<'a>(pairs: impl IntoIterator<Item = (&'a str, &'a OsStr)>) -> Vec<u8> {
    use std::os::unix::ffi::OsStrExt;
    let mut out = vec![];
    for (n, v) in pairs {
        if n.contains('\0') || v.as_bytes().contains(&0) {
            continue;
        }
        out.extend_from_slice(n.as_bytes());
        out.push(b'=');
        out.extend_from_slice(v.as_bytes());
        out.push(0);
    }
    out
}

/// Decodes what [`encode_handover`] made (pairs without `=` are skipped).
pub fn decode_handover(bytes: &[u8]) -> Vec<(String, OsString)> {
    use std::os::unix::ffi::OsStrExt;
    bytes
        .split(|&b| b == 0)
        .filter_map(|p| {
            let eq = p.iter().position(|&b| b == b'=')?;
            let name = std::str::from_utf8(&p[..eq]).ok()?.to_string();
            Some((name, OsStr::from_bytes(&p[eq + 1..]).to_os_string()))
        })
        .collect()
}

/// Default maximum trace size.
pub const DEFAULT_MAX_SIZE: u64 = 16 << 30;
/// Default trace memory kept ready ahead of the writers ([`ENV_BUFFER`]).
pub const DEFAULT_BUFFER: u64 = 8 << 20;

/// Mask bit of a [`CaptureSpec`] for the return value (bits 0–5 are
/// arguments 1–6).
pub const CAPTURE_RETVAL: u8 = 0x80;

/// One `-A`/`-R` spec: a function pattern (see [`pattern_regex`]) and
/// what to capture (bits 0–5: arguments 1–6, [`CAPTURE_RETVAL`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CaptureSpec {
    /// The function pattern as written.
    pub pattern: String,
    /// What to capture.
    pub mask: u8,
}

/// Above this many symbols (the `.symtab` entries of an object), an
/// object's `call mcount`s are rewritten on a runtime thread by default:
/// rewriting them before the program runs costs about 0.15 µs a function
/// (3 ms for 20,000), and rewriting them later leaves a converted call about
/// 2 ns slower (it undoes the prologue and runs a copy of it).
pub const LAZY_MCOUNT_SYMBOLS: u64 = 20_000;

/// When compiler hook calls become patchable sites
/// ([`ENV_CONVERT_AT_START`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConvertAt {
    /// Before the program runs.
    Start,
    /// On a runtime thread while the program runs, wherever possible.
    Later,
    /// `call __fentry__`s later; `call mcount`s later in an object with
    /// more than [`LAZY_MCOUNT_SYMBOLS`] symbols, at start otherwise.
    BySize,
}

/// Everything a session starts with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// Output file (no session without one).
    pub output: Option<PathBuf>,
    /// Largest trace size; events past it are counted as lost.
    pub max_size: u64,
    /// Create the output exclusively (`PATH.PID` if it exists) and let
    /// forked children record into `PATH.PID`.
    pub exclusive: bool,
    /// Maximum recorded call depth (0: no limit).
    pub depth: u32,
    /// `-F`: record only inside calls of functions matching these.
    pub filter: Vec<String>,
    /// `-N`: record nothing inside calls of functions matching these.
    pub notrace: Vec<String>,
    /// `-P`: patch only the sites and sleds of functions matching these.
    pub patch: Vec<String>,
    /// `-A`/`-R`: arguments and return values to capture.
    pub capture: Vec<CaptureSpec>,
    /// Counting mode.
    pub count: bool,
    /// `-M`: markers whose events are recorded.
    pub markers: Vec<String>,
    /// Open the control socket of `fntrace live`.
    pub control: bool,
    /// Keep `call mcount`/`call __fentry__` instead of rewriting them.
    pub keep_calls: bool,
    /// When hook calls are rewritten into patchable sites.
    pub convert_at: ConvertAt,
    /// `--libcalls`: the symbol pattern of library calls to record.
    pub libcalls: Option<String>,
    /// `--sched`: record off-CPU intervals.
    pub sched: bool,
    /// Record-time time filter in nanoseconds (0: record every call).
    pub time_filter_ns: u64,
    /// Stop recording this many nanoseconds after the start (0: never).
    pub duration_ns: u64,
    /// Trace memory kept ready ahead of the writers ([`ENV_BUFFER`]; 0:
    /// no helper thread).
    pub buffer: u64,
    /// Flight recorder ring size ([`ENV_RING`]; 0: off).
    pub ring: u64,
    /// Signal that asks for a snapshot ([`ENV_SNAPSHOT_SIGNAL`]; 0: none).
    pub snapshot_signal: i32,
    /// Widest vector registers saved ([`ENV_VECTOR_WIDTH`]): 0 SSE, 1 AVX,
    /// 2 AVX-512 (the default: whatever the CPU has, up to that).
    pub vector_width: u8,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            output: None,
            max_size: DEFAULT_MAX_SIZE,
            exclusive: false,
            depth: 0,
            filter: Vec::new(),
            notrace: Vec::new(),
            patch: Vec::new(),
            capture: Vec::new(),
            count: false,
            markers: Vec::new(),
            control: false,
            keep_calls: false,
            convert_at: ConvertAt::BySize,
            libcalls: None,
            sched: false,
            time_filter_ns: 0,
            duration_ns: 0,
            buffer: DEFAULT_BUFFER,
            ring: 0,
            snapshot_signal: 0,
            vector_width: VECTOR_WIDTH_MAX,
        }
    }
}

/// [`Config::vector_width`]'s default: no cap below the CPU's own width.
pub const VECTOR_WIDTH_MAX: u8 = 2;

/// The [`Config::vector_width`] an [`ENV_VECTOR_WIDTH`] value names.
pub fn parse_vector_width(s: &str) -> Option<u8> {
    match s.trim().to_ascii_lowercase().as_str() {
        "sse" | "xmm" => Some(0),
        "avx" | "ymm" => Some(1),
        "avx512" | "zmm" => Some(2),
        _ => None,
    }
}

/// One variable whose value cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{var}={value:?}: {problem}")]
pub struct InvalidVar {
    /// The variable's name.
    pub var: &'static str,
    /// The value (or, for a list, the offending line).
    pub value: String,
    /// What is wrong with it.
    pub problem: String,
}

/// Every invalid value found by [`Config::from_env`], and the
/// configuration made of the valid rest.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", self.invalid.iter().map(|e| e.to_string()).collect::<Vec<_>>().join("; "))]
pub struct ConfigError {
    /// The invalid values, in the order of the variables.
    pub invalid: Vec<InvalidVar>,
    /// The configuration without them.
    pub usable: Box<Config>,
}

/// A function pattern that is not a valid regular expression.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("bad function pattern {pattern:?}: {problem}")]
pub struct PatternError {
    /// The pattern as given.
    pub pattern: String,
    /// What the regular-expression parser said.
    pub problem: String,
}

impl PatternError {
    /// The error for `pattern`, which failed to compile with `e`.
    pub fn new(pattern: &str, e: &dyn std::fmt::Display) -> PatternError {
        PatternError {
            pattern: pattern.to_string(),
            problem: e.to_string(),
        }
    }
}

/// A bad `-A`/`-R` spec or size.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct SpecError(pub String);

impl Config {
    /// Recording into `path` with every other setting at its default.
    pub fn with_output(path: impl Into<PathBuf>) -> Config {
        Config {
            output: Some(path.into()),
            ..Config::default()
        }
    }

    /// Reads the `FNTRACE_*` variables of the process environment. No
    /// side effects; every invalid value is reported with its variable.
    pub fn from_env() -> Result<Config, ConfigError> {
        Config::from_vars(|name| std::env::var_os(name))
    }

    /// [`Config::from_env`] over any source of variables.
    pub fn from_vars(get: impl Fn(&str) -> Option<OsString>) -> Result<Config, ConfigError> {
        let (cfg, invalid) = Config::parse_vars(get);
        if invalid.is_empty() {
            Ok(cfg)
        } else {
            Err(ConfigError {
                invalid,
                usable: Box::new(cfg),
            })
        }
    }

    /// Parses every variable: the configuration of the valid values and
    /// the list of invalid ones.
    fn parse_vars(get: impl Fn(&str) -> Option<OsString>) -> (Config, Vec<InvalidVar>) {
        let mut bad = Vec::new();
        let mut invalid = |var: &'static str, value: &str, problem: String| {
            bad.push(InvalidVar {
                var,
                value: value.to_string(),
                problem,
            })
        };
        let text = |var: &'static str, invalid: &mut dyn FnMut(&'static str, &str, String)| {
            let v = get(var)?;
            match v.into_string() {
                Ok(s) => Some(s),
                Err(v) => {
                    invalid(var, &v.to_string_lossy(), "not valid UTF-8".into());
                    None
                }
            }
        };
        let mut c = Config {
            output: get(ENV_OUTPUT).filter(|p| !p.is_empty()).map(PathBuf::from),
            ..Config::default()
        };
        if let Some(v) = text(ENV_MAX_SIZE, &mut invalid).filter(|v| !v.trim().is_empty()) {
            match parse_size(&v) {
                Some(n) => c.max_size = n,
                None => invalid(
                    ENV_MAX_SIZE,
                    &v,
                    "not a size (bytes, or a number with K, M or G)".into(),
                ),
            }
        }
        for (var, slot) in [(ENV_BUFFER, &mut c.buffer), (ENV_RING, &mut c.ring)] {
            if let Some(v) = text(var, &mut invalid).filter(|v| !v.trim().is_empty()) {
                match parse_size(&v) {
                    Some(n) => *slot = n,
                    None => invalid(
                        var,
                        &v,
                        "not a size (bytes, or a number with K, M or G)".into(),
                    ),
                }
            }
        }
        if let Some(v) = text(ENV_SNAPSHOT_SIGNAL, &mut invalid).filter(|v| !v.trim().is_empty()) {
            match parse_signal(&v) {
                Some(n) => c.snapshot_signal = n,
                None => invalid(
                    ENV_SNAPSHOT_SIGNAL,
                    &v,
                    "not a snapshot signal (SIGUSR1, SIGUSR2 or a real-time signal 34..64)".into(),
                ),
            }
        }
        if let Some(v) = text(ENV_VECTOR_WIDTH, &mut invalid).filter(|v| !v.trim().is_empty()) {
            match parse_vector_width(&v) {
                Some(w) => c.vector_width = w,
                None => invalid(
                    ENV_VECTOR_WIDTH,
                    &v,
                    "not a vector width (sse, avx or avx512)".into(),
                ),
            }
        }
        if let Some(v) = text(ENV_CONVERT_AT_START, &mut invalid) {
            match v.as_str() {
                "1" => c.convert_at = ConvertAt::Start,
                "0" => c.convert_at = ConvertAt::Later,
                "" => {}
                _ => invalid(ENV_CONVERT_AT_START, &v, "expected 1 or 0".into()),
            }
        }
        for (var, slot) in [
            (ENV_EXCLUSIVE, &mut c.exclusive),
            (ENV_COUNT, &mut c.count),
            (ENV_CONTROL, &mut c.control),
            (ENV_KEEP_CALLS, &mut c.keep_calls),
            (ENV_SCHED, &mut c.sched),
        ] {
            if let Some(v) = text(var, &mut invalid) {
                match v.as_str() {
                    "1" => *slot = true,
                    "0" | "" => {}
                    _ => invalid(var, &v, "expected 1 or 0".into()),
                }
            }
        }
        for (var, slot) in [
            (ENV_TIME_FILTER, &mut c.time_filter_ns),
            (ENV_DURATION, &mut c.duration_ns),
        ] {
            if let Some(v) = text(var, &mut invalid).filter(|v| !v.trim().is_empty()) {
                match parse_duration(&v, 1) {
                    Some(n) => *slot = n,
                    None => invalid(
                        var,
                        &v,
                        "not a duration (a number with ns, us, ms, s, m or h)".into(),
                    ),
                }
            }
        }
        if let Some(v) = text(ENV_DEPTH, &mut invalid).filter(|v| !v.trim().is_empty()) {
            match v.trim().parse::<u32>() {
                Ok(d) => c.depth = d,
                Err(_) => invalid(ENV_DEPTH, &v, "not a depth (0 to 4294967295)".into()),
            }
        }
        for (var, list) in [
            (ENV_FILTER, &mut c.filter),
            (ENV_NOTRACE, &mut c.notrace),
            (ENV_PATCH, &mut c.patch),
            (ENV_MARKERS, &mut c.markers),
        ] {
            for l in text(var, &mut invalid).unwrap_or_default().lines() {
                if l.trim().is_empty() {
                    continue;
                }
                match regex_lite::Regex::new(l) {
                    Ok(_) => list.push(l.to_string()),
                    Err(e) => invalid(var, l, format!("bad pattern: {e}")),
                }
            }
        }
        if let Some(v) = text(ENV_LIBCALLS, &mut invalid).filter(|v| !v.is_empty()) {
            match regex_lite::Regex::new(&v) {
                Ok(_) => c.libcalls = Some(v),
                Err(e) => invalid(ENV_LIBCALLS, &v, format!("bad pattern: {e}")),
            }
        }
        for (var, retval) in [(ENV_ARGS, false), (ENV_RETVAL, true)] {
            for l in text(var, &mut invalid).unwrap_or_default().lines() {
                let l = l.trim();
                if l.is_empty() {
                    continue;
                }
                match parse_spec(l, retval) {
                    Ok(s) => c.capture.push(s),
                    Err(e) => invalid(var, l, e.0),
                }
            }
        }
        (c, bad)
    }

    /// The environment that hands this configuration to a program
    /// (what [`Config::from_env`] reads back): only the variables whose
    /// value differs from the default.
    pub fn to_env(&self) -> Vec<(&'static str, OsString)> {
        let mut v: Vec<(&'static str, OsString)> = Vec::new();
        if let Some(p) = &self.output {
            v.push((ENV_OUTPUT, p.clone().into_os_string()));
        }
        if self.max_size != DEFAULT_MAX_SIZE {
            v.push((ENV_MAX_SIZE, self.max_size.to_string().into()));
        }
        if self.buffer != DEFAULT_BUFFER {
            v.push((ENV_BUFFER, self.buffer.to_string().into()));
        }
        if self.ring != 0 {
            v.push((ENV_RING, self.ring.to_string().into()));
        }
        if self.snapshot_signal != 0 {
            v.push((ENV_SNAPSHOT_SIGNAL, self.snapshot_signal.to_string().into()));
        }
        if self.vector_width != VECTOR_WIDTH_MAX {
            let name = ["sse", "avx", "avx512"][usize::from(self.vector_width.min(2))];
            v.push((ENV_VECTOR_WIDTH, name.into()));
        }
        match self.convert_at {
            ConvertAt::Start => v.push((ENV_CONVERT_AT_START, "1".into())),
            ConvertAt::Later => v.push((ENV_CONVERT_AT_START, "0".into())),
            ConvertAt::BySize => {}
        }
        for (var, on) in [
            (ENV_EXCLUSIVE, self.exclusive),
            (ENV_COUNT, self.count),
            (ENV_CONTROL, self.control),
            (ENV_KEEP_CALLS, self.keep_calls),
            (ENV_SCHED, self.sched),
        ] {
            if on {
                v.push((var, "1".into()));
            }
        }
        if let Some(p) = &self.libcalls {
            v.push((ENV_LIBCALLS, p.into()));
        }
        if self.depth != 0 {
            v.push((ENV_DEPTH, self.depth.to_string().into()));
        }
        for (var, ns) in [
            (ENV_TIME_FILTER, self.time_filter_ns),
            (ENV_DURATION, self.duration_ns),
        ] {
            if ns != 0 {
                v.push((var, format!("{ns}ns").into()));
            }
        }
        for (var, list) in [
            (ENV_FILTER, &self.filter),
            (ENV_NOTRACE, &self.notrace),
            (ENV_PATCH, &self.patch),
            (ENV_MARKERS, &self.markers),
        ] {
            if !list.is_empty() {
                v.push((var, list.join("\n").into()));
            }
        }
        // Specs with arguments go to `-A` (with `retval` in their list if
        // asked), return values alone to `-R`.
        let specs = |retval: bool| -> Vec<String> {
            self.capture
                .iter()
                .filter(|s| (s.mask & 0x3f == 0) == retval)
                .map(|s| spec_text(s, retval))
                .collect()
        };
        let (args, rets) = (specs(false), specs(true));
        if !args.is_empty() {
            v.push((ENV_ARGS, args.join("\n").into()));
        }
        if !rets.is_empty() {
            v.push((ENV_RETVAL, rets.join("\n").into()));
        }
        v
    }

    /// Whether `call mcount`/`call __fentry__` sites are rewritten into
    /// patchable sites with call wrappers: not when `-F`/`-N`/`-P` ask
    /// for their semantics, in counting mode (it has its own fast path),
    /// or with `keep_calls`.
    pub fn converts_calls(&self) -> bool {
        self.filter.is_empty()
            && self.notrace.is_empty()
            && self.patch.is_empty()
            && !self.count
            && !self.keep_calls
    }
}

/// The text of a spec as `-A` (`retval` false: its arguments) or `-R`
/// (its return value) writes it.
fn spec_text(s: &CaptureSpec, retval: bool) -> String {
    if retval {
        return format!("{}@retval", s.pattern);
    }
    let mut parts: Vec<String> = (0..6)
        .filter(|i| s.mask & (1 << i) != 0)
        .map(|i| format!("arg{}", i + 1))
        .collect();
    if s.mask & CAPTURE_RETVAL != 0 {
        parts.push("retval".into());
    }
    format!("{}@{}", s.pattern, parts.join(","))
}

/// Parses a size such as `512M` (bytes, or with a `K`, `M` or `G`
/// suffix).
pub fn parse_size(s: &str) -> Option<u64> {
    let s = s.trim();
    let (num, mult) = match s.as_bytes().last()? {
        b'k' | b'K' => (&s[..s.len() - 1], 1u64 << 10),
        b'm' | b'M' => (&s[..s.len() - 1], 1 << 20),
        b'g' | b'G' => (&s[..s.len() - 1], 1 << 30),
        _ => (s, 1),
    };
    num.trim().parse::<u64>().ok()?.checked_mul(mult)
}

/// Parses a duration such as `10us`, `1.5ms`, `2s`, `300ns`, `2m` or
/// `1h` into nanoseconds; a bare number is in units of `bare_ns`
/// nanoseconds (1 where nanoseconds are the natural unit, 10^9 where
/// seconds are). Negative, non-finite and absurdly large values (over
/// 10^9 seconds) are refused.
pub fn parse_duration(s: &str, bare_ns: u64) -> Option<u64> {
    let s = s.trim();
    let i = s.find(|c: char| c.is_ascii_alphabetic()).unwrap_or(s.len());
    let (num, unit) = s.split_at(i);
    let v: f64 = num.trim().parse().ok()?;
    let mult = match unit.trim() {
        "" => bare_ns as f64,
        "ns" => 1.0,
        "us" | "µs" => 1e3,
        "ms" => 1e6,
        "s" => 1e9,
        "m" | "min" => 60e9,
        "h" => 3600e9,
        _ => return None,
    };
    let ns = v * mult;
    (0.0..1e18).contains(&ns).then_some(ns as u64)
}

/// Parses a snapshot signal: `SIGUSR1`, `USR1`, `SIGUSR2`, `USR2` or a
/// number that is one of them or a real-time signal (34..=64). Signals
/// with another meaning (fatal ones, `SIGKILL`, `SIGPROF`...) are refused.
pub fn parse_signal(s: &str) -> Option<i32> {
    let s = s.trim();
    let name = s.strip_prefix("SIG").unwrap_or(s);
    let n = match name {
        "USR1" => 10,
        "USR2" => 12,
        _ => name.parse::<i32>().ok()?,
    };
    (n == 10 || n == 12 || (34..=64).contains(&n)).then_some(n)
}

/// Parses one `-A`/`-R` spec: `FUNC@arg1,arg2`, `FUNC@args`,
/// `FUNC@retval`, or (for `-R`) a bare `FUNC`.
pub fn parse_spec(spec: &str, retval: bool) -> Result<CaptureSpec, SpecError> {
    let (pat, what) = match spec.rsplit_once('@') {
        Some((p, w)) => (p, w),
        None if retval => (spec, "retval"),
        None => {
            return Err(SpecError(format!(
                "bad argument spec {spec:?}: expected FUNC@arg1[,argN...]"
            )));
        }
    };
    if pat.is_empty() {
        return Err(SpecError(format!(
            "bad spec {spec:?}: no function pattern before '@'"
        )));
    }
    let mut mask = 0u8;
    for w in what.split(',') {
        let w = w.trim();
        if w == "retval" {
            mask |= CAPTURE_RETVAL;
        } else if w == "args" {
            mask |= 0x3f;
        } else if let Some(n) = w.strip_prefix("arg").and_then(|n| n.parse::<u8>().ok()) {
            if !(1..=6).contains(&n) {
                return Err(SpecError(format!(
                    "bad spec {spec:?}: {w} is not an integer register argument (arg1 to arg6)"
                )));
            }
            mask |= 1 << (n - 1);
        } else {
            return Err(SpecError(format!(
                "bad spec {spec:?}: {w:?} is not arg1..arg6, args or retval"
            )));
        }
    }
    let pattern = pat.to_string();
    if let Err(e) = regex_lite::Regex::new(&pattern_regex(&pattern)) {
        return Err(SpecError(format!("bad function pattern {pattern:?}: {e}")));
    }
    Ok(CaptureSpec { pattern, mask })
}

/// The regular expression a spec's function pattern stands for: a plain
/// name (letters, digits, `_`, `::`) matches that full name or a name
/// ending in `::NAME` (so `fib` is `fib::fib` but not `fib::main`);
/// anything else is a regular expression as written.
pub fn pattern_regex(p: &str) -> String {
    if !p.is_empty()
        && p.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
    {
        format!("(^|::){p}$")
    } else {
        p.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn vars(v: &[(&str, &str)]) -> impl Fn(&str) -> Option<OsString> {
        let m: HashMap<String, OsString> = v
            .iter()
            .map(|(k, v)| (k.to_string(), OsString::from(v)))
            .collect();
        move |k| m.get(k).cloned()
    }

    #[test]
    fn empty_environment_is_the_default() {
        assert_eq!(Config::from_vars(vars(&[])).unwrap(), Config::default());
    }

    #[test]
    fn vector_widths_parse_and_bad_ones_name_the_variable() {
        assert_eq!(parse_vector_width("SSE"), Some(0));
        assert_eq!(parse_vector_width("avx"), Some(1));
        assert_eq!(parse_vector_width(" avx512 "), Some(2));
        assert_eq!(parse_vector_width("avx2"), None);
        let e = Config::from_vars(|k| (k == ENV_VECTOR_WIDTH).then(|| "mmx".into())).unwrap_err();
        assert_eq!(e.invalid[0].var, ENV_VECTOR_WIDTH);
        assert_eq!(e.usable.vector_width, VECTOR_WIDTH_MAX);
    }

    #[test]
    fn every_setting_round_trips_through_the_environment() {
        let c = Config {
            output: Some("/tmp/x.data".into()),
            max_size: 50 << 20,
            exclusive: true,
            depth: 7,
            filter: vec!["^a".into(), "b$".into()],
            notrace: vec!["log_".into()],
            patch: vec!["fib".into()],
            capture: vec![
                parse_spec("fib@arg1,arg3", false).unwrap(),
                parse_spec("fib", true).unwrap(),
            ],
            count: true,
            markers: vec!["^job_".into()],
            control: true,
            keep_calls: true,
            convert_at: ConvertAt::Later,
            libcalls: Some("^mem|pthread_".into()),
            sched: true,
            time_filter_ns: 10_000,
            duration_ns: 30_000_000_000,
            buffer: 3 << 20,
            ring: 64 << 20,
            snapshot_signal: 12,
            vector_width: 1,
        };
        let env: HashMap<String, OsString> = c
            .to_env()
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect();
        let back = Config::from_vars(|k| env.get(k).cloned()).unwrap();
        assert_eq!(back, c);
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("10us", 1), Some(10_000));
        assert_eq!(parse_duration("1.5ms", 1), Some(1_500_000));
        assert_eq!(parse_duration("7", 1), Some(7));
        assert_eq!(parse_duration("7", 1_000_000_000), Some(7_000_000_000));
        assert_eq!(parse_duration("2m", 1), Some(120_000_000_000));
        assert_eq!(parse_duration("3 weeks", 1), None);
        assert_eq!(parse_duration("-1s", 1), None);
        assert_eq!(parse_duration("1e30s", 1), None);
        assert_eq!(parse_duration("", 1), None);
    }

    #[test]
    fn every_invalid_value_is_named_and_the_rest_is_kept() {
        let e = Config::from_vars(vars(&[
            (ENV_OUTPUT, "t.data"),
            (ENV_MAX_SIZE, "12Q"),
            (ENV_DEPTH, "deep"),
            (ENV_COUNT, "yes"),
            (ENV_FILTER, "ok\n(unclosed"),
            (ENV_ARGS, "fib@arg9\nfib@arg2"),
        ]))
        .unwrap_err();
        let names: Vec<&str> = e.invalid.iter().map(|i| i.var).collect();
        assert_eq!(
            names,
            [ENV_MAX_SIZE, ENV_COUNT, ENV_DEPTH, ENV_FILTER, ENV_ARGS]
        );
        assert!(e.to_string().contains("FNTRACE_DEPTH=\"deep\""), "{e}");
        assert_eq!(e.usable.output, Some(PathBuf::from("t.data")));
        assert_eq!(e.usable.filter, ["ok"]);
        assert_eq!(e.usable.capture, [parse_spec("fib@arg2", false).unwrap()]);
        assert_eq!(e.usable.max_size, DEFAULT_MAX_SIZE);
    }

    #[test]
    fn sizes_and_specs() {
        assert_eq!(parse_size("512M"), Some(512 << 20));
        assert_eq!(parse_size(" 3 k"), Some(3 << 10));
        assert_eq!(parse_size("x"), None);
        assert_eq!(parse_size("99999999999G"), None);
        assert_eq!(parse_spec("f@arg1,arg6", false).unwrap().mask, 0x21);
        assert_eq!(parse_spec("f", true).unwrap().mask, CAPTURE_RETVAL);
        assert!(parse_spec("f", false).is_err());
        assert!(parse_spec("@arg1", false).is_err());
        assert!(parse_spec("f@arg7", false).is_err());
        assert!(parse_spec("f@rax", false).is_err());
        assert_eq!(pattern_regex("fib"), "(^|::)fib$");
        assert_eq!(pattern_regex("^fib"), "^fib");
    }

    #[test]
    fn specs_parse_and_bad_ones_say_why() {
        assert_eq!(
            parse_spec("fib@arg1", false).unwrap(),
            CaptureSpec {
                pattern: "fib".into(),
                mask: 1
            }
        );
        assert_eq!(
            parse_spec("^a::b$@arg2,arg6", false).unwrap().mask,
            0b10_0010
        );
        assert_eq!(parse_spec("fib@retval", true).unwrap().mask, CAPTURE_RETVAL);
        assert_eq!(parse_spec("fib", true).unwrap().mask, CAPTURE_RETVAL);
        assert_eq!(parse_spec("f@args", false).unwrap().mask, 0x3f);
        assert!(
            parse_spec("fib", false)
                .unwrap_err()
                .0
                .contains("FUNC@arg1")
        );
        assert!(
            parse_spec("fib@arg7", false)
                .unwrap_err()
                .0
                .contains("arg7")
        );
        assert!(
            parse_spec("@arg1", false)
                .unwrap_err()
                .0
                .contains("no function")
        );
        assert!(
            parse_spec("f@ret", false)
                .unwrap_err()
                .0
                .contains("\"ret\"")
        );
        let re = |p: &str| regex_lite::Regex::new(&pattern_regex(p)).unwrap();
        assert!(re("fib").is_match("fib") && re("fib").is_match("fib::fib"));
        assert!(!re("fib").is_match("fib::main") && !re("fib").is_match("myfib"));
        assert!(re("work::fib").is_match("app::work::fib"));
        assert!(re("^fib").is_match("fib::main"));
    }
}
