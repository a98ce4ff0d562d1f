//! Hostile trace files: a structure-aware fuzzer. A real trace (recorded
//! by this test binary re-executed, two threads) is mutated field by field
//! — file header, final block, chunk headers, payload bytes, whole chunks,
//! the file's length — with every checksum recomputed, so that mutants get
//! past the checks and reach the code that uses the values. Every reader
//! command (`info`, `report`, `replay`, `graph`, every export) runs on each
//! mutant as a child process with its address space limited, and must end
//! with success or one error line: no signal, no panic, peak memory under
//! 100 MB, output bounded by the input.
//!
//! `hostile_corpus` replays the reproducers of `tests/traces/hostile.txt`
//! (one mutant per line, mutations separated by `;`, in the syntax
//! [`Mutation::parse`] reads). `fuzz_mutants` runs random mutants for
//! `FNTRACE_FUZZ_SECS` seconds (3 by default; `scripts/fuzz-traces` runs
//! longer on a 1.2 MB trace, `FNTRACE_FUZZ_FIB=26`); each failing mutant is
//! printed as a corpus line.

mod common;

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use fntrace::__private::{Site, enter};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// Peak resident memory a reader command may use on any mutant.
const MAX_RSS_KB: i64 = 100 * 1024;
/// Address-space limit of each child: a runaway allocation fails at once
/// (and shows as an abort) instead of taking the machine's memory.
const AS_LIMIT: u64 = 2 << 30;
/// A child still running after this long is a hang: a watchdog, far above
/// any normal run in the test suite (not a performance threshold);
/// `scripts/fuzz-traces` sets `FNTRACE_FUZZ_HANG_SECS=10` for release
/// builds.
fn watchdog() -> Duration {
    Duration::from_secs(
        std::env::var("FNTRACE_FUZZ_HANG_SECS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(120),
    )
}

fn fib(n: u64) -> u64 {
    static SITE: Site = Site::new("fuzz::fib", file!(), line!());
    let _g = enter(&SITE);
    if n < 2 { n } else { fib(n - 1) + fib(n - 2) }
}

fn fib_n() -> u64 {
    std::env::var("FNTRACE_FUZZ_FIB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(22)
}

#[test]
fn child_workload() {
    if std::env::var_os("FUZZ_CHILD").is_none() {
        return;
    }
    let n = fib_n();
    let t = std::thread::spawn(move || fib(n - 3));
    fib(n);
    t.join().unwrap();
}

/// Records the trace the mutants start from.
fn record(dir: &Path) -> Vec<u8> {
    let out = dir.join("base.data");
    let st = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child_workload", "--nocapture"])
        .env("FUZZ_CHILD", "1")
        .env("FNTRACE_OUTPUT", &out)
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert!(st.success());
    std::fs::read(&out).unwrap()
}

/// One change to a trace file, applied with its checksums fixed up.
#[derive(Debug, Clone)]
enum Mutation {
    /// Sets `width` bytes at `off` of the file header's static block.
    Header { off: usize, width: usize, val: u64 },
    /// Sets a field of the final block (`off` from byte 128); writes the
    /// final magic if the block was empty.
    Final { off: usize, width: usize, val: u64 },
    /// Sets a field of the header of used chunk `chunk` (`off` from the
    /// chunk's start).
    Chunk {
        chunk: usize,
        off: usize,
        width: usize,
        val: u64,
    },
    /// Sets payload byte `pos` of used chunk `chunk`.
    Payload { chunk: usize, pos: usize, val: u8 },
    /// Copies used chunk `from` over used chunk `to`.
    Copy { from: usize, to: usize },
    /// Cuts the file to `len` bytes.
    Truncate { len: usize },
}

impl Mutation {
    /// Reads one mutation: `header OFF WIDTH VAL`, `final OFF WIDTH VAL`,
    /// `chunk I OFF WIDTH VAL`, `payload I POS BYTE`, `copy I J`,
    /// `truncate LEN`.
    fn parse(s: &str) -> Mutation {
        let w: Vec<&str> = s.split_whitespace().collect();
        let n = |i: usize| -> u64 {
            let t = w[i];
            match t.strip_prefix("0x") {
                Some(h) => u64::from_str_radix(h, 16).unwrap(),
                None => t.parse().unwrap(),
            }
        };
        let u = |i: usize| n(i) as usize;
        match w[0] {
            "header" => Mutation::Header {
                off: u(1),
                width: u(2),
                val: n(3),
            },
            "final" => Mutation::Final {
                off: u(1),
                width: u(2),
                val: n(3),
            },
            "chunk" => Mutation::Chunk {
                chunk: u(1),
                off: u(2),
                width: u(3),
                val: n(4),
            },
            "payload" => Mutation::Payload {
                chunk: u(1),
                pos: u(2),
                val: n(3) as u8,
            },
            "copy" => Mutation::Copy {
                from: u(1),
                to: u(2),
            },
            "truncate" => Mutation::Truncate { len: u(1) },
            other => panic!("unknown mutation {other:?} in {s:?}"),
        }
    }

    fn show(&self) -> String {
        match *self {
            Mutation::Header { off, width, val } => format!("header {off} {width} {val}"),
            Mutation::Final { off, width, val } => format!("final {off} {width} {val}"),
            Mutation::Chunk {
                chunk,
                off,
                width,
                val,
            } => format!("chunk {chunk} {off} {width} {val}"),
            Mutation::Payload { chunk, pos, val } => format!("payload {chunk} {pos} {val}"),
            Mutation::Copy { from, to } => format!("copy {from} {to}"),
            Mutation::Truncate { len } => format!("truncate {len}"),
        }
    }
}

fn get(b: &[u8], off: usize, width: usize) -> u64 {
    let mut v = [0u8; 8];
    v[..width].copy_from_slice(&b[off..off + width]);
    u64::from_le_bytes(v)
}

fn put(b: &mut [u8], off: usize, width: usize, val: u64) {
    b[off..off + width].copy_from_slice(&val.to_le_bytes()[..width]);
}

/// The chunk size of `b` (the default when a mutation made it unusable).
fn chunk_size(b: &[u8]) -> usize {
    match get(b, 16, 4) as usize {
        cs @ 128..=0x100000 => cs,
        _ => 65536,
    }
}

/// Offsets of the chunks whose header is in use, in file order (read with
/// the base trace's geometry: 4096-byte header, chunk size from byte 16).
fn used_chunks(b: &[u8]) -> Vec<usize> {
    let (hs, cs) = (4096usize, chunk_size(b));
    let mut v = vec![];
    let mut off = hs;
    while off + 64 <= b.len() {
        if b[off..off + 4] == *b"FNTC" {
            v.push(off);
        }
        off += cs;
    }
    v
}

/// Recomputes the payload checksum of the chunk at `c` when it is sealed
/// and its length fits.
fn fix_payload_crc(b: &mut [u8], c: usize) {
    let sealed = get(b, c + 36, 4) & 1 != 0;
    let len = get(b, c + 40, 4) as usize;
    if sealed && c + 64 + len <= b.len() {
        let crc = crc32fast::hash(&b[c + 64..c + 64 + len]);
        put(b, c + 44, 4, crc as u64);
    }
}

fn apply(b: &mut Vec<u8>, m: &Mutation) {
    let chunks = used_chunks(b);
    let pick = |i: usize| chunks.get(i % chunks.len().max(1)).copied();
    match *m {
        Mutation::Header { off, width, val } => {
            put(b, off, width, val);
            let crc = crc32fast::hash(&b[0..124]);
            put(b, 124, 4, crc as u64);
        }
        Mutation::Final { off, width, val } => {
            put(b, 128, 4, u32::from_le_bytes(*b"FEND") as u64);
            put(b, 128 + off, width, val);
            let crc = crc32fast::hash(&b[128..252]);
            put(b, 252, 4, crc as u64);
        }
        Mutation::Chunk {
            chunk,
            off,
            width,
            val,
        } => {
            let Some(c) = pick(chunk) else { return };
            put(b, c + off, width, val);
            let crc = crc32fast::hash(&b[c + 4..c + 32]);
            put(b, c + 32, 4, crc as u64);
        }
        Mutation::Payload { chunk, pos, val } => {
            let Some(c) = pick(chunk) else { return };
            let cs = chunk_size(b);
            let at = c + 64 + pos % (cs - 64);
            if at < b.len() {
                b[at] = val;
                fix_payload_crc(b, c);
            }
        }
        Mutation::Copy { from, to } => {
            let (Some(f), Some(t)) = (pick(from), pick(to)) else {
                return;
            };
            let cs = chunk_size(b);
            if f + cs <= b.len() && t + cs <= b.len() {
                let src = b[f..f + cs].to_vec();
                b[t..t + cs].copy_from_slice(&src);
            }
        }
        Mutation::Truncate { len } => b.truncate(len),
    }
}

/// Values that break assumptions: limits, powers of two, small numbers.
fn interesting(rng: &mut StdRng, width: usize, old: u64) -> u64 {
    let max = if width == 8 {
        u64::MAX
    } else {
        (1u64 << (8 * width)) - 1
    };
    let v = match rng.gen_range(0..12) {
        0 => 0,
        1 => 1,
        2 => max,
        3 => max - 1,
        4 => max >> 1,
        5 => (max >> 1) + 1,
        6 => 1_000_000,
        7 => old.wrapping_add(1),
        8 => old.wrapping_sub(1),
        9 => 1 << rng.gen_range(0..8 * width as u32),
        10 => old ^ (1 << rng.gen_range(0..8 * width as u32)),
        _ => rng.r#gen(),
    };
    v & max
}

/// A random mutation of `b`.
fn random_mutation(rng: &mut StdRng, b: &[u8]) -> Mutation {
    let nchunks = used_chunks(b).len().max(1);
    let chunk = rng.gen_range(0..nchunks);
    // Format 1.1 fields included: the ring flag (20) and size (60), the
    // writer's event total and overwritten count (final 48, 56), a chunk's
    // event count and its check (48, 52).
    const HEADER: [(usize, usize); 9] = [
        (12, 4),
        (16, 4),
        (20, 4),
        (24, 8),
        (32, 8),
        (40, 8),
        (48, 8),
        (56, 4),
        (60, 8),
    ];
    const FINAL: [(usize, usize); 8] = [
        (4, 4),
        (8, 8),
        (16, 8),
        (24, 8),
        (32, 8),
        (40, 8),
        (48, 8),
        (56, 8),
    ];
    const CHUNK: [(usize, usize); 10] = [
        (4, 4),
        (8, 4),
        (12, 4),
        (12, 4),
        (16, 8),
        (24, 8),
        (36, 4),
        (40, 4),
        (48, 4),
        (52, 4),
    ];
    match rng.gen_range(0..20) {
        0..=1 => {
            let (off, width) = HEADER[rng.gen_range(0..HEADER.len())];
            let val = interesting(rng, width, get(b, off, width));
            Mutation::Header { off, width, val }
        }
        2..=3 => {
            let (off, width) = FINAL[rng.gen_range(0..FINAL.len())];
            let val = interesting(rng, width, get(b, 128 + off, width));
            Mutation::Final { off, width, val }
        }
        4..=10 => {
            let (off, width) = CHUNK[rng.gen_range(0..CHUNK.len())];
            let c = used_chunks(b).get(chunk).copied().unwrap_or(4096);
            let old = if c + off + width <= b.len() {
                get(b, c + off, width)
            } else {
                0
            };
            let val = interesting(rng, width, old);
            Mutation::Chunk {
                chunk,
                off,
                width,
                val,
            }
        }
        11..=16 => {
            // Mostly near the start of the payload, where records are.
            let pos = if rng.gen_bool(0.5) {
                rng.gen_range(0..64)
            } else {
                rng.gen_range(0..65536)
            };
            let val = match rng.gen_range(0..4) {
                0 => 0xff,
                1 => rng.gen_range(1..=0x0f),
                2 => 0x80,
                _ => rng.r#gen(),
            };
            Mutation::Payload { chunk, pos, val }
        }
        17 => Mutation::Copy {
            from: rng.gen_range(0..nchunks),
            to: chunk,
        },
        _ => Mutation::Truncate {
            len: rng.gen_range(0..b.len()),
        },
    }
}

/// How one command ended.
struct Outcome {
    status: i32,
    hung: bool,
    maxrss_kb: i64,
    elapsed: Duration,
    output: u64,
    stderr: String,
}

/// Runs `fntrace ARGS` with its address space limited; stdout is counted,
/// stderr kept.
fn run_cli(args: &[&std::ffi::OsStr], dir: &Path) -> Outcome {
    let err_path = dir.join("stderr.txt");
    let mut cmd = Command::new(common::fntrace_bin());
    cmd.args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&err_path).unwrap());
    // SAFETY: pre_exec runs in the forked child before exec; setrlimit is
    // async-signal-safe and touches no memory of the parent.
    unsafe {
        cmd.pre_exec(|| {
            let lim = libc::rlimit {
                rlim_cur: AS_LIMIT,
                rlim_max: AS_LIMIT,
            };
            libc::setrlimit(libc::RLIMIT_AS, &lim);
            Ok(())
        });
    }
    let watchdog = watchdog();
    let start = Instant::now();
    let mut child = cmd.spawn().unwrap();
    let pid = child.id() as libc::pid_t;
    let mut stdout = child.stdout.take().unwrap();
    let counter = std::thread::spawn(move || {
        let mut n = 0u64;
        let mut buf = vec![0u8; 1 << 16];
        while let Ok(k) = stdout.read(&mut buf) {
            if k == 0 {
                break;
            }
            n += k as u64;
        }
        n
    });
    let mut status = 0;
    // SAFETY: an all-zero rusage is a valid value for wait4 to fill.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    let mut hung = false;
    loop {
        // SAFETY: waits for our own child, with valid out-pointers.
        let r = unsafe { libc::wait4(pid, &mut status, libc::WNOHANG, &mut ru) };
        if r == pid {
            break;
        }
        assert!(r == 0, "wait4: {}", std::io::Error::last_os_error());
        if !hung && start.elapsed() > watchdog {
            hung = true;
            let _ = child.kill();
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    // The status is reaped; keep std from waiting again.
    std::mem::forget(child);
    let elapsed = start.elapsed();
    let output = counter.join().unwrap();
    Outcome {
        status,
        hung,
        maxrss_kb: ru.ru_maxrss,
        elapsed,
        output,
        stderr: std::fs::read_to_string(&err_path).unwrap_or_default(),
    }
}

/// The reader commands run on each mutant.
fn commands(data: &Path, out: &Path) -> Vec<Vec<std::ffi::OsString>> {
    let d = data.as_os_str().to_owned();
    let o = out.as_os_str().to_owned();
    let mut v: Vec<Vec<std::ffi::OsString>> = vec![
        vec!["info".into(), d.clone()],
        vec!["report".into(), d.clone()],
        vec!["replay".into(), d.clone()],
        vec!["graph".into(), "fib".into(), d.clone()],
        vec!["tui".into(), "--first-screen".into(), d.clone()],
    ];
    for f in ["chrome", "folded", "flamegraph", "html", "gmon", "xray"] {
        v.push(vec![
            "export".into(),
            d.clone(),
            "--format".into(),
            f.into(),
            "-o".into(),
            o.clone(),
        ]);
    }
    v
}

/// The worst figures seen, and failures.
#[derive(Default)]
struct Tally {
    mutants: u64,
    runs: u64,
    max_rss_kb: i64,
    max_time: Duration,
    failures: Vec<String>,
}

/// Runs every command on `bytes`; failures are recorded with `what`.
fn check(bytes: &[u8], what: &str, dir: &Path, tally: &mut Tally) {
    let data = dir.join("mutant.data");
    std::fs::write(&data, bytes).unwrap();
    let out = dir.join("export.out");
    tally.mutants += 1;
    for args in commands(&data, &out) {
        let argv: Vec<&std::ffi::OsStr> = args.iter().map(|a| a.as_os_str()).collect();
        let o = run_cli(&argv, dir);
        tally.runs += 1;
        tally.max_rss_kb = tally.max_rss_kb.max(o.maxrss_kb);
        tally.max_time = tally.max_time.max(o.elapsed);
        let cmd = args[..2]
            .iter()
            .map(|a| a.to_string_lossy())
            .collect::<Vec<_>>()
            .join(" ");
        let mut bad = vec![];
        if o.hung {
            bad.push(format!("hang (killed after {:?})", o.elapsed));
        } else if libc::WIFSIGNALED(o.status) {
            bad.push(format!("killed by signal {}", libc::WTERMSIG(o.status)));
        } else {
            let code = libc::WEXITSTATUS(o.status);
            if code != 0 && code != 2 {
                bad.push(format!("exit status {code}"));
            }
            // An error is one line, the last (warnings may come first).
            let last = o.stderr.trim_end().lines().last().unwrap_or("");
            if code == 2 && !last.starts_with("fntrace: ") {
                bad.push("no error line".into());
            }
        }
        if o.stderr.contains("panicked") {
            bad.push("panic".into());
        }
        if o.maxrss_kb > MAX_RSS_KB {
            bad.push(format!("peak memory {} MB", o.maxrss_kb / 1024));
        }
        // Output grows with the input (a line per call at most), never
        // with a value read from it.
        let limit = 200 * bytes.len() as u64 + (1 << 20);
        if o.output > limit {
            bad.push(format!("{} bytes of output", o.output));
        }
        if !bad.is_empty() {
            let err: String = o
                .stderr
                .chars()
                .rev()
                .take(300)
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
                .collect();
            tally.failures.push(format!(
                "{what}\n    fntrace {cmd}: {}; stderr: {err}",
                bad.join(", ")
            ));
        }
    }
    let _ = std::fs::remove_file(&out);
}

fn report(t: &Tally, label: &str) {
    eprintln!(
        "{label}: {} mutants, {} runs, max RSS {} KB, max time {:?}, {} failures",
        t.mutants,
        t.runs,
        t.max_rss_kb,
        t.max_time,
        t.failures.len()
    );
    assert!(
        t.failures.is_empty(),
        "{} failing runs:\n{}",
        t.failures.len(),
        t.failures.join("\n")
    );
}

fn corpus() -> PathBuf {
    PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/traces/hostile.txt"
    ))
}

