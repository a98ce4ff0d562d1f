//! Fixed-layout parts of a trace file: the file header and the chunk headers.
//!
//! All integers are little-endian. `docs/FORMAT.md` gives the byte-by-byte
//! layout; the constants here are the single source of truth for the offsets.

/// First eight bytes of every trace file.
pub const MAGIC: [u8; 8] = *b"FNTRACE\0";
/// Major version: readers refuse other major versions.
pub const VERSION_MAJOR: u16 = 1;
/// Minor version: additions that older readers can skip.
pub const VERSION_MINOR: u16 = 3;
/// Size of the file header; chunk 0 starts here.
pub const HEADER_SIZE: u32 = 4096;
/// Default chunk size (header plus payload).
pub const DEFAULT_CHUNK_SIZE: u32 = 64 * 1024;
/// Size of a chunk header; the payload follows it.
pub const CHUNK_HEADER_SIZE: usize = 64;
/// Magic of a chunk header (`"FNTC"`).
pub const CHUNK_MAGIC: u32 = u32::from_le_bytes(*b"FNTC");
/// Magic of the final block (`"FEND"`).
pub const FINAL_MAGIC: u32 = u32::from_le_bytes(*b"FEND");
/// Thread id of the metadata stream.
pub const META_TID: u32 = 0;

/// Header flag: the TSC runs at a constant rate and does not stop in idle
/// states (`constant_tsc` and `nonstop_tsc`).
pub const HDR_FLAG_TSC_INVARIANT: u32 = 1;
/// Header flag (minor 1): the file is a flight-recorder ring of
/// `ring_chunks` chunks whose oldest were overwritten.
pub const HDR_FLAG_RING: u32 = 2;
/// Final-block flag: the process finished recording cleanly.
pub const FINAL_FLAG_CLEAN: u32 = 1;
/// Chunk flag: the chunk is sealed; `payload_len` and `payload_crc` are valid.
pub const CHUNK_FLAG_SEALED: u32 = 1;
/// Final-block flag (minor 1): `events` holds the writer's count of the
/// events in the file.
pub const FINAL_FLAG_EVENTS: u32 = 2;
/// Offset of the event count of a chunk (u32 events, u32 check; minor 1).
pub const CHUNK_COUNT_OFFSET: usize = 48;
/// Offset of the live counters block inside the header page (minor 1).
pub const LIVE_OFFSET: usize = 256;
/// Size of the live counters block.
pub const LIVE_SIZE: usize = 64;
/// Magic of the live counters block (`"FLIV"`).
pub const LIVE_MAGIC: u32 = u32::from_le_bytes(*b"FLIV");

/// Offset of the final block inside the header.
pub const FINAL_OFFSET: usize = 128;
/// Bytes of the header that readers look at.
pub const HEADER_USED: usize = 256;

fn u16_at(b: &[u8], o: usize) -> u16 {
    u16::from_le_bytes([b[o], b[o + 1]])
}
fn u32_at(b: &[u8], o: usize) -> u32 {
    u32::from_le_bytes(b[o..o + 4].try_into().expect("4 bytes"))
}
fn u64_at(b: &[u8], o: usize) -> u64 {
    u64::from_le_bytes(b[o..o + 8].try_into().expect("8 bytes"))
}
fn put_u16(b: &mut [u8], o: usize, v: u16) {
    b[o..o + 2].copy_from_slice(&v.to_le_bytes());
}
fn put_u32(b: &mut [u8], o: usize, v: u32) {
    b[o..o + 4].copy_from_slice(&v.to_le_bytes());
}
fn put_u64(b: &mut [u8], o: usize, v: u64) {
    b[o..o + 8].copy_from_slice(&v.to_le_bytes());
}

/// The static part of the file header, written once when the trace is created.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    /// Major format version.
    pub version_major: u16,
    /// Minor format version.
    pub version_minor: u16,
    /// Size of the header in bytes (offset of chunk 0).
    pub header_size: u32,
    /// Size of every chunk in bytes, header included.
    pub chunk_size: u32,
    /// `HDR_FLAG_*` bits.
    pub flags: u32,
    /// TSC ticks per second from the start-up calibration.
    pub tsc_hz: u64,
    /// TSC when recording started.
    pub start_tsc: u64,
    /// CLOCK_MONOTONIC (ns) read together with `start_tsc`.
    pub start_mono_ns: u64,
    /// CLOCK_REALTIME (ns since the Unix epoch) at start.
    pub start_realtime_ns: u64,
    /// Process id of the traced process.
    pub pid: u32,
    /// Flight recorder: chunks in the ring (0 when not a ring; minor 1).
    pub ring_chunks: u64,
}

