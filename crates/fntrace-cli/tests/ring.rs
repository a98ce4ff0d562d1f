//! The chunk life cycle end to end: the flight recorder (`record --ring`)
//! keeps the newest events of a program that runs far past the ring's
//! size, readable after a `SIGKILL` at a random moment or a crash in a
//! traced function, with its window's structure intact; the traced
//! process's resident memory stays within the budget whatever the trace's
//! size (and does not without the helper thread); the writer's counts
//! agree with the events decoded.

mod common;

use std::io::{BufRead, BufReader, Read};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use common::{record_cmd, tool};
use fntrace_cli::analysis::{Call, Visitor, walk_thread};
use fntrace_cli::symbols::Symbolizer;
use fntrace_format::Trace;

/// `step(i)` makes `i % 61 + 1` calls of `leaf`, then `main` prints `i`:
/// the trace's window tells which iterations it holds.
const PROG: &str = "#include <stdio.h>\n\
    #include <stdlib.h>\n\
    #include <string.h>\n\
    #include <unistd.h>\n\
    #ifdef LEAF_WORK\n\
    __attribute__((noinline)) int leaf(int x) {\n\
      volatile int s = x; for (int j = 0; j < LEAF_WORK; j++) s += j; return x * 3 + 1;\n\
    }\n\
    #else\n\
    __attribute__((noinline)) int leaf(int x) { return x * 3 + 1; }\n\
    #endif\n\
    __attribute__((noinline)) void boom(volatile int *p) { *p = 1; }\n\
    __attribute__((noinline)) int step(long i, long crash_at) {\n\
      int s = 0, n = (int)(i % 61) + 1;\n\
      for (int k = 0; k < n; k++) s += leaf(k);\n\
      if (i == crash_at) boom(0);\n\
      return s;\n\
    }\n\
    static long minflt(void) {\n\
      char b[1024]; long v = -1; FILE *f = fopen(\"/proc/thread-self/stat\", \"r\");\n\
      if (!f) return -1; size_t n = fread(b, 1, sizeof b - 1, f); fclose(f); b[n] = 0;\n\
      char *p = strrchr(b, ')'); if (p) sscanf(p + 2, \"%*c %*d %*d %*d %*d %*d %*u %ld\", &v);\n\
      return v;\n\
    }\n\
    int main(int argc, char **argv) {\n\
      long crash_at = argc > 1 ? atol(argv[1]) : -1, until = argc > 2 ? atol(argv[2]) : -1;\n\
      volatile int s = 0; char b[32]; long f0 = 0;\n\
      for (long i = 0; i != until; i++) {\n\
        if (i == 1000) f0 = minflt();\n\
        s += step(i, crash_at);\n\
        int n = snprintf(b, sizeof b, \"%ld\\n\", i);\n\
        if (write(1, b, n) != n) return 1;\n\
      }\n\
      fprintf(stderr, \"MINFLT: %ld\\n\", minflt() - f0);\n\
      FILE *f = fopen(\"/proc/self/status\", \"r\"); char line[256];\n\
      while (f && fgets(line, sizeof line, f)) if (line[0] == 'V' && line[2] == 'H') fputs(line, stderr);\n\
      return 0;\n\
    }\n";

fn build(dir: &Path) -> PathBuf {
    build_with(dir, "ring", &[])
}

/// [`PROG`] built as `dir/name` with the extra gcc `flags`.
fn build_with(dir: &Path, name: &str, flags: &[&str]) -> PathBuf {
    let c = dir.join("ring.c");
    std::fs::write(&c, PROG).unwrap();
    let bin = dir.join(name);
    let mut args = vec!["-O1", "-pg"];
    args.extend_from_slice(flags);
    args.extend_from_slice(&["-o", bin.to_str().unwrap(), c.to_str().unwrap()]);
    tool("gcc", &args);
    bin
}

/// What a thread's window holds: the `leaf` calls of each complete `step`
/// (in order), and the functions of calls without an exit.
#[derive(Default)]
struct Window {
    steps: Vec<u64>,
    leaves: u64,
    incomplete: Vec<String>,
}

struct V<'a, 'm> {
    sym: Symbolizer<'m>,
    w: &'a mut Window,
}

impl Visitor for V<'_, '_> {
    fn call(&mut self, c: &Call) {
        let name = self.sym.name(c.func).to_string();
        if c.incomplete {
            self.w.incomplete.push(name);
            return;
        }
        match name.as_str() {
            "leaf" => self.w.leaves += 1,
            "step" => self.w.steps.push(std::mem::take(&mut self.w.leaves)),
            _ => {}
        }
        assert!(c.end >= c.start, "{name} ends before it starts");
    }
}

