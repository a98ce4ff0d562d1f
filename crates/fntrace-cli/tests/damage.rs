//! Damaged traces: cut at random offsets and corrupted headers. The trace
//! is recorded by a hand-instrumented fib in a child process (this test
//! binary re-executed), so the recorder is the real one.

use std::path::{Path, PathBuf};
use std::process::Command;

use fntrace::__private::{Site, enter};
use fntrace_cli::analysis::{Call, Visitor, walk_thread};
use fntrace_format::Trace;
use rand::Rng;

fn fib(n: u64) -> u64 {
    static SITE: Site = Site::new("damage::fib", file!(), line!());
    let _g = enter(&SITE);
    if n < 2 { n } else { fib(n - 1) + fib(n - 2) }
}

struct Count(u64);
impl Visitor for Count {
    fn call(&mut self, _c: &Call) {
        self.0 += 1;
    }
}

fn calls(t: &Trace) -> u64 {
    let mut c = Count(0);
    for tid in t.thread_ids() {
        walk_thread(t, tid, &mut c);
    }
    c.0
}

fn record(dir: &Path) -> PathBuf {
    let out = dir.join("t.data");
    if std::env::var_os("DAMAGE_CHILD").is_some() {
        unreachable!()
    }
    let st = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child_workload", "--nocapture"])
        .env("DAMAGE_CHILD", "1")
        .env("FNTRACE_OUTPUT", &out)
        .status()
        .unwrap();
    assert!(st.success());
    out
}

#[test]
fn child_workload() {
    if std::env::var_os("DAMAGE_CHILD").is_none() {
        return;
    }
    // fib(24) = 46368: 2*75025-1 = 150049 calls, several chunks (at
    // least four: the tests damage the third; fib(22)'s trace was
    // sometimes shorter than that, its size depending on the TSC deltas).
    assert_eq!(fib(24), 46368);
}

#[test]
fn cut_at_random_offsets_reads_the_prefix_and_reports_loss() {
    let dir = tempfile::tempdir().unwrap();
    let full = record(dir.path());
    let bytes = std::fs::read(&full).unwrap();
    let t = Trace::open(&full).unwrap();
    assert!(t.damage().is_empty());
    let all = calls(&t);
    assert_eq!(all, 150049);
    let mut rng = rand::thread_rng();
    let cut_path = dir.path().join("cut.data");
    let mut prev_calls = 0;
    let mut cuts: Vec<usize> = (0..40).map(|_| rng.gen_range(0..bytes.len())).collect();
    cuts.sort();
    for cut in cuts {
        std::fs::write(&cut_path, &bytes[..cut]).unwrap();
        match Trace::open(&cut_path) {
            Err(e) => {
                // Only a cut inside the header is fatal, and it says so.
                assert!(cut < 256, "cut at {cut}: {e}");
                assert!(e.to_string().contains("cut.data"), "{e}");
            }
            Ok(t) => {
                let n = calls(&t);
                assert!(n <= all);
                assert!(
                    n >= prev_calls,
                    "a longer prefix must not yield fewer calls"
                );
                prev_calls = n;
                let mut damage = t.damage().to_vec();
                for tid in t.thread_ids() {
                    damage.extend(t.stream(tid).take_damage());
                    let mut r = t.stream(tid);
                    while r.next_item().is_some() {}
                    damage.extend(r.take_damage());
                }
                if cut < bytes.len() {
                    assert!(
                        !damage.is_empty(),
                        "cut at {cut} of {} not reported",
                        bytes.len()
                    );
                }
            }
        }
    }
}

#[test]
fn corrupted_header_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let full = record(dir.path());
    let mut bytes = std::fs::read(&full).unwrap();
    bytes[30] ^= 0x55;
    let p = dir.path().join("bad.data");
    std::fs::write(&p, &bytes).unwrap();
    let e = Trace::open(&p).unwrap_err().to_string();
    assert!(
        e.contains("bad.data") && e.contains("byte 0") && e.contains("header is corrupted"),
        "{e}"
    );
    let out = Command::new(env!("CARGO_BIN_EXE_fntrace"))
        .arg("info")
        .arg(&p)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("bad.data") && err.contains("header is corrupted"),
        "{err}"
    );
    // Not a trace at all.
    std::fs::write(&p, b"hello world, this is not a trace file at all, padding padding padding padding padding padding padding padding padding padding padding padding padding padding padding padding padding padding padding padding padding padding padding padding").unwrap();
    let e = Trace::open(&p).unwrap_err().to_string();
    assert!(e.contains("not an fntrace trace"), "{e}");
}

#[test]
fn corrupted_chunk_is_skipped_and_the_rest_is_read() {
    let dir = tempfile::tempdir().unwrap();
    let full = record(dir.path());
    let mut bytes = std::fs::read(&full).unwrap();
    let all = calls(&Trace::open(&full).unwrap());
    // Flip a byte in the payload of the third chunk.
    let off = 4096 + 2 * 65536 + 64 + 100;
    assert!(bytes.len() > off + 65536);
    bytes[off] ^= 0xff;
    let p = dir.path().join("flip.data");
    std::fs::write(&p, &bytes).unwrap();
    let t = Trace::open(&p).unwrap();
    let n = calls(&t);
    assert!(n < all && n > all / 3, "{n} of {all}");
    let out = Command::new(env!("CARGO_BIN_EXE_fntrace"))
        .arg("info")
        .arg(&p)
        .output()
        .unwrap();
    let info = String::from_utf8_lossy(&out.stdout);
    assert!(info.contains("checksum mismatch"), "{info}");
}
