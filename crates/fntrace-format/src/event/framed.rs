//! Framed records (tag, LEB128 payload length, payload): the [`Framed`]
//! records to write, their lengths, and the [`Sink`]s they are written
//! into.

use super::{EXT_RESUME, EXT_SETTING, EXT_SUSPEND, TAG_ATTACH, TAG_DETACH, TAG_EXT};
use super::{
    TAG_ARC, TAG_ARGS, TAG_LOST, TAG_MARKER, TAG_MODULE, TAG_PROCESS, TAG_RETVAL, TAG_SITE,
    TAG_THREAD_EXIT, TAG_THREAD_START,
};
use super::{TAG_LIBFUNC, TAG_OFFCPU};
use crate::varint::{put_uvarint, uvarint_len, zigzag};

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
    /// Recording started by attaching to a running process.
    Attach {
        /// Absolute TSC of the start.
        tsc: u64,
        /// Process id of the controller.
        controller: u64,
    },
    /// Recording of an attached process stopped.
    Detach {
        /// Absolute TSC of the stop.
        tsc: u64,
        /// [`super::DetachReason::code`].
        reason: u64,
    },
    /// A shared-library function recorded through a PLT/GOT entry.
    LibFunc {
        /// The key its entries carry.
        key: u64,
        /// Symbol name.
        symbol: &'a [u8],
        /// Path of the defining library.
        library: &'a [u8],
    },
    /// An interval a thread spent off CPU.
    OffCpu {
        /// Thread id.
        tid: u64,
        /// CLOCK_MONOTONIC ns of the switch out.
        out_ns: u64,
        /// Nanoseconds until it was switched back in.
        len_ns: u64,
        /// Bit 0: preempted (runnable) rather than blocked.
        flags: u64,
    },
    /// A setting the recording ran with (see `docs/FORMAT.md` for the
    /// keys readers know).
    Setting {
        /// Setting name, such as `time-filter-ns`.
        key: &'a [u8],
        /// Its value, as text.
        value: &'a [u8],
    },
    /// A user-level context switch (see `EXT_SUSPEND`, `EXT_RESUME`):
    /// the `calls` exits (or, `resumed`, entries) that follow suspend (or
    /// continue) open calls. Untimed.
    ContextSwitch {
        /// Entries of resumed calls follow (else exits of suspended ones).
        resumed: bool,
        /// How many.
        calls: u64,
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
            Framed::Attach { .. } => TAG_ATTACH,
            Framed::Detach { .. } => TAG_DETACH,
            Framed::LibFunc { .. } => TAG_LIBFUNC,
            Framed::OffCpu { .. } => TAG_OFFCPU,
            Framed::Setting { .. } | Framed::ContextSwitch { .. } => TAG_EXT,
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
            Framed::LibFunc {
                key,
                symbol,
                library,
            } => {
                put_var(s, key);
                put_bytes(s, symbol);
                put_bytes(s, library);
            }
            Framed::OffCpu {
                tid,
                out_ns,
                len_ns,
                flags,
            } => {
                put_var(s, tid);
                put_var(s, out_ns);
                put_var(s, len_ns);
                put_var(s, flags);
            }
            Framed::Arc { from, to, count } => {
                put_var(s, from);
                put_var(s, to);
                put_var(s, count);
            }
            Framed::Attach { tsc, controller } => {
                put_var(s, tsc);
                put_var(s, controller);
            }
            Framed::Detach { tsc, reason } => {
                put_var(s, tsc);
                put_var(s, reason);
            }
            Framed::Setting { key, value } => {
                put_var(s, EXT_SETTING);
                put_bytes(s, key);
                put_bytes(s, value);
            }
            Framed::ContextSwitch { resumed, calls } => {
                put_var(s, if resumed { EXT_RESUME } else { EXT_SUSPEND });
                put_var(s, calls);
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