fn window(path: &Path) -> (Trace, Window) {
    let t = Trace::open(path).unwrap_or_else(|e| panic!("{e}"));
    assert!(t.damage().is_empty(), "{:?}", t.damage());
    let tids = t.thread_ids();
    assert_eq!(tids.len(), 1, "one thread");
    let mut w = Window::default();
    let s = walk_thread(
        &t,
        tids[0],
        &mut V {
            sym: Symbolizer::new(t.metadata()),
            w: &mut w,
        },
    );
    assert!(s.damage.is_empty(), "{:?}", s.damage);
    (t, w)
}

/// Checks that the complete steps of the window are consecutive
/// iterations (the first may have lost leaves before the window) ending
/// with iteration `last` or `last + 1` (done but not printed yet).
fn check_window(w: &Window, last: u64) {
    let f = |i: u64| i % 61 + 1;
    let n = w.steps.len();
    assert!(n > 100, "window holds only {n} steps");
    let end = *w.steps.last().unwrap();
    assert!(
        end == f(last) || end == f(last + 1),
        "last complete step had {end} leaves; the program printed {last} last"
    );
    for p in w.steps[1..].windows(2) {
        assert_eq!(p[1], p[0] % 61 + 1, "steps of the window not consecutive");
    }
}

fn ring_bytes(t: &Trace) -> u64 {
    let w = fntrace_cli::info::ring_window(t).expect("a ring trace");
    assert!(w.overwritten_chunks > 0, "the ring never wrapped");
    w.ring_bytes
}

#[test]
fn ring_killed_at_random_moments_keeps_the_last_events() {
    let d = tempfile::tempdir().unwrap();
    let bin = build(d.path());
    // A cheap, seedless spread of kill points.
    let mut x = std::process::id() as u64 | 1;
    for trial in 0..20 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        // 1 MiB holds a few thousand iterations: kill far past it.
        let kill_after = 20_000 + x % 20_000;
        let data = d.path().join(format!("t{trial}.data"));
        let mut c = record_cmd(&data, &["--ring", "1M"], &bin, &[]);
        c.stdout(Stdio::piped()).stderr(Stdio::null());
        let mut child = c.spawn().unwrap();
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        let mut last = 0u64;
        while out.read_line(&mut line).unwrap() > 0 {
            last = line.trim().parse().unwrap();
            line.clear();
            if last >= kill_after {
                break;
            }
        }
        // The program is the recorder's child: kill it, not the recorder.
        let pid =
            std::fs::read_to_string(format!("/proc/{}/task/{}/children", child.id(), child.id()))
                .unwrap();
        let pid: i32 = pid.split_whitespace().next().unwrap().parse().unwrap();
        // SAFETY: sending a signal to our grandchild.
        unsafe { libc::kill(pid, libc::SIGKILL) };
        let mut rest = String::new();
        out.read_to_string(&mut rest).unwrap();
        if let Some(l) = rest.lines().last() {
            last = l.trim().parse().unwrap();
        }
        let st = child.wait().unwrap();
        assert_eq!(st.signal(), Some(libc::SIGKILL), "trial {trial}");
        let (t, w) = window(&data);
        assert!(ring_bytes(&t) <= 1 << 20);
        assert!(t.file_len() <= 1 << 20, "{} bytes", t.file_len());
        check_window(&w, last);
    }
}

#[test]
fn ring_of_a_crash_in_a_traced_function_ends_in_it() {
    let d = tempfile::tempdir().unwrap();
    let bin = build(d.path());
    let data = d.path().join("t.data");
    let o = record_cmd(&data, &["--ring", "1M"], &bin, &["30000"])
        .output()
        .unwrap();
    assert_eq!(o.status.signal(), Some(libc::SIGSEGV));
    let last: u64 = String::from_utf8_lossy(&o.stdout)
        .lines()
        .last()
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(last, 29_999);
    let (t, w) = window(&data);
    ring_bytes(&t);
    // step(30000)'s leaves are complete, boom and step are not.
    assert_eq!(w.leaves, 30_000 % 61 + 1);
    assert!(
        w.incomplete
            .starts_with(&["boom".to_string(), "step".to_string()]),
        "{:?}",
        w.incomplete
    );
    let f = |i: u64| i % 61 + 1;
    assert_eq!(*w.steps.last().unwrap(), f(last));
    check_window(&w, last);
}

