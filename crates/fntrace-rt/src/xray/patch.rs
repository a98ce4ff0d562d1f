//! The XRay object registry and sled patching.
//!
//! Patching a sled (11 bytes) while other threads may run
//! it: first bytes 2..11 are written (`<id32> e8|e9 <rel32>`: unreachable
//! while the head still jumps over them or is the `ret` of an exit sled),
//! then the 2-byte head (`41 ba`, the start of `mov r10d, id`) with one
//! atomic store. Unpatching stores the original head back (`eb 09`, or the
//! `ret` and the byte after it). Code pages are made writable with one
//! `mprotect` per run of contiguous pages and set back to read + execute
//! ([`crate::patch::text`]). The call targets are stubs
//! ([`crate::patch::stubs`]) within ±2 GiB of the object, since the
//! trampolines may be farther.

use std::path::PathBuf;
use std::sync::Mutex;
use std::sync::atomic::{AtomicPtr, Ordering};

use super::sleds::{self, Sled, kind};
use crate::patch::PatchError;

/// compiler-rt's `XRayPatchingStatus`.
pub mod status {
    /// The runtime found no sleds (or was not initialised).
    pub const NOT_INITIALIZED: i32 = 0;
    /// Done.
    pub const SUCCESS: i32 = 1;
    /// Another thread is patching.
    pub const ONGOING: i32 = 2;
    /// Something failed (bad id, `mprotect` refused).
    pub const FAILED: i32 = 3;
}

/// A loaded object with sleds.
pub struct XObject {
    /// Path of the object.
    pub path: PathBuf,
    /// Lowest mapped address.
    pub start: u64,
    /// Load bias.
    pub bias: u64,
    /// Mapped size.
    pub size: u64,
    /// Its sleds, in section order.
    pub sleds: Vec<Sled>,
    /// Original first two bytes of each sled.
    orig: Vec<[u8; 2]>,
    /// Function start by id - 1.
    pub funcs: Vec<u64>,
    /// `#[instrument_fn]` policies: functions with `xray = "off"` are
    /// never patched.
    policy: crate::procinfo::policy::Policies,
    /// Functions that also have a patchable entry, sorted: recorded through
    /// that entry by the dynamic runtime, so their sleds are never patched
    /// (see [`with_patchable_entry`]).
    sited: Vec<u64>,
    /// Stubs (entry, exit, tail, log-args), 0 until first patched.
    stubs: [u64; 4],
    /// Still loaded.
    pub alive: bool,
}

/// All objects seen; index = object id (0 = main executable, possibly
/// without sleds).
pub static OBJECTS: Mutex<Vec<XObject>> = Mutex::new(Vec::new());

/// Loaded objects known to have no sleds (start, path).
static NO_SLEDS: Mutex<Vec<(u64, PathBuf)>> = Mutex::new(Vec::new());

/// Function tables for the hot path: object id → a leaked array whose
/// word 0 is the number of functions and word `id` the start of function
/// `id` (the trampolines' assembly fast path reads it the same way).
pub(crate) static FUNCS: [AtomicPtr<u64>; 256] =
    [const { AtomicPtr::new(core::ptr::null_mut()) }; 256];

/// The start address of function `id`, or 0.
#[inline(always)]
pub fn function_address(id: i32) -> u64 {
    let id = id as u32;
    let (obj, fid) = ((id >> 24) as usize, id & 0x00ff_ffff);
    let p = FUNCS[obj].load(Ordering::Acquire);
    if p.is_null() || fid == 0 {
        return 0;
    }
    // SAFETY: published tables are leaked and never changed; word 0 is
    // their length, so words 1..=len exist.
    unsafe {
        if u64::from(fid) > *p {
            return 0;
        }
        *p.add(fid as usize)
    }
}

