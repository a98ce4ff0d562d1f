//! Property tests of the encoding and of the reader's robustness.
//!
//! - Round trips: varints, zigzag, compact events (every size class and its
//!   boundaries), framed records, mixed sequences, the offline writer.
//! - Whole trace files built with [`TraceBuilder`]: read back exactly;
//!   truncated anywhere, they keep every record wholly before the cut and
//!   report the loss; corrupted, they never panic or loop, keep every chunk
//!   the corruption did not touch and report what it did touch; random
//!   bytes (with or without a valid header) never panic.
//!
//! `PROPTEST_CASES` overrides the per-test case counts below.

use std::collections::BTreeMap;
use std::fs::{self, OpenOptions};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use fntrace_format::event::{
    Compact, DecodeError, Decoder, Framed, MAX_COMPACT_LEN, TAG_EXT, encode_compact,
    pack_entry_new, pack_entry_same, pack_exit, pack_tail_exit,
};
use fntrace_format::layout::{
    CHUNK_HEADER_SIZE, ChunkHeader, FINAL_FLAG_CLEAN, FINAL_OFFSET, Final, HEADER_SIZE,
    HEADER_USED, Header, META_TID, VERSION_MAJOR, VERSION_MINOR,
};
use fntrace_format::varint::{
    MAX_VARINT_LEN, get_uvarint, put_uvarint, unzigzag, uvarint_len, zigzag,
};
use fntrace_format::writer::{ChunkBuf, TraceBuilder};
use fntrace_format::{
    Damage, Ending, FastItem, ModuleInfo, ProcessInfo, Record, SiteInfo, StreamItem, Trace,
    TraceError,
};
use proptest::prelude::*;
use proptest::sample::Index;

fn cfg(cases: u32) -> ProptestConfig {
    if std::env::var_os("PROPTEST_CASES").is_some() {
        ProptestConfig::default()
    } else {
        ProptestConfig::with_cases(cases)
    }
}

// ---------------------------------------------------------------------------
// Model of the records a stream can hold.

#[derive(Debug, Clone)]
enum Ev {
    Entry(u64, u64),
    Exit(u64),
    Tail(u64),
    Start(u64, String),
    End(u64, String),
    Lost(u64, u64),
    Unknown(u8, Vec<u8>),
    Process(u64, u64, String, Vec<String>),
    Module(u64, u64, u64, Vec<u8>, String),
    Site(u64, String, String, String, u64),
}

/// TSC deltas: small ones, the edges of every size class (inline bits
/// 3..=6, then each further varint byte), and anything.
fn delta() -> impl Strategy<Value = u64> {
    prop_oneof![
        4 => 0u64..200,
        3 => (3u32..=6, 0u32..10, -1i64..=1).prop_map(|(bits, k, o)| {
            1u64.checked_shl(bits + 7 * k)
                .unwrap_or(u64::MAX)
                .wrapping_add(o as u64)
        }),
        1 => any::<u64>(),
    ]
}

fn func() -> impl Strategy<Value = u64> {
    prop_oneof![
        0u64..4,
        0x5555_0000u64..0x5555_0100,
        (0u32..64).prop_map(|s| 1u64 << s),
        any::<u64>(),
    ]
}

fn text() -> impl Strategy<Value = String> {
    prop_oneof!["[a-z_:.]{0,10}", "\\PC{0,6}"]
}

fn blob() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(any::<u8>(), 0..12)
}

/// A record readers do not know: an extension record (0x07) of a kind
/// not defined yet (its payload starts with the kind).
fn unknown_tag() -> impl Strategy<Value = u8> {
    Just(TAG_EXT)
}

/// The payload of an unknown record: an undefined extension kind (1 to 3
/// are settings and context switches), then
/// anything.
fn unknown_payload() -> impl Strategy<Value = Vec<u8>> {
    (4u8..=127, blob()).prop_map(|(kind, mut b)| {
        b.insert(0, kind);
        b
    })
}

fn thread_ev() -> impl Strategy<Value = Ev> {
    prop_oneof![
        6 => (delta(), func()).prop_map(|(d, f)| Ev::Entry(d, f)),
        5 => delta().prop_map(Ev::Exit),
        1 => delta().prop_map(Ev::Tail),
        1 => (delta(), text()).prop_map(|(d, n)| Ev::Start(d, n)),
        1 => (delta(), text()).prop_map(|(d, n)| Ev::End(d, n)),
        1 => (delta(), any::<u64>()).prop_map(|(d, c)| Ev::Lost(d, c)),
        1 => (unknown_tag(), unknown_payload()).prop_map(|(t, b)| Ev::Unknown(t, b)),
    ]
}

fn meta_ev() -> impl Strategy<Value = Ev> {
    prop_oneof![
        (
            any::<u64>(),
            any::<u64>(),
            text(),
            prop::collection::vec("[^\u{0}]{0,5}", 0..4)
        )
            .prop_map(|(p, pp, e, a)| Ev::Process(p, pp, e, a)),
        (any::<u64>(), any::<u64>(), any::<u64>(), blob(), text())
            .prop_map(|(b, s, z, id, p)| Ev::Module(b, s, z, id, p)),
        (0u64..8, text(), text(), text(), any::<u64>())
            .prop_map(|(k, pre, n, f, l)| Ev::Site(k, pre, n, f, l)),
        (unknown_tag(), unknown_payload()).prop_map(|(t, b)| Ev::Unknown(t, b)),
    ]
}

fn any_ev() -> impl Strategy<Value = Ev> {
    prop_oneof![4 => thread_ev(), 1 => meta_ev()]
}

fn framed_ev() -> impl Strategy<Value = Ev> {
    prop_oneof![
        (delta(), text()).prop_map(|(d, n)| Ev::Start(d, n)),
        (delta(), text()).prop_map(|(d, n)| Ev::End(d, n)),
        (delta(), any::<u64>()).prop_map(|(d, c)| Ev::Lost(d, c)),
        meta_ev(),
    ]
}