/// With the time filter (`-t`), entries are held back and written when a
/// call is kept, through their own chunk switches: the ring must still
/// reuse its oldest chunks (it once kept them claimed, so the ring filled
/// up and dropped everything after, as if `--max-size` had been reached).
/// Every `leaf` here does some work (a call that does nothing can read
/// the same TSC at its entry and exit: this machine's TSC moves in steps
/// of about 10 ns), so every call lasts more than 1 ns and the window is
/// that of a ring without the filter.
#[test]
fn ring_with_a_time_filter_wraps_and_keeps_the_last_events() {
    let d = tempfile::tempdir().unwrap();
    let bin = build_with(d.path(), "ring-work", &["-DLEAF_WORK=100"]);
    let data = d.path().join("t.data");
    let o = record_cmd(
        &data,
        &["--ring", "1M", "-t", "1ns"],
        &bin,
        &["-1", "40000"],
    )
    .output()
    .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(!err.contains("full"), "{err}");
    let last: u64 = String::from_utf8_lossy(&o.stdout)
        .lines()
        .last()
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(last, 39_999);
    let (t, w) = window(&data);
    assert!(ring_bytes(&t) <= 1 << 20);
    assert_eq!(
        t.final_block().map(|f| f.lost_events),
        Some(0),
        "events dropped by the runtime"
    );
    assert!(w.incomplete.is_empty(), "{:?}", w.incomplete);
    check_window(&w, last);
}

/// Peak resident memory (`VmHWM`, kB) the program printed at its end.
fn peak_kb(stderr: &[u8]) -> u64 {
    field(stderr, "VmHWM:")
}

/// The value after `name` (`VmHWM:`, `MINFLT:`) in the program's output.
fn field(stderr: &[u8], name: &str) -> u64 {
    let s = String::from_utf8_lossy(stderr);
    s.lines()
        .find_map(|l| l.strip_prefix(name))
        .unwrap_or_else(|| panic!("no {name} in {s}"))
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .unwrap()
}

#[test]
fn resident_memory_stays_within_the_budget_whatever_the_trace_size() {
    let d = tempfile::tempdir().unwrap();
    let bin = build(d.path());
    // ~1.8 M iterations: 56 M calls, a trace of about 125 MB.
    let iters = "1800000";
    let run = |data: &Path, buffer: Option<&str>| {
        let mut c = record_cmd(data, &[], &bin, &["-1", iters]);
        if let Some(b) = buffer {
            c.env("FNTRACE_BUFFER", b);
        }
        let o = c.stdout(Stdio::null()).output().unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let t = Trace::open(data).unwrap();
        (
            peak_kb(&o.stderr),
            t.file_len(),
            t,
            field(&o.stderr, "MINFLT:"),
        )
    };
    let (kb, len, t, faults) = run(&d.path().join("t.data"), None);
    assert!(len > 100 << 20, "trace of only {len} bytes");
    // The budget: 32 MB + 2 MB per recording thread (one here).
    assert!(kb <= 34 << 10, "peak RSS {kb} kB for a {len}-byte trace");
    // The traced thread took (almost) no page faults: the helper thread
    // faulted its trace pages in ahead of it (a bound that leaves room for
    // a helper descheduled on a loaded machine).
    let pages = len / 4096;
    assert!(
        faults < pages / 10,
        "{faults} page faults for {pages} trace pages"
    );
    // The writer counted every event: the summary's count is the decoded
    // one, without decoding.
    let counted = t.final_block().and_then(|f| f.events()).expect("a count");
    assert_eq!(t.event_count(None).decoded_chunks, 0);
    let decoded: u64 = walk_thread(&t, t.thread_ids()[0], &mut NoCalls).events;
    assert_eq!(counted, decoded);
    drop(t);
    // Without the helper thread every chunk stays resident: the test can fail.
    // Without the helper thread every chunk stays resident and the traced
    // thread faults its trace pages in: the test can fail.
    let (kb0, len0, _, faults0) = run(&d.path().join("t0.data"), Some("0"));
    assert!(
        kb0 > len0 / 1024 / 2,
        "without the helper: {kb0} kB for {len0} bytes"
    );
    assert!(
        faults0 > len0 / 4096 / 2,
        "without the helper: {faults0} page faults for {} pages",
        len0 / 4096
    );
}

struct NoCalls;
impl Visitor for NoCalls {
    fn call(&mut self, _c: &Call) {}
}

