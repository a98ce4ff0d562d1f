//! Static keys: switching a marker's firing sites between the 5-byte NOP
//! and `jmp rel32` to its enabled path, with the shared patching module
//! (`patch::int3`: breakpoint protocol and membarrier serialisation), so
//! threads may run the sites meanwhile.

use std::sync::OnceLock;

use fntrace_markers::sites::{KeySite, key_sites};
use fntrace_markers::{MarkerCore, PatchError};

use crate::patch::{self, int3, text};

/// The `jmp rel32` from `s.site` to `s.target`, if it reaches.
fn jmp(s: &KeySite) -> Option<[u8; 5]> {
    let rel = (s.target as i64).checked_sub(s.site as i64 + 5)?;
    let rel = i32::try_from(rel).ok()?;
    let r = rel.to_le_bytes();
    Some([0xe9, r[0], r[1], r[2], r[3]])
}

/// The executable segments of every loaded object.
fn exec_ranges() -> Vec<(u64, u64)> {
    unsafe extern "C" fn cb(
        info: *mut libc::dl_phdr_info,
        _size: libc::size_t,
        data: *mut libc::c_void,
    ) -> libc::c_int {
        // SAFETY: `data` is the vector passed below, alive for the whole
        // iteration; `info` is valid for this callback.
        let (out, info) = unsafe { (&mut *(data as *mut Vec<(u64, u64)>), &*info) };
        for i in 0..info.dlpi_phnum as usize {
            // SAFETY: the loader guarantees `dlpi_phdr` points at
            // `dlpi_phnum` program headers.
            let ph = unsafe { &*info.dlpi_phdr.add(i) };
            if ph.p_type == libc::PT_LOAD && ph.p_flags & libc::PF_X != 0 {
                let lo = info.dlpi_addr + ph.p_vaddr;
                out.push((lo, lo + ph.p_memsz));
            }
        }
        0
    }
    let mut out: Vec<(u64, u64)> = Vec::new();
    // SAFETY: the callback only reads the loader's data for the duration
    // of the call and writes into `out`.
    unsafe { libc::dl_iterate_phdr(Some(cb), (&raw mut out).cast()) };
    out
}

/// Whether the entry describes a live site: inside executable code, and
/// its bytes are the NOP or the jump this module writes (the entry of a
/// function the linker dropped points elsewhere).
fn valid(s: &KeySite, exec: &[(u64, u64)]) -> bool {
    let a = s.site as u64;
    if a == 0 || s.marker.is_null() || !exec.iter().any(|&(lo, hi)| a >= lo && a + 5 <= hi) {
        return false;
    }
    let Some(j) = jmp(s) else { return false };
    // SAFETY: `a..a + 5` lies in a mapped executable (readable) segment.
    let b = unsafe { text::read::<5>(a) };
    b == int3::NOP5 || b == j
}

static REGISTERED: OnceLock<bool> = OnceLock::new();

/// Registers every valid static-key site with the breakpoint handler,
/// once (they never change).
fn register_all(exec: &[(u64, u64)]) -> bool {
    *REGISTERED.get_or_init(|| {
        let addrs: Vec<u64> = key_sites()
            .iter()
            .filter(|s| valid(s, exec))
            .map(|s| s.site as u64)
            .collect();
        int3::register(addrs)
    })
}

/// Switches every site of `m` to `jmp` (`on`) or to the NOP.
pub fn patch_marker(m: &'static MarkerCore, on: bool) -> Result<(), PatchError> {
    let exec = exec_ranges();
    let _l = patch::lock();
    let sites: Vec<&KeySite> = key_sites()
        .iter()
        .filter(|s| core::ptr::eq(s.marker, m) && valid(s, &exec))
        .collect();
    if sites.is_empty() {
        // Declared but never fired in code that was kept: nothing to do.
        return Ok(());
    }
    if !register_all(&exec) {
        return Err("the breakpoint handler's site registry is full".into());
    }
    let mut items = Vec::with_capacity(sites.len());
    for s in &sites {
        let bytes = if on {
            jmp(s).ok_or("jump target out of reach")?
        } else {
            int3::NOP5
        };
        items.push((s.site as u64, bytes));
    }
    let ranges: Vec<(u64, u64)> = items.iter().map(|&(a, _)| (a, 5)).collect();
    let w = text::Writable::open(&ranges, "marker static keys")
        .map_err(|e| PatchError::from(e.to_string()))?;
    int3::poke5(&w, &items);
    drop(w);
    Ok(())
}
