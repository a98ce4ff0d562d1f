//! Streaming reader: opens a trace, checks its header, indexes its chunks,
//! reads the metadata stream and decodes one thread stream at a time with
//! memory bounded by one chunk. The thread streams themselves are read by
//! `stream.rs` ([`ThreadReader`]).

mod stream;
pub use stream::{FastItem, StreamItem, StreamPos, ThreadReader};

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use crate::event::{LibFuncInfo, ModuleInfo, OffCpu, ProcessInfo, Record, SiteInfo};
use crate::layout::{
    CHUNK_FLAG_SEALED, CHUNK_HEADER_SIZE, ChunkHeader, ChunkProblem, FINAL_FLAG_CLEAN,
    FINAL_OFFSET, Final, HEADER_USED, Header, HeaderProblem, META_TID, VERSION_MAJOR,
};

/// Largest call depth a flight recorder's window may start at (the
/// writer's shadow stack holds at most this many open calls; a larger
/// depth field is damage).
const MAX_WINDOW_DEPTH: u32 = 1 << 17;

/// An error that stops a trace from being read at all.
#[derive(Debug)]
pub struct TraceError {
    /// The file.
    pub path: PathBuf,
    /// Byte offset of the problem, when it has one.
    pub offset: Option<u64>,
    /// What is wrong.
    pub problem: String,
}

impl fmt::Display for TraceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.offset {
            Some(o) => write!(f, "{}: byte {}: {}", self.path.display(), o, self.problem),
            None => write!(f, "{}: {}", self.path.display(), self.problem),
        }
    }
}

impl std::error::Error for TraceError {}

/// A damaged or missing part of a trace that was skipped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Damage {
    /// File offset where the damage starts.
    pub offset: u64,
    /// Bytes of trace data lost (an upper bound when the file was cut).
    pub lost_bytes: u64,
    /// Thread whose stream is affected, when known.
    pub tid: Option<u32>,
    /// What was found.
    pub problem: String,
}

impl fmt::Display for Damage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "byte {}: {}", self.offset, self.problem)?;
        if let Some(t) = self.tid {
            write!(f, " (thread {t})")?;
        }
        if self.lost_bytes > 0 {
            write!(f, ", {} bytes lost", self.lost_bytes)?;
        }
        Ok(())
    }
}

/// One usable chunk of the file.
#[derive(Debug, Clone)]
pub struct ChunkEntry {
    /// File offset of the chunk header.
    pub offset: u64,
    /// The decoded header.
    pub header: ChunkHeader,
    /// Payload bytes present in the file (less than the chunk's payload
    /// capacity only when the file was cut inside this chunk).
    pub available: usize,
}

impl ChunkEntry {
    fn sealed(&self) -> bool {
        self.header.flags & CHUNK_FLAG_SEALED != 0
    }
}

/// What the metadata stream says.
#[derive(Debug, Clone, Default)]
pub struct Metadata {
    /// The traced process.
    pub process: Option<ProcessInfo>,
    /// Loaded objects, in the order they were recorded.
    pub modules: Vec<ModuleInfo>,
    /// Source-instrumented functions by key.
    pub sites: HashMap<u64, SiteInfo>,
    /// Shared-library functions recorded through PLT/GOT entries, by key.
    pub libfuncs: HashMap<u64, LibFuncInfo>,
    /// Off-CPU intervals (`record --sched`) per thread, sorted by switch-out
    /// time, overlaps merged away.
    pub offcpu: BTreeMap<u32, Vec<OffCpu>>,
    /// Call-graph arcs of a counting trace: (call site, callee, count),
    /// summed over threads.
    pub arcs: Vec<(u64, u64, u64)>,
    /// Set when the recording attached to a running process: (TSC of the
    /// start, controller pid).
    pub attach: Option<(u64, u64)>,
    /// Set when an attached recording detached: (TSC of the stop, why).
    pub detach: Option<(u64, crate::event::DetachReason)>,
    /// The settings the recording ran with ([`Record::Setting`]), in the
    /// order they were recorded.
    pub settings: Vec<(String, String)>,
}

