//! `fntrace info` from the writer's counts: on a trace that ended clean,
//! each thread's line comes from the chunk headers and its last chunk
//! (`info::thread_from_counts`) and must say what a walk of every event
//! says (events, name, exit, calls without exit, last time); a trace with
//! a damaged chunk in the middle of a stream still reports the damage.

use fntrace_cli::analysis::{Call, Visitor, walk_thread};
use fntrace_format::Trace;

mod common;

struct Nop;
impl Visitor for Nop {
    fn call(&mut self, _c: &Call) {}
}

fn record(dir: &std::path::Path) -> std::path::PathBuf {
    let exe = dir.join("threads");
    let src = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/info/threads.c");
    common::tool(
        "gcc",
        &[
            "-O1",
            "-pg",
            "-mfentry",
            "-o",
            exe.to_str().unwrap(),
            src,
            "-lpthread",
        ],
    );
    let data = dir.join("t.data");
    let out = common::record_cmd(&data, &[], &exe, &[]).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    data
}

#[test]
fn thread_lines_from_the_writer_counts_match_a_walk_of_every_event() {
    let d = tempfile::tempdir().unwrap();
    let data = record(d.path());
    let t = Trace::open(&data).unwrap();
    assert!(t.damage().is_empty());
    let mut multi_chunk = 0;
    for tid in t.thread_ids() {
        let full = walk_thread(&t, tid, &mut Nop);
        let fast = fntrace_cli::info::thread_from_counts(&t, tid);
        assert_eq!(fast.events, full.events, "{tid}");
        assert_eq!(fast.name, full.name, "{tid}");
        assert_eq!(fast.exited, full.exited, "{tid}");
        assert_eq!(fast.incomplete, full.incomplete, "{tid}");
        assert_eq!(fast.last_tsc, full.last_tsc, "{tid}");
        assert!(fast.first_tsc <= full.first_tsc, "{tid}");
        assert!(fast.damage.is_empty() && full.damage.is_empty(), "{tid}");
        if t.thread_chunks(tid).count() > 3 {
            multi_chunk += 1;
        }
    }
    assert!(multi_chunk >= 3, "the workers' streams span many chunks");
    let info = common::tool(
        common::fntrace_bin().to_str().unwrap(),
        &["info", data.to_str().unwrap()],
    );
    assert!(info.contains("# counted       by the writer"), "{info}");
    assert!(info.contains("named-worker"), "{info}");
    assert!(info.contains("no exit recorded"), "{info}");

    // A chunk in the middle of a worker's stream damaged: info (which
    // does not decode it) still finds it by its checksum.
    let tid = t
        .thread_ids()
        .into_iter()
        .max_by_key(|&tid| t.thread_chunks(tid).count())
        .unwrap();
    let c = t.thread_chunks(tid).nth(1).unwrap();
    let at = c.offset + fntrace_format::layout::CHUNK_HEADER_SIZE as u64 + 100;
    let mut bytes = std::fs::read(&data).unwrap();
    bytes[at as usize] ^= 0xff;
    let bad = d.path().join("bad.data");
    std::fs::write(&bad, &bytes).unwrap();
    let out = std::process::Command::new(common::fntrace_bin())
        .args(["info", bad.to_str().unwrap()])
        .output()
        .unwrap();
    let info = String::from_utf8_lossy(&out.stdout);
    assert!(info.contains("checksum mismatch"), "{info}");
    assert!(!info.contains("# damage        none"), "{info}");
}
