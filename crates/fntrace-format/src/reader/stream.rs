//! One thread's stream ([`ThreadReader`]): the records of its chunks in
//! order, with every check a chunk gets (sequence, size, seal, payload
//! checksum, decoding) and a [`StreamItem::Gap`] where data is missing;
//! positions to resume reading at ([`StreamPos`]), and the [`Trace`]
//! methods that open streams.

use std::os::unix::fs::FileExt;

use super::{ChunkEntry, Damage, MAX_WINDOW_DEPTH, Trace};
use crate::event::{Decoder, Record};
use crate::layout::CHUNK_HEADER_SIZE;

impl Trace {
    /// Reads one thread's stream (or the metadata stream, `META_TID`).
    pub fn stream(&self, tid: u32) -> ThreadReader<'_> {
        let chunks: Vec<&ChunkEntry> = self.thread_chunks(tid).collect();
        ThreadReader {
            trace: self,
            tid,
            chunks,
            next_chunk: 0,
            expected_seq: 0,
            buf: vec![],
            batch: vec![],
            batch_pos: 0,
            cur: None,
            damage: vec![],
            last_tsc: self.header.start_tsc,
            known: None,
            resync: false,
        }
    }

    /// Reads one thread's stream from `pos` on (a position a reader of
    /// the same stream returned with [`ThreadReader::position`], or
    /// [`Trace::chunk_start`]): the records from there are the ones the
    /// whole stream's reader yields after that point, except that a gap
    /// in front of `pos`'s chunk is not reported again (the caller knows
    /// the call depth there). A position past the stream's end reads as
    /// the end.
    pub fn stream_at(&self, tid: u32, pos: StreamPos) -> ThreadReader<'_> {
        let mut r = self.stream(tid);
        let k = pos.chunk as usize;
        let Some(&c) = r.chunks.get(k) else {
            r.next_chunk = r.chunks.len();
            return r;
        };
        if k > 0 {
            let p = r.chunks[k - 1];
            r.known = Some((p.offset, self.checked_chunk_depths(tid)[k - 1]));
        }
        r.next_chunk = k;
        r.expected_seq = c.header.seq;
        if r.load_next_chunk() {
            // A bad chunk ends at once and sets `resync`: its successor's
            // gap is reported as in a whole-stream read.
            r.batch.clear();
            r.batch_pos = 0;
            if let Some(cs) = r.cur.as_mut() {
                cs.pos = (pos.offset as usize).min(cs.len);
                if pos.offset > 0 {
                    cs.tsc = pos.tsc;
                    cs.prev_func = pos.prev_func;
                }
                r.last_tsc = cs.tsc;
            }
        }
        r
    }

    /// The position of the start of chunk `index` (in stream order) of
    /// thread `tid`, with the call depth its header records, checked as a
    /// whole-stream read checks it; `None` past the last chunk.
    pub fn chunk_start(&self, tid: u32, index: usize) -> Option<(StreamPos, u32)> {
        let c = &self.chunks[*self.threads.get(&tid)?.get(index)?];
        let depth = self.checked_chunk_depths(tid).get(index).copied()?;
        Some((
            StreamPos {
                chunk: index as u32,
                offset: 0,
                tsc: c.header.base_tsc,
                prev_func: 0,
            },
            depth,
        ))
    }

    /// The call depth each chunk of thread `tid` starts at (stream order),
    /// checked against what the file can hold as a whole-stream read
    /// checks it (an implausible depth is replaced by the previous one).
    pub fn checked_chunk_depths(&self, tid: u32) -> &[u32] {
        let all = self.depths.get_or_init(|| {
            self.threads
                .keys()
                .map(|&t| {
                    let mut r = self.stream(t);
                    let chunks = r.chunks.clone();
                    let v = chunks
                        .iter()
                        .map(|c| {
                            let d = r.checked_depth(c);
                            r.known = Some((c.offset, d));
                            d
                        })
                        .collect();
                    (t, v)
                })
                .collect()
        });
        all.get(&tid).map_or(&[], |v| v.as_slice())
    }
}

