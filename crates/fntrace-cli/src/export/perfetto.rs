//! `fntrace export --format perfetto`: a native Perfetto trace (a
//! `perfetto.protos.Trace`: `TracePacket`s carrying `TrackEvent`s), which
//! the Perfetto UI and trace processor load far faster and far larger than
//! Chrome JSON.
//!
//! Layout of the output:
//! - sequence 1: the process's `TrackDescriptor` (pid, name, command line);
//! - one packet sequence per thread (`trusted_packet_sequence_id` 2, 3, …):
//!   its `TrackDescriptor` (pid, tid, name; repeated at the end when the
//!   thread was renamed), then a packet that clears the incremental state
//!   (`SEQ_INCREMENTAL_STATE_CLEARED`) and sets the sequence's defaults
//!   (`TracePacketDefaults`: the thread's track and clock 64) with a
//!   `ClockSnapshot` declaring clock 64 incremental; then one packet per
//!   event: `TYPE_SLICE_BEGIN` / `TYPE_SLICE_END` per call,
//!   `TYPE_INSTANT` per marker (its argument text as the debug annotation
//!   `args`). Function and marker names are interned once per sequence
//!   (`interned_data.event_names`, referenced by `name_iid`; the packets
//!   that add names carry `SEQ_NEEDS_INCREMENTAL_STATE`). `-A` values are
//!   debug annotations `arg1`, `arg2`, … on the slice's begin, `-R` the
//!   annotation `retval` on its end (trace processor merges both into the
//!   slice's arguments).
//! - with `record --sched`, per thread a sequence of its own (ids after the
//!   threads') with a track named `off CPU`, child of the thread's track,
//!   holding one slice per off-CPU interval (`blocked` or `preempted`,
//!   absolute timestamps);
//! - Timestamps are CLOCK_MONOTONIC nanoseconds (the recording's start
//!   plus the TSC converted with the trace's measured frequency), declared
//!   in the BOOTTIME domain (the same clock unless the machine suspended
//!   during the recording). Each event packet carries only the delta from
//!   the sequence's previous timestamp on the incremental clock 64: one or
//!   two bytes for typical calls instead of seven.
//!
//! Size: a begin packet is 12 bytes and an end packet 10 when the delta is
//! under 128 ns and the name's iid under 128 (one byte more for each when
//! not).
//!
//! Why a hand-written encoder rather than `prost` and generated code (or
//! the `perfetto_protos` crate): the export writes five kinds of tiny
//! messages, each of a few varints; encoding them straight into one output
//! buffer costs a handful of stores per event, where generated code would
//! build a `TracePacket` struct per event (with its `Option`s and nested
//! boxes, about 200 fields wide), compute its encoded length in a second
//! pass and then encode it — several times the work, plus a build-time
//! protobuf compiler or a large generated dependency. Correctness of the
//! field numbers is not taken on trust: the tests decode the output with
//! the upstream `perfetto_trace.proto` compiled by `protoc`.
//!
//! Memory stays bounded: threads are written one after another, each
//! streamed through [`crate::analysis::Events`], with the output flushed
//! every megabyte; only the per-thread interning table (one entry per
//! distinct function) grows with the trace.

use rustc_hash::FxHashMap as HashMap;
use std::io::{self, Write};

use fntrace_format::{Record, Trace};

use crate::analysis::{Event, Events, Step};
use crate::select::{Selected, Selection, Selector};
use crate::symbols::Symbolizer;

/// What [`write_perfetto`] wrote.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PerfettoSummary {
    /// Track events (slice begins, slice ends and instants).
    pub events: u64,
    /// Threads (one track and packet sequence each).
    pub threads: u64,
    /// Bytes written.
    pub bytes: u64,
}