impl Metadata {
    /// The value of setting `key` (the last one recorded), if any.
    pub fn setting(&self, key: &str) -> Option<&str> {
        self.settings
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// The functions with `#[instrument_fn(threshold)]` the recording
    /// applied: (function key, threshold in nanoseconds).
    pub fn fn_thresholds(&self) -> Vec<(u64, u64)> {
        self.settings
            .iter()
            .filter(|(k, _)| k == crate::event::SETTING_FN_THRESHOLD)
            .filter_map(|(_, v)| {
                let (f, ns) = v.split_once(' ')?;
                let f = u64::from_str_radix(f.strip_prefix("0x")?, 16).ok()?;
                Some((f, ns.parse().ok()?))
            })
            .collect()
    }

    /// The record-time time filter in nanoseconds (`record -t`): only
    /// calls that lasted at least this long, and their callers, were
    /// recorded. 0 when none.
    pub fn time_filter_ns(&self) -> u64 {
        self.setting(crate::event::SETTING_TIME_FILTER)
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    }
}

/// What [`Trace::event_count`] found.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EventCount {
    /// Entry and exit events.
    pub events: u64,
    /// Chunks that had no writer's count and were decoded to count them.
    pub decoded_chunks: u64,
}

/// Reads the live counters of a trace being recorded (`None` when the
/// file has none: not an fntrace trace, an older writer, or a torn read).
pub fn read_live(path: &Path) -> Option<crate::layout::Live> {
    let (f, _) = crate::regular::open_regular(path).ok()?;
    let mut b = [0u8; crate::layout::LIVE_SIZE];
    f.read_exact_at(&mut b, crate::layout::LIVE_OFFSET as u64)
        .ok()?;
    crate::layout::Live::decode(&b)
}

/// An open trace file.
#[derive(Debug)]
pub struct Trace {
    path: PathBuf,
    file: File,
    file_len: u64,
    header: Header,
    fin: Option<Final>,
    chunks: Vec<ChunkEntry>,
    threads: BTreeMap<u32, Vec<usize>>,
    damage: Vec<Damage>,
    meta: Metadata,
    unused_chunks: u64,
    /// Flight recorder: chunks older than their stream's window.
    stale_chunks: u64,
    /// File offsets of chunks whose header could not be read (bad magic or
    /// checksum), in file order: a stream's missing chunks can only be
    /// among them.
    unreadable: Vec<u64>,
    /// Chunks loaded by stream readers so far (for progress display).
    chunks_read: std::sync::atomic::AtomicU64,
    /// Checked chunk depths per stream, computed on first use.
    depths: std::sync::OnceLock<BTreeMap<u32, Vec<u32>>>,
}

/// How the recording ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    /// The runtime finished the trace (process exit or an explicit stop).
    Clean,
    /// The process stopped without finishing the trace (crash, kill, or
    /// still running).
    Unfinished,
}