/// Iterator over the records of one thread's stream.
///
/// Where data is missing (a damaged or absent chunk, or a record that
/// cannot be decoded) the reader skips to the next good chunk, yields a
/// [`Gap`](StreamItem::Gap) with the call depth the writer had there, and
/// notes the damage.
pub struct ThreadReader<'t> {
    trace: &'t Trace,
    tid: u32,
    chunks: Vec<&'t ChunkEntry>,
    next_chunk: usize,
    expected_seq: u32,
    buf: Vec<u8>,
    /// Gaps waiting to be returned (before the current chunk's records).
    batch: Vec<StreamItem>,
    batch_pos: usize,
    /// Where decoding of the current chunk stands.
    cur: Option<Cursor>,
    damage: Vec<Damage>,
    last_tsc: u64,
    /// The last chunk of the stream whose header was accepted: its file
    /// offset and its (checked) call depth.
    known: Option<(u64, u32)>,
    /// The chunk that ended last lost its end: the next chunk's depth
    /// resynchronises the stack.
    resync: bool,
}

/// A place between two records of a thread stream, to resume reading
/// there later ([`Trace::stream_at`]) without decoding what lies before.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StreamPos {
    /// Index of the chunk in the stream (stream order, not the file's).
    pub chunk: u32,
    /// Payload byte of the next record.
    pub offset: u32,
    /// TSC of the previous timed record (the base of the next delta).
    pub tsc: u64,
    /// Function of the previous entry of the chunk (0 at its start).
    pub prev_func: u64,
}

/// An item of a thread stream in the form analysis loops want: compact
/// events without allocation, anything else boxed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FastItem {
    /// Function entry.
    Entry {
        /// Function key.
        func: u64,
        /// Absolute TSC.
        tsc: u64,
    },
    /// Exit (or tail exit) of the innermost call.
    Exit {
        /// Absolute TSC.
        tsc: u64,
    },
    /// Any other record, or a gap.
    Other(Box<StreamItem>),
}

/// Decoding position inside the current chunk of a stream.
#[derive(Debug, Clone, Copy)]
struct Cursor {
    /// Index of the chunk in the stream's chunk list.
    entry: usize,
    /// Bytes of payload to decode.
    len: usize,
    pos: usize,
    tsc: u64,
    prev_func: u64,
}

/// An item of a thread stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StreamItem {
    /// A record.
    Record(Record),
    /// Data was lost here; after the gap the thread's call depth is
    /// `depth` (entries recorded minus exits recorded).
    Gap {
        /// TSC of the last record before the gap.
        tsc: u64,
        /// Call depth at the first record after the gap.
        depth: u32,
    },
}

