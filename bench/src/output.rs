//! Derived numbers, call-count checks, targets, and what the suite
//! writes: the Markdown tables (stdout and the "Side-by-side suite"
//! section of `docs/BENCHMARKS.md`) and the JSON results.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::path::Path;
use std::process::Command;

use serde::Serialize;

use crate::counts::{self, Aliases, Check, Counts};
use crate::workloads::{Lang, Workload};
use crate::{Ctx, Metrics, ModeResult, Run, Tools, WorkloadResult};

/// The machine and tool versions of a run.
#[derive(Debug, Serialize)]
pub struct Machine {
    /// CPU model.
    pub cpu: String,
    /// Logical CPUs.
    pub cores: usize,
    /// Kernel release.
    pub kernel: String,
    /// /proc/loadavg when the run started.
    pub loadavg_at_start: String,
    /// `gcc --version`, first line.
    pub gcc: String,
    /// `clang-14 --version`, first line.
    pub clang: String,
    /// `rustc --version`.
    pub rustc: String,
    /// `uftrace --version`.
    pub uftrace: String,
    /// What two `rdtsc` in a row cost here, ns (best of 5 loops of 10 M,
    /// measured at the start of the run): the floor of a timed call,
    /// which reads the clock at its entry and at its exit.
    pub two_rdtsc_ns: f64,
}

/// The whole result file.
#[derive(Debug, Serialize)]
pub struct Report {
    /// UTC date.
    pub date: String,
    /// UTC time the run ended.
    pub time: String,
    /// How it was invoked.
    pub command: String,
    /// `--quick`.
    pub quick: bool,
    /// Repetitions per mode.
    pub reps: usize,
    /// Machine.
    pub machine: Machine,
    /// Tools found.
    pub tools: Tools,
    /// Time spent building (cached builds are reused).
    pub build_seconds: f64,
    /// Whole run, seconds.
    pub total_seconds: f64,
    /// Per workload.
    pub workloads: Vec<WorkloadResult>,
    /// Per-function call count comparisons.
    pub count_checks: Vec<Check>,
    /// The targets, computed from this run.
    pub targets: Vec<Target>,
}

/// One target line: measured value against its limit.
#[derive(Debug, Serialize)]
pub struct Target {
    /// What is targeted, e.g. `traced <= 30 ns/call (added)`.
    pub target: &'static str,
    /// Workload id.
    pub workload: String,
    /// Mode label.
    pub mode: String,
    /// Measured value.
    pub value: f64,
    /// The limit.
    pub limit: f64,
    /// Met.
    pub pass: bool,
}

/// `date -u FORMAT`.
pub fn date(fmt: &str) -> String {
    Command::new("date")
        .arg("-u")
        .arg(fmt)
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default()
}

/// Describes the machine and the tool versions.
pub fn machine(_ctx: &Ctx) -> Machine {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let cpu = cpuinfo
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split_once(':'))
        .map(|(_, v)| v.trim().to_string())
        .unwrap_or_default();
    let read = |p: &str| {
        std::fs::read_to_string(p)
            .unwrap_or_default()
            .trim()
            .to_string()
    };
    Machine {
        cpu,
        cores: std::thread::available_parallelism().map_or(0, |n| n.get()),
        kernel: read("/proc/sys/kernel/osrelease"),
        loadavg_at_start: read("/proc/loadavg"),
        gcc: crate::first_line("gcc", &["--version"]),
        clang: crate::first_line("clang-14", &["--version"]),
        rustc: crate::first_line("rustc", &["--version"]),
        uftrace: crate::first_line("uftrace", &["--version"]),
        two_rdtsc_ns: two_rdtsc_ns(),
    }
}