/// Finds objects loaded since the last scan and forgets unloaded ones.
/// Returns whether any object has sleds.
pub fn scan() -> bool {
    let mut objs = OBJECTS.lock().unwrap_or_else(|e| e.into_inner());
    let loaded = crate::procinfo::loaded_objects();
    for o in objs.iter_mut() {
        if o.alive && !loaded.iter().any(|l| l.0 == o.start && l.3 == o.path) {
            o.alive = false;
            // Its code is gone: no more patching, no more ids.
        }
    }
    let mut none = NO_SLEDS.lock().unwrap_or_else(|e| e.into_inner());
    none.retain(|n| loaded.iter().any(|l| l.0 == n.0 && l.3 == n.1));
    for (i, (start, size, bias, path)) in loaded.into_iter().enumerate() {
        if objs
            .iter()
            .any(|o| o.alive && o.start == start && o.path == path)
            || none.iter().any(|n| n.0 == start && n.1 == path)
        {
            continue;
        }
        let found =
            if path.as_os_str().is_empty() || crate::procinfo::own_preload_start() == Some(start) {
                None
            } else {
                sleds::read(&path, bias)
            };
        if found.is_none() && !(i == 0 && objs.is_empty()) {
            none.push((start, path));
            continue;
        }
        let (sl, policy, patchable) = found.map_or((vec![], Default::default(), vec![]), |f| {
            (f.sleds, f.policy, f.patchable)
        });
        let mut funcs: Vec<u64> = vec![];
        for s in &sl {
            if funcs.len() < s.id as usize {
                funcs.push(s.func);
            }
        }
        let orig = sl
            .iter()
            // SAFETY: sleds are inside the object's mapped, readable text.
            .map(|s| unsafe { [*(s.addr as *const u8), *((s.addr + 1) as *const u8)] })
            .collect();
        let sited = with_patchable_entry(&funcs, &patchable);
        // `#[instrument_fn(args, retval)]` on functions recorded through
        // their sleds: XRay's entry and exit sleds pass no registers to
        // the recorder (a function with a patchable entry captures there).
        let uncaptured = policy
            .entries()
            .iter()
            .filter(|e| {
                e.capture != 0
                    && e.flags & crate::procinfo::policy::XRAY_OFF == 0
                    && funcs.contains(&e.func)
                    && sited.binary_search(&e.func).is_err()
            })
            .count();
        if uncaptured > 0 {
            crate::diag::diag!(
                "fntrace: {}: {uncaptured} function(s) marked #[instrument_fn(args/retval)] are recorded \
                 through XRay sleds, which cannot capture arguments or return values \
                 (build with --instrument=fentry to capture them)",
                path.display()
            );
        }
        let id = objs.len();
        if id >= FUNCS.len() {
            break;
        }
        let table: Box<[u64]> = core::iter::once(funcs.len() as u64)
            .chain(funcs.iter().copied())
            .collect();
        FUNCS[id].store(Box::leak(table).as_mut_ptr(), Ordering::Release);
        objs.push(XObject {
            path,
            start,
            bias,
            size,
            sleds: sl,
            orig,
            funcs,
            policy,
            sited,
            stubs: [0; 4],
            alive: true,
        });
    }
    objs.iter().any(|o| o.alive && !o.sleds.is_empty())
}

/// Prefix NOP bytes a patchable entry may have before its function (rustc
/// `-Zpatchable-function-entry=10,8` has 8; the dynamic classifier reads
/// 24 bytes).
const MAX_PREFIX: u64 = 24;

/// The sled functions (`funcs`, function starts) that also have a
/// patchable entry, sorted. `sections`: run-time address and size of the
/// object's `__patchable_function_entries` sections. A function has one
/// when an entry is at its start or only NOPs (`90`) lie between the
/// entry and its start (prefix NOPs), as the dynamic classifier decides.
///
/// LLVM gives a function with `patchable-function-entry` (rustc's
/// `#[patchable_function_entry]`, which `#[instrument_fn]` adds in `cargo
/// fntrace --instrument=xray:instruction-threshold=N` builds) its NOPs *in
/// place of* the XRay entry sled: a large function keeps only its exit
/// sleds. Its patchable entry records entry and exit, so patching those
/// exit sleds too would record every exit twice; such functions are left
/// to the dynamic runtime. Sorting and a binary search per function keep
/// this linear in the size of the tables.
fn with_patchable_entry(funcs: &[u64], sections: &[(u64, u64)]) -> Vec<u64> {
    let mut entries: Vec<u64> = sections
        .iter()
        .flat_map(|&(addr, size)| read_addr_table(addr, size))
        .filter(|&e| e != 0)
        .collect();
    if entries.is_empty() {
        return vec![];
    }
    entries.sort_unstable();
    entries.dedup();
    let mut out: Vec<u64> = funcs
        .iter()
        .copied()
        .filter(|&f| {
            // The nearest entry at or before the function start.
            let k = entries.partition_point(|&e| e <= f);
            let Some(&e) = k.checked_sub(1).map(|k| &entries[k]) else {
                return false;
            };
            f - e <= MAX_PREFIX
                && (e..f)
                    // SAFETY: the bytes between a listed patchable entry
                    // and a sled function at most 24 bytes later are the
                    // object's mapped text (prefix NOPs or code).
                    .all(|a| unsafe { core::ptr::read_volatile(a as *const u8) } == 0x90)
        })
        .collect();
    out.sort_unstable();
    out.dedup();
    out
}