impl Header {
    /// A header of the current format version with `chunk_size`-byte
    /// chunks and a `tsc_hz` clock, every other field zero: the start of
    /// a trace written by a tool rather than a runtime (synthetic traces
    /// of tests and benchmarks), completed with struct update syntax.
    pub fn current(chunk_size: u32, tsc_hz: u64) -> Header {
        Header {
            version_major: VERSION_MAJOR,
            version_minor: VERSION_MINOR,
            header_size: HEADER_SIZE,
            chunk_size,
            flags: 0,
            tsc_hz,
            start_tsc: 0,
            start_mono_ns: 0,
            start_realtime_ns: 0,
            pid: 0,
            ring_chunks: 0,
        }
    }

    /// Encodes the static block (bytes 0..128), checksum included.
    pub fn encode(&self) -> [u8; FINAL_OFFSET] {
        let mut b = [0u8; FINAL_OFFSET];
        b[0..8].copy_from_slice(&MAGIC);
        put_u16(&mut b, 8, self.version_major);
        put_u16(&mut b, 10, self.version_minor);
        put_u32(&mut b, 12, self.header_size);
        put_u32(&mut b, 16, self.chunk_size);
        put_u32(&mut b, 20, self.flags);
        put_u64(&mut b, 24, self.tsc_hz);
        put_u64(&mut b, 32, self.start_tsc);
        put_u64(&mut b, 40, self.start_mono_ns);
        put_u64(&mut b, 48, self.start_realtime_ns);
        put_u32(&mut b, 56, self.pid);
        put_u64(&mut b, 60, self.ring_chunks);
        let crc = crc32fast::hash(&b[0..124]);
        put_u32(&mut b, 124, crc);
        b
    }

    /// Decodes the static block. The caller checks magic, version and
    /// checksum with [`Header::check`] first.
    pub fn decode(b: &[u8; FINAL_OFFSET]) -> Header {
        Header {
            version_major: u16_at(b, 8),
            version_minor: u16_at(b, 10),
            header_size: u32_at(b, 12),
            chunk_size: u32_at(b, 16),
            flags: u32_at(b, 20),
            tsc_hz: u64_at(b, 24),
            start_tsc: u64_at(b, 32),
            start_mono_ns: u64_at(b, 40),
            start_realtime_ns: u64_at(b, 48),
            pid: u32_at(b, 56),
            ring_chunks: u64_at(b, 60),
        }
    }

    /// Checks the magic and the checksum of a static block.
    pub fn check(b: &[u8; FINAL_OFFSET]) -> Result<(), HeaderProblem> {
        if b[0..8] != MAGIC {
            return Err(HeaderProblem::Magic);
        }
        if crc32fast::hash(&b[0..124]) != u32_at(b, 124) {
            return Err(HeaderProblem::Checksum);
        }
        Ok(())
    }
}

/// What is wrong with a header block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeaderProblem {
    /// The magic bytes are not `FNTRACE\0`.
    Magic,
    /// The checksum does not match the contents.
    Checksum,
}

/// The final block of the header (bytes 128..256), written when recording
/// finishes cleanly. All zero in a trace whose process died.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Final {
    /// `FINAL_FLAG_*` bits.
    pub flags: u32,
    /// TSC when recording finished.
    pub end_tsc: u64,
    /// CLOCK_MONOTONIC (ns) read together with `end_tsc`.
    pub end_mono_ns: u64,
    /// TSC ticks per second measured over the whole recording.
    pub tsc_hz: u64,
    /// Number of chunks allocated (the file holds exactly these).
    pub chunks: u64,
    /// Events the runtime counted as dropped, over all threads.
    pub lost_events: u64,
    /// TSC at which the size limit (or a full disk) first refused a chunk,
    /// 0 when it never did: from then on the events of a thread that
    /// needed a new chunk were dropped (counted in `lost_events`). Zero in
    /// files of version 1.0.
    pub full_tsc: u64,
    /// Entry and exit events in the file, counted by the writer (valid
    /// when `flags` has [`FINAL_FLAG_EVENTS`]; minor 1).
    pub events: u64,
    /// Flight recorder: chunks overwritten (handed out minus the ring's
    /// chunks; minor 1).
    pub overwritten: u64,
}

