//! Decoding one chunk payload: the [`Decoder`] turns compact events and
//! framed records back into [`Record`]s with absolute TSCs, and reports
//! the first undecodable record as a [`DecodeError`].

use super::{
    DetachReason, EXT_RESUME, EXT_SETTING, EXT_SUSPEND, LibFuncInfo, ModuleInfo, OffCpu,
    ProcessInfo, Record, SiteInfo, TAG_ARC, TAG_ARGS, TAG_ATTACH, TAG_DETACH, TAG_EXT, TAG_LIBFUNC,
    TAG_LOST, TAG_MARKER, TAG_MODULE, TAG_OFFCPU, TAG_PROCESS, TAG_RETVAL, TAG_SITE,
    TAG_THREAD_EXIT, TAG_THREAD_START,
};
use crate::varint::{get_uvarint, unzigzag};

/// A problem found while decoding a payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("byte {offset} of the chunk payload: {problem}")]
pub struct DecodeError {
    /// Offset inside the payload where the bad record starts.
    pub offset: usize,
    /// What is wrong.
    pub problem: &'static str,
}

/// Decodes the records of one chunk payload.
pub struct Decoder<'a> {
    buf: &'a [u8],
    pos: usize,
    tsc: u64,
    prev_func: u64,
}

impl<'a> Decoder<'a> {
    /// A decoder over `buf` whose first delta is relative to `base_tsc`.
    pub fn new(buf: &'a [u8], base_tsc: u64) -> Decoder<'a> {
        Decoder {
            buf,
            pos: 0,
            tsc: base_tsc,
            prev_func: 0,
        }
    }

    /// A decoder continuing where another over the same `buf` stopped
    /// (its [`position`](Decoder::position), [`tsc`](Decoder::tsc) and
    /// [`prev_func`](Decoder::prev_func)).
    #[inline(always)]
    pub fn resume(buf: &'a [u8], pos: usize, tsc: u64, prev_func: u64) -> Decoder<'a> {
        Decoder {
            buf,
            pos: pos.min(buf.len()),
            tsc,
            prev_func,
        }
    }

    /// Function of the last entry decoded (0 at the start of a chunk).
    pub fn prev_func(&self) -> u64 {
        self.prev_func
    }

    /// Offset of the next record.
    pub fn position(&self) -> usize {
        self.pos
    }

    /// TSC of the last timed record.
    pub fn tsc(&self) -> u64 {
        self.tsc
    }

    fn err(&self, offset: usize, problem: &'static str) -> DecodeError {
        DecodeError { offset, problem }
    }

    #[inline(always)]
    fn delta(&mut self, first: u8, bits: u32, start: usize) -> Result<u64, DecodeError> {
        let low = u64::from(first) & ((1 << bits) - 1);
        let d = if first & (1 << bits) != 0 {
            // One continuation byte is the common case.
            let rest = match self.buf.get(self.pos) {
                Some(&b) if b < 0x80 => {
                    self.pos += 1;
                    u64::from(b)
                }
                _ => get_uvarint(self.buf, &mut self.pos)
                    .ok_or_else(|| self.err(start, "truncated or overlong time delta"))?,
            };
            if rest == 0 || rest.leading_zeros() < bits {
                return Err(self.err(start, "invalid time delta"));
            }
            low | (rest << bits)
        } else {
            low
        };
        self.tsc = self.tsc.wrapping_add(d);
        Ok(d)
    }

    /// The next record if it is a compact event (entry, exit, tail exit):
    /// `Ok(Some((kind, func, tsc)))` with kind 0 entry, 1 exit, 2 tail exit.
    /// `Ok(None)` when the next record is framed or the end: then
    /// [`next_record`](Decoder::next_record) reads it. Errors as there.
    #[inline]
    pub fn next_compact(&mut self) -> Result<Option<(u8, u64, u64)>, DecodeError> {
        let start = self.pos;
        let Some(&first) = self.buf.get(self.pos) else {
            return Ok(None);
        };
        match first {
            0x80..=0xff => {
                self.pos += 1;
                self.delta(first, 6, start)?;
                Ok(Some((1, 0, self.tsc)))
            }
            0x40..=0x7f => {
                self.pos += 1;
                self.delta(first, 5, start)?;
                Ok(Some((0, self.prev_func, self.tsc)))
            }
            0x20..=0x3f => {
                self.pos += 1;
                self.delta(first, 4, start)?;
                let fd = get_uvarint(self.buf, &mut self.pos)
                    .ok_or(self.err(start, "truncated function delta"))?;
                if fd == 0 {
                    return Err(self.err(start, "new-function entry with zero delta"));
                }
                self.prev_func = self.prev_func.wrapping_add(unzigzag(fd) as u64);
                Ok(Some((0, self.prev_func, self.tsc)))
            }
            0x10..=0x1f => {
                self.pos += 1;
                self.delta(first, 3, start)?;
                Ok(Some((2, 0, self.tsc)))
            }
            _ => Ok(None),
        }
    }

    /// The next record: `Ok(None)` at the end marker or the end of the
    /// buffer, an error at the first record that cannot be decoded.
    pub fn next_record(&mut self) -> Result<Option<Record>, DecodeError> {
        let start = self.pos;
        let Some(&first) = self.buf.get(self.pos) else {
            return Ok(None);
        };
        if first == 0 {
            return Ok(None);
        }
        self.pos += 1;
        if let Some(rec) = self.compact(first, start)? {
            return Ok(Some(rec));
        }
        // A framed record: tag, length, body.
        let len = get_uvarint(self.buf, &mut self.pos)
            .ok_or(self.err(start, "truncated record length"))?;
        let end = self
            .pos
            .checked_add(len as usize)
            .filter(|&e| e <= self.buf.len() && len <= self.buf.len() as u64)
            .ok_or(self.err(start, "record runs past the end of its chunk"))?;
        let body = &self.buf[self.pos..end];
        self.pos = end;
        // A framed record's delta moves `tsc` inside `framed`.
        let rec = self
            .framed(first, body)
            .ok_or(self.err(start, "malformed record"))?;
        Ok(Some(rec))
    }

    /// The compact event (entry, exit, tail exit) whose first byte `first`
    /// was read at `start`, its time and function applied; `None` for the
    /// tag of a framed record (nothing read past it).
    fn compact(&mut self, first: u8, start: usize) -> Result<Option<Record>, DecodeError> {
        Ok(Some(match first {
            0x80..=0xff => {
                self.delta(first, 6, start)?;
                Record::Exit { tsc: self.tsc }
            }
            0x40..=0x7f => {
                self.delta(first, 5, start)?;
                Record::Entry {
                    tsc: self.tsc,
                    func: self.prev_func,
                }
            }
            0x20..=0x3f => {
                self.delta(first, 4, start)?;
                let fd = get_uvarint(self.buf, &mut self.pos)
                    .ok_or(self.err(start, "truncated function delta"))?;
                if fd == 0 {
                    return Err(self.err(start, "new-function entry with zero delta"));
                }
                self.prev_func = self.prev_func.wrapping_add(unzigzag(fd) as u64);
                Record::Entry {
                    tsc: self.tsc,
                    func: self.prev_func,
                }
            }
            0x10..=0x1f => {
                self.delta(first, 3, start)?;
                Record::TailExit { tsc: self.tsc }
            }
            _ => return Ok(None),
        }))
    }

    fn framed(&mut self, tag: u8, body: &[u8]) -> Option<Record> {
        let mut p = 0usize;
        let var = |p: &mut usize| get_uvarint(body, p);
        let bytes = |p: &mut usize| -> Option<&[u8]> {
            let n = get_uvarint(body, p)? as usize;
            let end = p.checked_add(n).filter(|&e| e <= body.len())?;
            let s = &body[*p..end];
            *p = end;
            Some(s)
        };
        // Raw text: paths, which must open the file they name.
        let string = |p: &mut usize| bytes(p).map(|b| String::from_utf8_lossy(b).into_owned());
        // Text only shown (names, marker text): without control characters.
        let text = |p: &mut usize| bytes(p).map(crate::text::sanitize_bytes);
        let rec = match tag {
            TAG_THREAD_START | TAG_THREAD_EXIT => {
                let d = var(&mut p)?;
                let name = text(&mut p)?;
                self.tsc = self.tsc.wrapping_add(d);
                if tag == TAG_THREAD_START {
                    Record::ThreadStart {
                        tsc: self.tsc,
                        name,
                    }
                } else {
                    Record::ThreadExit {
                        tsc: self.tsc,
                        name,
                    }
                }
            }
            TAG_LOST => {
                let d = var(&mut p)?;
                let count = var(&mut p)?;
                self.tsc = self.tsc.wrapping_add(d);
                Record::Lost {
                    tsc: self.tsc,
                    count,
                }
            }
            TAG_PROCESS => {
                let pid = var(&mut p)?;
                let ppid = var(&mut p)?;
                let exe = string(&mut p)?;
                let cmdline = bytes(&mut p)?;
                let args = cmdline
                    .strip_suffix(&[0])
                    .unwrap_or(cmdline)
                    .split(|&b| b == 0)
                    .filter(|_| !cmdline.is_empty())
                    .map(crate::text::sanitize_bytes)
                    .collect();
                Record::Process(ProcessInfo {
                    pid,
                    ppid,
                    exe,
                    args,
                })
            }
            TAG_MODULE => Record::Module(ModuleInfo {
                bias: var(&mut p)?,
                start: var(&mut p)?,
                size: var(&mut p)?,
                build_id: bytes(&mut p)?.to_vec(),
                path: string(&mut p)?,
            }),
            TAG_SITE => {
                let key = var(&mut p)?;
                let prefix = text(&mut p)?;
                let name = text(&mut p)?;
                let file = text(&mut p)?;
                let line = var(&mut p)?;
                let name = if prefix.is_empty() {
                    name
                } else {
                    format!("{prefix}::{name}")
                };
                Record::Site(SiteInfo {
                    key,
                    name,
                    file,
                    line: u32::try_from(line).unwrap_or(u32::MAX),
                })
            }
            TAG_ARGS => {
                let n = var(&mut p)?;
                // Each value takes at least one byte: bound before allocating.
                if n > body.len() as u64 {
                    return None;
                }
                let mut values = Vec::with_capacity(n as usize);
                for _ in 0..n {
                    values.push(unzigzag(var(&mut p)?));
                }
                Record::Args { values }
            }
            TAG_RETVAL => Record::RetVal {
                value: unzigzag(var(&mut p)?),
            },
            TAG_MARKER => {
                let d = var(&mut p)?;
                let name = text(&mut p)?;
                let text = text(&mut p)?;
                self.tsc = self.tsc.wrapping_add(d);
                Record::Marker {
                    tsc: self.tsc,
                    name,
                    text,
                }
            }
            TAG_ARC => Record::Arc {
                from: var(&mut p)?,
                to: var(&mut p)?,
                count: var(&mut p)?,
            },
            TAG_ATTACH => Record::Attach {
                tsc: var(&mut p)?,
                controller: var(&mut p)?,
            },
            TAG_DETACH => Record::Detach {
                tsc: var(&mut p)?,
                reason: DetachReason::from_code(var(&mut p)?),
            },
            TAG_LIBFUNC => Record::LibFunc(LibFuncInfo {
                key: var(&mut p)?,
                symbol: text(&mut p)?,
                library: text(&mut p)?,
            }),
            TAG_OFFCPU => {
                let tid = var(&mut p)?;
                let out_ns = var(&mut p)?;
                let len = var(&mut p)?;
                let flags = var(&mut p)?;
                Record::OffCpu(OffCpu {
                    tid: u32::try_from(tid).ok()?,
                    out_ns,
                    in_ns: out_ns.checked_add(len)?,
                    preempted: flags & 1 != 0,
                })
            }
            TAG_EXT => match var(&mut p)? {
                EXT_SETTING => Record::Setting {
                    key: text(&mut p)?,
                    value: text(&mut p)?,
                },
                k @ (EXT_SUSPEND | EXT_RESUME) => Record::ContextSwitch {
                    resumed: k == EXT_RESUME,
                    calls: var(&mut p)?,
                },
                _ => return Some(Record::Unknown { tag }),
            },
            // Unknown tags are skipped whole: that is what the length is for.
            _ => return Some(Record::Unknown { tag }),
        };
        // Extra bytes at the end of a known record are allowed (future
        // minor versions may append fields).
        Some(rec)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{Compact, Framed, encode_compact};

    #[test]
    fn decode_sequence() {
        let mut buf = vec![];
        let mut b = [0u8; 32];
        let evs = [
            Compact::Entry {
                d: 3,
                func: 0x1000,
                prev: 0,
            },
            Compact::Entry {
                d: 100,
                func: 0x1000,
                prev: 0x1000,
            },
            Compact::Exit { d: 70 },
            Compact::Entry {
                d: 1,
                func: 0x900,
                prev: 0x1000,
            },
            Compact::TailExit { d: 9 },
            Compact::Exit { d: 1 << 33 },
        ];
        for e in evs {
            let n = encode_compact(e, &mut b);
            buf.extend_from_slice(&b[..n]);
        }
        Framed::Lost { d: 2, count: 5 }.encode(&mut buf);
        Framed::Site {
            key: 77,
            prefix: b"T",
            name: b"f",
            file: b"a.rs",
            line: 3,
        }
        .encode(&mut buf);
        for resumed in [false, true] {
            Framed::ContextSwitch { resumed, calls: 3 }.encode(&mut buf);
        }
        let mut d = Decoder::new(&buf, 1000);
        let mut got = vec![];
        while let Some(r) = d.next_record().unwrap() {
            got.push(r);
        }
        let t = 1000u64;
        assert_eq!(
            got,
            vec![
                Record::Entry {
                    tsc: t + 3,
                    func: 0x1000
                },
                Record::Entry {
                    tsc: t + 103,
                    func: 0x1000
                },
                Record::Exit { tsc: t + 173 },
                Record::Entry {
                    tsc: t + 174,
                    func: 0x900
                },
                Record::TailExit { tsc: t + 183 },
                Record::Exit {
                    tsc: t + 183 + (1 << 33)
                },
                Record::Lost {
                    tsc: t + 185 + (1 << 33),
                    count: 5
                },
                Record::Site(SiteInfo {
                    key: 77,
                    name: "T::f".into(),
                    file: "a.rs".into(),
                    line: 3
                }),
                Record::ContextSwitch {
                    resumed: false,
                    calls: 3
                },
                Record::ContextSwitch {
                    resumed: true,
                    calls: 3
                },
            ]
        );
    }

    #[test]
    fn errors_name_the_offset() {
        // An exit whose continuation is cut off.
        let buf = [0x81u8, 0xc1];
        let mut d = Decoder::new(&buf, 0);
        assert!(matches!(d.next_record(), Ok(Some(Record::Exit { .. }))));
        let e = d.next_record().unwrap_err();
        assert_eq!(e.offset, 1);
        // A framed record longer than the buffer.
        let buf = [0x05u8, 0x20, 1, 2];
        let e = Decoder::new(&buf, 0).next_record().unwrap_err();
        assert_eq!(e.offset, 0);
        assert_eq!(e.problem, "record runs past the end of its chunk");
        assert_eq!(
            e.to_string(),
            "byte 0 of the chunk payload: record runs past the end of its chunk"
        );
    }

    #[test]
    fn framed_lengths_are_checked_against_the_chunk() {
        // A length of u64::MAX neither overflows nor allocates.
        let mut buf = vec![TAG_SITE];
        buf.extend([0xff; 9]);
        buf.push(0x01);
        let e = Decoder::new(&buf, 0).next_record().unwrap_err();
        assert_eq!(e.problem, "record runs past the end of its chunk");
        // One byte too long, then exactly long enough.
        let buf = [TAG_LOST, 3, 1, 2];
        let e = Decoder::new(&buf, 0).next_record().unwrap_err();
        assert_eq!(e.problem, "record runs past the end of its chunk");
        let buf = [TAG_LOST, 2, 1, 2];
        let r = Decoder::new(&buf, 0).next_record().unwrap();
        assert_eq!(r, Some(Record::Lost { tsc: 1, count: 2 }));
        // A string length inside the record is checked against the record.
        let buf = [TAG_THREAD_START, 3, 0, 0xff, 0x7f, 0];
        let e = Decoder::new(&buf, 0).next_record().unwrap_err();
        assert_eq!((e.offset, e.problem), (0, "malformed record"));
    }
}

/// Where a chunk payload's stream stands after its last complete record
/// (see [`stream_end`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamEnd {
    /// Entries minus exits (and tail exits) in the payload.
    pub depth_change: i64,
    /// Function of the last entry (0 if there is none: a chunk starts from
    /// function 0).
    pub last_func: u64,
    /// TSC of the last timed record (the chunk's base TSC if none).
    pub last_tsc: u64,
}

/// Scans a chunk payload up to its end marker, its end or its first
/// undecodable record, keeping only what a writer continuing the stream
/// needs: the open-call balance, the last entry's function and the last
/// timed record's TSC (what the decoder's state would be). No allocation:
/// the runtime calls it on a thread whose recorder was interrupted and
/// abandoned by a signal handler, to resynchronise.
pub fn stream_end(payload: &[u8], base_tsc: u64) -> StreamEnd {
    let mut d = Decoder::new(payload, base_tsc);
    let mut depth = 0i64;
    loop {
        let start = d.pos;
        // A record cut short leaves nothing behind.
        let (tsc0, func0) = (d.tsc, d.prev_func);
        let Some(&first) = d.buf.get(d.pos) else {
            break;
        };
        if first == 0 {
            break;
        }
        d.pos += 1;
        let ok = match d.compact(first, start) {
            Ok(Some(Record::Entry { .. })) => {
                depth += 1;
                true
            }
            Ok(Some(_)) => {
                depth -= 1;
                true
            }
            Err(_) => false,
            Ok(None) => {
                let Some(len) = get_uvarint(d.buf, &mut d.pos) else {
                    break;
                };
                let Some(end) = d
                    .pos
                    .checked_add(len as usize)
                    .filter(|&e| e <= d.buf.len())
                else {
                    break;
                };
                // The framed records whose first field is a time delta
                // (see `Decoder::framed`).
                if matches!(
                    first,
                    TAG_THREAD_START | TAG_THREAD_EXIT | TAG_LOST | TAG_MARKER
                ) {
                    let mut p = d.pos;
                    match get_uvarint(&d.buf[..end], &mut p) {
                        Some(delta) => d.tsc = d.tsc.wrapping_add(delta),
                        None => break,
                    }
                }
                d.pos = end;
                true
            }
        };
        if !ok {
            (d.tsc, d.prev_func) = (tsc0, func0);
            break;
        }
    }
    StreamEnd {
        depth_change: depth,
        last_func: d.prev_func,
        last_tsc: d.tsc,
    }
}

/// Counts the entry, exit and tail-exit events of a chunk payload, up to
/// its end marker or its first undecodable record (what the writer stores
/// as a chunk's event count). A scan of the record framing (first bytes,
/// varint lengths) without decoding values: the runtime's helper thread
/// counts every full chunk with it. No allocation.
pub fn count_events(payload: &[u8]) -> u32 {
    let b = payload;
    let mut i = 0usize;
    let mut n = 0u32;
    // Skips a varint at `i`; false if it runs past the end.
    let skip = |i: &mut usize| -> bool {
        loop {
            match b.get(*i) {
                Some(&x) => {
                    *i += 1;
                    if x < 0x80 {
                        return true;
                    }
                }
                None => return false,
            }
        }
    };
    while let Some(&first) = b.get(i) {
        i += 1;
        let (cont, func) = match first {
            0x00 => break,
            0x01..=0x0f => {
                let mut p = i;
                let Some(len) = get_uvarint(b, &mut p) else {
                    break;
                };
                match p.checked_add(len as usize).filter(|&e| e <= b.len()) {
                    Some(e) => i = e,
                    None => break,
                }
                continue;
            }
            0x10..=0x1f => (first & 0x08 != 0, false),
            0x20..=0x3f => (first & 0x10 != 0, true),
            0x40..=0x7f => (first & 0x20 != 0, false),
            _ => (first & 0x40 != 0, false),
        };
        if (cont && !skip(&mut i)) || (func && !skip(&mut i)) {
            break;
        }
        n = n.saturating_add(1);
    }
    n
}

#[cfg(test)]
mod count_tests {
    use super::*;
    use crate::event::{Compact, encode_compact};

    /// The resynchronising scan ends where the decoder ends: the same
    /// balance of entries and exits, last function and last time.
    #[test]
    fn stream_end_matches_the_decoder() {
        let mut buf = vec![];
        let mut b = [0u8; 32];
        let mut prev = 0u64;
        let mut x = 0x1234_5678_9abc_def1u64;
        for k in 0..3000u64 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let d = if k % 3 == 0 { x % 100_000 } else { x % 50 };
            let func = 0x4000 + (x % 9) * 0x30;
            let ev = match x % 4 {
                0 | 1 => Compact::Entry { d, func, prev },
                2 => Compact::Exit { d },
                _ => Compact::TailExit { d },
            };
            if let Compact::Entry { func, .. } = ev {
                prev = func;
            }
            let n = encode_compact(ev, &mut b);
            buf.extend_from_slice(&b[..n]);
            if k % 101 == 0 {
                // Timed framed records (lost events, a marker) and an
                // untimed one (a return value).
                buf.extend_from_slice(&[0x03, 2, 7, 9]);
                buf.extend_from_slice(&[0x06, 5, 3, 1, b'm', 1, b't']);
                buf.extend_from_slice(&[0x05, 1, 4]);
            }
        }
        for cut in [0, 1, 2, 17, 500, buf.len() / 2, buf.len() - 1, buf.len()] {
            let p = &buf[..cut];
            let mut dec = Decoder::new(p, 1000);
            let (mut depth, mut func, mut tsc) = (0i64, 0u64, 1000u64);
            while let Ok(Some(r)) = dec.next_record() {
                match r {
                    Record::Entry { tsc: t, func: f } => {
                        depth += 1;
                        func = f;
                        tsc = t;
                    }
                    Record::Exit { tsc: t } | Record::TailExit { tsc: t } => {
                        depth -= 1;
                        tsc = t;
                    }
                    Record::Lost { tsc: t, .. } | Record::Marker { tsc: t, .. } => tsc = t,
                    _ => {}
                }
            }
            let e = stream_end(p, 1000);
            assert_eq!(
                (e.depth_change, e.last_func, e.last_tsc),
                (depth, func, tsc),
                "cut {cut}"
            );
        }
    }

    /// The framing scan counts what the decoder decodes.
    #[test]
    fn count_matches_the_decoder() {
        let mut buf = vec![];
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut prev = 0u64;
        for k in 0..5000u64 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let d = match k % 4 {
                0 => x % 30,
                1 => x % 5000,
                2 => x >> (x % 64),
                _ => 1,
            };
            let func = 0x1000 + (x % 7) * 0x40;
            let ev = match x % 5 {
                0 | 1 if func != prev => Compact::Entry { d, func, prev },
                0 | 1 => Compact::Entry {
                    d,
                    func,
                    prev: func,
                },
                2 | 3 => Compact::Exit { d },
                _ => Compact::TailExit { d },
            };
            if let Compact::Entry { func, .. } = ev {
                prev = func;
            }
            let mut b = [0u8; 32];
            let n = encode_compact(ev, &mut b);
            buf.extend_from_slice(&b[..n]);
            if k % 97 == 0 {
                // A framed record (lost events) in between.
                buf.extend_from_slice(&[0x03, 2, 5, 9]);
            }
        }
        let mut dec = Decoder::new(&buf, 0);
        let mut decoded = 0u32;
        while let Ok(Some(r)) = dec.next_record() {
            if matches!(
                r,
                Record::Entry { .. } | Record::Exit { .. } | Record::TailExit { .. }
            ) {
                decoded += 1;
            }
        }
        assert_eq!(dec.position(), buf.len());
        assert_eq!(count_events(&buf), decoded);
        assert_eq!(decoded, 5000);
        // Cut anywhere: never more than the decoder finds.
        for cut in [1, 7, 100, 1001, buf.len() - 1] {
            let mut dec = Decoder::new(&buf[..cut], 0);
            let mut d = 0;
            while let Ok(Some(r)) = dec.next_record() {
                d += u32::from(!matches!(r, Record::Lost { .. }));
            }
            assert!(count_events(&buf[..cut]) <= d + 1);
        }
    }
}