fn unknown_bytes(tag: u8, payload: &[u8]) -> Vec<u8> {
    let mut b = vec![tag; 1 + MAX_VARINT_LEN];
    let mut n = 1;
    put_uvarint(&mut b, &mut n, payload.len() as u64);
    b.truncate(n);
    b.extend_from_slice(payload);
    b
}

fn cmdline(args: &[String]) -> Vec<u8> {
    args.iter().flat_map(|a| a.bytes().chain([0])).collect()
}

/// Encodes `ev` with the crate's primitives (not the writer); `prev` is the
/// previous entry's function, updated.
fn encode_ev(ev: &Ev, prev: &mut u64, out: &mut Vec<u8>) {
    let mut b = [0u8; MAX_COMPACT_LEN];
    let compact = match *ev {
        Ev::Entry(d, func) => {
            let c = Compact::Entry {
                d,
                func,
                prev: *prev,
            };
            *prev = func;
            Some(c)
        }
        Ev::Exit(d) => Some(Compact::Exit { d }),
        Ev::Tail(d) => Some(Compact::TailExit { d }),
        _ => None,
    };
    if let Some(c) = compact {
        let n = encode_compact(c, &mut b);
        out.extend_from_slice(&b[..n]);
        return;
    }
    let args;
    let rec = match ev {
        Ev::Start(d, n) => Framed::ThreadStart {
            d: *d,
            name: n.as_bytes(),
        },
        Ev::End(d, n) => Framed::ThreadExit {
            d: *d,
            name: n.as_bytes(),
        },
        Ev::Lost(d, count) => Framed::Lost {
            d: *d,
            count: *count,
        },
        Ev::Process(pid, ppid, exe, a) => {
            args = cmdline(a);
            Framed::Process {
                pid: *pid,
                ppid: *ppid,
                exe: exe.as_bytes(),
                cmdline: &args,
            }
        }
        Ev::Module(bias, start, size, id, path) => Framed::Module {
            bias: *bias,
            start: *start,
            size: *size,
            build_id: id,
            path: path.as_bytes(),
        },
        Ev::Site(key, prefix, name, file, line) => Framed::Site {
            key: *key,
            prefix: prefix.as_bytes(),
            name: name.as_bytes(),
            file: file.as_bytes(),
            line: *line,
        },
        Ev::Unknown(tag, p) => {
            out.extend_from_slice(&unknown_bytes(*tag, p));
            return;
        }
        _ => unreachable!(),
    };
    let before = out.len();
    rec.encode(out);
    assert_eq!(out.len() - before, rec.framed_len(), "{ev:?}");
}

/// Writes `ev` with the offline writer; `false` when it does not fit.
fn write_ev(c: &mut ChunkBuf, ev: &Ev) -> bool {
    match *ev {
        Ev::Entry(d, f) => c.entry(d, f),
        Ev::Exit(d) => c.exit(d),
        Ev::Tail(d) => c.tail_exit(d),
        _ => {
            let mut b = vec![];
            encode_ev(ev, &mut 0, &mut b);
            match ev {
                // Exercise the writer's framed path for one kind.
                Ev::Lost(d, count) => c.framed(&Framed::Lost {
                    d: *d,
                    count: *count,
                }),
                _ => c.raw(&b),
            }
        }
    }
}

/// `s` as the reader returns names: control characters escaped.
fn clean(s: &str) -> String {
    fntrace_format::text::sanitize(s).into_owned()
}

/// The record the reader must produce for `ev`; `tsc` is the running TSC.
fn expect(ev: &Ev, tsc: &mut u64) -> Record {
    let mut at = |d: u64| {
        *tsc = tsc.wrapping_add(d);
        *tsc
    };
    match ev {
        Ev::Entry(d, func) => Record::Entry {
            tsc: at(*d),
            func: *func,
        },
        Ev::Exit(d) => Record::Exit { tsc: at(*d) },
        Ev::Tail(d) => Record::TailExit { tsc: at(*d) },
        // Names and arguments come back without control characters
        // (paths raw: they must open their file).
        Ev::Start(d, n) => Record::ThreadStart {
            tsc: at(*d),
            name: clean(n),
        },
        Ev::End(d, n) => Record::ThreadExit {
            tsc: at(*d),
            name: clean(n),
        },
        Ev::Lost(d, count) => Record::Lost {
            tsc: at(*d),
            count: *count,
        },
        Ev::Unknown(tag, _) => Record::Unknown { tag: *tag },
        Ev::Process(pid, ppid, exe, args) => Record::Process(ProcessInfo {
            pid: *pid,
            ppid: *ppid,
            exe: exe.clone(),
            args: args.iter().map(|a| clean(a)).collect(),
        }),
        Ev::Module(bias, start, size, id, path) => Record::Module(ModuleInfo {
            bias: *bias,
            start: *start,
            size: *size,
            build_id: id.clone(),
            path: path.clone(),
        }),
        Ev::Site(key, prefix, name, file, line) => Record::Site(SiteInfo {
            key: *key,
            name: clean(&if prefix.is_empty() {
                name.clone()
            } else {
                format!("{prefix}::{name}")
            }),
            file: clean(file),
            line: u32::try_from(*line).unwrap_or(u32::MAX),
        }),
    }
}

fn decode_all(buf: &[u8], base: u64) -> Result<Vec<Record>, DecodeError> {
    let mut d = Decoder::new(buf, base);
    let mut out = vec![];
    while let Some(r) = d.next_record()? {
        out.push(r);
    }
    assert_eq!(d.position(), buf.len(), "decoder stopped early");
    Ok(out)
}

// ---------------------------------------------------------------------------
// 1. Round trips.

/// Encoded length of a compact event, from the format description.
fn compact_len(ev: Compact) -> usize {
    let (bits, d) = match ev {
        Compact::Exit { d } => (6, d),
        Compact::TailExit { d } => (3, d),
        Compact::Entry { d, func, prev } if func == prev => (5, d),
        Compact::Entry { d, .. } => (4, d),
    };
    let rest = d >> bits;
    let mut n = 1 + if rest != 0 { uvarint_len(rest) } else { 0 };
    if let Compact::Entry { func, prev, .. } = ev {
        if func != prev {
            n += uvarint_len(zigzag(func.wrapping_sub(prev) as i64));
        }
    }
    n
}

