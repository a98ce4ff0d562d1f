//! Event encoding: the compact per-thread event forms, the framed records,
//! and a decoder for one chunk payload.
//!
//! The first byte of every record says what it is:
//!
//! | first byte | record |
//! |---|---|
//! | `0x00` | end of the written part of the payload (the file is zero-filled) |
//! | `0x01..=0x0f` | framed record: tag, LEB128 payload length, payload |
//! | `0x10..=0x1f` `0001cddd` | tail exit, 3 inline delta bits |
//! | `0x20..=0x3f` `001cdddd` | entry of a new function, 4 inline delta bits, then the function as a zigzag delta from the previous entry's |
//! | `0x40..=0x7f` `01cddddd` | entry of the same function as the previous entry, 5 inline delta bits |
//! | `0x80..=0xff` `1cdddddd` | exit, 6 inline delta bits |
//!
//! `d` bits are the low bits of the TSC delta from the previous timed record
//! of the chunk (or from the chunk's base TSC); when `c` is set the rest of
//! the delta follows as LEB128.

use crate::varint::{get_uvarint, put_uvarint, unzigzag, uvarint_len, zigzag};

/// Framed tag: thread start (delta, name).
pub const TAG_THREAD_START: u8 = 0x01;
/// Framed tag: thread exit (delta, name).
pub const TAG_THREAD_EXIT: u8 = 0x02;
/// Framed tag: events dropped by the runtime (delta, count).
pub const TAG_LOST: u8 = 0x03;
/// Framed tag: argument values of the call entered just before.
pub const TAG_ARGS: u8 = 0x04;
/// Framed tag: return value of the innermost open call (before its exit).
pub const TAG_RETVAL: u8 = 0x05;
/// Framed tag: a marker event.
pub const TAG_MARKER: u8 = 0x06;
/// Framed tag: process description (metadata stream).
pub const TAG_PROCESS: u8 = 0x08;
/// Framed tag: loaded module (metadata stream).
pub const TAG_MODULE: u8 = 0x09;
/// Framed tag: source-instrumented site (metadata stream).
pub const TAG_SITE: u8 = 0x0a;
/// Framed tag: a call-graph arc with its count (counting mode).
pub const TAG_ARC: u8 = 0x0b;

/// Longest encoding of a compact event (entry with a far function).
pub const MAX_COMPACT_LEN: usize = 1 + 10 + 10;

/// Packs a first byte and the LEB128 continuation of `rest` into one
/// little-endian word, when the whole record fits in 8 bytes.
#[inline(always)]
fn pack_word(first: u64, mut rest: u64, mut n: u32) -> Option<(u64, u32)> {
    let mut w = first;
    while rest != 0 {
        if n >= 8 {
            return None;
        }
        let mut b = rest & 0x7f;
        rest >>= 7;
        if rest != 0 {
            b |= 0x80;
        }
        w |= b << (8 * n);
        n += 1;
    }
    Some((w, n))
}

/// Encodes an exit with TSC delta `d` as a word of at most 8 bytes.
#[inline(always)]
pub fn pack_exit(d: u64) -> Option<(u64, u32)> {
    let rest = d >> 6;
    let first = 0x80 | (d & 0x3f) | if rest != 0 { 0x40 } else { 0 };
    pack_word(first, rest, 1)
}

/// Encodes a tail exit with TSC delta `d` as a word of at most 8 bytes.
#[inline(always)]
pub fn pack_tail_exit(d: u64) -> Option<(u64, u32)> {
    let rest = d >> 3;
    let first = 0x10 | (d & 0x7) | if rest != 0 { 0x08 } else { 0 };
    pack_word(first, rest, 1)
}

/// Encodes an entry of the previous entry's function as a word.
#[inline(always)]
pub fn pack_entry_same(d: u64) -> Option<(u64, u32)> {
    let rest = d >> 5;
    let first = 0x40 | (d & 0x1f) | if rest != 0 { 0x20 } else { 0 };
    pack_word(first, rest, 1)
}

