//! `fntrace export --format xray`: an llvm-xray basic-mode log of the
//! trace's main executable, for `llvm-xray account -instr_map=BINARY`.
//!
//! A call a user-level context switch suspended (`swapcontext`) is written
//! as its pieces, an entry and an exit each: the log has no way to say
//! that an entry continues a call, so `llvm-xray account` counts each
//! piece as a call (`report`, `graph` and the gmon export count it once).

use rustc_hash::FxHashMap as HashMap;
use std::io::{self, Write};

use fntrace_format::Trace;
use object::Object;

use crate::select::{SelectedEvents, Selection};

/// What went into an llvm-xray export.
#[derive(Debug, Default)]
pub struct XraySummary {
    /// Records written.
    pub records: u64,
    /// Entries of functions without an XRay id (skipped, with their exits).
    pub skipped: u64,
}

/// Writes an llvm-xray basic-mode ("naive") log of the trace's main
/// executable, for `llvm-xray account|convert|stack -instr_map=BINARY`.
///
/// Layout (little-endian): a 32-byte header (u16 version 3, u16 type 0,
/// a byte of flags: bit 0 constant TSC, bit 1 non-stop TSC, padding to 8,
/// u64 cycle frequency, 16 free bytes), then 32-byte records (u16 record
/// type 0, u8 cpu, u8 type: 0 entry, 1 exit, 2 tail exit; i32 function
/// id; u64 TSC; u32 thread id; u32 process id; 8 padding bytes). Function
/// ids are LLVM's for the executable's `xray_instr_map`. Only the entries
/// and exits of the calls `sel` selects are written.
pub fn write_xray(out: &mut dyn Write, trace: &Trace, sel: &Selection) -> io::Result<XraySummary> {
    use object::ObjectSection;
    let meta = trace.metadata();
    let exe = super::main_module(meta)?;
    // A path from the trace: only a regular file, of bounded size.
    let data = fntrace_format::regular::read_regular(
        std::path::Path::new(&exe.path),
        fntrace_format::regular::MAX_READ_BYTES,
    )
    .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", exe.path)))?;
    let obj = object::File::parse(&*data).map_err(io::Error::other)?;
    let sec = obj.section_by_name("xray_instr_map").ok_or_else(|| {
        io::Error::other(format!(
            "{}: no xray_instr_map section (not built with XRay)",
            exe.path
        ))
    })?;
    let sd = sec.data().map_err(io::Error::other)?;
    let mut ids: HashMap<u64, i32> = HashMap::default();
    for s in fntrace_rt::xray::sleds::parse(sd, sec.address(), exe.bias) {
        ids.entry(s.func).or_insert(s.id as i32);
    }
    let h = trace.header();
    let invariant = h.flags & fntrace_format::layout::HDR_FLAG_TSC_INVARIANT != 0;
    let mut hdr = [0u8; 32];
    hdr[0..2].copy_from_slice(&3u16.to_le_bytes());
    hdr[4] = if invariant { 0b11 } else { 0 };
    hdr[8..16].copy_from_slice(&trace.tsc_hz().to_le_bytes());
    out.write_all(&hdr)?;
    let pid = meta.process.as_ref().map(|p| p.pid as u32).unwrap_or(h.pid);
    let mut sum = XraySummary::default();
    // One record stream per thread, merged by TSC: `llvm-xray account`
    // rejects a record older than the first one it read, so the log must be
    // in time order across threads (one pending record per thread is held).
    let mut streams: Vec<ThreadRecords<'_, '_>> = sel
        .threads(trace)
        .into_iter()
        .map(|tid| ThreadRecords {
            tid,
            events: SelectedEvents::new(trace, tid, sel),
            stack: vec![],
        })
        .collect();
    let mut heads: Vec<Option<(u8, i32, u64)>> = streams
        .iter_mut()
        .map(|s| s.next_record(&ids, &mut sum))
        .collect();
    while let Some(i) = (0..heads.len())
        .filter(|&i| heads[i].is_some())
        .min_by_key(|&i| heads[i].map(|h| h.2))
    {
        let (kind, id, tsc) = heads[i].take().unwrap_or_default();
        let mut r = [0u8; 32];
        r[3] = kind;
        r[4..8].copy_from_slice(&id.to_le_bytes());
        r[8..16].copy_from_slice(&tsc.to_le_bytes());
        r[16..20].copy_from_slice(&streams[i].tid.to_le_bytes());
        r[20..24].copy_from_slice(&pid.to_le_bytes());
        out.write_all(&r)?;
        sum.records += 1;
        heads[i] = streams[i].next_record(&ids, &mut sum);
    }
    Ok(sum)
}

/// The XRay records of one thread's selected calls, in order.
struct ThreadRecords<'s, 't> {
    tid: u32,
    events: SelectedEvents<'s, 't>,
    /// Ids of the open calls (None: not an XRay function, skipped).
    stack: Vec<Option<i32>>,
}

impl ThreadRecords<'_, '_> {
    /// The next record: (type 0 entry / 1 exit, function id, TSC).
    fn next_record(
        &mut self,
        ids: &HashMap<u64, i32>,
        sum: &mut XraySummary,
    ) -> Option<(u8, i32, u64)> {
        for ev in self.events.by_ref() {
            let (kind, id, tsc) = match ev {
                crate::analysis::Event::Enter { func, tsc, .. } => {
                    let id = ids.get(&func).copied();
                    self.stack.push(id);
                    if id.is_none() {
                        sum.skipped += 1;
                    }
                    (0u8, id, tsc)
                }
                crate::analysis::Event::Exit { tsc, .. } => (1u8, self.stack.pop().flatten(), tsc),
                _ => continue,
            };
            if let Some(id) = id {
                return Some((kind, id, tsc));
            }
        }
        None
    }
}
