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
//!
//! This module owns the framed tags and the decoded forms ([`Record`] and
//! the metadata it carries); the work is split by job:
//!
//! - `compact`: the compact hot-path forms ([`Compact`], [`encode_compact`]
//!   and the `pack_*` word encoders the runtime uses);
//! - `framed`: framed records ([`Framed`]) and the [`Sink`]s they are
//!   written into;
//! - `decode`: the [`Decoder`] of one chunk payload and its [`DecodeError`].
//!
//! Everything is re-exported here: `fntrace_format::event::X` is the path
//! of every item.

mod compact;
mod decode;
mod framed;

pub use compact::{
    Compact, MAX_COMPACT_LEN, encode_compact, pack_entry_new, pack_entry_same, pack_exit,
    pack_tail_exit,
};
pub use decode::{DecodeError, Decoder, StreamEnd, count_events, stream_end};
pub use framed::{CountSink, Framed, Sink, SliceSink, framed_len};

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
/// Framed tag: the runtime was attached to a running process (metadata).
pub const TAG_ATTACH: u8 = 0x0c;
/// Framed tag: the runtime detached from the process (metadata).
pub const TAG_DETACH: u8 = 0x0d;
/// Framed tag: a shared-library function recorded through its PLT/GOT
/// entry (metadata, minor version 2).
pub const TAG_LIBFUNC: u8 = 0x0e;
/// Framed tag: a thread was off CPU (metadata, minor version 2).
pub const TAG_OFFCPU: u8 = 0x0f;
/// Framed tag: an extension record, whose payload starts with a varint
/// kind (`EXT_*`). The one-byte tag space (`0x01..=0x0f`) is full; new
/// records are kinds of this one, and readers skip kinds they do not know.
pub const TAG_EXT: u8 = 0x07;
/// Extension kind: a setting the recording ran with (metadata: key,
/// value), such as the record-time time filter or the size limit.
pub const EXT_SETTING: u64 = 1;
/// Extension kind (thread streams, minor version 3): the thread switched
/// to another user-level context (`swapcontext`, `setcontext`), and the
/// `varint n` exit records that follow suspend the innermost open calls
/// rather than return from them. Untimed: its time is the next exit's.
pub const EXT_SUSPEND: u64 = 2;
/// Extension kind (thread streams, minor version 3): a context suspended
/// by `swapcontext` runs again, and the `varint n` entry records that
/// follow continue calls it had open (outermost first) rather than start
/// new ones. Untimed: its time is the next entry's.
pub const EXT_RESUME: u64 = 3;

/// Setting key: the record-time time filter in nanoseconds (`record -t`).
pub const SETTING_TIME_FILTER: &str = "time-filter-ns";
/// Setting key: a function with `#[instrument_fn(threshold)]` (one record
/// per function): its key (address) in hex and its threshold in
/// nanoseconds, `0x5555… 40000000`. Its calls shorter than that, and what
/// they called, were not recorded.
pub const SETTING_FN_THRESHOLD: &str = "fn-threshold";
/// Setting key: the size limit in bytes (`record --max-size`).
pub const SETTING_MAX_SIZE: &str = "max-size";
/// Setting key: recording stops this many nanoseconds after it started
/// (`record --duration`); the program runs on.
pub const SETTING_DURATION: &str = "duration-ns";
/// Setting key: the recorded call depth limit (`record --depth`).
pub const SETTING_DEPTH: &str = "depth";
/// Setting key: a `-F` pattern (one record per pattern).
pub const SETTING_FILTER: &str = "filter";
/// Setting key: a `-N` pattern (one record per pattern).
pub const SETTING_NOTRACE: &str = "notrace";
/// Setting key: a `-P` pattern (one record per pattern).
pub const SETTING_PATCH: &str = "patch";
/// Setting key: recording was stopped before the program ended; the
/// value says why (`duration`). The final block's end time is when.
pub const SETTING_STOPPED: &str = "stopped";
/// Setting key: calls deeper than the runtime's shadow stack were not
/// recorded; the value is how many (they are part of the lost events).
pub const SETTING_TOO_DEEP: &str = "too-deep";
/// Setting key: the trace stopped growing because the process's file
/// size limit (`RLIMIT_FSIZE`, `ulimit -f`) was reached; the value is the
/// limit in bytes.
pub const SETTING_FSIZE_LIMIT: &str = "fsize-limit";

