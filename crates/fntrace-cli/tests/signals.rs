//! Signals and cores through `fntrace record`: a program that crashes
//! leaves no core of the recorder in place of its own, and SIGINT, SIGTERM,
//! SIGHUP and SIGQUIT sent to the recorder reach the program, whose end is
//! recorded and reported; the recorder ends as the program did.

mod common;

use std::io::{BufRead, BufReader};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::{record_cmd, tool};

/// A generous watchdog so that a broken build fails instead of hanging.
const WATCHDOG: Duration = Duration::from_secs(120);

fn build(dir: &Path, name: &str, src: &str) -> std::path::PathBuf {
    let c = dir.join(format!("{name}.c"));
    std::fs::write(&c, src).unwrap();
    let bin = dir.join(name);
    tool(
        "gcc",
        &[
            "-O1",
            "-pg",
            "-o",
            bin.to_str().unwrap(),
            c.to_str().unwrap(),
        ],
    );
    bin
}

#[test]
fn a_crashing_program_leaves_no_core_of_the_recorder() {
    let d = tempfile::tempdir().unwrap();
    let bin = build(
        d.path(),
        "crash",
        "#include <stdio.h>\n\
         __attribute__((noinline)) void boom(volatile int *p) { *p = 1; }\n\
         int main(void) { puts(\"about to crash\"); fflush(stdout); boom(0); return 0; }\n",
    );
    let mut c = record_cmd(&d.path().join("t.data"), &[], &bin, &[]);
    c.current_dir(d.path());
    // SAFETY: pre_exec runs in the child before exec; setrlimit is
    // async-signal-safe.
    unsafe {
        c.pre_exec(|| {
            let unl = libc::rlimit {
                rlim_cur: libc::RLIM_INFINITY,
                rlim_max: libc::RLIM_INFINITY,
            };
            libc::setrlimit(libc::RLIMIT_CORE, &unl);
            Ok(())
        });
    }
    let o = c.output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(
        o.status.signal(),
        Some(libc::SIGSEGV),
        "{:?} {err}",
        o.status
    );
    assert!(
        !o.status.core_dumped(),
        "fntrace record dumped its own core: {err}"
    );
    assert!(err.contains("fntrace: recorded"), "{err}");
}

const LOOP: &str = "#include <stdio.h>\n\
    #include <unistd.h>\n\
    __attribute__((noinline)) int work(int i) { return i * 3 + 1; }\n\
    int main(void) {\n\
      volatile int s = 0;\n\
      printf(\"ready %d\\n\", getpid()); fflush(stdout);\n\
      for (int i = 0;; i++) { s += work(i); usleep(1000); }\n\
    }\n";

#[test]
fn signals_to_the_recorder_reach_the_program() {
    let d = tempfile::tempdir().unwrap();
    let bin = build(d.path(), "loop", LOOP);
    for sig in [libc::SIGTERM, libc::SIGHUP, libc::SIGINT, libc::SIGQUIT] {
        let data = d.path().join(format!("t{sig}.data"));
        let mut c = record_cmd(&data, &[], &bin, &[]);
        c.stdout(Stdio::piped()).stderr(Stdio::piped());
        let mut child = c.spawn().unwrap();
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        out.read_line(&mut line).unwrap();
        let prog: i32 = line
            .trim()
            .strip_prefix("ready ")
            .unwrap_or_else(|| panic!("program printed {line:?}"))
            .parse()
            .unwrap();
        // SAFETY: sends a signal to the recorder we spawned.
        unsafe {
            libc::kill(child.id() as i32, sig);
        }
        let start = Instant::now();
        let status = loop {
            if let Some(st) = child.try_wait().unwrap() {
                break st;
            }
            if start.elapsed() > WATCHDOG {
                let _ = child.kill();
                // SAFETY: ends the program the test started.
                unsafe {
                    libc::kill(prog, libc::SIGKILL);
                }
                panic!("signal {sig}: fntrace record did not end");
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let mut err = String::new();
        std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
        // SAFETY: probes whether the program still exists.
        let alive = unsafe { libc::kill(prog, 0) } == 0;
        if alive {
            // SAFETY: ends the program the test started.
            unsafe {
                libc::kill(prog, libc::SIGKILL);
            }
        }
        assert!(!alive, "signal {sig}: the program is still running: {err}");
        assert_eq!(status.signal(), Some(sig), "signal {sig}: {status:?} {err}");
        assert!(!status.core_dumped(), "signal {sig}: core of the recorder");
        assert!(
            err.contains("fntrace: recorded") && err.contains(data.to_str().unwrap()),
            "signal {sig}: no report of the trace: {err}"
        );
    }
}