// Field numbers, from the upstream protos (protos/perfetto/trace/…).
/// `Trace.packet`.
const TRACE_PACKET: u32 = 1;
/// `TracePacket` fields.
const PKT_CLOCK_SNAPSHOT: u32 = 6;
const PKT_TIMESTAMP: u32 = 8;
const PKT_SEQUENCE_ID: u32 = 10;
const PKT_TRACK_EVENT: u32 = 11;
const PKT_INTERNED_DATA: u32 = 12;
const PKT_SEQUENCE_FLAGS: u32 = 13;
const PKT_TIMESTAMP_CLOCK_ID: u32 = 58;
const PKT_DEFAULTS: u32 = 59;
const PKT_TRACK_DESCRIPTOR: u32 = 60;
/// `TracePacket.SequenceFlags`.
const SEQ_INCREMENTAL_STATE_CLEARED: u64 = 1;
const SEQ_NEEDS_INCREMENTAL_STATE: u64 = 2;
/// `TrackEvent` fields.
const TE_DEBUG_ANNOTATIONS: u32 = 4;
const TE_TYPE: u32 = 9;
const TE_NAME_IID: u32 = 10;
const TE_TRACK_UUID: u32 = 11;
const TE_NAME: u32 = 23;
/// `TrackEvent.Type`.
const TYPE_SLICE_BEGIN: u64 = 1;
const TYPE_SLICE_END: u64 = 2;
const TYPE_INSTANT: u64 = 3;
/// `DebugAnnotation` fields.
const DA_INT_VALUE: u32 = 4;
const DA_STRING_VALUE: u32 = 6;
const DA_NAME: u32 = 10;
/// `InternedData.event_names`, and `EventName` fields.
const ID_EVENT_NAMES: u32 = 2;
const EN_IID: u32 = 1;
const EN_NAME: u32 = 2;
/// `TrackDescriptor` fields.
const TD_UUID: u32 = 1;
const TD_NAME: u32 = 2;
const TD_PROCESS: u32 = 3;
const TD_THREAD: u32 = 4;
const TD_PARENT_UUID: u32 = 5;
/// `ProcessDescriptor` fields.
const PD_PID: u32 = 1;
const PD_CMDLINE: u32 = 2;
const PD_PROCESS_NAME: u32 = 6;
/// `ThreadDescriptor` fields.
const THD_PID: u32 = 1;
const THD_TID: u32 = 2;
const THD_THREAD_NAME: u32 = 5;
/// `ClockSnapshot.clocks`, and `ClockSnapshot.Clock` fields.
const CS_CLOCKS: u32 = 1;
const CLK_ID: u32 = 1;
const CLK_TIMESTAMP: u32 = 2;
const CLK_IS_INCREMENTAL: u32 = 3;
/// `TracePacketDefaults` fields, and `TrackEventDefaults.track_uuid`.
const DEF_TRACK_EVENT_DEFAULTS: u32 = 11;
const DEF_TIMESTAMP_CLOCK_ID: u32 = 58;
const TED_TRACK_UUID: u32 = 11;
/// `BuiltinClocks.BOOTTIME`.
const CLOCK_BOOTTIME: u64 = 6;
/// The sequence-scoped incremental clock of every thread's sequence (ids
/// 64–127 are scoped to their sequence).
const CLOCK_INCREMENTAL: u64 = 64;

/// Flush the output buffer past this many bytes.
const FLUSH_AT: usize = 1 << 20;

/// A protobuf encoder writing into one growing buffer.
struct Pb {
    b: Vec<u8>,
}