/// Why an attached recording ended ([`Record::Detach`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DetachReason {
    /// The controller (`fntrace record -p`) asked (duration elapsed, Ctrl-C).
    Asked,
    /// The controller went away (killed) and the runtime detached itself.
    ControllerGone,
    /// The process exited during the window.
    ProcessExit,
    /// A code this reader does not know.
    Other(u64),
}

impl DetachReason {
    /// The on-disk code.
    pub fn code(self) -> u64 {
        match self {
            DetachReason::Asked => 0,
            DetachReason::ControllerGone => 1,
            DetachReason::ProcessExit => 2,
            DetachReason::Other(c) => c,
        }
    }

    /// The reason of an on-disk code.
    pub fn from_code(c: u64) -> DetachReason {
        match c {
            0 => DetachReason::Asked,
            1 => DetachReason::ControllerGone,
            2 => DetachReason::ProcessExit,
            c => DetachReason::Other(c),
        }
    }
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

/// A shared-library function whose calls were recorded through the
/// calling object's PLT/GOT entry (`record --libcalls`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LibFuncInfo {
    /// Key carried by the function's entries (not an address inside it).
    pub key: u64,
    /// The symbol the GOT slot is bound to (`memcpy`).
    pub symbol: String,
    /// Path of the library that defines it (`/lib/x86_64-linux-gnu/libc.so.6`).
    pub library: String,
}

impl LibFuncInfo {
    /// `symbol@library-file-name` (`memcpy@libc.so.6`).
    pub fn display_name(&self) -> String {
        let base = self.library.rsplit('/').next().unwrap_or(&self.library);
        if base.is_empty() {
            self.symbol.clone()
        } else {
            format!("{}@{}", self.symbol, base)
        }
    }
}

/// One interval a thread spent off CPU (`record --sched`): switched out
/// at `out_ns`, back in at `in_ns` (CLOCK_MONOTONIC nanoseconds).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OffCpu {
    /// Thread id.
    pub tid: u32,
    /// CLOCK_MONOTONIC ns of the switch out.
    pub out_ns: u64,
    /// CLOCK_MONOTONIC ns of the switch back in (≥ `out_ns`).
    pub in_ns: u64,
    /// The thread was preempted (still runnable) rather than blocked.
    pub preempted: bool,
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
    /// The runtime was attached to the running process (metadata).
    Attach {
        /// Absolute TSC when recording started.
        tsc: u64,
        /// Process id of the controller (`fntrace record -p`).
        controller: u64,
    },
    /// The runtime detached (metadata).
    Detach {
        /// Absolute TSC when recording stopped.
        tsc: u64,
        /// Why.
        reason: DetachReason,
    },
    /// A shared-library function (metadata).
    LibFunc(LibFuncInfo),
    /// A thread's off-CPU interval (metadata).
    OffCpu(OffCpu),
    /// A setting the recording ran with (metadata).
    Setting {
        /// Setting name.
        key: String,
        /// Its value.
        value: String,
    },
    /// A user-level context switch (`swapcontext`, `setcontext`): the
    /// `calls` exits that follow suspend open calls (`resumed` false), or
    /// the `calls` entries that follow continue calls suspended earlier
    /// (`resumed` true).
    ContextSwitch {
        /// Entries that continue suspended calls follow (else exits that
        /// suspend them).
        resumed: bool,
        /// How many exit or entry records this concerns.
        calls: u64,
    },
    /// A framed record of a tag this reader does not know (skipped).
    Unknown {
        /// The tag.
        tag: u8,
    },
}
