//! An offline writer: builds a complete trace file image in memory, with the
//! layout and write order of the runtime (record bodies before their first
//! byte, seal fields after the payload).
//!
//! The runtime writes into a shared mapping with its own hot-path code; this
//! module is for tests, fixtures and tools that produce traces from other
//! sources. It has no crash-safety guarantees of its own: nothing is visible
//! until the caller writes the bytes out.

use crate::event::{Compact, Framed, MAX_COMPACT_LEN, SliceSink, encode_compact};
use crate::layout::{
    CHUNK_FLAG_SEALED, CHUNK_HEADER_SIZE, CHUNK_SEAL_OFFSET, ChunkHeader, FINAL_OFFSET, Final,
    HEADER_USED, Header,
};

/// One chunk being written: its header and payload, `chunk_size` bytes.
#[derive(Debug, Clone)]
pub struct ChunkBuf {
    bytes: Vec<u8>,
    header: ChunkHeader,
    pos: usize,
    prev_func: u64,
}

impl ChunkBuf {
    /// A new, empty, unsealed chunk of `chunk_size` bytes (header included)
    /// with the static fields of `header` (its seal fields are ignored).
    ///
    /// # Panics
    /// If `chunk_size` is smaller than a chunk header.
    pub fn new(chunk_size: u32, header: &ChunkHeader) -> ChunkBuf {
        let size = chunk_size as usize;
        assert!(size >= CHUNK_HEADER_SIZE, "chunk size {size} is too small");
        let header = ChunkHeader {
            flags: 0,
            payload_len: 0,
            payload_crc: 0,
            events: None,
            ..header.clone()
        };
        let mut bytes = vec![0u8; size];
        let stat = header.encode_static();
        bytes[4..stat.len()].copy_from_slice(&stat[4..]);
        bytes[..4].copy_from_slice(&stat[..4]);
        ChunkBuf {
            bytes,
            header,
            pos: CHUNK_HEADER_SIZE,
            prev_func: 0,
        }
    }

    /// The chunk header as written so far.
    pub fn header(&self) -> &ChunkHeader {
        &self.header
    }

    /// Payload bytes written.
    pub fn payload_len(&self) -> usize {
        self.pos - CHUNK_HEADER_SIZE
    }

    /// Payload bytes still free (0 once sealed).
    pub fn remaining(&self) -> usize {
        if self.is_sealed() {
            0
        } else {
            self.bytes.len() - self.pos
        }
    }

    /// Whether [`ChunkBuf::seal`] was called.
    pub fn is_sealed(&self) -> bool {
        self.header.flags & CHUNK_FLAG_SEALED != 0
    }

    /// Appends raw record bytes (the first byte last); `false`, writing
    /// nothing, when they do not fit or the chunk is sealed.
    pub fn raw(&mut self, rec: &[u8]) -> bool {
        if rec.len() > self.remaining() {
            return false;
        }
        if let Some((&first, rest)) = rec.split_first() {
            self.bytes[self.pos + 1..self.pos + rec.len()].copy_from_slice(rest);
            self.bytes[self.pos] = first;
            self.pos += rec.len();
        }
        true
    }

    fn compact(&mut self, ev: Compact) -> bool {
        let mut b = [0u8; MAX_COMPACT_LEN];
        let n = encode_compact(ev, &mut b);
        self.raw(&b[..n])
    }

    /// Appends the entry of `func`, `d` TSC ticks after the previous timed
    /// record (or the chunk's base TSC).
    pub fn entry(&mut self, d: u64, func: u64) -> bool {
        let ok = self.compact(Compact::Entry {
            d,
            func,
            prev: self.prev_func,
        });
        if ok {
            self.prev_func = func;
        }
        ok
    }

    /// Appends an exit.
    pub fn exit(&mut self, d: u64) -> bool {
        self.compact(Compact::Exit { d })
    }

    /// Appends a tail exit.
    pub fn tail_exit(&mut self, d: u64) -> bool {
        self.compact(Compact::TailExit { d })
    }

    /// Appends a framed record.
    pub fn framed(&mut self, rec: &Framed<'_>) -> bool {
        let n = rec.framed_len();
        if n > self.remaining() {
            return false;
        }
        let mut sink = SliceSink {
            buf: &mut self.bytes[self.pos + 1..self.pos + n],
            pos: 0,
        };
        rec.write_body(&mut sink);
        debug_assert_eq!(sink.pos, n - 1);
        self.bytes[self.pos] = rec.first_byte();
        self.pos += n;
        true
    }

    /// Seals the chunk: payload length and checksum, then the sealed flag.
    pub fn seal(&mut self) {
        let payload = &self.bytes[CHUNK_HEADER_SIZE..self.pos];
        self.header.payload_len = payload.len() as u32;
        self.header.payload_crc = crc32fast::hash(payload);
        self.header.flags |= CHUNK_FLAG_SEALED;
        let b = self.header.encode_seal();
        let at = CHUNK_SEAL_OFFSET;
        self.bytes[at + 4..at + b.len()].copy_from_slice(&b[4..]);
        self.bytes[at..at + 4].copy_from_slice(&b[..4]);
    }

    /// The chunk's bytes, header included.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes
    }
}

/// A trace file image: the header, then chunks in the order they are added.
#[derive(Debug, Clone)]
pub struct TraceBuilder {
    header: Header,
    bytes: Vec<u8>,
    chunks: u64,
}