/// Two `rdtsc` per iteration, best of 5 loops of 10 M (see
/// [`Machine::two_rdtsc_ns`]).
fn two_rdtsc_ns() -> f64 {
    const N: u32 = 10_000_000;
    (0..5)
        .map(|_| {
            let t = std::time::Instant::now();
            let mut acc = 0u64;
            for _ in 0..N {
                // SAFETY: `rdtsc` has no preconditions on x86_64.
                unsafe {
                    acc = acc.wrapping_add(core::arch::x86_64::_rdtsc());
                    acc = acc.wrapping_add(core::arch::x86_64::_rdtsc());
                }
            }
            std::hint::black_box(acc);
            t.elapsed().as_secs_f64() * 1e9 / f64::from(N)
        })
        .fold(f64::INFINITY, f64::min)
}

fn min(v: &[f64]) -> f64 {
    v.iter().copied().fold(f64::INFINITY, f64::min)
}

fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.total_cmp(b));
    let n = s.len();
    if n == 0 {
        f64::NAN
    } else if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    }
}

/// Fills in calls (fntrace's count on the same binary, or on the
/// instrumented build of the same compiler for uninstrumented builds) and
/// the derived metrics of every mode of a workload.
pub fn derive(w: &Workload, wr: &mut WorkloadResult) {
    let mut by_build: BTreeMap<&str, u64> = BTreeMap::new();
    for m in &wr.modes {
        if m.run.fntrace_timed() {
            if let Some(c) = m.calls {
                by_build.insert(m.build, c);
            }
        }
    }
    let reference = |build: &str| -> Option<u64> {
        let b = match (w.lang, build) {
            (_, "plain") => "pg",
            (Lang::C, "clang") => "xray",
            (_, b) => b,
        };
        by_build.get(b).copied()
    };
    for m in wr.modes.iter_mut() {
        // Per-call numbers use fntrace's count on the same binary, so
        // every tool's time is divided by the same number.
        if let Some(c) = reference(m.build) {
            if m.run != Run::Count || m.calls.is_none() {
                m.calls = Some(c);
            }
        }
    }
    let large_net = |m: &ModeResult| -> Option<f64> {
        (!m.large_times.is_empty()).then(|| min(&m.large_times) - min(&m.empty_times))
    };
    let large_bases: BTreeMap<&str, f64> = wr
        .modes
        .iter()
        .filter(|m| m.id == "plain" || m.id == "clang")
        .filter_map(|m| large_net(m).map(|b| (m.id, b)))
        .collect();
    let basic = |m: &ModeResult| -> Option<(f64, f64)> {
        if m.times.is_empty() || m.error.is_some() {
            return None;
        }
        let wall = min(&m.times);
        Some((wall, wall - min(&m.empty_times)))
    };
    let bases: BTreeMap<&str, (f64, f64)> = wr
        .modes
        .iter()
        .filter(|m| m.id == "plain" || m.id == "clang")
        .filter_map(|m| basic(m).map(|b| (m.id, b)))
        .collect();
    let mut computed = vec![];
    for m in &wr.modes {
        let Some((wall, net)) = basic(m) else {
            computed.push(None);
            continue;
        };
        let Some(&(bwall, bnet)) = bases.get(m.baseline) else {
            computed.push(None);
            continue;
        };
        let calls = m.calls.map(|c| c as f64);
        computed.push(Some(Metrics {
            wall_min: wall,
            wall_median: median(&m.times),
            startup_min: min(&m.empty_times),
            net,
            ns_per_call: calls.map(|c| net / c * 1e9),
            added_ns_per_call: calls.map(|c| (net - bnet) / c * 1e9),
            slowdown: wall / bwall,
            net_slowdown: net / bnet,
            large_net_slowdown: large_net(m)
                .zip(large_bases.get(m.baseline))
                .map(|(a, b)| a / b),
            vs_uftrace: None,
            bytes_per_call: m.trace_bytes.zip(calls).map(|(b, c)| b as f64 / c),
        }));
    }
    let uft = wr
        .modes
        .iter()
        .zip(&computed)
        .find(|(m, _)| m.run == Run::Uftrace)
        .and_then(|(_, c)| c.and_then(|c| c.added_ns_per_call));
    for (m, c) in wr.modes.iter_mut().zip(computed) {
        m.metrics = c.map(|mut c| {
            if m.run != Run::Bare {
                c.vs_uftrace = c.added_ns_per_call.zip(uft).map(|(a, u)| a / u);
            }
            c
        });
    }
}

