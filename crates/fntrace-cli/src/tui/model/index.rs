//! The index `fntrace tui` builds when it opens a trace: for every chunk
//! of every thread stream, the call depth it starts at, the lowest depth
//! it reaches and its time span. With it, the end of a call is found by
//! decoding only the chunk where the call starts and the first chunk that
//! climbs back to its depth; everything in between is skipped unread.
//! Chunks are decoded independently, in parallel, one worker per core.
//! Each chunk also gets a small Bloom filter of the functions entered in
//! it, so that a search skips the chunks that cannot hold a match.

use std::sync::atomic::{AtomicUsize, Ordering};

use fntrace_format::{FastItem, Record, StreamItem, Trace};

use crate::analysis::Resume;

/// What one chunk of a thread stream holds.
#[derive(Debug, Clone, Copy, Default)]
pub struct ChunkInfo {
    /// Call depth at its start (checked as a whole-stream read checks it).
    pub depth: u32,
    /// Lowest depth reached in it, its start included.
    pub min: u32,
    /// TSC of its first and last timed record (the header's base TSC when
    /// it has none).
    pub first_tsc: u64,
    /// See `first_tsc`.
    pub last_tsc: u64,
    /// Entry and exit events in it.
    pub events: u64,
    /// Bloom filter (one hash, 256 bits) of the functions entered in it.
    pub funcs: Bloom,
}

/// A set of functions that may give false positives, never false
/// negatives.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Bloom([u64; 4]);

impl Bloom {
    /// Adds a function.
    #[inline]
    pub fn add(&mut self, func: u64) {
        let b = (func.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 56) as usize;
        self.0[b / 64] |= 1 << (b % 64);
    }

    /// Whether the two sets may share a function.
    pub fn meets(&self, other: &Bloom) -> bool {
        self.0.iter().zip(other.0).any(|(a, b)| a & b != 0)
    }

    /// Whether nothing was added.
    pub fn is_empty(&self) -> bool {
        self.0 == [0; 4]
    }
}

/// The index of one thread.
#[derive(Debug, Clone, Default)]
pub struct ThreadIndex {
    /// Thread id.
    pub tid: u32,
    /// Name (at exit if recorded, else at start; empty if neither).
    pub name: String,
    /// Its chunks in stream order.
    pub chunks: Vec<ChunkInfo>,
    /// Every function entered on the thread, sorted.
    pub funcs: Vec<u64>,
    /// Minimum of `min` over each run of [`BLOCK`] chunks.
    blocks: Vec<u32>,
}

/// Chunks per block of the two-level minimum search.
const BLOCK: usize = 64;

impl ThreadIndex {
    /// Entry and exit events of the thread.
    pub fn events(&self) -> u64 {
        self.chunks.iter().map(|c| c.events).sum()
    }

    /// TSC of the thread's last record.
    pub fn last_tsc(&self) -> u64 {
        self.chunks.iter().map(|c| c.last_tsc).max().unwrap_or(0)
    }

    /// The first chunk at or after `from` in which the call depth is
    /// `depth` or less at some point (at its start included).
    pub fn first_reaching(&self, from: usize, depth: u32) -> Option<usize> {
        let mut i = from;
        while i < self.chunks.len() {
            if i % BLOCK == 0 && self.blocks[i / BLOCK] > depth {
                i += BLOCK;
                continue;
            }
            if self.chunks[i].min <= depth {
                return Some(i);
            }
            i += 1;
        }
        None
    }

    /// The first chunk at or after `from` that may enter one of the
    /// functions of `want`.
    pub fn first_entering(&self, from: usize, want: &Bloom) -> Option<usize> {
        (from..self.chunks.len()).find(|&i| self.chunks[i].funcs.meets(want))
    }

    /// Where a walk of chunk `i` starts.
    pub fn chunk_start(&self, trace: &Trace, i: usize) -> Option<Resume> {
        let (pos, depth) = trace.chunk_start(self.tid, i)?;
        Some(Resume { pos, depth })
    }
}

/// The index of a whole trace.
#[derive(Debug, Clone, Default)]
pub struct Index {
    /// One entry per thread stream, by thread id (one empty entry, thread
    /// 0, when the trace has none).
    pub threads: Vec<ThreadIndex>,
}

/// What decoding one chunk found.
#[derive(Default)]
struct Scan {
    info: ChunkInfo,
    decoded: bool,
    funcs: Vec<u64>,
    start_name: Option<String>,
    exit_name: Option<String>,
}