impl TraceBuilder {
    /// A file holding only `header` (padded to its `header_size`).
    ///
    /// # Panics
    /// If the header or chunk size in `header` is too small for the format.
    pub fn new(header: Header) -> TraceBuilder {
        let hs = header.header_size as usize;
        assert!(hs >= HEADER_USED, "header size {hs} is too small");
        assert!(
            header.chunk_size as usize >= CHUNK_HEADER_SIZE,
            "chunk size {} is too small",
            header.chunk_size
        );
        let mut bytes = vec![0u8; hs];
        bytes[..FINAL_OFFSET].copy_from_slice(&header.encode());
        TraceBuilder {
            header,
            bytes,
            chunks: 0,
        }
    }

    /// The static header.
    pub fn header(&self) -> &Header {
        &self.header
    }

    /// A new chunk of this file's chunk size (see [`ChunkBuf::new`]).
    pub fn new_chunk(&self, header: &ChunkHeader) -> ChunkBuf {
        ChunkBuf::new(self.header.chunk_size, header)
    }

    /// Appends a chunk; returns its file offset.
    ///
    /// # Panics
    /// If the chunk was made for another chunk size.
    pub fn push_chunk(&mut self, chunk: &ChunkBuf) -> u64 {
        assert_eq!(chunk.bytes.len(), self.header.chunk_size as usize);
        let off = self.bytes.len() as u64;
        self.bytes.extend_from_slice(&chunk.bytes);
        self.chunks += 1;
        off
    }

    /// Appends a chunk that was never started (all zero); returns its file
    /// offset.
    pub fn push_unused(&mut self) -> u64 {
        let off = self.bytes.len() as u64;
        self.bytes
            .resize(self.bytes.len() + self.header.chunk_size as usize, 0);
        self.chunks += 1;
        off
    }

    /// Chunks added so far (what a clean [`Final::chunks`] says).
    pub fn chunks(&self) -> u64 {
        self.chunks
    }

    /// The file of a recording that finished: `fin` goes into the final
    /// block as given (a clean finish has `fin.chunks == self.chunks()`).
    pub fn finish(mut self, fin: &Final) -> Vec<u8> {
        self.bytes[FINAL_OFFSET..HEADER_USED].copy_from_slice(&fin.encode());
        self.bytes
    }

    /// The file of a recording that did not finish (zero final block).
    pub fn into_unfinished(self) -> Vec<u8> {
        self.bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{Decoder, Record};
    use crate::layout::{ChunkProblem, DEFAULT_CHUNK_SIZE, FINAL_FLAG_CLEAN, HEADER_SIZE};

    #[test]
    fn chunk_fills_seals_and_decodes() {
        let h = ChunkHeader {
            tid: 5,
            seq: 1,
            depth: 2,
            base_tsc: 100,
            base_mono_ns: 7,
            ..ChunkHeader::default()
        };
        let mut c = ChunkBuf::new(128, &h);
        assert!(c.entry(1, 0x1000));
        assert!(c.entry(2, 0x1000));
        assert!(c.exit(3));
        assert!(c.framed(&Framed::Lost { d: 4, count: 9 }));
        assert!(!c.raw(&[0xff; 65]), "does not fit");
        let used = c.payload_len();
        c.seal();
        assert!(!c.exit(1), "sealed");
        let b: &[u8; CHUNK_HEADER_SIZE] = c.as_bytes()[..CHUNK_HEADER_SIZE].try_into().unwrap();
        let got = ChunkHeader::decode(b).unwrap();
        assert_eq!(got.payload_len as usize, used);
        assert_eq!(got.flags, CHUNK_FLAG_SEALED);
        let payload = &c.as_bytes()[CHUNK_HEADER_SIZE..CHUNK_HEADER_SIZE + used];
        assert_eq!(got.payload_crc, crc32fast::hash(payload));
        let mut d = Decoder::new(payload, 100);
        let mut recs = vec![];
        while let Some(r) = d.next_record().unwrap() {
            recs.push(r);
        }
        assert_eq!(
            recs,
            [
                Record::Entry {
                    tsc: 101,
                    func: 0x1000
                },
                Record::Entry {
                    tsc: 103,
                    func: 0x1000
                },
                Record::Exit { tsc: 106 },
                Record::Lost { tsc: 110, count: 9 },
            ]
        );
    }

    #[test]
    fn builder_layout() {
        let header = Header {
            version_major: 1,
            version_minor: 0,
            header_size: HEADER_SIZE,
            chunk_size: DEFAULT_CHUNK_SIZE,
            flags: 0,
            tsc_hz: 1,
            start_tsc: 0,
            start_mono_ns: 0,
            start_realtime_ns: 0,
            pid: 1,
            ring_chunks: 0,
        };
        let mut b = TraceBuilder::new(header.clone());
        let c = b.new_chunk(&ChunkHeader::default());
        assert_eq!(b.push_chunk(&c), u64::from(HEADER_SIZE));
        assert_eq!(b.push_unused(), u64::from(HEADER_SIZE + DEFAULT_CHUNK_SIZE));
        let n = b.chunks();
        let file = b.finish(&Final {
            flags: FINAL_FLAG_CLEAN,
            chunks: n,
            ..Final::default()
        });
        assert_eq!(file.len(), (HEADER_SIZE + 2 * DEFAULT_CHUNK_SIZE) as usize);
        let stat: &[u8; FINAL_OFFSET] = file[..FINAL_OFFSET].try_into().unwrap();
        assert_eq!(Header::decode(stat), header);
        assert_eq!(
            Final::decode(&file[FINAL_OFFSET..HEADER_USED])
                .unwrap()
                .unwrap()
                .chunks,
            2
        );
        let unused: &[u8; CHUNK_HEADER_SIZE] = file[(HEADER_SIZE + DEFAULT_CHUNK_SIZE) as usize..]
            [..CHUNK_HEADER_SIZE]
            .try_into()
            .unwrap();
        assert_eq!(ChunkHeader::decode(unused), Err(ChunkProblem::Unused));
    }
}