fn find<'a>(wr: &'a WorkloadResult, id: &str) -> Option<&'a ModeResult> {
    wr.modes.iter().find(|m| m.id == id && m.error.is_none())
}

/// Compares per-function call counts between tools that ran the same
/// binary.
pub fn count_checks(ws: &[Workload], results: &[WorkloadResult]) -> Vec<Check> {
    let mut v = vec![];
    for (w, wr) in ws.iter().zip(results) {
        // Every comparison is on one binary: aliases resolved per binary.
        let aliases: BTreeMap<&Path, Aliases> = wr
            .modes
            .iter()
            .filter(|m| m.counts.is_some())
            .map(|m| (m.binary.as_path(), Aliases::of(&m.binary)))
            .collect();
        let canon = |m: &ModeResult, c: &Counts| aliases[m.binary.as_path()].apply(c);
        let all: BTreeMap<&str, Counts> = wr
            .modes
            .iter()
            .filter(|m| m.error.is_none())
            .filter_map(|m| m.counts.as_ref().map(|c| (m.id, canon(m, c))))
            .collect();
        let gmon: Option<Counts> =
            find(wr, "fntrace-count").and_then(|m| m.gmon_counts.as_ref().map(|c| canon(m, c)));
        let counts = |id: &str| all.get(id);
        let label = |id: &str| find(wr, id).map_or("", |m| m.label);
        // Every comparison is between two runs: a multi-threaded program's
        // counts may differ between any two runs.
        let varies = if w.id == "ripgrep" {
            "two threads share the files by work stealing, and the regex \
             cache pool's slow path runs when they contend, so a few \
             functions' counts differ between any two runs"
        } else {
            ""
        };
        let gmon_mt = if w.id == "ripgrep" {
            "; glibc's mcount drops a call that arrives while another thread \
             is inside it (one busy flag for the process), so its counts are \
             lower on a multi-threaded run"
        } else {
            ""
        };
        if let (Some(a), Some(b)) = (counts("fntrace-mcount"), counts("uftrace")) {
            v.push(counts::compare(
                w.id,
                (label("fntrace-mcount"), a),
                (label("uftrace"), b),
                varies,
            ));
        }
        if let (Some(a), Some(b)) = (gmon.as_ref(), counts("gprof")) {
            v.push(counts::compare(
                w.id,
                ("gprof on fntrace counting's gmon.out", a),
                ("gprof on glibc's gmon.out", b),
                &format!("{varies}{gmon_mt}"),
            ));
        }
        if let (Some(a), Some(b)) = (counts("fntrace-mcount"), counts("gprof")) {
            v.push(counts::compare(
                w.id,
                (label("fntrace-mcount"), a),
                ("gprof on glibc's gmon.out", b),
                &format!(
                    "gprof drops arcs whose caller is outside the profiled program (main, \
                 callbacks from libc), and it ignores symbols with a dot in their name \
                 (gcc's .part/.isra/.constprop clones): their calls are counted for the \
                 function before them in the address space{gmon_mt}"
                ),
            ));
        }
        if let (Some(a), Some(b)) = (counts("fntrace-count"), counts("fntrace-mcount")) {
            v.push(counts::compare(
                w.id,
                (label("fntrace-count"), a),
                (label("fntrace-mcount"), b),
                varies,
            ));
        }
        if let (Some(a), Some(b)) = (counts("fntrace-xray"), counts("xray-basic")) {
            v.push(counts::compare(
                w.id,
                (label("fntrace-xray"), a),
                ("llvm-xray account of compiler-rt basic", b),
                varies,
            ));
        }
    }
    v
}