fn scan_chunk(trace: &Trace, tid: u32, i: usize) -> Scan {
    let Some((pos, depth)) = trace.chunk_start(tid, i) else {
        return Scan::default();
    };
    let mut r = trace.stream_at(tid, pos);
    r.stop_after_current();
    // A chunk whose payload is unreadable (bad checksum) has no records:
    // its last TSC is the previous chunk's, as for a whole-stream read.
    let decoded = r.position().is_some();
    let mut s = Scan {
        info: ChunkInfo {
            depth,
            min: depth,
            first_tsc: u64::MAX,
            last_tsc: 0,
            events: 0,
            funcs: Bloom::default(),
        },
        ..Scan::default()
    };
    let mut d = depth;
    let see = |s: &mut Scan, tsc: u64| {
        s.info.first_tsc = s.info.first_tsc.min(tsc);
        s.info.last_tsc = s.info.last_tsc.max(tsc);
    };
    let mut seen: rustc_hash::FxHashSet<u64> = Default::default();
    let mut last = 0;
    // Depth as `analysis::Events` counts it: an exit at depth 0 has no
    // entry and is ignored.
    while let Some(it) = r.next_fast() {
        match it {
            FastItem::Entry { tsc, func } => {
                if func != last {
                    last = func;
                    s.info.funcs.add(func);
                    seen.insert(func);
                }
                d += 1;
                s.info.events += 1;
                see(&mut s, tsc);
            }
            FastItem::Exit { tsc } => {
                d = d.saturating_sub(1);
                s.info.min = s.info.min.min(d);
                s.info.events += 1;
                see(&mut s, tsc);
            }
            FastItem::Other(o) => match *o {
                StreamItem::Record(Record::ThreadStart { tsc, name }) => {
                    see(&mut s, tsc);
                    s.start_name.get_or_insert(name);
                }
                StreamItem::Record(Record::ThreadExit { tsc, name }) => {
                    see(&mut s, tsc);
                    s.exit_name = Some(name);
                }
                StreamItem::Record(Record::Marker { tsc, .. } | Record::Lost { tsc, .. }) => {
                    see(&mut s, tsc)
                }
                _ => {}
            },
        }
    }
    s.funcs = seen.into_iter().collect();
    s.decoded = decoded;
    if s.info.first_tsc == u64::MAX {
        s.info.first_tsc = pos.tsc;
        s.info.last_tsc = pos.tsc;
    }
    s
}

impl Index {
    /// Decodes every chunk of every thread once, `workers` at a time.
    pub fn build(trace: &Trace, workers: usize) -> Index {
        let tids = trace.thread_ids();
        let jobs: Vec<(usize, u32, usize)> = tids
            .iter()
            .enumerate()
            .flat_map(|(t, &tid)| {
                let n = trace.thread_chunks(tid).count();
                (0..n).map(move |i| (t, tid, i))
            })
            .collect();
        let next = AtomicUsize::new(0);
        let workers = workers.clamp(1, jobs.len().max(1));
        let results: Vec<Vec<(usize, Scan)>> = std::thread::scope(|sc| {
            let hs: Vec<_> = (0..workers)
                .map(|_| {
                    sc.spawn(|| {
                        let mut out = vec![];
                        loop {
                            let j = next.fetch_add(1, Ordering::Relaxed);
                            let Some(&(_, tid, i)) = jobs.get(j) else {
                                break;
                            };
                            out.push((j, scan_chunk(trace, tid, i)));
                        }
                        out
                    })
                })
                .collect();
            hs.into_iter()
                .map(|h| h.join().expect("index worker"))
                .collect()
        });
        let mut scans: Vec<Option<Scan>> = (0..jobs.len()).map(|_| None).collect();
        for (j, s) in results.into_iter().flatten() {
            scans[j] = Some(s);
        }
        let mut threads: Vec<ThreadIndex> = tids
            .iter()
            .map(|&tid| ThreadIndex {
                tid,
                ..ThreadIndex::default()
            })
            .collect();
        let mut exit_names: Vec<Option<String>> = vec![None; tids.len()];
        let mut funcs: Vec<rustc_hash::FxHashSet<u64>> = vec![Default::default(); tids.len()];
        for (&(t, _, _), s) in jobs.iter().zip(scans) {
            let s = s.unwrap_or_default();
            let th = &mut threads[t];
            if th.name.is_empty()
                && let Some(n) = s.start_name
            {
                th.name = n;
            }
            if s.exit_name.is_some() {
                exit_names[t] = s.exit_name;
            }
            funcs[t].extend(s.funcs);
            let mut info = s.info;
            if !s.decoded
                && let Some(p) = th.chunks.last()
            {
                info.first_tsc = p.last_tsc;
                info.last_tsc = p.last_tsc;
            }
            th.chunks.push(info);
        }
        for ((th, n), f) in threads.iter_mut().zip(exit_names).zip(funcs) {
            th.funcs = f.into_iter().collect();
            if let Some(n) = n {
                th.name = n;
            }
            th.funcs.sort_unstable();
            th.funcs.dedup();
            th.blocks = th
                .chunks
                .chunks(BLOCK)
                .map(|b| b.iter().map(|c| c.min).min().unwrap_or(u32::MAX))
                .collect();
        }
        if threads.is_empty() {
            // A trace without thread streams shows one empty thread.
            threads.push(ThreadIndex::default());
        }
        Index { threads }
    }
}
