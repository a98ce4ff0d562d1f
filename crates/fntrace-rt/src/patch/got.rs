//! Redirecting a loaded object's calls to an imported function by
//! rewriting its GOT slots (the 8-byte pointers its PLT entries and
//! `-fno-plt` calls jump through), and putting them back.
//!
//! This is how a runtime loaded into a process that is already running
//! (`fntrace record -p`, `session::attach`) takes over the compiler hooks
//! the program's code calls (`mcount`, `__fentry__`,
//! `__cyg_profile_func_*`, bound to glibc's definitions when the program
//! started) and the unwinder entry points, without touching code: one
//! aligned 8-byte store per slot, which every thread sees whole. A call
//! that loaded the old pointer just before the store goes to the old
//! function once; every later call goes to the new one.
//!
//! Slots are found from each object's dynamic relocations
//! (`R_X86_64_JUMP_SLOT`, `R_X86_64_GLOB_DAT`) read from its file; a slot
//! in a read-only page (RELRO, `-z now`) is written through a short
//! `mprotect` window and its protection restored.

use std::path::{Path, PathBuf};

/// One slot redirected by [`redirect`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Redirected {
    /// The object holding the slot.
    pub object: PathBuf,
    /// The symbol the slot is bound to.
    pub symbol: &'static str,
    /// Address of the slot.
    pub slot: u64,
    /// The value it held before.
    pub original: u64,
    /// The value written.
    pub target: u64,
}

/// The GOT slots of the object at `path` (loaded with `bias`) bound to one
/// of `names`, as (index in `names`, slot address).
pub fn slots_of(path: &Path, bias: u64, names: &[&str]) -> Vec<(usize, u64)> {
    use object::{Object as _, ObjectSymbol, ObjectSymbolTable};
    let Some(map) = crate::procinfo::FileMap::open(path) else {
        return vec![];
    };
    let Ok(obj) = object::File::parse(map.as_slice()) else {
        return vec![];
    };
    let (Some(relocs), Some(dynsym)) = (obj.dynamic_relocations(), obj.dynamic_symbol_table())
    else {
        return vec![];
    };
    let mut v = vec![];
    for (offset, r) in relocs {
        if let object::RelocationTarget::Symbol(i) = r.target()
            && let Ok(n) = dynsym.symbol_by_index(i).and_then(|s| s.name())
            && let Some(k) = names.iter().position(|x| *x == n)
        {
            v.push((k, offset.wrapping_add(bias)));
        }
    }
    v.sort_unstable_by_key(|s| s.1);
    v.dedup_by_key(|s| s.1);
    v
}

/// The protection of the page holding `addr` (`PROT_*` bits), from
/// `/proc/self/maps`.
fn protection(addr: u64) -> Option<i32> {
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    for line in maps.lines() {
        let mut f = line.split_whitespace();
        let (range, perms) = (f.next()?, f.next()?);
        let (a, b) = range.split_once('-')?;
        let (a, b) = (
            u64::from_str_radix(a, 16).ok()?,
            u64::from_str_radix(b, 16).ok()?,
        );
        if (a..b).contains(&addr) {
            let p = perms.as_bytes();
            let mut prot = 0;
            if p.first() == Some(&b'r') {
                prot |= libc::PROT_READ;
            }
            if p.get(1) == Some(&b'w') {
                prot |= libc::PROT_WRITE;
            }
            if p.get(2) == Some(&b'x') {
                prot |= libc::PROT_EXEC;
            }
            return Some(prot);
        }
    }
    None
}

/// Stores `value` into the 8-byte slot at `slot` (made writable for the
/// store if it is not); returns the value it held, or `None` if the slot
/// is not mapped or cannot be made writable.
pub fn store(slot: u64, value: u64) -> Option<u64> {
    if slot % 8 != 0 {
        return None;
    }
    let prot = protection(slot)?;
    if prot & libc::PROT_READ == 0 {
        return None;
    }
    let page = slot & !4095;
    let writable = prot & libc::PROT_WRITE != 0;
    // SAFETY: `page` is the mapped page holding the slot (checked in the
    // maps above); adding write permission to it changes no content.
    if !writable && unsafe { libc::mprotect(page as *mut _, 4096, prot | libc::PROT_WRITE) } != 0 {
        return None;
    }
    // SAFETY: the slot is an aligned, mapped and now writable 8-byte
    // pointer; the atomic swap makes every thread see the old or the new
    // pointer, never a mix.
    let old = unsafe {
        (*(slot as *const core::sync::atomic::AtomicU64))
            .swap(value, core::sync::atomic::Ordering::AcqRel)
    };
    if !writable {
        // SAFETY: puts back the protection read above.
        unsafe { libc::mprotect(page as *mut _, 4096, prot) };
    }
    Some(old)
}

/// Redirects, in every loaded object that `skip` does not exclude, the GOT
/// slots bound to each `(symbol, target)` of `to` to `target` (a slot
/// already holding its target is left alone). Returns what was changed.
pub fn redirect(to: &[(&'static str, u64)], skip: &dyn Fn(&Path) -> bool) -> Vec<Redirected> {
    let names: Vec<&str> = to.iter().map(|t| t.0).collect();
    let mut done = vec![];
    for (_, _, bias, path) in crate::procinfo::loaded_objects() {
        if path.as_os_str().is_empty() || skip(&path) {
            continue;
        }
        for (k, slot) in slots_of(&path, bias, &names) {
            let (symbol, target) = to[k];
            // SAFETY: a GOT slot of a loaded object, found from its
            // relocations: mapped, aligned, 8 bytes.
            let cur = unsafe { (slot as *const u64).read_volatile() };
            if cur == target {
                continue;
            }
            if let Some(original) = store(slot, target) {
                done.push(Redirected {
                    object: path.clone(),
                    symbol,
                    slot,
                    original,
                    target,
                });
            }
        }
    }
    done
}

/// Puts back the original values of `r` (a slot changed since by someone
/// else, such as a lazy binding, is left alone).
pub fn restore(r: &[Redirected]) {
    for x in r {
        if protection(x.slot).is_none() {
            continue;
        }
        // SAFETY: as in `redirect`: the slot's page is still mapped
        // (checked just above).
        let cur = unsafe { (x.slot as *const u64).read_volatile() };
        if cur == x.target {
            store(x.slot, x.original);
        }
    }
}