/// The targets, each computed from this run's numbers.
pub fn targets(results: &[WorkloadResult]) -> Vec<Target> {
    let mut v = vec![];
    let mut push = |target, wr: &WorkloadResult, m: &ModeResult, value: f64, limit, le: bool| {
        if value.is_finite() {
            v.push(Target {
                target,
                workload: wr.id.to_string(),
                mode: m.label.to_string(),
                value,
                limit,
                pass: if le { value <= limit } else { value >= limit },
            });
        }
    };
    for wr in results {
        let uft = find(wr, "uftrace")
            .and_then(|m| m.metrics)
            .and_then(|m| m.added_ns_per_call);
        let gprof = find(wr, "gprof")
            .and_then(|m| m.metrics)
            .and_then(|m| m.added_ns_per_call);
        for m in wr.modes.iter().filter(|m| m.error.is_none()) {
            let Some(x) = m.metrics else { continue };
            if m.run.fntrace_timed() {
                if let Some(a) = x.added_ns_per_call {
                    if !wr.real {
                        push("traced <= 30 ns/call (added)", wr, m, a, 30.0, true);
                    }
                    // The same mode on fib, same run (the floor: two
                    // timestamps per call).
                    let fib_added = wr
                        .fib
                        .and_then(|f| results.iter().find(|r| r.id == f))
                        .and_then(|r| r.modes.iter().find(|fm| fm.id == m.id))
                        .and_then(|fm| fm.metrics)
                        .and_then(|fm| fm.added_ns_per_call);
                    if let Some(f) = fib_added {
                        push(
                            "added ns/call <= 1.3x fib's (same mode, same run)",
                            wr,
                            m,
                            a / f,
                            1.3,
                            true,
                        );
                    }
                    if let Some(u) = uft {
                        push(
                            "traced >= 4x faster than uftrace (added ns/call)",
                            wr,
                            m,
                            u / a,
                            4.0,
                            false,
                        );
                    }
                }
                if let Some(b) = x.bytes_per_call {
                    push("<= 8 trace bytes per call", wr, m, b, 8.0, true);
                }
                if let Some(r) = &m.report {
                    push("report >= 60 M events/s", wr, m, r.meps, 60.0, false);
                }
                if wr.real {
                    push(
                        "real-program slowdown <= 3x (whole process)",
                        wr,
                        m,
                        x.slowdown,
                        3.0,
                        true,
                    );
                }
            }
            if m.run == Run::Count {
                if let (Some(a), Some(g)) = (x.added_ns_per_call, gprof) {
                    push(
                        "counting <= 0.7x glibc mcount (added cost)",
                        wr,
                        m,
                        a / g,
                        0.7,
                        true,
                    );
                }
                if wr.real {
                    push(
                        "real-program slowdown <= 3x (whole process)",
                        wr,
                        m,
                        x.slowdown,
                        3.0,
                        true,
                    );
                }
            }
            if m.id.ends_with("-off") {
                push(
                    "unpatched <= 1.02x uninstrumented (large input, net of start-up)",
                    wr,
                    m,
                    x.large_net_slowdown.unwrap_or(x.net_slowdown),
                    1.02,
                    true,
                );
            }
        }
    }
    v
}

fn opt(v: Option<f64>, prec: usize) -> String {
    match v {
        Some(x) if x.is_finite() => format!("{x:.prec$}"),
        _ => "–".into(),
    }
}