proptest! {
    #![proptest_config(cfg(512))]

    #[test]
    fn varint_roundtrip(
        v in prop_oneof![
            any::<u64>(),
            (0u32..64).prop_map(|s| 1u64 << s),
            (1u32..64).prop_map(|s| (1u64 << s) - 1),
        ],
    ) {
        let mut buf = [0xaau8; MAX_VARINT_LEN + 2];
        let mut pos = 1;
        put_uvarint(&mut buf, &mut pos, v);
        prop_assert_eq!(pos - 1, uvarint_len(v));
        prop_assert_eq!(buf[pos], 0xaa, "wrote past its length");
        let mut r = 1;
        prop_assert_eq!(get_uvarint(&buf[..pos], &mut r), Some(v));
        prop_assert_eq!(r, pos);
        // Any proper prefix is truncated.
        for cut in 1..pos {
            let mut r = 1;
            prop_assert_eq!(get_uvarint(&buf[..cut], &mut r), None);
        }
    }

    #[test]
    fn varint_of_garbage_is_bounded(bytes in prop::collection::vec(any::<u8>(), 0..16)) {
        let mut pos = 0;
        if let Some(v) = get_uvarint(&bytes, &mut pos) {
            prop_assert!(pos <= MAX_VARINT_LEN && pos <= bytes.len());
            prop_assert!(pos >= uvarint_len(v));
        }
    }

    #[test]
    fn zigzag_roundtrip(v in any::<i64>()) {
        prop_assert_eq!(unzigzag(zigzag(v)), v);
        let m = v.unsigned_abs();
        prop_assert!(zigzag(v) == m.wrapping_mul(2) || zigzag(v) == m.wrapping_mul(2) - 1);
    }

    #[test]
    fn compact_events_roundtrip(
        evs in prop::collection::vec(
            prop_oneof![
                (delta(), func()).prop_map(|(d, f)| Ev::Entry(d, f)),
                delta().prop_map(Ev::Exit),
                delta().prop_map(Ev::Tail),
            ],
            0..40,
        ),
        base in any::<u64>(),
    ) {
        let mut buf = vec![];
        let mut prev = 0;
        for ev in &evs {
            let c = match *ev {
                Ev::Entry(d, func) => Compact::Entry { d, func, prev },
                Ev::Exit(d) => Compact::Exit { d },
                Ev::Tail(d) => Compact::TailExit { d },
                _ => unreachable!(),
            };
            let before = buf.len();
            encode_ev(ev, &mut prev, &mut buf);
            let n = buf.len() - before;
            prop_assert_eq!(n, compact_len(c), "{:?}", c);
            prop_assert!(n <= MAX_COMPACT_LEN);
            // The packed single-store form is exactly the same bytes,
            // available exactly when the record fits in 8 bytes.
            let packed = match c {
                Compact::Exit { d } => pack_exit(d),
                Compact::TailExit { d } => pack_tail_exit(d),
                Compact::Entry { d, func, prev } if func == prev => pack_entry_same(d),
                Compact::Entry { d, func, prev } => pack_entry_new(d, func, prev),
            };
            match packed {
                Some((w, len)) => {
                    prop_assert_eq!(len as usize, n);
                    prop_assert_eq!(&w.to_le_bytes()[..n], &buf[before..]);
                    prop_assert!(w.to_le_bytes()[n..].iter().all(|&b| b == 0));
                }
                None => prop_assert!(n > 8, "{:?} is {} bytes but pack refused", c, n),
            }
        }
        let mut tsc = base;
        let want: Vec<Record> = evs.iter().map(|e| expect(e, &mut tsc)).collect();
        prop_assert_eq!(decode_all(&buf, base).unwrap(), want);
    }

    #[test]
    fn mixed_records_roundtrip(
        evs in prop::collection::vec(any_ev(), 0..30),
        base in any::<u64>(),
    ) {
        let mut buf = vec![];
        let mut prev = 0;
        for ev in &evs {
            encode_ev(ev, &mut prev, &mut buf);
        }
        let mut tsc = base;
        let want: Vec<Record> = evs.iter().map(|e| expect(e, &mut tsc)).collect();
        prop_assert_eq!(decode_all(&buf, base).unwrap(), want);

        // The offline writer produces the same bytes and a valid seal.
        let mut c = ChunkBuf::new((CHUNK_HEADER_SIZE + buf.len()) as u32, &ChunkHeader::default());
        for ev in &evs {
            prop_assert!(write_ev(&mut c, ev));
        }
        prop_assert_eq!(c.remaining(), 0);
        prop_assert_eq!(&c.as_bytes()[CHUNK_HEADER_SIZE..], &buf[..]);
        c.seal();
        let h = ChunkHeader::decode(c.as_bytes()[..CHUNK_HEADER_SIZE].try_into().unwrap()).unwrap();
        prop_assert_eq!(h.payload_len as usize, buf.len());
        prop_assert_eq!(h.payload_crc, crc32fast::hash(&buf));
    }

    /// Known records may grow trailing fields: a reader skips them.
    #[test]
    fn framed_records_ignore_trailing_fields(
        ev in framed_ev(),
        extra in blob(),
        base in any::<u64>(),
    ) {
        let mut buf = vec![];
        encode_ev(&ev, &mut 0, &mut buf);
        let mut p = 1;
        let len = get_uvarint(&buf, &mut p).unwrap() as usize;
        let mut payload = buf[p..].to_vec();
        prop_assert_eq!(payload.len(), len);
        payload.extend_from_slice(&extra);
        let grown = unknown_bytes(buf[0], &payload);
        let mut tsc = base;
        prop_assert_eq!(decode_all(&grown, base).unwrap(), vec![expect(&ev, &mut tsc)]);
    }

    /// Garbage never panics the decoder; it stops at the first bad record,
    /// at an offset inside the buffer, and never reads past it.
    #[test]
    fn decoder_on_garbage_is_bounded(bytes in prop::collection::vec(any::<u8>(), 0..200)) {
        let mut d = Decoder::new(&bytes, 0);
        let mut n = 0;
        loop {
            let start = d.position();
            match d.next_record() {
                Ok(Some(_)) => {
                    prop_assert!(d.position() > start && d.position() <= bytes.len());
                    n += 1;
                    prop_assert!(n <= bytes.len());
                }
                Ok(None) => {
                    prop_assert!(start == bytes.len() || bytes[start] == 0);
                    break;
                }
                Err(e) => {
                    prop_assert_eq!(e.offset, start);
                    prop_assert!(e.offset < bytes.len());
                    break;
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------
// 2. Whole files.

/// A file in the temporary directory, removed on drop.
struct TempFile(PathBuf);

impl TempFile {
    fn new(bytes: &[u8]) -> TempFile {
        static N: AtomicU64 = AtomicU64::new(0);
        let p = std::env::temp_dir().join(format!(
            "fntrace-props-{}-{}.trace",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        fs::write(&p, bytes).unwrap();
        TempFile(p)
    }

    fn path(&self) -> &Path {
        &self.0
    }

    fn set_len(&self, len: u64) {
        OpenOptions::new()
            .write(true)
            .open(&self.0)
            .unwrap()
            .set_len(len)
            .unwrap();
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.0);
    }
}

/// What a test file is made of.
#[derive(Debug, Clone)]
struct Plan {
    chunk_size: u32,
    meta: Vec<Ev>,
    threads: BTreeMap<u32, Vec<Ev>>,
    /// Bit `i % 64` says whether the `i`-th chunk written is sealed.
    sealed: u64,
    unused: usize,
    finished: bool,
    shuffle: u64,
}

fn plan() -> impl Strategy<Value = Plan> {
    (
        prop_oneof![Just(128u32), Just(160), Just(256), Just(1024)],
        prop::collection::vec(meta_ev(), 0..6),
        prop::collection::btree_map(
            1u32..=u32::MAX,
            prop::collection::vec(thread_ev(), 0..80),
            0..4,
        ),
        (any::<u64>(), any::<u64>()).prop_map(|(a, b)| a | b),
        0usize..3,
        any::<bool>(),
        any::<u64>(),
    )
        .prop_map(
            |(chunk_size, meta, threads, sealed, unused, finished, shuffle)| Plan {
                chunk_size,
                meta,
                threads,
                sealed,
                unused,
                finished,
                shuffle,
            },
        )
}

/// One chunk of a built file and the records it holds.
#[derive(Debug, Clone)]
struct ChunkInfo {
    offset: u64,
    tid: u32,
    seq: u32,
    sealed: bool,
    used: usize,
    /// Each record with the payload offset where it ends.
    records: Vec<(Record, usize)>,
}

#[derive(Debug)]
struct Built {
    bytes: Vec<u8>,
    chunk_size: u64,
    finished: bool,
    /// Used chunks, in file order.
    chunks: Vec<ChunkInfo>,
    /// Offsets of never-used chunks.
    unused: Vec<u64>,
}

impl Built {
    /// Every stream's records, chunks in sequence order, `keep` deciding
    /// which records of each chunk count.
    fn expected(
        &self,
        mut keep: impl FnMut(&ChunkInfo, usize) -> bool,
    ) -> BTreeMap<u32, Vec<Record>> {
        let mut cs: Vec<&ChunkInfo> = self.chunks.iter().collect();
        cs.sort_by_key(|c| (c.tid, c.seq));
        let mut out: BTreeMap<u32, Vec<Record>> = BTreeMap::new();
        for c in cs {
            for (r, end) in &c.records {
                if keep(c, *end) {
                    out.entry(c.tid).or_default().push(r.clone());
                }
            }
        }
        out
    }
}

fn splitmix(s: &mut u64) -> u64 {
    *s = s.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *s;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

const START_TSC: u64 = 1_000_000;

fn test_header(chunk_size: u32) -> Header {
    Header {
        version_major: VERSION_MAJOR,
        version_minor: VERSION_MINOR,
        header_size: HEADER_SIZE,
        chunk_size,
        flags: 0,
        tsc_hz: 1_000_000_000,
        start_tsc: START_TSC,
        start_mono_ns: 5_000,
        start_realtime_ns: 1_700_000_000_000_000_000,
        pid: 4242,
        ring_chunks: 0,
    }
}

fn build(plan: &Plan) -> Built {
    let mut chunks: Vec<(ChunkBuf, ChunkInfo)> = vec![];
    let mut nth = 0u32;
    let streams =
        std::iter::once((META_TID, &plan.meta)).chain(plan.threads.iter().map(|(t, e)| (*t, e)));
    for (tid, evs) in streams {
        let mut seq = 0;
        let mut depth = 0u32;
        let mut tsc = START_TSC;
        let new = |seq: u32, depth: u32, tsc: u64| {
            let h = ChunkHeader {
                tid,
                seq,
                depth,
                base_tsc: tsc,
                base_mono_ns: tsc / 2,
                ..ChunkHeader::default()
            };
            ChunkBuf::new(plan.chunk_size, &h)
        };
        let mut cur = new(0, 0, tsc);
        let mut recs = vec![];
        let mut close = |cur: &mut ChunkBuf, recs: &mut Vec<(Record, usize)>| {
            let sealed = plan.sealed >> (nth % 64) & 1 != 0;
            nth += 1;
            if sealed {
                cur.seal();
            }
            let info = ChunkInfo {
                offset: 0,
                tid,
                seq: cur.header().seq,
                sealed,
                used: cur.payload_len(),
                records: std::mem::take(recs),
            };
            chunks.push((cur.clone(), info));
        };
        for ev in evs {
            let mut fits = write_ev(&mut cur, ev);
            if !fits {
                close(&mut cur, &mut recs);
                seq += 1;
                cur = new(seq, depth, tsc);
                fits = write_ev(&mut cur, ev);
            }
            if !fits {
                continue; // larger than a chunk: not written
            }
            // A new chunk's base TSC is the running TSC.
            let mut t = tsc;
            recs.push((expect(ev, &mut t), cur.payload_len()));
            if !matches!(
                ev,
                Ev::Process(..) | Ev::Module(..) | Ev::Site(..) | Ev::Unknown(..)
            ) {
                tsc = t;
            }
            match ev {
                Ev::Entry(..) => depth = depth.wrapping_add(1),
                Ev::Exit(_) | Ev::Tail(_) => depth = depth.saturating_sub(1),
                _ => {}
            }
        }
        close(&mut cur, &mut recs);
    }
    // File order: shuffled, with never-used chunks mixed in.
    let mut order: Vec<Option<usize>> = (0..chunks.len()).map(Some).collect();
    order.extend(std::iter::repeat_n(None, plan.unused));
    let mut s = plan.shuffle;
    for i in (1..order.len()).rev() {
        let j = (splitmix(&mut s) % (i as u64 + 1)) as usize;
        order.swap(i, j);
    }
    let mut b = TraceBuilder::new(test_header(plan.chunk_size));
    let mut infos = vec![];
    let mut unused = vec![];
    for o in order {
        match o {
            Some(i) => {
                let (buf, info) = &chunks[i];
                let offset = b.push_chunk(buf);
                infos.push(ChunkInfo {
                    offset,
                    ..info.clone()
                });
            }
            None => unused.push(b.push_unused()),
        }
    }
    let n = b.chunks();
    let bytes = if plan.finished {
        b.finish(&Final {
            flags: FINAL_FLAG_CLEAN,
            end_tsc: START_TSC + 1,
            end_mono_ns: 6_000,
            tsc_hz: 1_000_000_000,
            chunks: n,
            lost_events: 3,
            full_tsc: 0,
            events: 0,
            overwritten: 0,
        })
    } else {
        b.into_unfinished()
    };
    Built {
        bytes,
        chunk_size: u64::from(plan.chunk_size),
        finished: plan.finished,
        chunks: infos,
        unused,
    }
}

/// Everything the reader yields, with sanity checks on the way.
struct ReadBack {
    streams: BTreeMap<u32, Vec<Record>>,
    damage: Vec<Damage>,
    gaps: usize,
}

fn read_all(t: &Trace) -> ReadBack {
    let mut tids = t.thread_ids();
    tids.push(META_TID);
    let chunks = t.file_len() / u64::from(t.header().chunk_size) + 1;
    let bound = t.file_len() + 2 * chunks;
    let mut streams = BTreeMap::new();
    let mut damage = t.damage().to_vec();
    let mut items = 0u64;
    let mut gaps = 0;
    for tid in tids {
        let mut r = t.stream(tid);
        let mut recs = vec![];
        while let Some(it) = r.next_item() {
            items += 1;
            assert!(items <= bound, "more items than the file can hold");
            match it {
                StreamItem::Record(rec) => recs.push(rec),
                StreamItem::Gap { .. } => gaps += 1,
            }
        }
        damage.extend(r.take_damage());
        // The fast reader yields the same items (compact events unboxed)
        // and the same damage.
        let mut f = t.stream(tid);
        let mut fast = vec![];
        while let Some(it) = f.next_fast() {
            fast.push(match it {
                FastItem::Entry { func, tsc } => StreamItem::Record(Record::Entry { func, tsc }),
                FastItem::Exit { tsc } => StreamItem::Record(Record::Exit { tsc }),
                FastItem::Other(o) => *o,
            });
        }
        let mut slow = vec![];
        let mut s2 = t.stream(tid);
        // Positions taken on the way, with the items read so far.
        let mut positions = vec![];
        loop {
            if let Some(p) = s2.position() {
                positions.push((p, slow.len()));
            }
            let Some(it) = s2.next_item() else { break };
            slow.push(match it {
                StreamItem::Record(Record::TailExit { tsc }) => {
                    StreamItem::Record(Record::Exit { tsc })
                }
                o => o,
            });
        }
        assert_eq!(fast, slow, "fast and plain readers differ on thread {tid}");
        // Reading from a position yields the rest of the stream.
        let step = positions.len() / 7 + 1;
        for &(p, done) in positions.iter().step_by(step) {
            let mut r = t.stream_at(tid, p);
            let mut rest = vec![];
            while let Some(it) = r.next_item() {
                rest.push(match it {
                    StreamItem::Record(Record::TailExit { tsc }) => {
                        StreamItem::Record(Record::Exit { tsc })
                    }
                    o => o,
                });
            }
            assert_eq!(rest, slow[done..], "thread {tid} read from {p:?}");
        }
        assert_eq!(f.take_damage(), s2.take_damage());
        if !recs.is_empty() {
            streams.insert(tid, recs);
        }
    }
    for d in &damage {
        assert!(d.offset <= t.file_len(), "damage past the end: {d}");
        assert!(d.to_string().starts_with("byte "), "{d}");
    }
    ReadBack {
        streams,
        damage,
        gaps,
    }
}

fn nonempty(m: BTreeMap<u32, Vec<Record>>) -> BTreeMap<u32, Vec<Record>> {
    m.into_iter().filter(|(_, v)| !v.is_empty()).collect()
}

fn check_error(e: &TraceError, path: &Path) {
    assert_eq!(e.path, path);
    let off = e.offset.expect("a header error has an offset");
    let msg = e.to_string();
    assert!(
        msg.starts_with(&format!("{}: byte {off}: ", path.display())),
        "{msg}"
    );
}

/// What a read of an intact file must show.
fn check_intact(built: &Built, plan: &Plan) {
    let f = TempFile::new(&built.bytes);
    let t = Trace::open(f.path()).unwrap();
    let got = read_all(&t);
    assert!(got.damage.is_empty(), "{:?}", got.damage);
    assert_eq!(got.gaps, 0);
    assert_eq!(got.streams, nonempty(built.expected(|_, _| true)));
    assert_eq!(
        t.ending(),
        if plan.finished {
            Ending::Clean
        } else {
            Ending::Unfinished
        }
    );
    assert_eq!(t.unused_chunks(), plan.unused as u64);
    let want_tids: Vec<u32> = plan.threads.keys().copied().collect();
    assert_eq!(t.thread_ids(), want_tids);
    // Metadata: the last process, distinct modules in order, first site of
    // each key.
    let m = t.metadata();
    let recs: Vec<Record> = built
        .expected(|c, _| c.tid == META_TID)
        .remove(&META_TID)
        .unwrap_or_default();
    let process = recs.iter().rev().find_map(|r| match r {
        Record::Process(p) => Some(p.clone()),
        _ => None,
    });
    assert_eq!(m.process, process);
    let mut modules: Vec<ModuleInfo> = vec![];
    for r in &recs {
        if let Record::Module(x) = r {
            if !modules.contains(x) {
                modules.push(x.clone());
            }
        }
        if let Record::Site(s) = r {
            if !m.sites.contains_key(&s.key) {
                panic!("site {} missing", s.key);
            }
        }
    }
    assert_eq!(m.modules, modules);
    for (k, s) in &m.sites {
        let first = recs.iter().find_map(|r| match r {
            Record::Site(x) if x.key == *k => Some(x),
            _ => None,
        });
        assert_eq!(Some(s), first);
    }
}

/// Truncates the file to each of `cuts` (longest first) and checks what
/// the reader keeps and reports.
fn check_cuts(built: &Built, mut cuts: Vec<u64>) {
    let f = TempFile::new(&built.bytes);
    let len = built.bytes.len() as u64;
    cuts.sort_unstable_by(|a, b| b.cmp(a));
    cuts.dedup();
    for cut in cuts {
        assert!(cut <= len);
        f.set_len(cut);
        let t = match Trace::open(f.path()) {
            Ok(t) => t,
            Err(e) => {
                assert!(cut < HEADER_USED as u64, "cut at {cut}: {e}");
                check_error(&e, f.path());
                continue;
            }
        };
        assert!(cut >= HEADER_USED as u64, "cut at {cut} opened");
        let got = read_all(&t);
        let want =
            nonempty(built.expected(|c, end| c.offset + (CHUNK_HEADER_SIZE + end) as u64 <= cut));
        assert_eq!(got.streams, want, "cut at {cut}");
        if cut == len {
            assert!(got.damage.is_empty(), "{:?}", got.damage);
            continue;
        }
        // A finished trace knows its length; an unfinished one knows when
        // the cut is inside a chunk that held data.
        let in_chunk = built
            .chunks
            .iter()
            .find(|c| c.offset < cut && cut < c.offset + built.chunk_size);
        let lost_here = in_chunk.is_some_and(|c| {
            cut < c.offset + CHUNK_HEADER_SIZE as u64
                || (!c.sealed && cut < c.offset + built.chunk_size)
                || c.offset + (CHUNK_HEADER_SIZE + c.used) as u64 > cut
        });
        if built.finished || lost_here {
            assert!(!got.damage.is_empty(), "cut at {cut} of {len} not reported");
        }
    }
}

proptest! {
    #![proptest_config(cfg(128))]

    #[test]
    fn built_files_read_back_exactly(plan in plan()) {
        let built = build(&plan);
        check_intact(&built, &plan);
    }

    #[test]
    fn truncated_files_keep_the_prefix(
        plan in plan(),
        cuts in prop::collection::vec(any::<Index>(), 1..12),
    ) {
        let built = build(&plan);
        let len = built.bytes.len();
        let mut cuts: Vec<u64> = cuts.iter().map(|i| i.index(len + 1) as u64).collect();
        // Also the edges of a few chunks.
        for c in built.chunks.iter().take(3) {
            let o = c.offset;
            cuts.extend([o, o + 1, o + 63, o + 64, o + 65, o + (64 + c.used) as u64]);
        }
        cuts.retain(|&c| c <= len as u64);
        check_cuts(&built, cuts);
    }
}

/// A fixed trace with several threads over many small chunks, cut at
/// every single offset.
#[test]
fn truncated_at_every_offset() {
    for finished in [false, true] {
        let mut threads = BTreeMap::new();
        for tid in [7u32, 9] {
            let mut evs = vec![Ev::Start(3, format!("t{tid}"))];
            for i in 0..60u64 {
                evs.push(Ev::Entry(i * 37, 0x4000 + i % 5));
                evs.push(Ev::Entry(i << (i % 60), 0x4000 + i % 5));
                evs.push(Ev::Exit(i));
                evs.push(Ev::Tail(1 << (i % 64)));
            }
            evs.push(Ev::Lost(1, 2));
            evs.push(Ev::End(9, "bye".into()));
            threads.insert(tid, evs);
        }
        let plan = Plan {
            chunk_size: 128,
            meta: vec![
                Ev::Process(1, 2, "/bin/x".into(), vec!["x".into(), "-v".into()]),
                Ev::Site(3, "T".into(), "f".into(), "a.rs".into(), 10),
            ],
            threads,
            sealed: 0xffff_ffff_ffff_fdef,
            unused: 2,
            finished,
            shuffle: 17,
        };
        let built = build(&plan);
        check_intact(&built, &plan);
        assert!(built.chunks.len() > 20);
        check_cuts(&built, (0..=built.bytes.len() as u64).collect());
    }
}

// ---------------------------------------------------------------------------
// 2b. Corruption.

#[derive(Debug, Clone)]
enum Where {
    Anywhere(Index),
    Header(Index),
    ChunkHeader(Index, Index),
}

#[derive(Debug, Clone)]
enum Mutation {
    Xor(Where, u8),
    Overwrite(Where, Vec<u8>),
    Fill(Where, usize, u8),
}

fn place() -> impl Strategy<Value = Where> {
    prop_oneof![
        4 => any::<Index>().prop_map(Where::Anywhere),
        1 => any::<Index>().prop_map(Where::Header),
        3 => (any::<Index>(), any::<Index>()).prop_map(|(c, b)| Where::ChunkHeader(c, b)),
    ]
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        4 => (place(), 1u8..=255).prop_map(|(w, x)| Mutation::Xor(w, x)),
        2 => (place(), prop::collection::vec(any::<u8>(), 1..40))
            .prop_map(|(w, b)| Mutation::Overwrite(w, b)),
        1 => (place(), 1usize..300, prop_oneof![Just(0u8), Just(0xff), any::<u8>()])
            .prop_map(|(w, n, b)| Mutation::Fill(w, n, b)),
    ]
}

fn apply(built: &Built, muts: &[Mutation]) -> Vec<u8> {
    let mut b = built.bytes.clone();
    let nchunks = (b.len() - HEADER_SIZE as usize) / built.chunk_size as usize;
    let len = b.len();
    let at = |w: &Where| match w {
        Where::Anywhere(i) => i.index(len),
        Where::Header(i) => i.index(HEADER_USED),
        Where::ChunkHeader(c, i) if nchunks > 0 => {
            HEADER_SIZE as usize
                + c.index(nchunks) * built.chunk_size as usize
                + i.index(CHUNK_HEADER_SIZE)
        }
        Where::ChunkHeader(_, i) => i.index(len),
    };
    for m in muts {
        match m {
            Mutation::Xor(w, x) => {
                let p = at(w);
                b[p] ^= x;
            }
            Mutation::Overwrite(w, bytes) => {
                let p = at(w);
                let n = bytes.len().min(b.len() - p);
                b[p..p + n].copy_from_slice(&bytes[..n]);
            }
            Mutation::Fill(w, n, x) => {
                let p = at(w);
                let n = (*n).min(b.len() - p);
                b[p..p + n].fill(*x);
            }
        }
    }
    b
}

fn is_subsequence(small: &[Record], big: &[Record]) -> bool {
    let mut it = big.iter();
    small.iter().all(|s| it.any(|b| b == s))
}

fn check_corrupted(built: &Built, bytes: &[u8]) {
    let changed: Vec<usize> = (0..bytes.len())
        .filter(|&i| bytes[i] != built.bytes[i])
        .collect();
    let touched = |from: u64, to: u64| changed.iter().any(|&i| (from..to).contains(&(i as u64)));
    let f = TempFile::new(bytes);
    let t = match Trace::open(f.path()) {
        Ok(t) => t,
        Err(e) => {
            check_error(&e, f.path());
            assert!(touched(0, FINAL_OFFSET as u64), "{e}");
            return;
        }
    };
    let got = read_all(&t);
    // Chunks the corruption missed are read whole.
    let cs = built.chunk_size;
    let want = built.expected(|c, _| !touched(c.offset, c.offset + cs));
    for (tid, recs) in &want {
        let have = got.streams.get(tid).map_or(&[][..], |v| &v[..]);
        assert!(
            is_subsequence(recs, have),
            "thread {tid}: {recs:?}\nnot in {have:?}"
        );
    }
    // Corruption of checked bytes is reported.
    let fin_now = &bytes[FINAL_OFFSET..HEADER_USED];
    let mut must_report =
        touched(FINAL_OFFSET as u64, HEADER_USED as u64) && fin_now.iter().any(|&x| x != 0);
    for c in &built.chunks {
        let o = c.offset;
        let hdr = &bytes[o as usize..o as usize + CHUNK_HEADER_SIZE];
        if hdr.iter().all(|&x| x == 0) {
            // Blanked: indistinguishable from a chunk never used.
            continue;
        }
        must_report |= touched(o, o + 36);
        // A seal is checked: its length against the chunk, its checksum
        // against the payload, and the byte after the payload for zero.
        let u32_at = |i: usize| u32::from_le_bytes(bytes[i..i + 4].try_into().unwrap());
        let o = o as usize;
        if u32_at(o + 36) & 1 != 0 {
            let len = u32_at(o + 40) as usize;
            let payload = &bytes[o + CHUNK_HEADER_SIZE..o + cs as usize];
            must_report |= len > payload.len()
                || crc32fast::hash(&payload[..len]) != u32_at(o + 44)
                || payload.get(len).is_some_and(|&b| b != 0);
        }
    }
    for &o in &built.unused {
        must_report |= touched(o, o + CHUNK_HEADER_SIZE as u64);
    }
    if must_report {
        assert!(
            !got.damage.is_empty(),
            "corruption at {changed:?} not reported"
        );
    }
}

proptest! {
    #![proptest_config(cfg(256))]

    #[test]
    fn corrupted_files_degrade_gracefully(
        plan in plan(),
        muts in prop::collection::vec(mutation(), 1..6),
    ) {
        let built = build(&plan);
        let bytes = apply(&built, &muts);
        check_corrupted(&built, &bytes);
    }
}

// ---------------------------------------------------------------------------
// 2c. Random bytes.

/// Reads whatever opens; the checks are that nothing panics or loops.
fn open_and_read(bytes: &[u8]) {
    let f = TempFile::new(bytes);
    match Trace::open(f.path()) {
        Ok(t) => {
            let _ = read_all(&t);
            let _ = t.tsc_hz();
        }
        Err(e) => check_error(&e, f.path()),
    }
}

fn odd_header() -> impl Strategy<Value = Header> {
    (
        prop_oneof![Just(HEADER_SIZE), Just(256u32), 0u32..300, any::<u32>()],
        prop_oneof![
            Just(128u32),
            Just(200),
            0u32..300,
            Just(1 << 30),
            any::<u32>()
        ],
        any::<(u64, u64, u64)>(),
        prop_oneof![Just(VERSION_MAJOR), any::<u16>()],
    )
        .prop_map(|(header_size, chunk_size, (hz, tsc, mono), major)| Header {
            version_major: major,
            header_size,
            chunk_size,
            tsc_hz: hz,
            start_tsc: tsc,
            start_mono_ns: mono,
            ..test_header(chunk_size)
        })
}

fn any_final() -> impl Strategy<Value = Option<Final>> {
    prop::option::of(
        (
            any::<u32>(),
            any::<(u64, u64, u64)>(),
            prop_oneof![0u64..100, any::<u64>()],
            any::<u64>(),
        )
            .prop_map(
                |(flags, (end_tsc, end_mono_ns, tsc_hz), chunks, lost_events)| Final {
                    flags,
                    end_tsc,
                    end_mono_ns,
                    tsc_hz,
                    chunks,
                    lost_events,
                    full_tsc: 0,
                    events: 0,
                    overwritten: 0,
                },
            ),
    )
}

/// Chunks with valid headers around random payloads.
/// A chunk header, whether to seal, seal fields to force, the payload.
type GarbageChunk = (ChunkHeader, bool, Option<(u32, u32, u32)>, Vec<u8>);

fn garbage_chunk() -> impl Strategy<Value = GarbageChunk> {
    (
        (0u32..3, 0u32..4, any::<u32>(), any::<u64>(), any::<u64>()),
        any::<bool>(),
        prop::option::weighted(0.2, any::<(u32, u32, u32)>()),
        prop::collection::vec(any::<u8>(), 0..300),
    )
        .prop_map(
            |((tid, seq, depth, base_tsc, base_mono_ns), seal, seal_fields, payload)| {
                let h = ChunkHeader {
                    tid,
                    seq,
                    depth,
                    base_tsc,
                    base_mono_ns,
                    ..ChunkHeader::default()
                };
                (h, seal, seal_fields, payload)
            },
        )
}

proptest! {
    #![proptest_config(cfg(256))]

    #[test]
    fn random_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..5000)) {
        open_and_read(&bytes);
    }

    #[test]
    fn random_bytes_after_a_header_never_panic(
        h in odd_header(),
        fin in any_final(),
        tail in prop::collection::vec(any::<u8>(), 0..3000),
    ) {
        let mut bytes = vec![0u8; HEADER_SIZE as usize];
        bytes[..FINAL_OFFSET].copy_from_slice(&h.encode());
        if let Some(f) = &fin {
            bytes[FINAL_OFFSET..HEADER_USED].copy_from_slice(&f.encode());
        }
        let hs = (h.header_size as usize).min(bytes.len());
        bytes.truncate(hs.max(HEADER_USED));
        bytes.extend_from_slice(&tail);
        open_and_read(&bytes);
    }

    #[test]
    fn valid_chunks_of_garbage_never_panic(
        chunk_size in prop_oneof![Just(128u32), Just(200), Just(400)],
        fin in any_final(),
        chunks in prop::collection::vec(garbage_chunk(), 0..12),
        cut in any::<Index>(),
    ) {
        let mut b = TraceBuilder::new(test_header(chunk_size));
        let mut patches = vec![];
        for (h, seal, seal_fields, payload) in &chunks {
            let mut c = b.new_chunk(h);
            let n = payload.len().min(c.remaining());
            c.raw(&payload[..n]);
            if *seal {
                c.seal();
            }
            let off = b.push_chunk(&c) as usize;
            if let Some(fields) = seal_fields {
                patches.push((off, *fields));
            }
        }
        let mut bytes = match &fin {
            Some(f) => b.finish(f),
            None => b.into_unfinished(),
        };
        for (off, (flags, len, crc)) in patches {
            bytes[off + 36..off + 40].copy_from_slice(&flags.to_le_bytes());
            bytes[off + 40..off + 44].copy_from_slice(&len.to_le_bytes());
            bytes[off + 44..off + 48].copy_from_slice(&crc.to_le_bytes());
        }
        let cut = HEADER_USED + cut.index(bytes.len() - HEADER_USED + 1);
        open_and_read(&bytes[..cut]);
    }
}

// ---------------------------------------------------------------------------
// Regressions.

/// Found by `random_bytes_after_a_header_never_panic`: the file length a
/// final block implies overflowed (`chunks * chunk_size`) and panicked.
#[test]
fn final_block_with_an_impossible_chunk_count() {
    for (chunk_size, chunks) in [
        (1 << 30, 1 << 34),
        (128, 144_115_188_075_855_840),
        (128, u64::MAX),
    ] {
        let b = TraceBuilder::new(test_header(chunk_size));
        let bytes = b.finish(&Final {
            flags: FINAL_FLAG_CLEAN,
            chunks,
            ..Final::default()
        });
        let f = TempFile::new(&bytes);
        let t = Trace::open(f.path()).unwrap();
        assert!(
            t.damage()
                .iter()
                .any(|d| d.problem.contains("file was cut")),
            "{:?}",
            t.damage()
        );
    }
}

/// Found by `corrupted_files_degrade_gracefully`: a sealed flag set on an
/// unsealed chunk made it read as an empty sealed chunk (length and
/// checksum 0 match), losing its records without a word.
#[test]
fn sealed_flag_on_an_unsealed_chunk_is_reported() {
    let mut b = TraceBuilder::new(test_header(256));
    let mut c = b.new_chunk(&ChunkHeader {
        tid: 3,
        base_tsc: 10,
        ..ChunkHeader::default()
    });
    assert!(c.entry(1, 0x10) && c.exit(2));
    let off = b.push_chunk(&c) as usize;
    let mut bytes = b.into_unfinished();
    let f = TempFile::new(&bytes);
    let t = Trace::open(f.path()).unwrap();
    assert_eq!(t.stream(3).count(), 2);
    bytes[off + 36] |= 1;
    let f = TempFile::new(&bytes);
    let t = Trace::open(f.path()).unwrap();
    let mut r = t.stream(3);
    assert_eq!(r.by_ref().count(), 0);
    let d = r.take_damage();
    assert_eq!(d.len(), 1, "{d:?}");
    assert_eq!(d[0].offset, (off + CHUNK_HEADER_SIZE) as u64);
    assert!(
        d[0].problem
            .contains("data after the end of a sealed chunk")
    );
}
