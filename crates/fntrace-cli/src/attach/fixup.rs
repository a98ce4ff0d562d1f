//! Rewriting runs of one-byte NOPs (what gcc's
//! `-fpatchable-function-entry=N[,M]` emits) into the layouts the runtime
//! can switch while threads run (one 5-byte NOP, or `66 90` at the entry
//! behind prefix NOPs), done by `fntrace record -p` while every thread of
//! the process is stopped.
//!
//! A thread stopped between two of the NOPs would resume in the middle of
//! the new instruction, so a run that holds a stopped thread's instruction
//! pointer (other than at its first byte) is left alone, and its function
//! cannot be traced in this window. The same holds for a thread that was
//! interrupted by a signal inside such a run and is running its handler:
//! its return address sits in the signal frame, which is not looked at;
//! the window for that is the handful of cycles the NOPs take.
//!
//! The bytes are written through `/proc/PID/mem`, which the kernel allows
//! the tracer for read-only code (the page becomes a private copy, as with
//! a debugger's breakpoint).

use std::path::Path;

use fntrace_rt::patch::int3::NOP5;
use fntrace_rt::patch::sites::{self, Fixup, PREFIX_OFF};
use object::{Object, ObjectSection, ObjectSegment, ObjectSymbol};

use super::ptrace::Stopped;

/// What `fix_up` did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Fixed {
    /// Runs rewritten.
    pub rewritten: usize,
    /// Runs left alone because a stopped thread was inside them.
    pub busy: usize,
}

/// The rewrites of one object, as one span of code to write back while
/// the threads are stopped (one write instead of one per site).
#[derive(Debug, Clone)]
pub struct Span {
    /// Address of the first byte.
    at: u64,
    /// The code with every rewrite applied.
    new: Vec<u8>,
    /// The code as it was.
    old: Vec<u8>,
    /// The rewrites: (offset in the span, length).
    runs: Vec<(usize, usize)>,
}

/// Reads `n` bytes of the process at `addr` (empty if unreadable).
fn read_mem(mem: &std::fs::File, addr: u64, n: usize) -> Vec<u8> {
    use std::os::unix::fs::FileExt;
    let mut v = vec![0u8; n];
    match mem.read_exact_at(&mut v, addr) {
        Ok(()) => v,
        Err(_) => vec![],
    }
}

/// The rewrites the object `path` (offset 0 mapped at `start` in the
/// process whose memory is `mem`) needs, found before stopping anything.
fn plan_object(mem: &std::fs::File, path: &Path, start: u64) -> Option<Span> {
    let file = std::fs::File::open(path).ok()?;
    // SAFETY: a read-only private mapping of a loaded object's file;
    // loaded objects are not rewritten in place.
    let map = unsafe { memmap2::Mmap::map(&file) }.ok()?;
    let obj = object::File::parse(&*map).ok()?;
    let sec = obj.section_by_name("__patchable_function_entries")?;
    let first = obj.segments().map(|s| s.address()).min()?;
    let bias = start.wrapping_sub(first & !0xfff);
    // The entries as the loader relocated them, read from the process.
    let raw = read_mem(mem, sec.address().wrapping_add(bias), sec.size() as usize);
    let mut entries: Vec<u64> = raw
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().unwrap_or([0; 8])))
        .filter(|&e| e != 0)
        .collect();
    entries.sort_unstable();
    let (lo, hi) = (entries.first()?.saturating_sub(8), entries.last()? + 32);
    if hi - lo > 1 << 30 {
        return None;
    }
    // All the code around the sites in one read.
    let code_buf = read_mem(mem, lo, (hi - lo) as usize);
    if code_buf.is_empty() {
        return None;
    }
    let code = |a: u64, n: usize| {
        let o = a.wrapping_sub(lo) as usize;
        std::borrow::Cow::Borrowed(code_buf.get(o..o + n).unwrap_or_default())
    };
    let mut funcs: Vec<u64> = obj
        .symbols()
        .chain(obj.dynamic_symbols())
        .filter(|s| s.kind() == object::SymbolKind::Text && s.is_definition() && s.address() != 0)
        .map(|s| s.address().wrapping_add(bias))
        .collect();
    funcs.sort_unstable();
    funcs.dedup();
    let mut rewrites: Vec<(u64, &'static [u8])> = vec![];
    for e in entries {
        let k = funcs.partition_point(|&f| f < e);
        let Ok(site) = sites::classify(e, &code, funcs.get(k).copied()) else {
            continue;
        };
        match site.fixup {
            Some(Fixup::Nop5) => rewrites.push((site.addr, &NOP5)),
            Some(Fixup::Nop2) => rewrites.push((site.addr, &PREFIX_OFF)),
            _ => {}
        }
    }
    let at = rewrites.first()?.0;
    let end = rewrites.iter().map(|r| r.0 + r.1.len() as u64).max()?;
    let old = code(at, (end - at) as usize).into_owned();
    if old.is_empty() {
        return None;
    }
    let mut new = old.clone();
    let mut runs = vec![];
    for (a, b) in rewrites {
        let o = (a - at) as usize;
        new[o..o + b.len()].copy_from_slice(b);
        runs.push((o, b.len()));
    }
    Some(Span { at, new, old, runs })
}

/// The rewrites the objects mapped in `pid` need (`objects`: path, where
/// offset 0 is mapped), found while the process runs.
pub fn plan(pid: i32, objects: &[(std::path::PathBuf, u64)]) -> Vec<Span> {
    let Ok(mem) = std::fs::File::open(format!("/proc/{pid}/mem")) else {
        return vec![];
    };
    objects
        .iter()
        .filter_map(|(path, start)| plan_object(&mem, path, *start))
        .collect()
}

/// Applies `plan` in the stopped process, except runs a stopped thread is
/// inside, and code that changed since it was planned.
pub fn apply(st: &Stopped, plan: &[Span]) -> Fixed {
    let rips: Vec<u64> = st
        .tids()
        .into_iter()
        .filter_map(|t| st.regs(t).ok().map(|r| r.rip))
        .collect();
    let mut out = Fixed::default();
    for span in plan {
        // Someone else changed the code meanwhile: leave it.
        if st.read_mem(span.at, span.old.len()).ok().as_deref() != Some(&span.old[..]) {
            continue;
        }
        let mut new = span.new.clone();
        let mut n = 0;
        for &(o, len) in &span.runs {
            let (a, b) = (span.at + o as u64, span.at + (o + len) as u64);
            if rips.iter().any(|&ip| ip > a && ip < b) {
                new[o..o + len].copy_from_slice(&span.old[o..o + len]);
                out.busy += 1;
            } else {
                n += 1;
            }
        }
        if st.write_mem(span.at, &new).is_ok() {
            out.rewritten += n;
        }
    }
    out
}