/// The Markdown text of a run: machine, one table per workload, the
/// call-count checks and the targets.
pub fn render(r: &Report, every_check: bool) -> String {
    let mut s = String::new();
    let m = &r.machine;
    let _ = writeln!(
        s,
        "Measured {} with `{}` ({} repetitions per mode{}).\n",
        r.time,
        r.command,
        r.reps,
        if r.quick { ", quick inputs" } else { "" }
    );
    let _ = writeln!(
        s,
        "Machine: {} ({} logical CPUs), Linux {}, load average at start {}; {}; {}; {}; {}.\n",
        m.cpu, m.cores, m.kernel, m.loadavg_at_start, m.gcc, m.clang, m.rustc, m.uftrace
    );
    s.push_str(
        "Every mode of a workload runs in the same repetition loop (repetitions outermost), \
         whole process, output discarded. Columns: **wall** min and median of the measured \
         runs; **start-up**: min of the same mode doing no work (fib(1), 0 rows, 0 lines); \
         **calls**: instrumented calls in that binary, counted by fntrace on the same binary \
         (uninstrumented rows: the mcount build's count, clang: the XRay build's); \
         **ns/call** = (wall min − start-up) / calls; **added ns/call** = the same minus the \
         uninstrumented build's, per call (gcc, rustc or clang-14 baseline, same compiler); \
         **× uninstr.**: whole-process wall min / uninstrumented wall min; **× uftrace**: \
         added ns/call / uftrace's added ns/call (smaller is better); **bytes/call**: trace \
         on disk / calls; **report**: M events/s of `fntrace report`, `uftrace report` or \
         `llvm-xray account` on that trace (whole process, best of runs). uftrace runs with \
         `--no-libcall` (it would otherwise also trace PLT calls into libc). \
         compiler-rt's FDR mode records only once the program initialises it \
         (`__xray_log_init_mode`) and writes only when the program flushes it: the XRay \
         builds wrap `main` with `bench/workloads/xray_fdr_main.c`, which does both when \
         asked (row *compiler-rt XRay FDR*); its log is a flight recorder (the last \
         buffers only), so its bytes/call are bounded, not the cost of a full trace. \
         The row *env only* is FDR selected with `XRAY_OPTIONS=\"patch_premain=true \
         xray_mode=xray-fdr\"` alone: the handler runs on every call but records nothing.\n\n",
    );
    for wr in &r.workloads {
        let _ = writeln!(s, "#### {}: {}\n", wr.id, wr.title);
        s.push_str(
            "| mode | build | wall min ms | wall median ms | start-up ms | calls | ns/call | added ns/call | × uninstr. | × uftrace | bytes/call | report M ev/s |\n",
        );
        s.push_str("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
        for mr in &wr.modes {
            if let Some(e) = &mr.error {
                let _ = writeln!(
                    s,
                    "| {} | {} | failed: {} | | | | | | | | | |",
                    mr.label,
                    mr.flags,
                    e.replace('|', "/")
                );
                continue;
            }
            let Some(x) = mr.metrics else {
                let _ = writeln!(
                    s,
                    "| {} | {} | no baseline | | | | | | | | | |",
                    mr.label, mr.flags
                );
                continue;
            };
            let _ = writeln!(
                s,
                "| {} | {} | {:.1} | {:.1} | {:.1} | {} | {} | {} | {:.2} | {} | {} | {} |",
                mr.label,
                if mr.flags.is_empty() { "–" } else { mr.flags },
                x.wall_min * 1e3,
                x.wall_median * 1e3,
                x.startup_min * 1e3,
                mr.calls.map_or("–".into(), |c| c.to_string()),
                opt(x.ns_per_call, 1),
                opt(x.added_ns_per_call, 1),
                x.slowdown,
                opt(x.vs_uftrace, 2),
                opt(x.bytes_per_call, 2),
                mr.report
                    .as_ref()
                    .map_or("–".into(), |r| format!("{:.1}", r.meps)),
            );
        }
        let large: Vec<&ModeResult> = wr
            .modes
            .iter()
            .filter(|m| m.metrics.is_some_and(|x| x.large_net_slowdown.is_some()))
            .collect();
        if !large.is_empty() {
            let _ = writeln!(
                s,
                "\nUninstrumented and not-patched builds with the large input ({}), net of start-up:\n\n\
                 | mode | build | wall min ms | net ms | × uninstr. (net) |\n|---|---|---:|---:|---:|",
                wr.large_args.join(" ")
            );
            for m in large {
                let x = m.metrics.unwrap();
                let _ = writeln!(
                    s,
                    "| {} | {} | {:.1} | {:.1} | {:.3} |",
                    m.label,
                    if m.flags.is_empty() { "–" } else { m.flags },
                    min(&m.large_times) * 1e3,
                    (min(&m.large_times) - x.startup_min) * 1e3,
                    x.large_net_slowdown.unwrap()
                );
            }
        }
        for (label, why) in &wr.skipped {
            let _ = writeln!(s, "\nNot measured: {label} ({why}).");
        }
        s.push('\n');
    }
    s.push_str("#### Call counts per function, same binary\n\n");
    s.push_str("| workload | left | right | functions | calls (left / right) | mismatches |\n|---|---|---|---:|---:|---:|\n");
    for c in &r.count_checks {
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} / {} | {} |",
            c.workload,
            c.left,
            c.right,
            c.functions,
            c.total.0,
            c.total.1,
            c.mismatches.len()
        );
    }
    for c in r.count_checks.iter().filter(|c| !c.mismatches.is_empty()) {
        let _ = writeln!(
            s,
            "\nMismatches, {}: {} vs {}{}:\n",
            c.workload,
            c.left,
            c.right,
            if c.note.is_empty() {
                String::new()
            } else {
                format!(" (expected: {})", c.note)
            }
        );
        for (name, a, b) in c.mismatches.iter().take(12) {
            let _ = writeln!(s, "- `{name}`: {a} vs {b}");
        }
        if c.mismatches.len() > 12 {
            let _ = writeln!(s, "- … {} more (all in the JSON)", c.mismatches.len() - 12);
        }
    }
    s.push_str(
        "\n#### Targets (computed from this run)\n\n\
         How each is measured: *traced ≤ 30 ns/call*: added ns/call (net of start-up) of \
         every fntrace timed mode on the fib workloads; *≥ 4× faster than uftrace*: \
         uftrace's added ns/call / the mode's, each against its own compiler's \
         uninstrumented build; *counting ≤ 0.7× glibc mcount*: added ns/call of fntrace \
         counting / glibc's, same -pg binary; *unpatched ≤ 1.02×*: not-patched build / \
         uninstrumented, large input, net of start-up; *≤ 8 bytes per call*: trace file / \
         calls; *report ≥ 60 M events/s*: whole-process `fntrace report` (events = 2 × \
         calls); *real-program slowdown ≤ 3×*: whole-process wall min / uninstrumented, \
         SQLite and regex, fntrace timed and counting modes.\n\n\
         | target | checks | pass | fail |\n|---|---:|---:|---|\n",
    );
    let mut names: Vec<&str> = r.targets.iter().map(|t| t.target).collect();
    names.dedup();
    names.sort();
    names.dedup();
    for n in names {
        let ts: Vec<&Target> = r.targets.iter().filter(|t| t.target == n).collect();
        let fails: Vec<String> = ts
            .iter()
            .filter(|t| !t.pass)
            .map(|t| format!("{} {} ({:.2})", t.workload, t.mode, t.value))
            .collect();
        let _ = writeln!(
            s,
            "| {n} | {} | {} | {} |",
            ts.len(),
            ts.len() - fails.len(),
            if fails.is_empty() {
                "–".into()
            } else {
                fails.join("; ")
            }
        );
    }
    let pass = r.targets.iter().filter(|t| t.pass).count();
    let _ = writeln!(s, "\n{pass} of {} target checks pass.", r.targets.len());
    // What "4x less than uftrace" asks of a timed call, against the cost
    // of the two clock reads every timed call makes.
    let floor = r.machine.two_rdtsc_ns;
    let _ = writeln!(
        s,
        "\nThe floor of a timed call on this machine, measured in this run: two `rdtsc` \
         cost {floor:.1} ns. \"≥ 4× less than uftrace\" asks for at most a quarter of \
         uftrace's added ns/call, of which the two clock reads take the floor and \
         the rest of a recorded call (the calls into and out of the trampoline or \
         wrapper, the shadow frame, encoding and storing two events) must fit in what \
         is left:\n\n| workload | uftrace added ns/call | ÷ 4 | two `rdtsc` | left for \
         the rest of a call |\n|---|---:|---:|---:|---:|"
    );
    for wr in &r.workloads {
        if let Some(u) = find(wr, "uftrace")
            .and_then(|m| m.metrics)
            .and_then(|m| m.added_ns_per_call)
        {
            let _ = writeln!(
                s,
                "| {} | {u:.1} | {:.1} | {floor:.1} | {:.1} ns |",
                wr.id,
                u / 4.0,
                u / 4.0 - floor
            );
        }
    }
    if !every_check {
        return s;
    }
    s.push_str("\nEvery check:\n\n| target | workload | mode | measured | limit | |\n|---|---|---|---:|---:|---|\n");
    for t in &r.targets {
        let _ = writeln!(
            s,
            "| {} | {} | {} | {:.2} | {} | {} |",
            t.target,
            t.workload,
            t.mode,
            t.value,
            t.limit,
            if t.pass { "pass" } else { "**FAIL**" }
        );
    }
    s
}