impl Pb {
    #[inline(always)]
    fn varint(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.b.push(v as u8 | 0x80);
            v >>= 7;
        }
        self.b.push(v as u8);
    }

    #[inline(always)]
    fn key(&mut self, field: u32, wire_type: u8) {
        self.varint(u64::from(field) << 3 | u64::from(wire_type));
    }

    /// A varint field (uint64, uint32, enum, bool; int64 as two's
    /// complement).
    #[inline(always)]
    fn uint(&mut self, field: u32, v: u64) {
        self.key(field, 0);
        self.varint(v);
    }

    /// A string or bytes field.
    fn bytes(&mut self, field: u32, s: &[u8]) {
        self.key(field, 2);
        self.varint(s.len() as u64);
        self.b.extend_from_slice(s);
    }

    /// Starts a length-delimited submessage; returns what [`Pb::close`]
    /// takes. One length byte is reserved (the common case).
    #[inline(always)]
    fn open(&mut self, field: u32) -> usize {
        self.key(field, 2);
        self.b.push(0);
        self.b.len()
    }

    /// Ends the submessage started at `start`, writing its length (moving
    /// the body when the length needs more than one byte).
    #[inline(always)]
    fn close(&mut self, start: usize) {
        let len = self.b.len() - start;
        if len < 0x80 {
            self.b[start - 1] = len as u8;
        } else {
            self.close_long(start, len);
        }
    }

    #[inline(never)]
    fn close_long(&mut self, start: usize, len: usize) {
        let mut tmp = Pb { b: Vec::new() };
        tmp.varint(len as u64);
        self.b.splice(start - 1..start, tmp.b);
    }
}

/// Nanoseconds from TSC ticks with two multiplications instead of a
/// 128-bit division: `ticks * 10^9 / hz` rounded down, exactly like
/// [`crate::analysis::Clock::ns`]. The multiplier is `10^9 * 2^96 / hz`
/// rounded up; its excess adds less than `ticks / 2^96`, below the `1 /
/// hz` that separates the quotient from the next integer.
#[derive(Debug, Clone, Copy)]
struct FastClock {
    start_tsc: u64,
    start_ns: u64,
    /// The multiplier's high and low 64 bits (the high part is below
    /// 2^62: 64-bit operands, one multiplication each).
    mult_hi: u64,
    mult_lo: u64,
}

impl FastClock {
    fn of(trace: &Trace) -> FastClock {
        FastClock::new(
            trace.tsc_hz(),
            trace.header().start_tsc,
            trace.header().start_mono_ns,
        )
    }

    fn new(hz: u64, start_tsc: u64, start_ns: u64) -> FastClock {
        let mult = (1_000_000_000u128 << 96) / u128::from(hz.max(1)) + 1;
        FastClock {
            start_tsc,
            start_ns,
            mult_hi: (mult >> 64) as u64,
            mult_lo: mult as u64,
        }
    }

    /// CLOCK_MONOTONIC nanoseconds of a TSC value.
    #[inline(always)]
    fn ns(&self, tsc: u64) -> u64 {
        let ticks = u128::from(tsc.saturating_sub(self.start_tsc));
        // (ticks * mult) >> 96 without overflowing 128 bits.
        let lo = (ticks * u128::from(self.mult_lo)) >> 64;
        let v = (ticks * u128::from(self.mult_hi) + lo) >> 32;
        self.start_ns.wrapping_add(v as u64)
    }
}

/// The writer of one thread's packet sequence.
struct Sequence<'a> {
    pb: &'a mut Pb,
    seq: u64,
    /// Last timestamp written on the incremental clock.
    last_ns: u64,
    /// Interned names: function key → iid.
    funcs: HashMap<u64, u64>,
    /// The last function begun and its iid (recursion and loops repeat
    /// it: no hash lookup).
    last_func: (u64, u64),
    /// Interned marker names → iid.
    markers: HashMap<String, u64>,
    next_iid: u64,
    events: u64,
}