impl Final {
    /// Encodes the final block, checksum included.
    pub fn encode(&self) -> [u8; HEADER_USED - FINAL_OFFSET] {
        let mut b = [0u8; HEADER_USED - FINAL_OFFSET];
        put_u32(&mut b, 0, FINAL_MAGIC);
        put_u32(&mut b, 4, self.flags);
        put_u64(&mut b, 8, self.end_tsc);
        put_u64(&mut b, 16, self.end_mono_ns);
        put_u64(&mut b, 24, self.tsc_hz);
        put_u64(&mut b, 32, self.chunks);
        put_u64(&mut b, 40, self.lost_events);
        put_u64(&mut b, 64, self.full_tsc);
        put_u64(&mut b, 48, self.events);
        put_u64(&mut b, 56, self.overwritten);
        let crc = crc32fast::hash(&b[0..124]);
        put_u32(&mut b, 124, crc);
        b
    }

    /// Decodes a final block: `Ok(None)` when it is all zero (not finished),
    /// an error when it is present but damaged.
    pub fn decode(b: &[u8]) -> Result<Option<Final>, HeaderProblem> {
        if b.iter().all(|&x| x == 0) {
            return Ok(None);
        }
        if u32_at(b, 0) != FINAL_MAGIC {
            return Err(HeaderProblem::Magic);
        }
        if crc32fast::hash(&b[0..124]) != u32_at(b, 124) {
            return Err(HeaderProblem::Checksum);
        }
        Ok(Some(Final {
            flags: u32_at(b, 4),
            end_tsc: u64_at(b, 8),
            end_mono_ns: u64_at(b, 16),
            tsc_hz: u64_at(b, 24),
            chunks: u64_at(b, 32),
            lost_events: u64_at(b, 40),
            full_tsc: u64_at(b, 64),
            events: u64_at(b, 48),
            overwritten: u64_at(b, 56),
        }))
    }

    /// The writer's event count, when the final block has one.
    pub fn events(&self) -> Option<u64> {
        (self.flags & FINAL_FLAG_EVENTS != 0).then_some(self.events)
    }
}

/// The header at the start of every chunk.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ChunkHeader {
    /// Thread the chunk belongs to ([`META_TID`] for metadata).
    pub tid: u32,
    /// Position of the chunk in its thread's stream, from 0.
    pub seq: u32,
    /// Call depth of the thread when the chunk was started.
    pub depth: u32,
    /// TSC that the first event's delta is relative to.
    pub base_tsc: u64,
    /// CLOCK_MONOTONIC (ns) read together with `base_tsc`.
    pub base_mono_ns: u64,
    /// `CHUNK_FLAG_*` bits.
    pub flags: u32,
    /// Payload bytes in use (valid when sealed).
    pub payload_len: u32,
    /// CRC-32 of the used payload (valid when sealed).
    pub payload_crc: u32,
    /// Entry and exit events in the payload, counted by the writer after
    /// the seal (minor 1): `None` when absent or not matching the seal.
    pub events: Option<u32>,
}

impl ChunkHeader {
    /// The header of chunk `seq` of thread `tid` that starts at call depth
    /// `depth` and TSC `base_tsc`, every other field zero (what a
    /// synthetic trace's writer starts a chunk with; sealing fills in the
    /// payload's length and checksum).
    pub fn at(tid: u32, seq: u32, depth: u32, base_tsc: u64) -> ChunkHeader {
        ChunkHeader {
            tid,
            seq,
            depth,
            base_tsc,
            ..ChunkHeader::default()
        }
    }