/// Four threads running `step`s until killed.
const THREADS: &str = "#include <pthread.h>\n\
    #include <stdio.h>\n\
    #include <unistd.h>\n\
    __attribute__((noinline)) int leaf(int x) { return x * 3 + 1; }\n\
    __attribute__((noinline)) int step(long i) {\n\
      int s = 0, n = (int)(i % 61) + 1;\n\
      for (int k = 0; k < n; k++) s += leaf(k);\n\
      return s;\n\
    }\n\
    static void *run(void *a) { volatile int s = 0; for (long i = 0;; i++) s += step(i); return a; }\n\
    int main(void) {\n\
      pthread_t t[4];\n\
      for (int i = 0; i < 4; i++) pthread_create(&t[i], 0, run, 0);\n\
      printf(\"ready\\n\"); fflush(stdout);\n\
      pthread_join(t[0], 0);\n\
      return 0;\n\
    }\n";

/// Checks every thread's window of the (snapshot) trace at `path`: no
/// damage, consecutive steps; returns how many threads recorded steps.
fn check_threads(path: &Path) -> usize {
    let t = Trace::open(path).unwrap_or_else(|e| panic!("{e}"));
    assert!(t.damage().is_empty(), "{:?}", t.damage());
    let mut busy = 0;
    for tid in t.thread_ids() {
        let mut w = Window::default();
        let s = walk_thread(
            &t,
            tid,
            &mut V {
                sym: Symbolizer::new(t.metadata()),
                w: &mut w,
            },
        );
        assert!(s.damage.is_empty(), "{tid}: {:?}", s.damage);
        if w.steps.len() > 2 {
            busy += 1;
            for p in w.steps[1..].windows(2) {
                assert_eq!(p[1], p[0] % 61 + 1, "thread {tid}: steps not consecutive");
            }
        }
    }
    busy
}

/// Kills the endless program (`fntrace record`'s child) when a test ends,
/// passed or failed: a failing assertion must not leave it running.
struct KillOnDrop(i32);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        // SAFETY: signalling our grandchild (a dead one is ignored).
        unsafe { libc::kill(self.0, libc::SIGKILL) };
    }
}

fn spawn_threads(d: &Path, opts: &[&str]) -> (std::process::Child, i32, KillOnDrop) {
    let c = d.join("threads.c");
    std::fs::write(&c, THREADS).unwrap();
    let bin = d.join("threads");
    tool(
        "gcc",
        &[
            "-O1",
            "-pg",
            "-pthread",
            "-o",
            bin.to_str().unwrap(),
            c.to_str().unwrap(),
        ],
    );
    let mut c = record_cmd(&d.join("t.data"), opts, &bin, &[]);
    c.stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = c.spawn().unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "ready");
    let pid = std::fs::read_to_string(format!("/proc/{}/task/{}/children", child.id(), child.id()))
        .unwrap();
    let pid: i32 = pid.split_whitespace().next().unwrap().parse().unwrap();
    (child, pid, KillOnDrop(pid))
}

/// Waits until the trace at `path` has wrapped (all four threads busy).
fn wait_wrapped(path: &Path) {
    for _ in 0..600 {
        std::thread::sleep(std::time::Duration::from_millis(50));
        if let Some(l) = fntrace_format::reader::read_live(path) {
            if l.chunks > 3 * 64 {
                return;
            }
        }
    }
    panic!("the ring never wrapped");
}

#[test]
fn snapshots_while_four_threads_record() {
    let d = tempfile::tempdir().unwrap();
    let (mut child, pid, _guard) = spawn_threads(d.path(), &["--ring", "4M"]);
    wait_wrapped(&d.path().join("t.data"));
    for n in 0..3 {
        let snap = d.path().join(format!("snap{n}.data"));
        let o = std::process::Command::new(common::fntrace_bin())
            .args(["live", &pid.to_string(), "snapshot", "-o"])
            .arg(&snap)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        assert_eq!(check_threads(&snap), 4, "snapshot {n}");
        let t = Trace::open(&snap).unwrap();
        ring_bytes(&t);
    }
    // The program went on: it is still running.
    assert!(child.try_wait().unwrap().is_none());
    // SAFETY: signalling our grandchild.
    unsafe { libc::kill(pid, libc::SIGKILL) };
    child.wait().unwrap();
    // And the trace it left reads too.
    assert_eq!(check_threads(&d.path().join("t.data")), 4);
}

