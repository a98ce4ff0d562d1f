//! `bench/compare --exports`: export speed and size on the suite's traces
//! (issue #18). Each workload's `-pg` build (gcc for C, rustc
//! `-Zinstrument-mcount` for Rust; the same binaries as the suite) is
//! recorded with the release `fntrace record`, then exported to `chrome`,
//! `perfetto` and `html` (best of the repetitions, whole `fntrace export`
//! process): M events/s of wall and of CPU time (the children's user +
//! system time, which load from elsewhere on the machine does not
//! inflate), and output bytes per event. `fntrace report` of the same
//! trace is timed alongside, and every HTML page is opened in headless
//! Chromium: the time the page itself reports from navigation start to
//! everything drawn (target: under 3 s for a 1 M-call trace, checked on
//! fib(28), 1,028,458 calls, whatever the run's size).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use crate::Ctx;
use crate::workloads::{BuildKind, Workload};

/// CPU seconds (user + system) of the waited-for children so far.
fn children_cpu() -> f64 {
    // SAFETY: getrusage writes the struct it is given; a zeroed rusage is
    // a valid value of it.
    let mut r: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: RUSAGE_CHILDREN with a valid pointer.
    unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut r) };
    let t = |v: libc::timeval| v.tv_sec as f64 + v.tv_usec as f64 / 1e6;
    t(r.ru_utime) + t(r.ru_stime)
}

/// Best (wall, CPU) seconds of `n` runs of a command.
fn best(n: usize, mut make: impl FnMut() -> Command) -> Result<(f64, f64), String> {
    let (mut wall, mut cpu) = (f64::INFINITY, f64::INFINITY);
    for _ in 0..n {
        let mut c = make();
        c.stdout(Stdio::null()).stderr(Stdio::null());
        let c0 = children_cpu();
        let t = Instant::now();
        let st = c.status().map_err(|e| format!("{c:?}: {e}"))?;
        let w = t.elapsed().as_secs_f64();
        if !st.success() {
            return Err(format!("{c:?} failed"));
        }
        wall = wall.min(w);
        cpu = cpu.min(children_cpu() - c0);
    }
    Ok((wall, cpu))
}

/// Records `bin args` with `fntrace record`; returns the trace and its
/// event count (from `record`'s summary).
fn record(ctx: &Ctx, dir: &Path, bin: &Path, args: &[String]) -> Result<(PathBuf, u64), String> {
    let data = dir.join("t.data");
    let _ = std::fs::remove_file(&data);
    let _ = std::fs::remove_file(dir.join("t.data.old"));
    let o = Command::new(&ctx.fntrace)
        .arg("record")
        .arg("-o")
        .arg(&data)
        .arg("--")
        .arg(bin)
        .args(args)
        .env("FNTRACE_PRELOAD", &ctx.preload)
        .current_dir(dir)
        .stdout(Stdio::null())
        .output()
        .map_err(|e| e.to_string())?;
    let err = String::from_utf8_lossy(&o.stderr);
    if !o.status.success() {
        return Err(format!("fntrace record {}: {err}", bin.display()));
    }
    let events = err
        .split("recorded ")
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .ok_or_else(|| format!("no event count in: {err}"))?;
    Ok((data, events))
}

/// Milliseconds from navigation start to the page's `data-drawn`, as the
/// page reports it in headless Chromium.
fn chromium_load_ms(dir: &Path, page: &Path) -> Result<f64, String> {
    let o = Command::new("chromium")
        .args([
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--window-size=1280,1400",
            "--dump-dom",
        ])
        .arg(format!("file://{}", page.display()))
        .env("HOME", dir)
        .stderr(Stdio::null())
        .output()
        .map_err(|e| format!("chromium: {e}"))?;
    let dom = String::from_utf8_lossy(&o.stdout);
    let k = "data-load-ms=\"";
    let i = dom
        .find(k)
        .ok_or("the page did not finish drawing in chromium")?
        + k.len();
    dom[i..i + dom[i..].find('"').unwrap_or(0)]
        .parse()
        .map_err(|e| format!("data-load-ms: {e}"))
}