/// Replaces (or appends) the "Side-by-side suite" section of
/// `docs/BENCHMARKS.md`; the other sections are kept.
/// Every check is in the JSON; the page gets the summary.
pub fn update_docs(path: &Path, r: &Report) -> Result<(), String> {
    const HEAD: &str = "## Side-by-side suite";
    let old = std::fs::read_to_string(path).map_err(|e| e.to_string())?;
    let text = render(r, false);
    let section = format!(
        "{HEAD}\n\nThis section is generated by `bench/compare` (last run {}; \
         `bench/compare --quick` for a short run; every number and every target check in \
         `bench/results/{}{}.json`). It builds `examples/workloads/fib.c` and `fib.rs`, \
         a stack VM interpreter in C with well over 10 M calls per second \
         (`bench/workloads/vm.c`), the SQLite amalgamation shipped in the crates.io package libsqlite3-sys driven by \
         `bench/workloads/sqlite_query.c`, ripgrep 14 from its crates.io source (fetched \
         once with `cargo vendor`) searching a generated tree of 20,000 small files with \
         two threads, and the `regex` crate on generated log lines \
         (`bench/workloads/regex_work`; both Rust programs built with `cargo fntrace build \
         --all-crates`) with every mechanism, and runs fntrace and its peers on the same \
         binaries. The first run compiles the SQLite amalgamation eight times (about 30 s \
         of CPU each, more on a busy machine) and ripgrep five times; builds are cached in `target/bench-compare/build`, and the \
         run times (`--quick` under 2 minutes, full under 10) are with the cache \
         warm.\n\n{text}\n",
        r.date,
        r.date,
        if r.quick { "-quick" } else { "" }
    );
    let new = replace_section(&old, HEAD, &section);
    std::fs::write(path, new).map_err(|e| e.to_string())
}

