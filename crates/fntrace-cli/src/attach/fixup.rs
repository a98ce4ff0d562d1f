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

/// What [`fix_up`] did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Fixed {
    /// Runs rewritten.
    pub rewritten: usize,
    /// Runs left alone because a stopped thread was inside them.
    pub busy: usize,
}

/// A planned rewrite: `bytes` at `at`.
#[derive(Debug, Clone)]
pub struct Rewrite {
    at: u64,
    bytes: &'static [u8],
}

/// Reads `n` bytes of process `pid` at `addr` (empty if unreadable).
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
fn plan_object(mem: &std::fs::File, path: &Path, start: u64, out: &mut Vec<Rewrite>) {
    let Ok(file) = std::fs::File::open(path) else {
        return;
    };
    // SAFETY: a read-only private mapping of a loaded object's file;
    // loaded objects are not rewritten in place.
    let Ok(map) = (unsafe { memmap2::Mmap::map(&file) }) else {
        return;
    };
    let Ok(obj) = object::File::parse(&*map) else {
        return;
    };
    let Some(sec) = obj.section_by_name("__patchable_function_entries") else {
        return;
    };
    let Some(first) = obj.segments().map(|s| s.address()).min() else {
        return;
    };
    let bias = start.wrapping_sub(first & !0xfff);
    // The entries as the loader relocated them, read from the process.
    let raw = read_mem(mem, sec.address().wrapping_add(bias), sec.size() as usize);
    let mut funcs: Vec<u64> = obj
        .symbols()
        .chain(obj.dynamic_symbols())
        .filter(|s| s.kind() == object::SymbolKind::Text && s.is_definition() && s.address() != 0)
        .map(|s| s.address().wrapping_add(bias))
        .collect();
    funcs.sort_unstable();
    funcs.dedup();
    let code = |a: u64, n: usize| read_mem(mem, a, n);
    for e in raw
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().unwrap_or([0; 8])))
    {
        if e == 0 {
            continue;
        }
        let k = funcs.partition_point(|&f| f < e);
        let Ok(site) = sites::classify(e, &code, funcs.get(k).copied()) else {
            continue;
        };
        match site.fixup {
            Some(Fixup::Nop5) => out.push(Rewrite {
                at: site.addr,
                bytes: &NOP5,
            }),
            Some(Fixup::Nop2) => out.push(Rewrite {
                at: site.addr,
                bytes: &PREFIX_OFF,
            }),
            _ => {}
        }
    }
}

/// The rewrites the objects mapped in `pid` need (`objects`: path, where
/// offset 0 is mapped), found while the process runs.
pub fn plan(pid: i32, objects: &[(std::path::PathBuf, u64)]) -> Vec<Rewrite> {
    let Ok(mem) = std::fs::File::open(format!("/proc/{pid}/mem")) else {
        return vec![];
    };
    let mut out = vec![];
    for (path, start) in objects {
        plan_object(&mem, path, *start, &mut out);
    }
    out
}

/// Applies `plan` in the stopped process, except runs a stopped thread is
/// inside.
pub fn apply(st: &Stopped, plan: &[Rewrite]) -> Fixed {
    let rips: Vec<u64> = st
        .tids()
        .into_iter()
        .filter_map(|t| st.regs(t).ok().map(|r| r.rip))
        .collect();
    let mut out = Fixed::default();
    for r in plan {
        let end = r.at + r.bytes.len() as u64;
        if rips.iter().any(|&ip| ip > r.at && ip < end) {
            out.busy += 1;
            continue;
        }
        if st.write_mem(r.at, r.bytes).is_ok() {
            out.rewritten += 1;
        }
    }
    out
}