    /// Encodes the static part (bytes 0..36: magic, fields and their
    /// checksum). The dynamic part (flags, length, payload checksum) is
    /// written by [`ChunkHeader::encode_seal`].
    pub fn encode_static(&self) -> [u8; 36] {
        let mut b = [0u8; 36];
        put_u32(&mut b, 0, CHUNK_MAGIC);
        put_u32(&mut b, 4, self.tid);
        put_u32(&mut b, 8, self.seq);
        put_u32(&mut b, 12, self.depth);
        put_u64(&mut b, 16, self.base_tsc);
        put_u64(&mut b, 24, self.base_mono_ns);
        let crc = crc32fast::hash(&b[4..32]);
        put_u32(&mut b, 32, crc);
        b
    }

    /// Encodes bytes 36..48: flags, payload length and payload checksum.
    pub fn encode_seal(&self) -> [u8; 12] {
        let mut b = [0u8; 12];
        put_u32(&mut b, 0, self.flags);
        put_u32(&mut b, 4, self.payload_len);
        put_u32(&mut b, 8, self.payload_crc);
        b
    }

    /// Encodes bytes 48..56: the event count of a sealed chunk and its
    /// check (a CRC-32 over the payload length, payload CRC and count, so
    /// that a count only holds for the seal it was made for).
    pub fn encode_count(payload_len: u32, payload_crc: u32, events: u32) -> [u8; 8] {
        let mut b = [0u8; 8];
        put_u32(&mut b, 0, events);
        put_u32(&mut b, 4, count_check(payload_len, payload_crc, events));
        b
    }

    /// Decodes a chunk header.
    pub fn decode(b: &[u8; CHUNK_HEADER_SIZE]) -> Result<ChunkHeader, ChunkProblem> {
        if b.iter().all(|&x| x == 0) {
            return Err(ChunkProblem::Unused);
        }
        if u32_at(b, 0) != CHUNK_MAGIC {
            return Err(ChunkProblem::Magic);
        }
        if crc32fast::hash(&b[4..32]) != u32_at(b, 32) {
            return Err(ChunkProblem::Checksum);
        }
        let (flags, payload_len, payload_crc) = (u32_at(b, 36), u32_at(b, 40), u32_at(b, 44));
        let events = u32_at(b, CHUNK_COUNT_OFFSET);
        let counted = flags & CHUNK_FLAG_SEALED != 0
            && u32_at(b, CHUNK_COUNT_OFFSET + 4) == count_check(payload_len, payload_crc, events);
        Ok(ChunkHeader {
            tid: u32_at(b, 4),
            seq: u32_at(b, 8),
            depth: u32_at(b, 12),
            base_tsc: u64_at(b, 16),
            base_mono_ns: u64_at(b, 24),
            flags,
            payload_len,
            payload_crc,
            events: counted.then_some(events),
        })
    }
}

fn count_check(payload_len: u32, payload_crc: u32, events: u32) -> u32 {
    let mut b = [0u8; 12];
    put_u32(&mut b, 0, payload_len);
    put_u32(&mut b, 4, payload_crc);
    put_u32(&mut b, 8, events);
    crc32fast::hash(&b) ^ 0x4556_4e54
}

/// The live counters block (header bytes 256..320, minor 1): what a
/// recording has written so far, updated by the runtime while it records
/// (every few milliseconds) so that another process can show progress by
/// reading the file. Not used by readers of a finished trace.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Live {
    /// Entry and exit events in chunks counted so far (full chunks; the
    /// chunks threads are still filling are not included).
    pub events: u64,
    /// Chunks handed out so far.
    pub chunks: u64,
    /// Events dropped so far.
    pub lost_events: u64,
    /// CLOCK_MONOTONIC (ns) of the update.
    pub mono_ns: u64,
    /// Bytes of trace memory resident in the traced process (the helper's
    /// estimate: chunks mapped and not yet dropped).
    pub resident: u64,
}

impl Live {
    /// Encodes the block, checksum included.
    pub fn encode(&self) -> [u8; LIVE_SIZE] {
        let mut b = [0u8; LIVE_SIZE];
        put_u32(&mut b, 0, LIVE_MAGIC);
        put_u64(&mut b, 8, self.events);
        put_u64(&mut b, 16, self.chunks);
        put_u64(&mut b, 24, self.lost_events);
        put_u64(&mut b, 32, self.mono_ns);
        put_u64(&mut b, 40, self.resident);
        let crc = crc32fast::hash(&b[0..60]);
        put_u32(&mut b, 60, crc);
        b
    }