impl Trace {
    /// Opens and indexes a trace. Fails only when the file cannot be read or
    /// its header is unusable; damaged chunks are recorded in
    /// [`Trace::damage`] and skipped.
    pub fn open(path: impl AsRef<Path>) -> Result<Trace, TraceError> {
        let path = path.as_ref().to_path_buf();
        let err = |offset: Option<u64>, problem: String| TraceError {
            path: path.clone(),
            offset,
            problem,
        };
        // Not `File::open` alone: it blocks forever on a FIFO.
        let (file, m) =
            crate::regular::open_regular(&path).map_err(|e| err(None, e.to_string()))?;
        let file_len = m.len();
        if file_len < HEADER_USED as u64 {
            let mut m = [0u8; 8];
            if file_len < 8 || file.read_exact_at(&mut m, 0).is_err() || m != crate::layout::MAGIC {
                return Err(err(Some(0), "not an fntrace trace (bad magic)".into()));
            }
            return Err(err(
                Some(file_len),
                format!(
                    "file is {file_len} bytes, too short for a trace header ({HEADER_USED} bytes)"
                ),
            ));
        }
        let mut hb = [0u8; HEADER_USED];
        file.read_exact_at(&mut hb, 0)
            .map_err(|e| err(Some(0), e.to_string()))?;
        let stat: &[u8; FINAL_OFFSET] = hb[..FINAL_OFFSET].try_into().expect("128 bytes");
        match Header::check(stat) {
            Ok(()) => {}
            Err(HeaderProblem::Magic) => {
                return Err(err(Some(0), "not an fntrace trace (bad magic)".into()));
            }
            Err(HeaderProblem::Checksum) => {
                return Err(err(
                    Some(0),
                    "header is corrupted (checksum of bytes 0..124 does not match)".into(),
                ));
            }
        }
        let header = Header::decode(stat);
        if header.version_major != VERSION_MAJOR {
            return Err(err(
                Some(8),
                format!(
                    "format version {}.{} is not supported (this reader reads {}.x)",
                    header.version_major, header.version_minor, VERSION_MAJOR
                ),
            ));
        }
        let chunk_size = header.chunk_size as u64;
        if header.header_size < HEADER_USED as u32
            || chunk_size < 2 * CHUNK_HEADER_SIZE as u64
            || chunk_size > 1 << 30
        {
            return Err(err(
                Some(12),
                format!(
                    "implausible header: header size {}, chunk size {}",
                    header.header_size, header.chunk_size
                ),
            ));
        }
        let mut damage = vec![];
        let fin = match Final::decode(&hb[FINAL_OFFSET..]) {
            Ok(f) => f,
            Err(p) => {
                damage.push(Damage {
                    offset: FINAL_OFFSET as u64,
                    lost_bytes: 0,
                    tid: None,
                    problem: format!(
                        "final block is damaged ({}); treating the trace as unfinished",
                        if p == HeaderProblem::Magic {
                            "bad magic"
                        } else {
                            "checksum mismatch"
                        }
                    ),
                });
                None
            }
        };

        let mut trace = Trace {
            path,
            file,
            file_len,
            header,
            fin,
            chunks: vec![],
            threads: BTreeMap::new(),
            damage,
            meta: Metadata::default(),
            unused_chunks: 0,
            stale_chunks: 0,
            unreadable: vec![],
            chunks_read: std::sync::atomic::AtomicU64::new(0),
            depths: std::sync::OnceLock::new(),
        };
        trace.index_chunks()?;
        trace.read_metadata();
        Ok(trace)
    }