/// Encodes an entry of function `func` (previous entry `prev`) as a word.
#[inline(always)]
pub fn pack_entry_new(d: u64, func: u64, prev: u64) -> Option<(u64, u32)> {
    let rest = d >> 4;
    let first = 0x20 | (d & 0xf) | if rest != 0 { 0x10 } else { 0 };
    let (w, n) = pack_word(first, rest, 1)?;
    let fd = zigzag(func.wrapping_sub(prev) as i64);
    // The function delta is a complete varint of its own (it may be zero).
    let len = uvarint_len(fd) as u32;
    if n + len > 8 {
        return None;
    }
    let mut w = w;
    let mut v = fd;
    for i in 0..len {
        let mut b = v & 0x7f;
        v >>= 7;
        if i + 1 < len {
            b |= 0x80;
        }
        w |= b << (8 * (n + i));
    }
    Some((w, n + len))
}

/// A compact event to encode with [`encode_compact`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compact {
    /// Entry of `func`; `prev` is the function of the previous entry in the
    /// chunk (0 at the chunk start).
    Entry {
        /// TSC delta.
        d: u64,
        /// Function key.
        func: u64,
        /// Previous entry's function key.
        prev: u64,
    },
    /// Exit of the innermost open function.
    Exit {
        /// TSC delta.
        d: u64,
    },
    /// Tail exit (XRay) of the innermost open function.
    TailExit {
        /// TSC delta.
        d: u64,
    },
}

/// Encodes any compact event into `out` (at least [`MAX_COMPACT_LEN`]
/// bytes), returning its length. Produces exactly the bytes of the `pack_*`
/// functions when those succeed.
pub fn encode_compact(ev: Compact, out: &mut [u8]) -> usize {
    let (first, bits, d) = match ev {
        Compact::Exit { d } => (0x80u8, 6u32, d),
        Compact::TailExit { d } => (0x10, 3, d),
        Compact::Entry { d, func, prev } if func == prev => (0x40, 5, d),
        Compact::Entry { d, .. } => (0x20, 4, d),
    };
    let rest = d >> bits;
    out[0] = first | (d & ((1 << bits) - 1)) as u8 | if rest != 0 { 1 << bits } else { 0 };
    let mut pos = 1;
    if rest != 0 {
        put_uvarint(out, &mut pos, rest);
    }
    if let Compact::Entry { func, prev, .. } = ev {
        if func != prev {
            put_uvarint(out, &mut pos, zigzag(func.wrapping_sub(prev) as i64));
        }
    }
    pos
}

/// Destination of framed-record bytes.
pub trait Sink {
    /// Appends bytes.
    fn put(&mut self, bytes: &[u8]);
}

/// A [`Sink`] that only counts.
#[derive(Default)]
pub struct CountSink(pub usize);

impl Sink for CountSink {
    fn put(&mut self, bytes: &[u8]) {
        self.0 += bytes.len();
    }
}

impl Sink for Vec<u8> {
    fn put(&mut self, bytes: &[u8]) {
        self.extend_from_slice(bytes);
    }
}

/// A [`Sink`] writing into a slice; panics if it overflows, so size it with
/// [`framed_len`] first.
pub struct SliceSink<'a> {
    /// Destination.
    pub buf: &'a mut [u8],
    /// Bytes written so far.
    pub pos: usize,
}

impl Sink for SliceSink<'_> {
    fn put(&mut self, bytes: &[u8]) {
        self.buf[self.pos..self.pos + bytes.len()].copy_from_slice(bytes);
        self.pos += bytes.len();
    }
}

fn put_var<S: Sink>(s: &mut S, v: u64) {
    let mut b = [0u8; 10];
    let mut n = 0;
    put_uvarint(&mut b, &mut n, v);
    s.put(&b[..n]);
}

fn put_bytes<S: Sink>(s: &mut S, bytes: &[u8]) {
    put_var(s, bytes.len() as u64);
    s.put(bytes);
}

