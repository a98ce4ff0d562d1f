//! A synthetic trace of 1,000,000,000 events (4 threads of recursive
//! fib-like call trees, written chunk by chunk with the format crate's
//! writer), then `fntrace report` on it: time, events per second and the
//! peak resident memory of the report process (`getrusage` of the waited
//! child). Asserts nothing.
//!
//! Run: `cargo bench -p fntrace-cli --bench billion` (needs ~1.5 GB of disk
//! in the target directory; `FNTRACE_SYNTH_EVENTS` overrides the count).

use std::io::{Seek, SeekFrom, Write};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Instant;

use fntrace_format::event::Framed;
use fntrace_format::layout::{
    ChunkHeader, DEFAULT_CHUNK_SIZE, FINAL_FLAG_CLEAN, FINAL_OFFSET, Final, HEADER_SIZE, Header,
    META_TID,
};
use fntrace_format::writer::ChunkBuf;

const THREADS: u32 = 4;
const FUNCS: [u64; 3] = [0x1000, 0x2000, 0x3000];

struct Stream {
    tid: u32,
    seq: u32,
    depth: u32,
    tsc: u64,
    buf: ChunkBuf,
}

/// Overrides the number of synthetic events (a bench setting, not the
/// runtime's).
const ENV_SYNTH_EVENTS: &str = "FNTRACE_SYNTH_EVENTS";

fn main() {
    let events: u64 = std::env::var(ENV_SYNTH_EVENTS)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000_000);
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_fntrace"));
    let dir = bin.parent().unwrap().join("synthetic");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("billion.data");
    let t0 = Instant::now();
    let mut f = std::io::BufWriter::with_capacity(8 << 20, std::fs::File::create(&path).unwrap());
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
    // Metadata: names for the three functions.
    let mut meta = ChunkBuf::new(DEFAULT_CHUNK_SIZE, &ChunkHeader::at(META_TID, 0, 0, 1_000));
    for (i, &k) in FUNCS.iter().enumerate() {
        let name = format!("synthetic::f{i}");
        assert!(meta.framed(&Framed::Site {
            key: k,
            prefix: b"",
            name: name.as_bytes(),
            file: b"synthetic.rs",
            line: i as u64 + 1,
        }));
    }
    meta.seal();
    f.write_all(meta.as_bytes()).unwrap();
    chunks += 1;
    let mut streams: Vec<Stream> = (1..=THREADS)
        .map(|tid| Stream {
            tid,
            seq: 0,
            depth: 0,
            tsc: 1_000,
            buf: ChunkBuf::new(DEFAULT_CHUNK_SIZE, &ChunkHeader::at(tid, 0, 0, 1_000)),
        })
        .collect();
    let per_thread = events / u64::from(THREADS);
    let mut rng = 0x1234_5678_9abc_def0u64;
    for s in streams.iter_mut() {
        let mut written = 0u64;
        while written < per_thread {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            let d = 20 + (rng & 63);
            s.tsc += d;
            // Enter while shallow or by chance, else exit.
            let enter = s.depth == 0 || (s.depth < 20 && rng & 0x100 != 0);
            let ok = if enter {
                s.buf.entry(d, FUNCS[(rng >> 9) as usize % 3])
            } else {
                s.buf.exit(d)
            };
            if !ok {
                s.buf.seal();
                f.write_all(s.buf.as_bytes()).unwrap();
                chunks += 1;
                s.seq += 1;
                s.buf = ChunkBuf::new(
                    DEFAULT_CHUNK_SIZE,
                    &ChunkHeader::at(s.tid, s.seq, s.depth, s.tsc - d),
                );
                s.tsc -= d;
                continue;
            }
            if enter {
                s.depth += 1;
            } else {
                s.depth -= 1;
            }
            written += 1;
        }
        s.buf.seal();
        f.write_all(s.buf.as_bytes()).unwrap();
        chunks += 1;
    }
    let end = streams.iter().map(|s| s.tsc).max().unwrap();
    let fin = Final {
        flags: FINAL_FLAG_CLEAN,
        end_tsc: end,
        end_mono_ns: 0,
        tsc_hz: hz,
        chunks,
        lost_events: 0,
        full_tsc: 0,
        events: 0,
        overwritten: 0,
    };
    f.flush().unwrap();
    let mut file = f.into_inner().unwrap();
    file.seek(SeekFrom::Start(FINAL_OFFSET as u64)).unwrap();
    file.write_all(&fin.encode()).unwrap();
    drop(file);
    let size = std::fs::metadata(&path).unwrap().len();
    println!(
        "synthetic trace: {events} events, {THREADS} threads, {chunks} chunks, {:.2} GB, written in {:.1} s",
        size as f64 / 1e9,
        t0.elapsed().as_secs_f64()
    );
    // fntrace report, with its peak RSS from wait4.
    let t = Instant::now();
    let status = Command::new(&bin)
        .arg("report")
        .arg(&path)
        .stdout(Stdio::null())
        .status()
        .unwrap();
    // SAFETY: an all-zero rusage is valid; getrusage fills it. The report
    // is the only child this process has waited for.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: valid out-pointer.
    unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut ru) };
    let secs = t.elapsed().as_secs_f64();
    println!(
        "fntrace report: {secs:.1} s, {:.1} M events/s, peak RSS {:.1} MB, {status}",
        events as f64 / secs / 1e6,
        ru.ru_maxrss as f64 / 1024.0
    );
    std::fs::remove_file(&path).unwrap();
}