    fn index_chunks(&mut self) -> Result<(), TraceError> {
        let chunk_size = self.header.chunk_size as u64;
        let payload_cap = chunk_size - CHUNK_HEADER_SIZE as u64;
        let mut offset = self.header.header_size as u64;
        let mut seen: HashMap<(u32, u32), u64> = HashMap::new();
        while offset < self.file_len {
            let left = self.file_len - offset;
            if left < CHUNK_HEADER_SIZE as u64 {
                self.damage.push(Damage {
                    offset,
                    lost_bytes: chunk_size - left,
                    tid: None,
                    problem: "file ends inside a chunk header (the file was cut)".into(),
                });
                break;
            }
            let mut hb = [0u8; CHUNK_HEADER_SIZE];
            self.file
                .read_exact_at(&mut hb, offset)
                .map_err(|e| TraceError {
                    path: self.path.clone(),
                    offset: Some(offset),
                    problem: e.to_string(),
                })?;
            match ChunkHeader::decode(&hb) {
                Ok(h) => {
                    let available = (left - CHUNK_HEADER_SIZE as u64).min(payload_cap) as usize;
                    if let Some(prev) = seen.insert((h.tid, h.seq), offset) {
                        self.damage.push(Damage {
                            offset,
                            lost_bytes: chunk_size,
                            tid: Some(h.tid),
                            problem: format!(
                                "chunk {} of thread {} appears twice (first at byte {prev}); second copy ignored",
                                h.seq, h.tid
                            ),
                        });
                    } else {
                        self.chunks.push(ChunkEntry {
                            offset,
                            header: h,
                            available,
                        });
                    }
                }
                Err(ChunkProblem::Unused) => self.unused_chunks += 1,
                // A flight recorder's chunk being reset for reuse (its
                // magic is cleared first): nothing to read, no damage.
                Err(ChunkProblem::Magic)
                    if self.header.flags & crate::layout::HDR_FLAG_RING != 0
                        && hb[0..4] == [0; 4] =>
                {
                    self.unused_chunks += 1
                }
                Err(p) => {
                    self.unreadable.push(offset);
                    self.damage.push(Damage {
                        offset,
                        lost_bytes: chunk_size.min(left),
                        tid: None,
                        problem: match p {
                            ChunkProblem::Magic => {
                                "chunk header has a bad magic; chunk skipped".into()
                            }
                            _ => "chunk header checksum mismatch; chunk skipped".into(),
                        },
                    })
                }
            }
            offset += chunk_size;
        }
        if let Some(f) = &self.fin {
            // A damaged count may not fit in 64 bits: the file is then short.
            let expected = f
                .chunks
                .checked_mul(chunk_size)
                .and_then(|n| n.checked_add(self.header.header_size as u64))
                .unwrap_or(u64::MAX);
            if self.file_len < expected {
                self.damage.push(Damage {
                    offset: self.file_len,
                    lost_bytes: expected - self.file_len,
                    tid: None,
                    problem: format!(
                        "file was cut: it should be {expected} bytes ({} chunks) but is {}",
                        f.chunks, self.file_len
                    ),
                });
            }
        }
        for (i, c) in self.chunks.iter().enumerate() {
            self.threads.entry(c.header.tid).or_default().push(i);
        }
        let chunks = &self.chunks;
        let ring = self.header.flags & crate::layout::HDR_FLAG_RING != 0;
        for list in self.threads.values_mut() {
            list.sort_by_key(|&i| chunks[i].header.seq);
            if ring {
                // A flight recorder keeps a window of every stream: its
                // newest chunks with consecutive sequence numbers. Older
                // chunks a slot kept while newer ones were overwritten
                // (a slot busy when its turn came) are outside it.
                let keep = list
                    .windows(2)
                    .rposition(|w| {
                        chunks[w[1]].header.seq != chunks[w[0]].header.seq.wrapping_add(1)
                    })
                    .map_or(0, |p| p + 1);
                self.stale_chunks += keep as u64;
                list.drain(..keep);
            }
        }
        Ok(())
    }