/// A framed record to write, borrowing its strings.
#[derive(Debug, Clone, Copy)]
pub enum Framed<'a> {
    /// A thread's first record.
    ThreadStart {
        /// TSC delta.
        d: u64,
        /// Thread name.
        name: &'a [u8],
    },
    /// A thread's last record.
    ThreadExit {
        /// TSC delta.
        d: u64,
        /// Thread name at exit.
        name: &'a [u8],
    },
    /// Events dropped since the previous record.
    Lost {
        /// TSC delta.
        d: u64,
        /// Number of events dropped.
        count: u64,
    },
    /// The traced process.
    Process {
        /// Process id.
        pid: u64,
        /// Parent process id.
        ppid: u64,
        /// Executable path.
        exe: &'a [u8],
        /// Command line, arguments separated (and usually ended) by NUL.
        cmdline: &'a [u8],
    },
    /// A loaded ELF object.
    Module {
        /// Load bias: run-time address minus link-time address.
        bias: u64,
        /// Lowest run-time address of the object's segments.
        start: u64,
        /// Bytes from `start` to the end of the highest segment.
        size: u64,
        /// GNU build id (may be empty).
        build_id: &'a [u8],
        /// Path of the object.
        path: &'a [u8],
    },
    /// A source-instrumented function.
    Site {
        /// The key that entries of this function carry.
        key: u64,
        /// Name prefix (for example the `Self` type), may be empty.
        prefix: &'a [u8],
        /// Function name (joined to the prefix with `::`).
        name: &'a [u8],
        /// Source file.
        file: &'a [u8],
        /// Source line.
        line: u64,
    },
    /// Integer argument values of the call whose entry precedes it.
    Args {
        /// The values (zigzag varints on disk).
        values: &'a [i64],
    },
    /// Return value of the innermost open call; its exit follows.
    RetVal {
        /// The value.
        value: i64,
    },
    /// A marker event with its (formatted) arguments.
    Marker {
        /// TSC delta.
        d: u64,
        /// Marker name.
        name: &'a [u8],
        /// Its arguments, formatted.
        text: &'a [u8],
    },
    /// A call-graph arc counted without timestamps (`record --count`).
    Arc {
        /// Return address in the caller (the call site).
        from: u64,
        /// Address inside the callee (its key).
        to: u64,
        /// Calls along the arc.
        count: u64,
    },
}