impl Sequence<'_> {
    /// Starts a packet on this sequence at `ns`; returns what
    /// [`Pb::close`] takes.
    #[inline(always)]
    fn packet(&mut self, ns: u64) -> usize {
        let p = self.pb.open(TRACE_PACKET);
        // Time never goes back on a sequence (TSC read on another core may
        // be a few ticks behind): clamp.
        let ns = ns.max(self.last_ns);
        self.pb.uint(PKT_TIMESTAMP, ns - self.last_ns);
        self.last_ns = ns;
        self.pb.uint(PKT_SEQUENCE_ID, self.seq);
        p
    }

    /// The iid of function `func`, interning it in the current packet's
    /// `interned_data` (and flagging the packet) when new.
    #[inline(always)]
    fn func_iid(&mut self, func: u64, sym: &mut Symbolizer<'_>) -> (u64, bool) {
        if let Some(&iid) = self.funcs.get(&func) {
            return (iid, false);
        }
        let iid = self.next_iid;
        self.next_iid += 1;
        self.funcs.insert(func, iid);
        self.intern(iid, sym.name(func).as_bytes());
        (iid, true)
    }

    fn marker_iid(&mut self, name: &str) -> (u64, bool) {
        if let Some(&iid) = self.markers.get(name) {
            return (iid, false);
        }
        let iid = self.next_iid;
        self.next_iid += 1;
        self.markers.insert(name.to_string(), iid);
        self.intern(iid, name.as_bytes());
        (iid, true)
    }

    fn intern(&mut self, iid: u64, name: &[u8]) {
        let d = self.pb.open(PKT_INTERNED_DATA);
        let e = self.pb.open(ID_EVENT_NAMES);
        self.pb.uint(EN_IID, iid);
        self.pb.bytes(EN_NAME, name);
        self.pb.close(e);
        self.pb.close(d);
        self.pb
            .uint(PKT_SEQUENCE_FLAGS, SEQ_NEEDS_INCREMENTAL_STATE);
    }

    /// The common packet of an event without interned data or annotations
    /// (`name_iid` 0: none, a slice end), written with every length in one
    /// byte (the packet is at most 41).
    #[inline(always)]
    fn small(&mut self, ns: u64, ty: u64, name_iid: u64) {
        #[inline(always)]
        fn put(a: &mut [u8; 48], mut n: usize, mut v: u64) -> usize {
            while v >= 0x80 {
                a[n] = v as u8 | 0x80;
                v >>= 7;
                n += 1;
            }
            a[n] = v as u8;
            n + 1
        }
        let ns = ns.max(self.last_ns);
        let delta = ns - self.last_ns;
        self.last_ns = ns;
        // Written in place (48 bytes reserved, then cut to the packet):
        // bytes assembled on the stack and copied would be reloaded
        // before their stores retire (a store-forwarding stall).
        let len = self.pb.b.len();
        self.pb.b.resize(len + 48, 0);
        let a: &mut [u8; 48] = (&mut self.pb.b[len..len + 48])
            .try_into()
            .expect("48 bytes");
        a[0] = (TRACE_PACKET << 3 | 2) as u8;
        a[2] = (PKT_TIMESTAMP << 3) as u8;
        let mut n = put(a, 3, delta);
        a[n] = (PKT_SEQUENCE_ID << 3) as u8;
        n = put(a, n + 1, self.seq);
        a[n] = (PKT_TRACK_EVENT << 3 | 2) as u8;
        let te = n + 2;
        a[te] = (TE_TYPE << 3) as u8;
        a[te + 1] = ty as u8;
        n = te + 2;
        if name_iid != 0 {
            a[n] = (TE_NAME_IID << 3) as u8;
            n = put(a, n + 1, name_iid);
        }
        a[te - 1] = (n - te) as u8;
        a[1] = (n - 2) as u8;
        self.pb.b.truncate(len + n);
        self.events += 1;
    }

    /// A slice begin of `func` at `ns`, with argument values.
    #[inline(always)]
    fn begin(&mut self, func: u64, ns: u64, args: &[i64], sym: &mut Symbolizer<'_>) {
        if args.is_empty() {
            if self.last_func.0 == func && self.last_func.1 != 0 {
                return self.small(ns, TYPE_SLICE_BEGIN, self.last_func.1);
            }
            if let Some(&iid) = self.funcs.get(&func) {
                self.last_func = (func, iid);
                return self.small(ns, TYPE_SLICE_BEGIN, iid);
            }
        }
        let p = self.packet(ns);
        let (iid, _) = self.func_iid(func, sym);
        let te = self.pb.open(PKT_TRACK_EVENT);
        self.pb.uint(TE_TYPE, TYPE_SLICE_BEGIN);
        self.pb.uint(TE_NAME_IID, iid);
        for (i, &v) in args.iter().enumerate() {
            let a = self.pb.open(TE_DEBUG_ANNOTATIONS);
            self.pb.bytes(DA_NAME, format!("arg{}", i + 1).as_bytes());
            self.pb.uint(DA_INT_VALUE, v as u64);
            self.pb.close(a);
        }
        self.pb.close(te);
        self.pb.close(p);
        self.events += 1;
    }

    /// A slice end at `ns`, with the return value.
    #[inline(always)]
    fn end(&mut self, ns: u64, ret: Option<i64>) {
        if ret.is_none() {
            return self.small(ns, TYPE_SLICE_END, 0);
        }
        let p = self.packet(ns);
        let te = self.pb.open(PKT_TRACK_EVENT);
        self.pb.uint(TE_TYPE, TYPE_SLICE_END);
        if let Some(v) = ret {
            let a = self.pb.open(TE_DEBUG_ANNOTATIONS);
            self.pb.bytes(DA_NAME, b"retval");
            self.pb.uint(DA_INT_VALUE, v as u64);
            self.pb.close(a);
        }
        self.pb.close(te);
        self.pb.close(p);
        self.events += 1;
    }

    /// An instant event (a marker) at `ns`.
    fn instant(&mut self, name: &str, text: &str, ns: u64) {
        let p = self.packet(ns);
        let (iid, _) = self.marker_iid(name);
        let te = self.pb.open(PKT_TRACK_EVENT);
        self.pb.uint(TE_TYPE, TYPE_INSTANT);
        self.pb.uint(TE_NAME_IID, iid);
        if !text.is_empty() {
            let a = self.pb.open(TE_DEBUG_ANNOTATIONS);
            self.pb.bytes(DA_NAME, b"args");
            self.pb.bytes(DA_STRING_VALUE, text.as_bytes());
            self.pb.close(a);
        }
        self.pb.close(te);
        self.pb.close(p);
        self.events += 1;
    }
}