impl ThreadReader<'_> {
    /// The thread id.
    pub fn tid(&self) -> u32 {
        self.tid
    }

    /// Damage found so far in this stream.
    pub fn damage(&self) -> &[Damage] {
        &self.damage
    }

    /// Takes the damage found so far.
    pub fn take_damage(&mut self) -> Vec<Damage> {
        std::mem::take(&mut self.damage)
    }

    /// Where the reader stands when that is between two records of a
    /// chunk; `None` before the first chunk is loaded and while gaps are
    /// waiting to be returned.
    pub fn position(&self) -> Option<StreamPos> {
        if self.batch_pos < self.batch.len() {
            return None;
        }
        self.cur.as_ref().map(|cs| StreamPos {
            chunk: cs.entry as u32,
            offset: cs.pos as u32,
            tsc: cs.tsc,
            prev_func: cs.prev_func,
        })
    }

    /// Ends the stream after the chunk being decoded (to read one chunk
    /// of a stream with [`Trace::stream_at`]).
    pub fn stop_after_current(&mut self) {
        self.chunks.truncate(self.next_chunk);
    }

    /// Chunks of the stream loaded so far (the index of the chunk being
    /// decoded is one less).
    #[inline]
    pub fn chunks_loaded(&self) -> usize {
        self.next_chunk
    }

    /// Reads the stream's chunks before `upto` (stream order) with every
    /// check a whole-stream read makes of a chunk (sequence, size, seal,
    /// payload checksum: what is wrong goes to [`ThreadReader::damage`])
    /// but without decoding their records, then stops. What `fntrace
    /// info` needs of a trace whose writer counted its events.
    pub fn check_chunks(&mut self, upto: usize) {
        while self.next_chunk < upto.min(self.chunks.len()) {
            if !self.load_next_chunk() {
                break;
            }
            self.cur = None;
            self.batch.clear();
            self.batch_pos = 0;
        }
    }

    /// The next item, with compact events decoded without building a
    /// [`Record`] (the fast path of analysis).
    #[inline]
    pub fn next_fast(&mut self) -> Option<FastItem> {
        if self.batch_pos >= self.batch.len() {
            if let Some(cs) = self.cur.as_mut() {
                let mut dec = Decoder::resume(&self.buf[..cs.len], cs.pos, cs.tsc, cs.prev_func);
                if let Ok(Some((kind, func, tsc))) = dec.next_compact() {
                    cs.pos = dec.position();
                    cs.tsc = dec.tsc();
                    cs.prev_func = dec.prev_func();
                    return Some(if kind == 0 {
                        FastItem::Entry { func, tsc }
                    } else {
                        FastItem::Exit { tsc }
                    });
                }
            }
        }
        match self.next_item()? {
            StreamItem::Record(Record::Entry { func, tsc }) => Some(FastItem::Entry { func, tsc }),
            StreamItem::Record(Record::Exit { tsc } | Record::TailExit { tsc }) => {
                Some(FastItem::Exit { tsc })
            }
            other => Some(FastItem::Other(Box::new(other))),
        }
    }

    /// The next item, gaps included.
    pub fn next_item(&mut self) -> Option<StreamItem> {
        loop {
            if self.batch_pos < self.batch.len() {
                let it = std::mem::replace(
                    &mut self.batch[self.batch_pos],
                    StreamItem::Gap { tsc: 0, depth: 0 },
                );
                self.batch_pos += 1;
                return Some(it);
            }
            if self.cur.is_some() {
                if let Some(it) = self.next_in_chunk() {
                    return Some(it);
                }
                // The chunk ended; gaps it left come first.
                continue;
            }
            if !self.load_next_chunk() {
                return None;
            }
        }
    }

    fn gap(&mut self, depth: u32) {
        self.batch.push(StreamItem::Gap {
            tsc: self.last_tsc,
            depth,
        });
    }

    fn load_next_chunk(&mut self) -> bool {
        self.batch.clear();
        self.batch_pos = 0;
        let Some(&c) = self.chunks.get(self.next_chunk) else {
            return false;
        };
        self.next_chunk += 1;
        self.trace
            .chunks_read
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let h = &c.header;
        let payload_off = c.offset + CHUNK_HEADER_SIZE as u64;
        let ring = self.trace.header.flags & crate::layout::HDR_FLAG_RING != 0;
        if ring && self.known.is_none() && h.seq > 0 {
            // A flight recorder's window starts here: earlier chunks were
            // overwritten. The calls open then are entered before the
            // window (a gap with the chunk's depth, at its base time).
            self.expected_seq = h.seq;
            self.last_tsc = h.base_tsc;
            self.resync = true;
            let depth = c.header.depth.min(MAX_WINDOW_DEPTH);
            self.known = Some((c.offset, depth));
        }
        let depth = self.checked_depth(c);
        if h.seq != self.expected_seq {
            self.damage.push(Damage {
                offset: c.offset,
                lost_bytes: 0,
                tid: Some(self.tid),
                problem: format!(
                    "chunks {}..{} of the stream are missing",
                    self.expected_seq, h.seq
                ),
            });
            self.gap(depth);
        } else if self.resync {
            self.gap(depth);
        }
        self.resync = false;
        self.known = Some((c.offset, depth));
        self.expected_seq = h.seq.wrapping_add(1);
        let cap = self.trace.header.chunk_size as usize - CHUNK_HEADER_SIZE;
        let mut len = c.available;
        if c.sealed() {
            let want = h.payload_len as usize;
            if want > cap {
                self.damage.push(Damage {
                    offset: c.offset,
                    lost_bytes: cap as u64,
                    tid: Some(self.tid),
                    problem: format!("sealed chunk claims {want} payload bytes, more than fit"),
                });
                self.gap_after();
                return true;
            }
            if want > c.available {
                self.damage.push(Damage {
                    offset: payload_off + c.available as u64,
                    lost_bytes: (want - c.available) as u64,
                    tid: Some(self.tid),
                    problem: "file was cut inside this chunk".into(),
                });
            } else {
                len = want;
            }
        } else if c.available < cap {
            self.damage.push(Damage {
                offset: payload_off + c.available as u64,
                lost_bytes: (cap - c.available) as u64,
                tid: Some(self.tid),
                problem: "file was cut inside an unsealed chunk".into(),
            });
        }
        self.buf.resize(len, 0);
        if let Err(e) = self.trace.file.read_exact_at(&mut self.buf, payload_off) {
            self.damage.push(Damage {
                offset: payload_off,
                lost_bytes: len as u64,
                tid: Some(self.tid),
                problem: format!("read failed: {e}"),
            });
            self.gap_after();
            return true;
        }
        if c.sealed()
            && len == h.payload_len as usize
            && crc32fast::hash(&self.buf) != h.payload_crc
        {
            self.damage.push(Damage {
                offset: payload_off,
                lost_bytes: len as u64,
                tid: Some(self.tid),
                problem: "chunk payload checksum mismatch; chunk skipped".into(),
            });
            self.gap_after();
            return true;
        }
        if c.sealed() && len < c.available {
            // Writers leave the rest of a sealed payload zero: data there
            // means the seal fields (say, a flipped sealed flag) are wrong.
            let mut next = [0u8; 1];
            let at = payload_off + len as u64;
            if self.trace.file.read_exact_at(&mut next, at).is_ok() && next[0] != 0 {
                self.damage.push(Damage {
                    offset: at,
                    lost_bytes: (c.available - len) as u64,
                    tid: Some(self.tid),
                    problem: "data after the end of a sealed chunk; its seal is damaged".into(),
                });
            }
        }
        // Records are decoded one at a time by `next_item`.
        self.cur = Some(Cursor {
            entry: self.next_chunk - 1,
            len,
            pos: 0,
            tsc: h.base_tsc,
            prev_func: 0,
        });
        true
    }

    /// Decodes the next record of the current chunk; `None` when the chunk
    /// is done (its end or its damage handled).
    #[inline]
    fn next_in_chunk(&mut self) -> Option<StreamItem> {
        let cs = self.cur.as_mut()?;
        let mut dec = Decoder::resume(&self.buf[..cs.len], cs.pos, cs.tsc, cs.prev_func);
        let r = dec.next_record();
        cs.pos = dec.position();
        cs.tsc = dec.tsc();
        cs.prev_func = dec.prev_func();
        let err = match r {
            Ok(Some(rec)) => return Some(StreamItem::Record(rec)),
            Ok(None) => None,
            Err(e) => Some(e),
        };
        let (entry, len) = (cs.entry, cs.len);
        let c = self.chunks[entry];
        let payload_off = c.offset + CHUNK_HEADER_SIZE as u64;
        match err {
            None => {
                if c.sealed() && dec.position() < len {
                    let at = dec.position();
                    self.damage.push(Damage {
                        offset: payload_off + at as u64,
                        lost_bytes: (len - at) as u64,
                        tid: Some(self.tid),
                        problem: "end marker inside a sealed chunk".into(),
                    });
                    self.last_tsc = dec.tsc();
                    self.gap_after();
                } else {
                    self.last_tsc = dec.tsc();
                }
            }
            Some(e) => {
                self.damage.push(Damage {
                    offset: payload_off + e.offset as u64,
                    lost_bytes: (len - e.offset) as u64,
                    tid: Some(self.tid),
                    problem: format!("{}; rest of the chunk skipped", e.problem),
                });
                self.last_tsc = dec.tsc();
                self.gap_after();
            }
        }
        self.cur = None;
        None
    }

    /// After a chunk whose end was lost: the next chunk of the stream, if
    /// there is one, resynchronises the call depth (a missing successor
    /// is caught by the sequence check, which adds the gap itself).
    fn gap_after(&mut self) {
        self.resync = true;
    }

    /// The call depth chunk `c` starts at, bounded by what the file can
    /// hold: every entry takes at least one payload byte, so the depth can
    /// have grown since the last accepted chunk of the stream by at most
    /// one payload per chunk that can belong to the stream in between
    /// (that chunk itself, and chunks whose header is unreadable). A
    /// larger value is damage: it is reported and the last accepted depth
    /// is used instead, so that no value read from the file sizes the
    /// stack a reader rebuilds.
    fn checked_depth(&mut self, c: &ChunkEntry) -> u32 {
        let cap = self.trace.header.chunk_size as u64 - CHUNK_HEADER_SIZE as u64;
        let (from, base, own) = match self.known {
            Some((off, d)) => (Some(off), d, 1),
            None => (None, 0, 0),
        };
        let chunks = own + self.trace.unreadable_between(from, c.offset);
        let bound = (base as u64).saturating_add(chunks.saturating_mul(cap));
        let depth = c.header.depth;
        if depth as u64 <= bound {
            return depth;
        }
        self.damage.push(Damage {
            offset: c.offset + 12,
            lost_bytes: 0,
            tid: Some(self.tid),
            problem: format!(
                "chunk header claims a call depth of {depth}, more than the stream can have reached ({bound}); depth taken as {base}"
            ),
        });
        base
    }
}

impl Iterator for ThreadReader<'_> {
    type Item = Record;

    /// Records only; gaps are skipped (use [`ThreadReader::next_item`] to
    /// see them).
    fn next(&mut self) -> Option<Record> {
        loop {
            match self.next_item()? {
                StreamItem::Record(r) => return Some(r),
                StreamItem::Gap { .. } => continue,
            }
        }
    }
}