impl Framed<'_> {
    fn tag(&self) -> u8 {
        match self {
            Framed::ThreadStart { .. } => TAG_THREAD_START,
            Framed::ThreadExit { .. } => TAG_THREAD_EXIT,
            Framed::Lost { .. } => TAG_LOST,
            Framed::Process { .. } => TAG_PROCESS,
            Framed::Module { .. } => TAG_MODULE,
            Framed::Site { .. } => TAG_SITE,
            Framed::Arc { .. } => TAG_ARC,
            Framed::Args { .. } => TAG_ARGS,
            Framed::RetVal { .. } => TAG_RETVAL,
            Framed::Marker { .. } => TAG_MARKER,
        }
    }

    fn payload<S: Sink>(&self, s: &mut S) {
        match *self {
            Framed::ThreadStart { d, name } | Framed::ThreadExit { d, name } => {
                put_var(s, d);
                put_bytes(s, name);
            }
            Framed::Lost { d, count } => {
                put_var(s, d);
                put_var(s, count);
            }
            Framed::Process {
                pid,
                ppid,
                exe,
                cmdline,
            } => {
                put_var(s, pid);
                put_var(s, ppid);
                put_bytes(s, exe);
                put_bytes(s, cmdline);
            }
            Framed::Module {
                bias,
                start,
                size,
                build_id,
                path,
            } => {
                put_var(s, bias);
                put_var(s, start);
                put_var(s, size);
                put_bytes(s, build_id);
                put_bytes(s, path);
            }
            Framed::Site {
                key,
                prefix,
                name,
                file,
                line,
            } => {
                put_var(s, key);
                put_bytes(s, prefix);
                put_bytes(s, name);
                put_bytes(s, file);
                put_var(s, line);
            }
            Framed::Arc { from, to, count } => {
                put_var(s, from);
                put_var(s, to);
                put_var(s, count);
            }
            Framed::Args { values } => {
                put_var(s, values.len() as u64);
                for &v in values {
                    put_var(s, zigzag(v));
                }
            }
            Framed::RetVal { value } => put_var(s, zigzag(value)),
            Framed::Marker { d, name, text } => {
                put_var(s, d);
                put_bytes(s, name);
                put_bytes(s, text);
            }
        }
    }

    /// The TSC delta this record carries (0 for untimed metadata).
    pub fn delta(&self) -> u64 {
        match *self {
            Framed::ThreadStart { d, .. }
            | Framed::ThreadExit { d, .. }
            | Framed::Lost { d, .. }
            | Framed::Marker { d, .. } => d,
            _ => 0,
        }
    }

    /// Bytes of the payload.
    pub fn payload_len(&self) -> usize {
        let mut c = CountSink::default();
        self.payload(&mut c);
        c.0
    }

    /// Total encoded length: tag, length varint, payload.
    pub fn framed_len(&self) -> usize {
        let p = self.payload_len();
        1 + uvarint_len(p as u64) + p
    }

    /// Writes the record. The tag byte is written by the caller's `tag`
    /// closure *after* everything else, so that a record interrupted half
    /// way still reads as the end of the stream: `body` receives the bytes
    /// after the tag.
    pub fn write_body<S: Sink>(&self, s: &mut S) {
        put_var(s, self.payload_len() as u64);
        self.payload(s);
    }

    /// The first byte of the record.
    pub fn first_byte(&self) -> u8 {
        self.tag()
    }

    /// Encodes the whole record (tag first) into a sink; for tests and
    /// offline writers.
    pub fn encode<S: Sink>(&self, s: &mut S) {
        s.put(&[self.tag()]);
        self.write_body(s);
    }
}

/// Total encoded length of a framed record.
pub fn framed_len(rec: &Framed<'_>) -> usize {
    rec.framed_len()
}

/// The process a trace was recorded from.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProcessInfo {
    /// Process id.
    pub pid: u64,
    /// Parent process id.
    pub ppid: u64,
    /// Executable path.
    pub exe: String,
    /// Command line arguments, `argv[0]` first.
    pub args: Vec<String>,
}

/// A loaded ELF object.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ModuleInfo {
    /// Run-time address minus link-time address.
    pub bias: u64,
    /// Lowest run-time address.
    pub start: u64,
    /// Size of the mapped range.
    pub size: u64,
    /// GNU build id bytes.
    pub build_id: Vec<u8>,
    /// Path of the object.
    pub path: String,
}

impl ModuleInfo {
    /// Whether `addr` lies in the object's mapped range.
    pub fn contains(&self, addr: u64) -> bool {
        addr >= self.start && addr - self.start < self.size
    }

    /// The build id as lowercase hex.
    pub fn build_id_hex(&self) -> String {
        self.build_id.iter().map(|b| format!("{b:02x}")).collect()
    }
}

/// A source-instrumented function.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SiteInfo {
    /// Key carried by the function's entries.
    pub key: u64,
    /// Full name (prefix and name joined by `::`).
    pub name: String,
    /// Source file.
    pub file: String,
    /// Source line.
    pub line: u32,
}