/// The 8-byte addresses (relocated in memory) of an allocated table at
/// run-time address `addr`: `__patchable_function_entries`.
fn read_addr_table(addr: u64, size: u64) -> Vec<u64> {
    (0..size / 8)
        // SAFETY: both sections are allocated (SHF_ALLOC: statics, or the
        // entries' addresses) and mapped with their object.
        .map(|i| unsafe { ((addr + 8 * i) as *const u64).read_unaligned() })
        .collect()
}

/// The functions whose entry sleds are patched now: demangled name, or
/// the address when the object has no symbol for it.
pub fn patched_functions() -> Vec<String> {
    let objs = OBJECTS.lock().unwrap_or_else(|e| e.into_inner());
    let mut v = vec![];
    for o in objs.iter().filter(|o| o.alive && !o.sleds.is_empty()) {
        let mut funcs: Vec<u64> = o
            .sleds
            .iter()
            .zip(&o.orig)
            .filter(|(s, orig)| {
                matches!(s.kind, super::sleds::kind::ENTRY | super::sleds::kind::LOG_ARGS)
                    // SAFETY: a sled of a loaded object is mapped code.
                    && unsafe { crate::patch::text::read::<2>(s.addr) } != **orig
            })
            .map(|(s, _)| s.func)
            .collect();
        if funcs.is_empty() {
            continue;
        }
        funcs.sort_unstable();
        funcs.dedup();
        let names: std::collections::HashMap<u64, String> = function_names(o).into_iter().collect();
        v.extend(
            funcs
                .into_iter()
                .map(|f| names.get(&f).cloned().unwrap_or_else(|| format!("{f:#x}"))),
        );
    }
    v
}

/// Demangled names of the sled functions of `o` (runtime start address,
/// name), from the object's symbol tables; functions left to their
/// patchable entry (never patched here) are not listed.
pub fn function_names(o: &XObject) -> Vec<(u64, String)> {
    let funcs: std::collections::HashSet<u64> = o
        .funcs
        .iter()
        .copied()
        .filter(|f| o.sited.binary_search(f).is_err())
        .collect();
    crate::procinfo::module_functions(&o.path, o.bias)
        .into_iter()
        .filter(|f| funcs.contains(&f.0))
        .map(|f| (f.0, f.2))
        .collect()
}

/// The stubs of `o` (entry, exit, tail, log-args), mapped near it once.
fn stubs(o: &mut XObject) -> Result<[u64; 4], PatchError> {
    if o.stubs[0] != 0 {
        return Ok(o.stubs);
    }
    let what = o.path.display().to_string();
    let mut out = [0u64; 4];
    for (slot, t) in out.iter_mut().zip(super::tramp::targets()) {
        *slot = crate::patch::stubs::stub(t, o.start, o.start + o.size, &what)?;
    }
    o.stubs = out;
    Ok(out)
}

/// Patches (`on`) or unpatches the sleds of `o` selected by `pick`.
fn patch_object(
    obj: usize,
    o: &mut XObject,
    on: bool,
    pick: &dyn Fn(&Sled) -> bool,
) -> Result<usize, PatchError> {
    if !o.alive {
        return Ok(0);
    }
    let stub = if on { stubs(o)? } else { [0; 4] };
    let mut todo: Vec<usize> = (0..o.sleds.len())
        .filter(|&i| {
            let s = &o.sleds[i];
            s.kind <= kind::LOG_ARGS
                && pick(s)
                && !(on
                    && (o.policy.is_off(s.func, crate::procinfo::policy::XRAY_OFF)
                        || o.sited.binary_search(&s.func).is_ok()))
        })
        .collect();
    // While threads run, a function must never record an entry whose exit
    // is not recorded yet: switching on, exit sleds go first; switching
    // off, entry sleds go first (stores become visible in order on x86).
    let entry_like = |s: &Sled| s.kind == kind::ENTRY || s.kind == kind::LOG_ARGS;
    todo.sort_by_key(|&i| entry_like(&o.sleds[i]) == on);
    let ranges: Vec<(u64, u64)> = todo.iter().map(|&i| (o.sleds[i].addr, 11)).collect();
    let _w = crate::patch::text::Writable::open(&ranges, &o.path.display().to_string())?;
    for &i in &todo {
        let s = o.sleds[i];
        if on {
            write_patched(&s, (obj as u32) << 24 | s.id, &stub);
        } else {
            // SAFETY: the sled's page is writable (`_w`); the original head
            // (a jump over the sled, or the `ret`) is valid whatever bytes
            // 2..11 hold.
            unsafe { crate::patch::text::store2(s.addr, o.orig[i]) };
        }
    }
    Ok(todo.len())
}