/// One trace's row of results.
struct Row {
    trace: String,
    events: u64,
    trace_bytes: u64,
    report: (f64, f64),
    /// Per format: (wall s, CPU s, output bytes).
    formats: Vec<(&'static str, f64, f64, u64)>,
    load_ms: Result<f64, String>,
}

/// Runs the export benchmark on the built workloads; prints the tables
/// (Markdown, as in `docs/BENCHMARKS.md`).
pub fn run(
    ctx: &Ctx,
    ws: &[Workload],
    bins: &std::collections::BTreeMap<(String, BuildKind), PathBuf>,
    reps: usize,
) -> Result<(), String> {
    let dir = ctx.work.join("exports");
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let mut jobs: Vec<(String, PathBuf, Vec<String>)> = vec![];
    for w in ws {
        let Some(bin) = bins.get(&(w.id.to_string(), BuildKind::Pg)) else {
            eprintln!("exports: {}: no -pg build, skipped", w.id);
            continue;
        };
        jobs.push((
            format!("{} ({})", w.id, w.args.join(" ")),
            bin.clone(),
            w.args.clone(),
        ));
        if w.id == "fib-c" && w.args != ["28"] {
            jobs.push(("fib-c (28)".into(), bin.clone(), vec!["28".into()]));
        }
    }
    let mut rows = vec![];
    for (name, bin, args) in &jobs {
        eprintln!("exports: {name}: recording");
        let (data, events) = record(ctx, &dir, bin, args)?;
        let trace_bytes = std::fs::metadata(&data).map_or(0, |m| m.len());
        let report = best(reps, || {
            let mut c = Command::new(&ctx.fntrace);
            c.arg("report").arg(&data);
            c
        })?;
        let mut formats = vec![];
        let mut load_ms = Err("no page".to_string());
        for f in ["perfetto", "chrome", "html"] {
            eprintln!("exports: {name}: {f}");
            let out = dir.join(format!("t.{f}"));
            let (wall, cpu) = best(reps, || {
                let mut c = Command::new(&ctx.fntrace);
                c.arg("export")
                    .arg(&data)
                    .args(["--format", f, "-o"])
                    .arg(&out);
                c
            })?;
            let bytes = std::fs::metadata(&out).map_or(0, |m| m.len());
            if f == "html" {
                load_ms = chromium_load_ms(&dir, &out);
            }
            let _ = std::fs::remove_file(&out);
            formats.push((f, wall, cpu, bytes));
        }
        rows.push(Row {
            trace: name.clone(),
            events,
            trace_bytes,
            report,
            formats,
            load_ms,
        });
    }
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "Export speed, best of {reps}; load average {}",
        load.split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    );
    println!();
    println!(
        "| trace | events | format | wall s | CPU s | M events/s (wall) | M events/s (CPU) | output bytes | bytes/event |"
    );
    println!("|---|---:|---|---:|---:|---:|---:|---:|---:|");
    for r in &rows {
        let m = |s: f64| r.events as f64 / s.max(1e-9) / 1e6;
        println!(
            "| {} | {} | (trace; `fntrace report`) | {:.3} | {:.3} | {:.1} | {:.1} | {} | {:.2} |",
            r.trace,
            r.events,
            r.report.0,
            r.report.1,
            m(r.report.0),
            m(r.report.1),
            r.trace_bytes,
            r.trace_bytes as f64 / r.events as f64
        );
        for &(f, wall, cpu, bytes) in &r.formats {
            println!(
                "| {} | {} | {f} | {wall:.3} | {cpu:.3} | {:.1} | {:.1} | {bytes} | {:.2} |",
                r.trace,
                r.events,
                m(wall),
                m(cpu),
                bytes as f64 / r.events as f64
            );
        }
    }
    println!();
    println!("HTML page in headless Chromium (navigation start to drawn, as the page reports it):");
    println!();
    println!("| trace | calls | page MB | drawn ms | `fntrace report` s | target |");
    println!("|---|---:|---:|---:|---:|---|");
    for r in &rows {
        let html = r.formats.iter().find(|f| f.0 == "html").map_or(0, |f| f.3);
        let (ms, target) = match &r.load_ms {
            Ok(ms) if r.trace == "fib-c (28)" => (
                format!("{ms:.0}"),
                if *ms < 3000.0 {
                    "< 3 s for 1 M calls: met"
                } else {
                    "< 3 s for 1 M calls: NOT met"
                },
            ),
            Ok(ms) => (format!("{ms:.0}"), ""),
            Err(e) => (e.clone(), ""),
        };
        println!(
            "| {} | {} | {:.1} | {ms} | {:.3} | {target} |",
            r.trace,
            r.events / 2,
            html as f64 / 1e6,
            r.report.0
        );
    }
    Ok(())
}
