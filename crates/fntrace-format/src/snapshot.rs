//! Snapshots of a trace that is still being written (a flight recorder's
//! current window): a copy made through the file, chunk by chunk, that
//! never takes a chunk being overwritten for a valid one.
//!
//! Each chunk's header is read before and after its payload; a chunk
//! whose header changed meanwhile (reset for reuse, resealed) is read
//! again, and left out (zero, an unused chunk) if it keeps changing. A
//! chunk a thread is still filling is cut after its last record that
//! decodes (the record being written at that moment may be torn). The
//! copy's final block and live counters are cleared: it reads as an
//! unfinished trace whose window ends at the moment of the copy.

use std::collections::HashSet;
use std::fs::File;
use std::io::{self, Write};
use std::os::unix::fs::FileExt;

use crate::event::Decoder;
use crate::layout::{
    CHUNK_FLAG_SEALED, CHUNK_HEADER_SIZE, CHUNK_MAGIC, FINAL_OFFSET, HEADER_USED, Header,
    LIVE_OFFSET, LIVE_SIZE,
};

/// What a snapshot copied.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SnapshotStats {
    /// Chunks copied.
    pub chunks: u64,
    /// Chunks left out because they changed while being copied.
    pub skipped: u64,
    /// Bytes written.
    pub bytes: u64,
}

/// How often a chunk that changed while it was copied is read again.
const RETRIES: usize = 4;

/// Copies the trace being written in `src` to `dst`, a new file (see the
/// module documentation). Fails on read or write errors or when `src` is
/// not a trace (bad magic or header checksum).
pub fn snapshot(src: &File, dst: &File) -> io::Result<SnapshotStats> {
    let mut w = io::BufWriter::with_capacity(1 << 20, dst);
    let (st, cut) = copy(src, &mut w)?;
    w.flush()?;
    drop(w);
    let mut st = st;
    // Open chunks whose successor was copied too lost their end.
    let (next, open): Copied = cut;
    for (off, tid, seq) in open {
        if next.contains(&(tid, seq.wrapping_add(1))) {
            dst.write_all_at(&[0u8; CHUNK_HEADER_SIZE], off)?;
            st.chunks -= 1;
            st.skipped += 1;
        }
    }
    dst.sync_data()?;
    Ok(st)
}

/// Chunks copied (thread, sequence) and the open ones (offset, thread,
/// sequence).
type Copied = (HashSet<(u32, u32)>, Vec<(u64, u32, u32)>);

fn copy(src: &File, dst: &mut dyn Write) -> io::Result<(SnapshotStats, Copied)> {
    let bad = |m: &str| io::Error::new(io::ErrorKind::InvalidData, m.to_string());
    let len = src.metadata()?.len();
    let mut head = vec![0u8; 4096];
    src.read_exact_at(&mut head[..HEADER_USED], 0)?;
    let stat: &[u8; FINAL_OFFSET] = head[..FINAL_OFFSET].try_into().expect("128 bytes");
    Header::check(stat).map_err(|_| bad("not an fntrace trace (bad magic or header checksum)"))?;
    let h = Header::decode(stat);
    let chunk = h.chunk_size as usize;
    let hsize = h.header_size as usize;
    if !(HEADER_USED..=1 << 20).contains(&hsize)
        || !(2 * CHUNK_HEADER_SIZE..=1 << 30).contains(&chunk)
    {
        return Err(bad("implausible header"));
    }
    head.resize(hsize, 0);
    src.read_exact_at(&mut head, 0)?;
    head[FINAL_OFFSET..HEADER_USED].fill(0);
    head[LIVE_OFFSET..LIVE_OFFSET + LIVE_SIZE].fill(0);
    dst.write_all(&head)?;
    let mut st = SnapshotStats {
        bytes: hsize as u64,
        ..SnapshotStats::default()
    };
    let mut seen = HashSet::new();
    let mut open = vec![];
    let mut buf = vec![0u8; chunk];
    let mut again = [0u8; CHUNK_HEADER_SIZE];
    let mut off = hsize as u64;
    while off + chunk as u64 <= len {
        let mut ok = false;
        for _ in 0..RETRIES {
            src.read_exact_at(&mut buf, off)?;
            src.read_exact_at(&mut again, off)?;
            if again[..] == buf[..CHUNK_HEADER_SIZE] {
                ok = true;
                break;
            }
        }
        let magic = u32::from_le_bytes(buf[0..4].try_into().expect("4 bytes"));
        if !ok {
            buf.fill(0);
            st.skipped += 1;
        } else if magic == CHUNK_MAGIC {
            let word = |o: usize| u32::from_le_bytes(buf[o..o + 4].try_into().expect("4 bytes"));
            let (tid, seq, flags) = (word(4), word(8), word(36));
            if flags & CHUNK_FLAG_SEALED == 0 {
                cut_torn(&mut buf[CHUNK_HEADER_SIZE..]);
                open.push((off, tid, seq));
            }
            seen.insert((tid, seq));
            st.chunks += 1;
        }
        dst.write_all(&buf)?;
        st.bytes += chunk as u64;
        off += chunk as u64;
    }
    dst.flush()?;
    Ok((st, (seen, open)))
}

/// Zeroes an open chunk's payload from its first record that does not
/// decode (the one being written during the copy).
fn cut_torn(payload: &mut [u8]) {
    let mut dec = Decoder::new(payload, 0);
    let end = loop {
        let at = dec.position();
        match dec.next_compact() {
            Ok(Some(_)) => continue,
            Ok(None) => {}
            Err(_) => break at,
        }
        let at = dec.position();
        match dec.next_record() {
            Ok(Some(_)) => {}
            Ok(None) | Err(_) => break at,
        }
    };
    payload[end..].fill(0);
}