/// Writes the call (or jump) of a patched sled, head last.
fn write_patched(s: &Sled, id: u32, stub: &[u64; 4]) {
    let (target, op) = match s.kind {
        kind::ENTRY => (stub[0], 0xe8u8),
        kind::EXIT => (stub[1], 0xe9),
        kind::TAIL => (stub[2], 0xe8),
        _ => (stub[3], 0xe8),
    };
    let rel = (target as i64 - (s.addr as i64 + 11)) as i32;
    let mut b = [0u8; 11];
    b[0] = 0x41;
    b[1] = 0xba;
    b[2..6].copy_from_slice(&id.to_le_bytes());
    b[6] = op;
    b[7..11].copy_from_slice(&rel.to_le_bytes());
    // SAFETY: the page is writable (caller); bytes 2..11 are not executed
    // while the head is unpatched (a jump over them, or a `ret` before
    // them); identical bytes are rewritten when already patched. The head
    // (`mov r10d`, whose immediate is already in place) is then one store.
    unsafe {
        crate::patch::text::write_bytes(s.addr + 2, &b[2..]);
        crate::patch::text::store2(s.addr, [b[0], b[1]]);
    }
}

/// Serialises patching (`ONGOING` for a second patcher).
static PATCHING: Mutex<()> = Mutex::new(());

/// Patches or unpatches every function (`pick` selects sleds).
pub fn patch_where(on: bool, pick: &dyn Fn(&Sled) -> bool) -> Result<usize, i32> {
    let Ok(_g) = PATCHING.try_lock() else {
        return Err(status::ONGOING);
    };
    let _code = crate::patch::lock();
    scan();
    let mut objs = OBJECTS.lock().unwrap_or_else(|e| e.into_inner());
    if !objs.iter().any(|o| !o.sleds.is_empty()) {
        return Err(status::NOT_INITIALIZED);
    }
    let mut n = 0;
    for (i, o) in objs.iter_mut().enumerate() {
        match patch_object(i, o, on, pick) {
            Ok(k) => n += k,
            Err(e) => {
                crate::diag::diag!("fntrace: {e}");
                return Err(status::FAILED);
            }
        }
    }
    Ok(n)
}

/// Patches or unpatches one function by (packed) id.
pub fn patch_function(id: i32, on: bool) -> i32 {
    let func = function_address(id);
    if func == 0 {
        return status::FAILED;
    }
    let obj = (id as u32 >> 24) as usize;
    let Ok(_g) = PATCHING.try_lock() else {
        return status::ONGOING;
    };
    let _code = crate::patch::lock();
    let mut objs = OBJECTS.lock().unwrap_or_else(|e| e.into_inner());
    let Some(o) = objs.get_mut(obj) else {
        return status::FAILED;
    };
    match patch_object(obj, o, on, &|s| s.func == func) {
        Ok(_) => status::SUCCESS,
        Err(e) => {
            crate::diag::diag!("fntrace: {e}");
            status::FAILED
        }
    }
}

/// The highest function id of the main executable.
pub fn max_function_id() -> usize {
    scan();
    let objs = OBJECTS.lock().unwrap_or_else(|e| e.into_inner());
    objs.first().map(|o| o.funcs.len()).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::with_patchable_entry;

    #[test]
    fn sled_functions_with_a_patchable_entry() {
        // Code: f1 behind 8 prefix NOPs (rustc 10,8), f2 with its entry at
        // its start (N,0), f3 right after f2's entry but with code between
        // (not f2's prefix), f4 with no entry at all.
        let mut code = vec![0xccu8; 256];
        code[8..16].fill(0x90); // prefix of f1 at 16
        code[16..18].copy_from_slice(&[0x66, 0x90]);
        code[64..69].fill(0x90); // entry of f2 at 64
        code[69] = 0xc3;
        let base = code.as_ptr() as u64;
        let (f1, f2, f3, f4) = (base + 16, base + 64, base + 72, base + 128);
        // Unsorted, with a duplicate and a NULL (a dropped function).
        let table: [u64; 4] = [f2, base + 8, 0, f2];
        let secs = [(table.as_ptr() as u64, 32)];
        assert_eq!(with_patchable_entry(&[f4, f3, f2, f1], &secs), vec![f1, f2]);
        assert!(with_patchable_entry(&[f1], &[]).is_empty());
    }
}