/// Identifiers of the process's and the threads' tracks.
fn process_uuid(pid: u64) -> u64 {
    0x7f00_0000_0000_0000 | pid
}

fn thread_uuid(pid: u64, tid: u32) -> u64 {
    (pid & 0x3fff_ffff) << 32 | u64::from(tid)
}

/// The uuid of thread `tid`'s off-CPU track (a child of its thread track).
fn offcpu_uuid(pid: u64, tid: u32) -> u64 {
    thread_uuid(pid, tid) | 1 << 62
}

/// Writes thread `tid`'s off-CPU intervals (`record --sched`) on sequence
/// `seq`: a track named `off CPU`, child of the thread's track, with one
/// slice per interval (`blocked` or `preempted`), absolute BOOTTIME
/// timestamps. A track of its own because the thread's slices come from
/// another clock: nesting them inside the calls would need both clocks to
/// agree to the nanosecond. With `--time-range`, the intervals that start
/// inside it. Returns the events written.
#[allow(clippy::too_many_arguments)]
fn offcpu_track(
    pb: &mut Pb,
    trace: &Trace,
    sel: &Selection,
    clock: FastClock,
    seq: u64,
    pid: u64,
    tid: u32,
) -> u64 {
    let iv = trace.offcpu_tsc(tid);
    if iv.is_empty() {
        return 0;
    }
    let uuid = offcpu_uuid(pid, tid);
    let p = pb.open(TRACE_PACKET);
    pb.uint(PKT_SEQUENCE_ID, seq);
    let td = pb.open(PKT_TRACK_DESCRIPTOR);
    pb.uint(TD_UUID, uuid);
    pb.bytes(TD_NAME, b"off CPU");
    pb.uint(TD_PARENT_UUID, thread_uuid(pid, tid));
    pb.close(td);
    pb.close(p);
    let mut n = 0;
    for (out, back, preempted) in iv {
        let since = clock.ns(out).saturating_sub(clock.start_ns);
        if sel.time_range.is_some_and(|(a, b)| since < a || since > b) {
            continue;
        }
        let name: &[u8] = if preempted { b"preempted" } else { b"blocked" };
        for (ty, at) in [(TYPE_SLICE_BEGIN, out), (TYPE_SLICE_END, back)] {
            let p = pb.open(TRACE_PACKET);
            pb.uint(PKT_TIMESTAMP, clock.ns(at));
            pb.uint(PKT_TIMESTAMP_CLOCK_ID, CLOCK_BOOTTIME);
            pb.uint(PKT_SEQUENCE_ID, seq);
            let te = pb.open(PKT_TRACK_EVENT);
            pb.uint(TE_TYPE, ty);
            pb.uint(TE_TRACK_UUID, uuid);
            if ty == TYPE_SLICE_BEGIN {
                pb.bytes(TE_NAME, name);
            }
            pb.close(te);
            pb.close(p);
            n += 1;
        }
    }
    n
}