    fn read_metadata(&mut self) {
        let mut meta = Metadata::default();
        let mut reader = self.stream(META_TID);
        for rec in reader.by_ref() {
            match rec {
                Record::Process(p) => meta.process = Some(p),
                Record::Module(m) if !meta.modules.contains(&m) => meta.modules.push(m),
                Record::Site(s) => {
                    meta.sites.entry(s.key).or_insert(s);
                }
                Record::LibFunc(f) => {
                    meta.libfuncs.entry(f.key).or_insert(f);
                }
                Record::OffCpu(o) => meta.offcpu.entry(o.tid).or_default().push(o),
                Record::Arc { from, to, count } => meta.arcs.push((from, to, count)),
                Record::Attach { tsc, controller } => meta.attach = Some((tsc, controller)),
                Record::Detach { tsc, reason } => meta.detach = Some((tsc, reason)),
                Record::Setting { key, value } => meta.settings.push((key, value)),
                _ => {}
            }
        }
        for v in meta.offcpu.values_mut() {
            v.sort_unstable_by_key(|o| (o.out_ns, o.in_ns));
            // Overlapping intervals (a record written twice) count once.
            let mut out: Vec<OffCpu> = Vec::with_capacity(v.len());
            for o in v.drain(..) {
                match out.last_mut() {
                    Some(l) if o.out_ns < l.in_ns => l.in_ns = l.in_ns.max(o.in_ns),
                    _ => out.push(o),
                }
            }
            *v = out;
        }
        let damage = reader.take_damage();
        self.damage.extend(damage);
        self.meta = meta;
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Size of the file in bytes.
    pub fn file_len(&self) -> u64 {
        self.file_len
    }

    /// The static header.
    pub fn header(&self) -> &Header {
        &self.header
    }

    /// The final block, when the recording finished cleanly.
    pub fn final_block(&self) -> Option<&Final> {
        self.fin.as_ref()
    }

    /// How the recording ended.
    pub fn ending(&self) -> Ending {
        match &self.fin {
            Some(f) if f.flags & FINAL_FLAG_CLEAN != 0 => Ending::Clean,
            _ => Ending::Unfinished,
        }
    }

    /// Metadata: process, modules, sites.
    pub fn metadata(&self) -> &Metadata {
        &self.meta
    }

    /// Damage found while indexing chunks and reading metadata. Damage
    /// inside thread streams is reported by each [`ThreadReader`].
    pub fn damage(&self) -> &[Damage] {
        &self.damage
    }

    /// Flight recorder: chunks left out because they are older than their
    /// stream's window (its newest chunks with consecutive numbers).
    pub fn stale_chunks(&self) -> u64 {
        self.stale_chunks
    }

    /// Chunks that were never written (zero headers).
    pub fn unused_chunks(&self) -> u64 {
        self.unused_chunks
    }

    /// Stream chunks loaded by readers of this trace so far (a progress
    /// measure: one pass over every thread reads [`Trace::stream_chunks`]).
    pub fn chunks_read(&self) -> u64 {
        self.chunks_read.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Entry and exit events of thread `tid` (or of every thread when
    /// `None`), from the counts the writer keeps: the final block's total
    /// when there is one (`tid == None`), else each chunk's count, decoding
    /// only the chunks without one (the chunks threads were filling when
    /// the process died or the trace was finished). Never decodes the
    /// whole trace of a recording whose writer counted.
    pub fn event_count(&self, tid: Option<u32>) -> EventCount {
        if tid.is_none() {
            if let Some(n) = self.fin.as_ref().and_then(Final::events) {
                return EventCount {
                    events: n,
                    decoded_chunks: 0,
                };
            }
        }
        let mut out = EventCount::default();
        let mut buf = vec![];
        for (&t, list) in &self.threads {
            if t == META_TID || tid.is_some_and(|x| x != t) {
                continue;
            }
            for &i in list {
                let c = &self.chunks[i];
                if let Some(n) = c.header.events {
                    out.events += u64::from(n);
                    continue;
                }
                let len = if c.sealed() {
                    (c.header.payload_len as usize).min(c.available)
                } else {
                    c.available
                };
                buf.resize(len, 0);
                if self
                    .file
                    .read_exact_at(&mut buf, c.offset + CHUNK_HEADER_SIZE as u64)
                    .is_ok()
                {
                    out.events += u64::from(crate::event::count_events(&buf));
                }
                out.decoded_chunks += 1;
            }
        }
        out
    }

    /// Chunks of all thread streams (metadata excluded).
    pub fn stream_chunks(&self) -> u64 {
        self.thread_ids()
            .into_iter()
            .map(|t| self.thread_chunks(t).count() as u64)
            .sum()
    }

    /// Thread ids that have a stream (the metadata stream excluded), sorted.
    pub fn thread_ids(&self) -> Vec<u32> {
        self.threads
            .keys()
            .copied()
            .filter(|&t| t != META_TID)
            .collect()
    }

    /// The chunks of one thread, in stream order.
    pub fn thread_chunks(&self, tid: u32) -> impl Iterator<Item = &ChunkEntry> {
        self.threads
            .get(&tid)
            .into_iter()
            .flatten()
            .map(|&i| &self.chunks[i])
    }

    /// The best available TSC frequency (ticks per second): measured over
    /// the whole recording when it finished cleanly, else estimated from the
    /// latest chunk's clock pair, else the start-up calibration.
    pub fn tsc_hz(&self) -> u64 {
        let h = &self.header;
        let from_pair = |tsc: u64, mono: u64| -> Option<u64> {
            let dt = mono.checked_sub(h.start_mono_ns)?;
            let dc = tsc.checked_sub(h.start_tsc)?;
            (dt >= 20_000_000).then(|| (dc as u128 * 1_000_000_000 / dt as u128) as u64)
        };
        if let Some(f) = &self.fin {
            if f.tsc_hz != 0 {
                return f.tsc_hz;
            }
        }
        self.chunks
            .iter()
            .max_by_key(|c| c.header.base_mono_ns)
            .and_then(|c| from_pair(c.header.base_tsc, c.header.base_mono_ns))
            .filter(|&hz| hz > 0)
            .unwrap_or(h.tsc_hz.max(1))
    }

    /// The TSC value of a CLOCK_MONOTONIC time `ns`, through the start
    /// clock pair and [`Trace::tsc_hz`].
    pub fn mono_to_tsc(&self, ns: u64) -> u64 {
        let h = &self.header;
        map_mono(&[(h.start_mono_ns, h.start_tsc)], self.tsc_hz(), ns)
    }

    /// The off-CPU intervals of thread `tid` as (switch-out TSC, switch-in
    /// TSC, preempted), sorted and not overlapping; empty without
    /// `record --sched`. CLOCK_MONOTONIC times are placed on the TSC
    /// timeline by interpolating between the nearest clock pairs the file
    /// holds (the start, every chunk header, the finish), so that a drift
    /// between the two clocks (NTP slewing the monotonic clock) stays
    /// local.
    pub fn offcpu_tsc(&self, tid: u32) -> Vec<(u64, u64, bool)> {
        let Some(v) = self.meta.offcpu.get(&tid) else {
            return vec![];
        };
        let h = &self.header;
        let mut pairs: Vec<(u64, u64)> = vec![(h.start_mono_ns, h.start_tsc)];
        pairs.extend(
            self.chunks
                .iter()
                .filter(|c| {
                    c.header.base_mono_ns >= h.start_mono_ns && c.header.base_tsc >= h.start_tsc
                })
                .map(|c| (c.header.base_mono_ns, c.header.base_tsc)),
        );
        if let Some(f) = &self.fin
            && f.end_mono_ns >= h.start_mono_ns
            && f.end_tsc >= h.start_tsc
        {
            pairs.push((f.end_mono_ns, f.end_tsc));
        }
        pairs.sort_unstable();
        pairs.dedup_by_key(|p| p.0);
        let hz = self.tsc_hz();
        v.iter()
            .map(|o| {
                let a = map_mono(&pairs, hz, o.out_ns);
                (a, map_mono(&pairs, hz, o.in_ns).max(a), o.preempted)
            })
            .collect()
    }

    /// Chunks between file offsets `from` (exclusive) and `to` (exclusive)
    /// whose header could not be read.
    fn unreadable_between(&self, from: Option<u64>, to: u64) -> u64 {
        let lo = from.map_or(0, |f| self.unreadable.partition_point(|&o| o <= f));
        let hi = self.unreadable.partition_point(|&o| o < to);
        hi.saturating_sub(lo) as u64
    }
}

/// Maps CLOCK_MONOTONIC `ns` to a TSC value: linear interpolation between
/// the two clock pairs `(mono, tsc)` around it (`pairs` sorted by mono,
/// not empty), or extrapolation at `hz` from the nearest one outside them.
fn map_mono(pairs: &[(u64, u64)], hz: u64, ns: u64) -> u64 {
    let i = pairs.partition_point(|p| p.0 <= ns);
    let (m0, t0) = pairs[i.saturating_sub(1)];
    if i > 0
        && let Some(&(m1, t1)) = pairs.get(i)
        && m1 > m0
        && t1 >= t0
    {
        let t = t0 as u128 + (t1 - t0) as u128 * (ns - m0) as u128 / (m1 - m0) as u128;
        return t.min(u64::MAX as u128) as u64;
    }
    let dt = ns as i128 - m0 as i128;
    (t0 as i128 + dt * hz as i128 / 1_000_000_000).clamp(0, u64::MAX as i128) as u64
}
