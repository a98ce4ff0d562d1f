//! Cost of compiler-hook tracing against its peers, measured in one run on
//! the same binaries (`examples/workloads/fib.c`, fib(30) = 2,692,537
//! calls): uninstrumented, glibc `-pg` (gmon arcs), glibc's no-op
//! `-finstrument-functions` hooks, `uftrace record`, fntrace timed (mcount,
//! fentry, cyg_profile) and fntrace counting. Prints ns per call (whole
//! process, best of several runs), the ratio to the uninstrumented build
//! and bytes per call on disk. Asserts nothing.
//!
//! Run: `cargo bench -p fntrace-cli --bench hooks` (needs gcc; uftrace is
//! measured when installed).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

const N: &str = "30";
const CALLS: f64 = 2_692_537.0;

mod common;
use common::{RUNS, best, build, gcc, size};
use fntrace_rt::config;

fn main() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path();
    let preload = common::preload();
    let plain = gcc(dir, "fib", &[]);
    let pg = gcc(dir, "fib-pg", &["-pg"]);
    let fentry = gcc(dir, "fib-fentry", &["-pg", "-mfentry"]);
    let cyg = gcc(dir, "fib-cyg", &["-finstrument-functions"]);
    let data = dir.join("t.data");
    let traced_env = |bin: &Path, count: bool, env: &'static [(&'static str, &'static str)]| {
        let (bin, preload, data) = (bin.to_path_buf(), preload.clone(), data.clone());
        move || {
            let mut c = Command::new(&bin);
            c.arg(N)
                .env("LD_PRELOAD", &preload)
                .env(config::ENV_OUTPUT, &data)
                .envs(env.iter().copied());
            if count {
                c.env(config::ENV_COUNT, "1");
            }
            c
        }
    };
    let traced = |bin: &Path, count: bool| traced_env(bin, count, &[]);
    let plain_t = best(dir, || {
        let mut c = Command::new(&plain);
        c.arg(N);
        c
    });
    let mut rows: Vec<(String, f64, Option<f64>)> = vec![("uninstrumented".into(), plain_t, None)];
    let glibc_pg = best(dir, || {
        let mut c = Command::new(&pg);
        c.arg(N);
        c
    });
    rows.push(("glibc -pg (mcount, gmon arcs)".into(), glibc_pg, None));
    let t = best(dir, || {
        let mut c = Command::new(&cyg);
        c.arg(N);
        c
    });
    rows.push(("glibc -finstrument-functions (no-op hooks)".into(), t, None));
    let uftrace = Command::new("uftrace").arg("--version").output().is_ok();
    if uftrace {
        let ud = dir.join("uftrace.data");
        let t = best(dir, || {
            let mut c = Command::new("uftrace");
            c.args(["record", "-d"]).arg(&ud).arg(&pg).arg(N);
            c
        });
        rows.push(("uftrace record (-pg)".into(), t, Some(size(&ud) as f64)));
    }
    // `-pg -mfentry` twice: as fntrace records it by default (the calls
    // rewritten into patchable sites with call wrappers) and with
    // `FNTRACE_KEEP_CALLS=1` (the calls kept, exits by return-address
    // hijacking, like mcount).
    let keep: &'static [(&'static str, &'static str)] = &[(config::ENV_KEEP_CALLS, "1")];
    let keep_name = format!("-pg -mfentry, {}=1", config::ENV_KEEP_CALLS);
    for (name, bin, env) in [
        ("-pg", &pg, &[][..]),
        ("-pg -mfentry", &fentry, &[][..]),
        (keep_name.as_str(), &fentry, keep),
        ("-finstrument-functions", &cyg, &[][..]),
    ] {
        let t = best(dir, traced_env(bin, false, env));
        rows.push((
            format!("fntrace timed ({name})"),
            t,
            Some(size(&data) as f64),
        ));
    }
    let count_t = best(dir, traced(&pg, true));
    rows.push(("fntrace counting (-pg)".into(), count_t, None));

    // XRay: one clang binary (it links compiler-rt's XRay runtime, idle
    // unless XRAY_OPTIONS asks) against the same source without XRay.
    let clang = Command::new("clang-14").arg("--version").output().is_ok();
    let mut xrows: Vec<(String, f64)> = vec![];
    let mut fdr_t = None;
    let mut xray_on = None;
    if clang {
        let cc = |name: &str, flags: &[&str]| build("clang-14", dir, name, flags);
        let cplain = cc("fib-clang", &[]);
        // One XRay binary for every XRay row. It wraps `main` with the
        // suite's `xray_fdr_main.c`, which initialises and flushes
        // compiler-rt's FDR mode when BENCH_XRAY_FDR is set (FDR selected
        // from the environment alone records nothing) and otherwise calls
        // `main` untouched.
        let fdr_main = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../bench/workloads/xray_fdr_main.c"
        );
        let cx = cc(
            "fib-xray",
            &[
                "-fxray-instrument",
                "-fxray-instruction-threshold=1",
                fdr_main,
                "-Wl,--wrap=main",
            ],
        );
        // Net of process start-up (compiler-rt's runtime initialises even
        // when idle; fntrace calibrates): time(fib(N)) - time(fib(1)).
        let net = |mk: &dyn Fn(&str) -> Command| best(dir, || mk(N)) - best(dir, || mk("1"));
        let plain_c = net(&|n| {
            let mut c = Command::new(&cplain);
            c.arg(n);
            c
        });
        xrows.push(("clang, uninstrumented".into(), plain_c));
        let t = net(&|n| {
            let mut c = Command::new(&cx);
            c.arg(n);
            c
        });
        xrows.push(("XRay sleds, not patched".into(), t));
        let t = net(&|n| {
            let mut c = Command::new(&cx);
            c.arg(n)
                .env("LD_PRELOAD", &preload)
                .env(config::ENV_OUTPUT, &data);
            c
        });
        xrows.push(("fntrace XRay, patched and recording".into(), t));
        xray_on = Some(t);
        for (name, mode, opts) in [
            (
                "compiler-rt XRay basic mode",
                "xray-basic",
                "XRAY_BASIC_OPTIONS",
            ),
            (
                "compiler-rt XRay FDR mode, env only (records nothing: never initialised)",
                "xray-fdr",
                "XRAY_FDR_OPTIONS",
            ),
        ] {
            let t = net(&|n| {
                let mut c = Command::new(&cx);
                c.arg(n)
                    .env(
                        "XRAY_OPTIONS",
                        format!("patch_premain=true xray_mode={mode} verbosity=0"),
                    )
                    .env(opts, "func_duration_threshold_us=0");
                c
            });
            for e in std::fs::read_dir(dir).unwrap().flatten() {
                if e.file_name().to_string_lossy().starts_with("xray-log.") {
                    let _ = std::fs::remove_file(e.path());
                }
            }
            xrows.push((name.into(), t));
        }
        // FDR recording: initialised and flushed by the program (the
        // flight recorder keeps its last buffers, written at exit).
        let t = net(&|n| {
            let mut c = Command::new(&cx);
            c.arg(n)
                .env("BENCH_XRAY_FDR", "1")
                .env("XRAY_OPTIONS", "xray_mode=xray-fdr verbosity=0")
                .current_dir(dir);
            c
        });
        for e in std::fs::read_dir(dir).unwrap().flatten() {
            if e.file_name().to_string_lossy().starts_with("fdr-")
                || e.file_name().to_string_lossy().starts_with("xray-log.")
            {
                let _ = std::fs::remove_file(e.path());
            }
        }
        fdr_t = Some(t);
        xrows.push((
            "compiler-rt XRay FDR mode, recording (initialised and flushed by the program)".into(),
            t,
        ));
    }
    println!("fib({N}): {CALLS} calls; whole-process time, best of {RUNS} runs\n");
    println!("| what | ns/call | added ns/call | × uninstrumented | bytes/call |");
    println!("|---|---:|---:|---:|---:|");
    for (name, t, bytes) in &rows {
        println!(
            "| {name} | {:.1} | {:.1} | {:.2} | {} |",
            t / CALLS * 1e9,
            (t - plain_t) / CALLS * 1e9,
            t / plain_t,
            bytes
                .map(|b| format!("{:.2}", b / CALLS))
                .unwrap_or_else(|| "–".into())
        );
    }
    println!(
        "\nfntrace counting / glibc mcount (added cost): {:.2}",
        (count_t - plain_t) / (glibc_pg - plain_t)
    );
    if !uftrace {
        println!("(uftrace not installed: apt-get install uftrace)");
    }
    // Analysis speed: the same program recorded by both, then
    // `uftrace report` against `fntrace report` (output discarded).
    if uftrace {
        let ud = dir.join("uftrace.data");
        let _ = std::fs::remove_dir_all(&ud);
        let st = Command::new("uftrace")
            .args(["record", "-d"])
            .arg(&ud)
            .arg(&pg)
            .arg(N)
            .stdout(Stdio::null())
            .status()
            .unwrap();
        assert!(st.success());
        let _ = std::fs::remove_file(&data);
        let st = traced(&pg, false)().stdout(Stdio::null()).status().unwrap();
        assert!(st.success());
        let fntrace = PathBuf::from(env!("CARGO_BIN_EXE_fntrace"));
        let time = |mut c: Command| {
            (0..3)
                .map(|_| {
                    let t = Instant::now();
                    assert!(c.stdout(Stdio::null()).status().unwrap().success());
                    t.elapsed().as_secs_f64()
                })
                .fold(f64::INFINITY, f64::min)
        };
        let mut c = Command::new("uftrace");
        c.args(["report", "-d"]).arg(&ud);
        let tu = time(c);
        let mut c = Command::new(&fntrace);
        c.arg("report").arg(&data);
        let tf = time(c);
        let events = 2.0 * (CALLS + 1.0);
        println!("\nreport of fib({N}) ({events} events), best of 3\n");
        println!("| tool | seconds | M events/s |");
        println!("|---|---:|---:|");
        println!("| uftrace report | {tu:.3} | {:.1} |", events / tu / 1e6);
        println!("| fntrace report | {tf:.3} | {:.1} |", events / tf / 1e6);
        println!("\nfntrace report / uftrace report speed: {:.2}x", tu / tf);
    }
    if let Some(&(_, plain_c)) = xrows.first() {
        println!(
            "\nXRay, fib({N}), clang-14 binaries, best of {RUNS} runs, net of process start-up\n"
        );
        println!("| what | ns/call | × uninstrumented |");
        println!("|---|---:|---:|");
        for (name, t) in &xrows {
            println!("| {name} | {:.1} | {:.2} |", t / CALLS * 1e9, t / plain_c);
        }
        if let (Some(f), Some(x)) = (fdr_t, xray_on) {
            println!(
                "\ncompiler-rt FDR (recording) / fntrace XRay: {:.2}x",
                f / x
            );
        }
    } else {
        println!("(clang-14 not installed: XRay rows skipped)");
    }
}