#[test]
fn hostile_corpus() {
    let dir = tempfile::tempdir().unwrap();
    let base = record(dir.path());
    let text = std::fs::read_to_string(corpus()).unwrap();
    let mut tally = Tally::default();
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let mut b = base.clone();
        for m in line.split(';') {
            apply(&mut b, &Mutation::parse(m));
        }
        check(&b, line, dir.path(), &mut tally);
    }
    assert!(tally.mutants >= 5, "corpus too small");
    report(&tally, "hostile corpus");
}

#[test]
fn fuzz_mutants() {
    if std::env::var_os("FUZZ_CHILD").is_some() {
        return;
    }
    let secs: u64 = std::env::var("FNTRACE_FUZZ_SECS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3);
    let seed: u64 = std::env::var("FNTRACE_FUZZ_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(rand::random);
    let dir = tempfile::tempdir().unwrap();
    let base = record(dir.path());
    let mut rng = StdRng::seed_from_u64(seed);
    let mut tally = Tally::default();
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(secs) || tally.mutants == 0 {
        let mut b = base.clone();
        let mut ms = vec![];
        for _ in 0..rng.gen_range(1..=3) {
            let m = random_mutation(&mut rng, &b);
            apply(&mut b, &m);
            ms.push(m.show());
        }
        check(&b, &ms.join("; "), dir.path(), &mut tally);
        if tally.failures.len() >= 20 {
            break;
        }
    }
    report(
        &tally,
        &format!("fuzz (seed {seed}, {} byte trace)", base.len()),
    );
}

#[test]
fn implausible_depth_is_reported_as_damage() {
    let dir = tempfile::tempdir().unwrap();
    let mut b = record(dir.path());
    // A missing predecessor (sequence number moved on) makes the reader
    // resynchronise with the depth of this header.
    for m in ["chunk 2 8 4 7", "chunk 2 12 4 4294967295"] {
        apply(&mut b, &Mutation::parse(m));
    }
    let p = dir.path().join("deep.data");
    std::fs::write(&p, &b).unwrap();
    let out = Command::new(common::fntrace_bin())
        .arg("info")
        .arg(&p)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("claims a call depth of 4294967295, more than the stream can have reached"),
        "{text}"
    );
}
