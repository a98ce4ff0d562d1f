//! `cargo build --release -p fntrace-cli && cargo run --release -p
//! fntrace-bench --bin tui`: how fast `fntrace tui` opens a 100 M-event
//! trace. The trace is generated with the format crate's writer: thread 1
//! runs `main` → `fib(36)` (96.6 M events, 36 levels deep, one call
//! spanning nearly the whole stream), thread 2 a flat loop of 1.7 M leaf
//! calls (3.4 M events).
//!
//! Measured, in the same run, whole processes, best of `--runs`:
//! - `fntrace tui --first-screen`: open the trace, build the chunk index,
//!   draw the first screen (80×24: the thread's tree with `main` opened)
//!   to a test backend and print it, then exit — the time until a user
//!   sees the first screen, without a terminal to drive;
//! - `fntrace report` on the same trace, for scale (a full aggregation).
//!
//! Printed: wall time and peak RSS (`wait4`) of each and the ratio
//! tui / report. Targets (issue #22): first screen under 2 s, at most
//! 200 MB. Asserts nothing. `--runs N` (default 3); `--keep PATH` writes
//! the trace to PATH and leaves it there.

use std::fs::File;
use std::io::{BufWriter, Seek, SeekFrom, Write};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use fntrace_format::event::Framed;
use fntrace_format::layout::{
    ChunkHeader, DEFAULT_CHUNK_SIZE, FINAL_FLAG_CLEAN, FINAL_OFFSET, Final, HEADER_SIZE, Header,
    META_TID,
};
use fntrace_format::writer::ChunkBuf;

const MAIN: u64 = 0x1000;
const FIB: u64 = 0x2000;
const LOOP: u64 = 0x3000;
const LEAF: u64 = 0x4000;

/// One thread's stream, written chunk by chunk to the file.
struct Stream<'f> {
    f: &'f mut BufWriter<File>,
    chunks: &'f mut u64,
    tid: u32,
    seq: u32,
    depth: u32,
    tsc: u64,
    events: u64,
    buf: ChunkBuf,
}

impl Stream<'_> {
    fn put(&mut self, d: u64, entry: Option<u64>) {
        loop {
            let ok = match entry {
                Some(func) => self.buf.entry(d, func),
                None => self.buf.exit(d),
            };
            if ok {
                break;
            }
            self.flush();
            self.seq += 1;
            self.buf = ChunkBuf::new(
                DEFAULT_CHUNK_SIZE,
                &ChunkHeader::at(self.tid, self.seq, self.depth, self.tsc),
            );
        }
        self.tsc += d;
        self.events += 1;
        if entry.is_some() {
            self.depth += 1;
        } else {
            self.depth -= 1;
        }
    }

    fn flush(&mut self) {
        self.buf.seal();
        self.f.write_all(self.buf.as_bytes()).unwrap();
        *self.chunks += 1;
    }

    fn fib(&mut self, n: u32) {
        self.put(7 + u64::from(n % 5), Some(FIB));
        if n >= 2 {
            self.fib(n - 1);
            self.fib(n - 2);
        }
        self.put(11, None);
    }
}

fn generate(path: &Path) -> u64 {
    let mut f = BufWriter::with_capacity(8 << 20, File::create(path).unwrap());
    let hz = 2_000_000_000u64;
    let h = Header {
        start_tsc: 1_000,
        pid: 1,
        ..Header::current(DEFAULT_CHUNK_SIZE, hz)
    };
    let mut head = vec![0u8; HEADER_SIZE as usize];
    head[..FINAL_OFFSET].copy_from_slice(&h.encode());
    f.write_all(&head).unwrap();
    let mut chunks = 0u64;
    let mut meta = ChunkBuf::new(DEFAULT_CHUNK_SIZE, &ChunkHeader::at(META_TID, 0, 0, 1_000));
    for (k, name) in [
        (MAIN, "main"),
        (FIB, "fib"),
        (LOOP, "worker"),
        (LEAF, "leaf"),
    ] {
        assert!(meta.framed(&Framed::Site {
            key: k,
            prefix: b"synthetic",
            name: name.as_bytes(),
            file: b"synthetic.rs",
            line: k >> 12,
        }));
    }
    meta.seal();
    f.write_all(meta.as_bytes()).unwrap();
    chunks += 1;
    let mut events = 0;
    let mut end = 0;
    for tid in [1u32, 2] {
        let mut s = Stream {
            f: &mut f,
            chunks: &mut chunks,
            tid,
            seq: 0,
            depth: 0,
            tsc: 1_000,
            events: 0,
            buf: ChunkBuf::new(DEFAULT_CHUNK_SIZE, &ChunkHeader::at(tid, 0, 0, 1_000)),
        };
        if tid == 1 {
            s.put(5, Some(MAIN));
            s.fib(36);
            s.put(5, None);
        } else {
            s.put(5, Some(LOOP));
            for i in 0..1_700_000u64 {
                s.put(3 + i % 7, Some(LEAF));
                s.put(9, None);
            }
            s.put(5, None);
        }
        s.flush();
        events += s.events;
        end = end.max(s.tsc);
    }
    let fin = Final {
        flags: FINAL_FLAG_CLEAN,
        end_tsc: end,
        end_mono_ns: 0,
        tsc_hz: hz,
        chunks,
        ..Final::default()
    };
    f.flush().unwrap();
    let mut file = f.into_inner().unwrap();
    file.seek(SeekFrom::Start(FINAL_OFFSET as u64)).unwrap();
    file.write_all(&fin.encode()).unwrap();
    events
}