    /// Decodes a block; `None` when absent or torn (read while written).
    pub fn decode(b: &[u8]) -> Option<Live> {
        if b.len() < LIVE_SIZE
            || u32_at(b, 0) != LIVE_MAGIC
            || crc32fast::hash(&b[0..60]) != u32_at(b, 60)
        {
            return None;
        }
        Some(Live {
            events: u64_at(b, 8),
            chunks: u64_at(b, 16),
            lost_events: u64_at(b, 24),
            mono_ns: u64_at(b, 32),
            resident: u64_at(b, 40),
        })
    }
}

/// Why a chunk header cannot be used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChunkProblem {
    /// All zero: the chunk was never started (normal after a crash or at the
    /// end of a file that was not truncated).
    Unused,
    /// The magic is wrong.
    Magic,
    /// The header checksum does not match.
    Checksum,
}

/// Byte offset of the dynamic (seal) part inside a chunk header.
pub const CHUNK_SEAL_OFFSET: usize = 36;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_roundtrip_and_checks() {
        let h = Header {
            version_major: 1,
            version_minor: 0,
            header_size: HEADER_SIZE,
            chunk_size: DEFAULT_CHUNK_SIZE,
            flags: HDR_FLAG_TSC_INVARIANT,
            tsc_hz: 2_000_000_000,
            start_tsc: 12345,
            start_mono_ns: 678,
            start_realtime_ns: 9,
            pid: 42,
            ring_chunks: 0,
        };
        let mut b = h.encode();
        assert_eq!(Header::check(&b), Ok(()));
        assert_eq!(Header::decode(&b), h);
        b[30] ^= 1;
        assert_eq!(Header::check(&b), Err(HeaderProblem::Checksum));
        b[0] = b'X';
        assert_eq!(Header::check(&b), Err(HeaderProblem::Magic));
    }

    #[test]
    fn chunk_roundtrip() {
        let c = ChunkHeader {
            tid: 7,
            seq: 3,
            depth: 2,
            base_tsc: 99,
            base_mono_ns: 100,
            flags: CHUNK_FLAG_SEALED,
            payload_len: 1000,
            payload_crc: 0xdead_beef,
            events: None,
        };
        let mut b = [0u8; CHUNK_HEADER_SIZE];
        b[..36].copy_from_slice(&c.encode_static());
        b[36..48].copy_from_slice(&c.encode_seal());
        assert_eq!(ChunkHeader::decode(&b), Ok(c.clone()));
        b[48..56].copy_from_slice(&ChunkHeader::encode_count(1000, 0xdead_beef, 77));
        assert_eq!(ChunkHeader::decode(&b).unwrap().events, Some(77));
        // A count made for another seal does not hold.
        b[48..56].copy_from_slice(&ChunkHeader::encode_count(999, 0xdead_beef, 77));
        assert_eq!(ChunkHeader::decode(&b).unwrap().events, None);
        b[5] ^= 0xff;
        assert_eq!(ChunkHeader::decode(&b), Err(ChunkProblem::Checksum));
        assert_eq!(
            ChunkHeader::decode(&[0; CHUNK_HEADER_SIZE]),
            Err(ChunkProblem::Unused)
        );
    }

    #[test]
    fn final_roundtrip() {
        assert_eq!(Final::decode(&[0u8; 128]), Ok(None));
        let f = Final {
            flags: FINAL_FLAG_CLEAN,
            end_tsc: 5,
            end_mono_ns: 6,
            tsc_hz: 7,
            chunks: 8,
            lost_events: 9,
            full_tsc: 10,
            events: 10,
            overwritten: 11,
        };
        let mut b = f.encode();
        assert_eq!(Final::decode(&b), Ok(Some(f)));
        b[9] ^= 1;
        assert_eq!(Final::decode(&b), Err(HeaderProblem::Checksum));
    }

    #[test]
    fn live_roundtrip() {
        let l = Live {
            events: 1,
            chunks: 2,
            lost_events: 3,
            mono_ns: 4,
            resident: 5,
        };
        let mut b = l.encode();
        assert_eq!(Live::decode(&b), Some(l));
        b[9] ^= 1;
        assert_eq!(Live::decode(&b), None);
        assert_eq!(Live::decode(&[0u8; LIVE_SIZE]), None);
    }
}