/// A thread's `TrackDescriptor` packet.
fn thread_descriptor(pb: &mut Pb, seq: u64, pid: u64, tid: u32, name: &str) {
    let p = pb.open(TRACE_PACKET);
    pb.uint(PKT_SEQUENCE_ID, seq);
    let td = pb.open(PKT_TRACK_DESCRIPTOR);
    pb.uint(TD_UUID, thread_uuid(pid, tid));
    pb.uint(TD_PARENT_UUID, process_uuid(pid));
    let t = pb.open(TD_THREAD);
    pb.uint(THD_PID, pid);
    pb.uint(THD_TID, u64::from(tid));
    if !name.is_empty() {
        pb.bytes(THD_THREAD_NAME, name.as_bytes());
    }
    pb.close(t);
    pb.close(td);
    pb.close(p);
}

/// The name a thread had when its recording started, from its first
/// records.
fn start_name(trace: &Trace, tid: u32) -> String {
    trace
        .stream(tid)
        .take(4)
        .find_map(|r| match r {
            Record::ThreadStart { name, .. } => Some(name),
            _ => None,
        })
        .unwrap_or_default()
}

/// Writes the trace as a Perfetto protobuf trace (see the module doc):
/// one track per thread with its calls as nested slices, markers as
/// instants, arguments and return values as debug annotations. Calls whose
/// exit was lost end where the thread's recording ends, as in every view.
/// Only the calls and markers `sel` selects are written (argument values
/// go with a selected call when its begin is written at its entry, i.e.
/// without `--threshold`).
pub fn write_perfetto(
    out: &mut dyn Write,
    trace: &Trace,
    sel: &Selection,
) -> io::Result<PerfettoSummary> {
    let clock = FastClock::of(trace);
    let meta = trace.metadata();
    let mut sym = Symbolizer::new(meta);
    let pid = meta
        .process
        .as_ref()
        .map(|p| p.pid)
        .unwrap_or(u64::from(trace.header().pid));
    let mut pb = Pb {
        b: Vec::with_capacity(FLUSH_AT + (64 << 10)),
    };
    let mut sum = PerfettoSummary::default();
    // The process track, on sequence 1.
    {
        let p = pb.open(TRACE_PACKET);
        pb.uint(PKT_SEQUENCE_ID, 1);
        let td = pb.open(PKT_TRACK_DESCRIPTOR);
        pb.uint(TD_UUID, process_uuid(pid));
        let pd = pb.open(TD_PROCESS);
        pb.uint(PD_PID, pid);
        if let Some(pr) = &meta.process {
            for a in &pr.args {
                pb.bytes(PD_CMDLINE, a.as_bytes());
            }
            let name = pr.exe.rsplit('/').next().unwrap_or(&pr.exe);
            pb.bytes(PD_PROCESS_NAME, name.as_bytes());
        }
        pb.close(pd);
        pb.close(td);
        pb.close(p);
    }
    let tids = sel.threads(trace);
    let nthreads = tids.len() as u64;
    for (i, tid) in tids.into_iter().enumerate() {
        let seq = i as u64 + 2;
        let first_name = start_name(trace, tid);
        thread_descriptor(&mut pb, seq, pid, tid, &first_name);
        // Clear the incremental state, set the defaults and the
        // incremental clock, starting at the recording's start.
        let t0 = clock.start_ns;
        {
            let p = pb.open(TRACE_PACKET);
            pb.uint(PKT_TIMESTAMP, t0);
            pb.uint(PKT_TIMESTAMP_CLOCK_ID, CLOCK_BOOTTIME);
            pb.uint(PKT_SEQUENCE_ID, seq);
            pb.uint(PKT_SEQUENCE_FLAGS, SEQ_INCREMENTAL_STATE_CLEARED);
            let cs = pb.open(PKT_CLOCK_SNAPSHOT);
            let c = pb.open(CS_CLOCKS);
            pb.uint(CLK_ID, CLOCK_BOOTTIME);
            pb.uint(CLK_TIMESTAMP, t0);
            pb.close(c);
            let c = pb.open(CS_CLOCKS);
            pb.uint(CLK_ID, CLOCK_INCREMENTAL);
            pb.uint(CLK_TIMESTAMP, t0);
            pb.uint(CLK_IS_INCREMENTAL, 1);
            pb.close(c);
            pb.close(cs);
            let d = pb.open(PKT_DEFAULTS);
            pb.uint(DEF_TIMESTAMP_CLOCK_ID, CLOCK_INCREMENTAL);
            let ted = pb.open(DEF_TRACK_EVENT_DEFAULTS);
            pb.uint(TED_TRACK_UUID, thread_uuid(pid, tid));
            pb.close(ted);
            pb.close(d);
            pb.close(p);
        }
        let mut s = Sequence {
            pb: &mut pb,
            seq,
            last_ns: t0,
            funcs: HashMap::default(),
            last_func: (0, 0),
            markers: HashMap::default(),
            next_iid: 1,
            events: 0,
        };
        let mut events = Events::new(trace, tid);
        // An entry is written when the next event shows whether argument
        // values follow it.
        let mut pending: Option<(u64, u64)> = None;
        let mut ret: Option<i64> = None;
        if !sel.is_all() {
            write_selected(
                out,
                &mut s,
                &mut events,
                sel,
                trace,
                clock,
                &mut sym,
                &mut sum,
            )?;
        }
        while sel.is_all() {
            if s.pb.b.len() >= FLUSH_AT {
                out.write_all(&s.pb.b)?;
                sum.bytes += s.pb.b.len() as u64;
                s.pb.b.clear();
            }
            match events.step() {
                Step::Enter { func, tsc, .. } => {
                    if let Some((f, ns)) = pending.take() {
                        s.begin(f, ns, &[], &mut sym);
                    }
                    pending = Some((func, clock.ns(tsc)));
                }
                Step::Exit { tsc } => {
                    if let Some((f, ns)) = pending.take() {
                        s.begin(f, ns, &[], &mut sym);
                    }
                    s.end(clock.ns(tsc), ret.take());
                }
                Step::Other => {
                    let ev = events.next();
                    if let Some(Event::Args(a)) = &ev {
                        if let Some((f, ns)) = pending.take() {
                            s.begin(f, ns, a, &mut sym);
                        }
                        continue;
                    }
                    if let Some((f, ns)) = pending.take() {
                        s.begin(f, ns, &[], &mut sym);
                    }
                    match ev {
                        None => break,
                        Some(Event::Enter { func, tsc, .. }) => {
                            pending = Some((func, clock.ns(tsc)));
                        }
                        Some(Event::Exit { tsc, .. }) => s.end(clock.ns(tsc), ret.take()),
                        Some(Event::RetVal(v)) => ret = Some(v),
                        Some(Event::Marker { tsc, name, text }) => {
                            s.instant(&name, &text, clock.ns(tsc));
                        }
                        Some(Event::Args(_) | Event::Switch { .. }) => {}
                    }
                }
            }
        }
        sum.events += s.events;
        sum.threads += 1;
        sum.events += offcpu_track(&mut pb, trace, sel, clock, seq + nthreads, pid, tid);
        let summary = events.into_summary();
        if !summary.name.is_empty() && summary.name != first_name {
            thread_descriptor(&mut pb, seq, pid, tid, &summary.name);
        }
    }
    out.write_all(&pb.b)?;
    sum.bytes += pb.b.len() as u64;
    Ok(sum)
}