/// Runs a command with its output discarded; wall seconds and peak RSS
/// in MB (`wait4`).
// The child is reaped with `wait4` (for its rusage), not `Child::wait`.
#[allow(clippy::zombie_processes)]
fn measure(cmd: &mut Command) -> (f64, f64, String) {
    let t = Instant::now();
    let child = cmd.stdout(Stdio::piped()).spawn().unwrap();
    let pid = child.id() as libc::pid_t;
    let mut status = 0;
    // SAFETY: an all-zero rusage is valid; wait4 fills it.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    let mut out = String::new();
    {
        use std::io::Read;
        let mut so = child.stdout.unwrap();
        so.read_to_string(&mut out).unwrap();
    }
    // SAFETY: valid pointers; the child is ours and not yet reaped.
    let r = unsafe { libc::wait4(pid, &mut status, 0, &mut ru) };
    assert_eq!(r, pid);
    let secs = t.elapsed().as_secs_f64();
    let st = std::process::ExitStatus::from_raw(status);
    assert!(st.success(), "{cmd:?}: {st}");
    (secs, ru.ru_maxrss as f64 / 1024.0, out)
}

fn fntrace() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.parent().unwrap().join("fntrace")
}

fn main() {
    let runs: usize = std::env::args()
        .skip_while(|a| a != "--runs")
        .nth(1)
        .and_then(|v| v.parse().ok())
        .unwrap_or(3);
    let bin = fntrace();
    assert!(
        bin.is_file(),
        "{} missing: cargo build --release -p fntrace-cli",
        bin.display()
    );
    // `--keep PATH`: write the trace there and leave it (to browse it).
    let keep: Option<PathBuf> = std::env::args()
        .skip_while(|a| a != "--keep")
        .nth(1)
        .map(PathBuf::from);
    let dir = std::env::temp_dir().join(format!("fntrace-tui-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = keep.clone().unwrap_or_else(|| dir.join("100m.data"));
    let t0 = Instant::now();
    let events = generate(&path);
    let size = std::fs::metadata(&path).unwrap().len();
    println!(
        "synthetic trace: {events} events, 2 threads, {:.1} MB, written in {:.1} s",
        size as f64 / 1e6,
        t0.elapsed().as_secs_f64()
    );
    let mut best = [(f64::MAX, 0.0f64), (f64::MAX, 0.0f64)];
    let mut screen = String::new();
    for _ in 0..runs {
        let (s, m, out) = measure(
            Command::new(&bin)
                .arg("tui")
                .arg("--first-screen")
                .arg(&path),
        );
        best[0] = (best[0].0.min(s), best[0].1.max(m));
        screen = out;
        let (s, m, _) = measure(Command::new(&bin).arg("report").arg(&path));
        best[1] = (best[1].0.min(s), best[1].1.max(m));
    }
    println!("first screen of `fntrace tui` (80x24):");
    for l in screen.lines().take(6) {
        println!("  | {l}");
    }
    println!("best of {runs} runs, whole process:");
    println!(
        "  fntrace tui --first-screen  {:7.3} s  peak RSS {:6.1} MB   targets < 2 s, <= 200 MB",
        best[0].0, best[0].1
    );
    println!(
        "  fntrace report              {:7.3} s  peak RSS {:6.1} MB",
        best[1].0, best[1].1
    );
    println!(
        "  tui first screen / report: time {:.2}x, peak RSS {:.2}x",
        best[0].0 / best[1].0,
        best[0].1 / best[1].1
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