/// `old` with the section starting at `head` replaced by `section` (up to
/// the next `## ` heading), or `section` appended.
fn replace_section(old: &str, head: &str, section: &str) -> String {
    match old.find(head) {
        Some(start) => {
            let rest = &old[start + head.len()..];
            let end = rest
                .find("\n## ")
                .map_or(old.len(), |i| start + head.len() + i + 1);
            format!("{}{}{}", &old[..start], section, &old[end..])
        }
        None => format!("{}\n\n{section}", old.trim_end_matches('\n')),
    }
}

#[cfg(test)]
mod tests {
    use super::replace_section;

    #[test]
    fn replaces_only_its_section() {
        let h = "## Side-by-side suite";
        let doc = "# B\n\n## A\ntext\n\n## Side-by-side suite\nold\n\n## C\nkept\n";
        let new = replace_section(doc, h, "## Side-by-side suite\nnew\n\n");
        assert_eq!(
            new,
            "# B\n\n## A\ntext\n\n## Side-by-side suite\nnew\n\n## C\nkept\n"
        );
        let appended = replace_section("# B\n\n## A\ntext\n", h, "## Side-by-side suite\nx\n");
        assert_eq!(appended, "# B\n\n## A\ntext\n\n## Side-by-side suite\nx\n");
        // Replacing twice is stable.
        assert_eq!(
            replace_section(&new, h, "## Side-by-side suite\nnew\n\n"),
            new
        );
    }
}