#[test]
fn snapshot_signal_writes_a_snapshot_from_inside() {
    let d = tempfile::tempdir().unwrap();
    let (mut child, pid, _guard) =
        spawn_threads(d.path(), &["--ring", "2M", "--snapshot-signal", "SIGUSR2"]);
    let data = d.path().join("t.data");
    wait_wrapped(&data);
    // SAFETY: signalling our grandchild.
    unsafe { libc::kill(pid, libc::SIGUSR2) };
    let snap = d.path().join("t.data.snapshot.1");
    let mut ok = false;
    for _ in 0..600 {
        std::thread::sleep(std::time::Duration::from_millis(50));
        // The helper writes it, then says so on standard error; wait for
        // a complete file (the ring's size).
        if std::fs::metadata(&snap)
            .is_ok_and(|m| m.len() >= std::fs::metadata(&data).unwrap().len())
        {
            ok = true;
            break;
        }
    }
    assert!(ok, "no snapshot written");
    std::thread::sleep(std::time::Duration::from_millis(200));
    assert!(child.try_wait().unwrap().is_none(), "the program stopped");
    assert_eq!(check_threads(&snap), 4);
    // SAFETY: signalling our grandchild.
    unsafe { libc::kill(pid, libc::SIGKILL) };
    child.wait().unwrap();
}

/// On a terminal (`script` gives the recorder one), a long recording
/// shows events, bytes and rate from the writer's live counters, and its
/// summary gives the writer's count.
#[test]
fn progress_on_a_terminal_from_the_live_counters() {
    let d = tempfile::tempdir().unwrap();
    let bin = build(d.path());
    let data = d.path().join("t.data");
    let cmd = format!(
        "FNTRACE_PRELOAD={} {} record -o {} -- {} -1 800000 >/dev/null",
        common::preload().display(),
        common::fntrace_bin().display(),
        data.display(),
        bin.display()
    );
    let o = std::process::Command::new("script")
        .args(["-qec", &cmd, "/dev/null"])
        .output()
        .expect("script (bsdutils) is required for this test");
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{out}");
    let lines: Vec<&str> = out.split(['\r', '\n']).collect();
    let progress: Vec<&&str> = lines
        .iter()
        .filter(|l| l.contains("events/s") && l.contains("B written"))
        .collect();
    assert!(!progress.is_empty(), "no progress line in {out:?}");
    let t = Trace::open(&data).unwrap();
    let n = t.final_block().and_then(|f| f.events()).expect("a count");
    assert!(
        out.contains(&format!("recorded {n} events from 1 threads")),
        "{out:?}"
    );
    // Without a terminal: no progress line.
    let o = record_cmd(&d.path().join("u.data"), &[], &bin, &["-1", "300000"])
        .stdout(Stdio::null())
        .output()
        .unwrap();
    assert!(!String::from_utf8_lossy(&o.stderr).contains("events/s"));
}

/// More threads writing at once than the ring has chunks: the threads
/// that found no chunk are counted, and `record` and `info` say why in
/// the ring's terms (not a `--max-size` or a full disk, which a flight
/// recorder never meets).
#[test]
fn a_ring_with_fewer_chunks_than_threads_says_so() {
    let d = tempfile::tempdir().unwrap();
    let c = d.path().join("many.c");
    std::fs::write(
        &c,
        "#include <pthread.h>\n\
         #include <stdio.h>\n\
         static pthread_barrier_t b;\n\
         __attribute__((noinline)) int leaf(int x) { return x + 1; }\n\
         static void *run(void *a) { leaf(1); pthread_barrier_wait(&b); leaf(2); return a; }\n\
         int main(void) {\n\
           pthread_t t[40];\n\
           pthread_barrier_init(&b, 0, 40);\n\
           for (int i = 0; i < 40; i++) pthread_create(&t[i], 0, run, 0);\n\
           for (int i = 0; i < 40; i++) pthread_join(t[i], 0);\n\
           printf(\"done\\n\");\n\
           return 0;\n\
         }\n",
    )
    .unwrap();
    let bin = d.path().join("many");
    tool(
        "gcc",
        &[
            "-O1",
            "-pg",
            "-o",
            bin.to_str().unwrap(),
            c.to_str().unwrap(),
            "-lpthread",
        ],
    );
    let data = d.path().join("t.data");
    let out = common::record_cmd(&data, &["--ring", "1M"], &bin, &[])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "done\n");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("every chunk of the ring"), "{err}");
    assert!(!err.contains("--max-size"), "{err}");
    let info = std::process::Command::new(common::fntrace_bin())
        .arg("info")
        .arg(&data)
        .output()
        .unwrap();
    let info = String::from_utf8_lossy(&info.stdout);
    assert!(info.contains("every chunk of the ring"), "{info}");
}