/// Writes the selected events of one thread (see [`Selector`]); kept out
/// of [`write_perfetto`]'s unselected loop so that the loop stays as tight.
#[inline(never)]
#[allow(clippy::too_many_arguments)]
fn write_selected(
    out: &mut dyn Write,
    s: &mut Sequence<'_>,
    events: &mut Events<'_>,
    sel: &Selection,
    trace: &Trace,
    clock: FastClock,
    sym: &mut Symbolizer<'_>,
    sum: &mut PerfettoSummary,
) -> io::Result<()> {
    let mut pending: Option<(u64, u64)> = None;
    let mut ret: Option<i64> = None;
    let mut selector = Selector::new(sel, trace);
    let apply = |s: &mut Sequence<'_>,
                 pending: &mut Option<(u64, u64)>,
                 ret: &mut Option<i64>,
                 sym: &mut Symbolizer<'_>,
                 x: &[Selected]| {
        for &x in x {
            if let Some((f, ns)) = pending.take() {
                s.begin(f, ns, &[], sym);
            }
            match x {
                Selected::Begin { func, tsc } => *pending = Some((func, clock.ns(tsc))),
                Selected::End { tsc } => s.end(clock.ns(tsc), ret.take()),
            }
        }
    };
    for ev in events.by_ref() {
        if s.pb.b.len() >= FLUSH_AT {
            out.write_all(&s.pb.b)?;
            sum.bytes += s.pb.b.len() as u64;
            s.pb.b.clear();
        }
        match ev {
            Event::Enter { func, tsc, .. } => {
                let x = selector.enter(func, tsc, sym);
                apply(s, &mut pending, &mut ret, sym, x);
            }
            Event::Exit { tsc, .. } => {
                let x = selector.exit(tsc);
                apply(s, &mut pending, &mut ret, sym, x);
            }
            Event::Args(a) => {
                if selector.top_selected()
                    && let Some((f, ns)) = pending.take()
                {
                    s.begin(f, ns, &a, sym);
                }
            }
            Event::RetVal(v) => {
                if selector.top_selected() {
                    ret = Some(v);
                }
            }
            Event::Switch { .. } => {}
            Event::Marker { tsc, name, text } => {
                let (shown, x) = selector.marker(tsc);
                apply(s, &mut pending, &mut ret, sym, x);
                if shown {
                    if let Some((f, ns)) = pending.take() {
                        s.begin(f, ns, &[], sym);
                    }
                    s.instant(&name, &text, clock.ns(tsc));
                }
            }
        }
    }
    if let Some((f, ns)) = pending.take() {
        s.begin(f, ns, &[], sym);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_and_long_submessages() {
        let mut pb = Pb { b: vec![] };
        pb.uint(1, 300);
        assert_eq!(pb.b, [0x08, 0xac, 0x02]);
        pb.b.clear();
        let o = pb.open(2);
        pb.bytes(3, &[b'x'; 200]);
        pb.close(o);
        // key, length 203 in two bytes, inner key, inner length 200.
        assert_eq!(&pb.b[..5], &[0x12, 0xcb, 0x01, 0x1a, 0xc8]);
        assert_eq!(pb.b.len(), 3 + 203);
    }

    #[test]
    fn fast_clock_matches_the_exact_division() {
        for hz in [1_000_000_000u64, 2_995_200_000, 3_000_000_001, 1_234_567] {
            let c = FastClock::new(hz, 0, 0);
            for t in [0u64, 1, 7, 999, 123_456_789, 1 << 40, 3 << 50, u64::MAX / 3] {
                let exact = (u128::from(t) * 1_000_000_000 / u128::from(hz)) as u64;
                assert_eq!(c.ns(t), exact, "hz {hz} ticks {t}");
            }
        }
    }
}