/// One decoded record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Record {
    /// Function entry.
    Entry {
        /// Absolute TSC.
        tsc: u64,
        /// Function key (start address, or a site key).
        func: u64,
    },
    /// Exit of the innermost open function.
    Exit {
        /// Absolute TSC.
        tsc: u64,
    },
    /// Tail exit of the innermost open function.
    TailExit {
        /// Absolute TSC.
        tsc: u64,
    },
    /// Thread start.
    ThreadStart {
        /// Absolute TSC.
        tsc: u64,
        /// Thread name.
        name: String,
    },
    /// Thread exit.
    ThreadExit {
        /// Absolute TSC.
        tsc: u64,
        /// Thread name.
        name: String,
    },
    /// Events dropped by the runtime.
    Lost {
        /// Absolute TSC.
        tsc: u64,
        /// How many.
        count: u64,
    },
    /// Process description.
    Process(ProcessInfo),
    /// Module description.
    Module(ModuleInfo),
    /// Source site description.
    Site(SiteInfo),
    /// Argument values of the call entered just before.
    Args {
        /// The values.
        values: Vec<i64>,
    },
    /// Return value of the innermost open call (its exit follows).
    RetVal {
        /// The value.
        value: i64,
    },
    /// A marker event.
    Marker {
        /// Absolute TSC.
        tsc: u64,
        /// Marker name.
        name: String,
        /// Its arguments, formatted.
        text: String,
    },
    /// A counted call-graph arc.
    Arc {
        /// Call site in the caller.
        from: u64,
        /// Address inside the callee.
        to: u64,
        /// Calls.
        count: u64,
    },
    /// A framed record of a tag this reader does not know (skipped).
    Unknown {
        /// The tag.
        tag: u8,
    },
}

/// A problem found while decoding a payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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
        let rec = match first {
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
            tag => {
                let len = get_uvarint(self.buf, &mut self.pos)
                    .ok_or(self.err(start, "truncated record length"))?;
                let end = self
                    .pos
                    .checked_add(len as usize)
                    .filter(|&e| e <= self.buf.len() && len <= self.buf.len() as u64)
                    .ok_or(self.err(start, "record runs past the end of its chunk"))?;
                let body = &self.buf[self.pos..end];
                self.pos = end;
                let rec = self
                    .framed(tag, body)
                    .ok_or(self.err(start, "malformed record"))?;
                // A framed record's delta moved `tsc` inside `framed`.
                rec
            }
        };
        Ok(Some(rec))
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
        let string = |p: &mut usize| bytes(p).map(|b| String::from_utf8_lossy(b).into_owned());
        let rec = match tag {
            TAG_THREAD_START | TAG_THREAD_EXIT => {
                let d = var(&mut p)?;
                let name = string(&mut p)?;
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
                    .map(|a| String::from_utf8_lossy(a).into_owned())
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
                let prefix = string(&mut p)?;
                let name = string(&mut p)?;
                let file = string(&mut p)?;
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
                let name = string(&mut p)?;
                let text = string(&mut p)?;
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

    fn check_pack(ev: Compact, packed: Option<(u64, u32)>) {
        let mut buf = [0u8; 32];
        let n = encode_compact(ev, &mut buf);
        match packed {
            Some((w, len)) => {
                assert_eq!(len as usize, n, "{ev:?}");
                assert_eq!(&w.to_le_bytes()[..n], &buf[..n], "{ev:?}");
                assert!(w.to_le_bytes()[n..].iter().all(|&b| b == 0));
            }
            None => assert!(n > 8, "{ev:?} fits in 8 bytes but pack refused"),
        }
    }

    #[test]
    fn packers_match_encoder() {
        let deltas = [
            0u64,
            1,
            15,
            16,
            31,
            32,
            63,
            64,
            127,
            128,
            5000,
            1 << 40,
            1 << 54,
            u64::MAX,
        ];
        let funcs = [0u64, 1, 0x5555_0000, 0x7fff_ffff_f000, u64::MAX];
        for &d in &deltas {
            check_pack(Compact::Exit { d }, pack_exit(d));
            check_pack(Compact::TailExit { d }, pack_tail_exit(d));
            check_pack(
                Compact::Entry {
                    d,
                    func: 9,
                    prev: 9,
                },
                pack_entry_same(d),
            );
            for &f in &funcs {
                for &p in &funcs {
                    if f != p {
                        check_pack(
                            Compact::Entry {
                                d,
                                func: f,
                                prev: p,
                            },
                            pack_entry_new(d, f, p),
                        );
                    }
                }
            }
        }
    }

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
