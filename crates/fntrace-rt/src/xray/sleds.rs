//! XRay sled discovery: reads `xray_instr_map` of a loaded object from its
//! ELF file (mapped read-only) and turns the 32-byte entries into runtime
//! addresses. Function ids are assigned as LLVM does: 1-based, in section
//! order, a new id whenever the function address changes.
//!
//! Entry layout: `u64 sled, u64 function, u8 kind, u8 always_instrument,
//! u8 version, 13 bytes padding`. Version 2 stores both addresses relative
//! to the field's own address; older versions store absolute link-time
//! addresses. `xray_fn_idx` is not needed (clang 14 emits none).

use std::path::Path;

use object::ObjectSection;

/// Sled kinds (the `kind` byte).
pub mod kind {
    /// Function entry.
    pub const ENTRY: u8 = 0;
    /// Function exit (a `ret`).
    pub const EXIT: u8 = 1;
    /// Tail exit (before a tail call).
    pub const TAIL: u8 = 2;
    /// Entry that logs the first argument.
    pub const LOG_ARGS: u8 = 3;
    /// Custom event.
    pub const CUSTOM: u8 = 4;
    /// Typed event.
    pub const TYPED: u8 = 5;
}

/// One sled, at run time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sled {
    /// Address of the sled.
    pub addr: u64,
    /// Start address of its function.
    pub func: u64,
    /// Kind (see [`kind`]).
    pub kind: u8,
    /// The function was marked always-instrument.
    pub always: bool,
    /// Function id within the object (1-based).
    pub id: u32,
}

/// What an object's ELF file says for XRay.
pub struct ObjectSleds {
    /// Its sleds, in section order.
    pub sleds: Vec<Sled>,
    /// Its `#[instrument_fn]` policies (`fntrace_policy`, `fntrace_off`).
    pub policy: crate::procinfo::policy::Policies,
    /// Run-time address and size of each of its
    /// `__patchable_function_entries` sections (8-byte addresses of
    /// patchable entries; a link may keep several).
    pub patchable: Vec<(u64, u64)>,
}

/// The sleds of one object, or `None` if it has no `xray_instr_map`. The
/// file is parsed once, for the sleds, the policy tables and the
/// patchable entries.
pub fn read(path: &Path, bias: u64) -> Option<ObjectSleds> {
    use object::Object;
    let map = crate::procinfo::FileMap::open(path)?;
    let obj = object::File::parse(map.as_slice()).ok()?;
    let sec = obj.section_by_name("xray_instr_map")?;
    let data = sec.data().ok()?;
    let policy = crate::procinfo::policy::Policies::read(&obj, bias);
    let patchable = obj
        .sections()
        .filter(|s| s.name() == Ok("__patchable_function_entries"))
        .map(|s| (s.address().wrapping_add(bias), s.size()))
        .collect();
    Some(ObjectSleds {
        sleds: parse(data, sec.address(), bias),
        policy,
        patchable,
    })
}

/// Parses entries of a section whose link-time address is `sec_addr`.
pub fn parse(data: &[u8], sec_addr: u64, bias: u64) -> Vec<Sled> {
    let mut out = Vec::with_capacity(data.len() / 32);
    let mut id = 0u32;
    let mut last_func = None;
    for (i, e) in data.chunks_exact(32).enumerate() {
        let a = u64::from_le_bytes(e[0..8].try_into().unwrap());
        let f = u64::from_le_bytes(e[8..16].try_into().unwrap());
        let (kind, always, version) = (e[16], e[17] != 0, e[18]);
        let entry = sec_addr + 32 * i as u64;
        let (sled, func) = if version >= 2 {
            (entry.wrapping_add(a), (entry + 8).wrapping_add(f))
        } else {
            (a, f)
        };
        if last_func != Some(func) {
            id += 1;
            last_func = Some(func);
        }
        out.push(Sled {
            addr: sled.wrapping_add(bias),
            func: func.wrapping_add(bias),
            kind,
            always,
            id,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(sled: u64, func: u64, kind: u8, version: u8) -> Vec<u8> {
        let mut e = vec![0u8; 32];
        e[0..8].copy_from_slice(&sled.to_le_bytes());
        e[8..16].copy_from_slice(&func.to_le_bytes());
        e[16] = kind;
        e[18] = version;
        e
    }

    #[test]
    fn ids_follow_section_order_and_relative_addresses_resolve() {
        // Version 2: relative to the field address. Section at 0x1000.
        let mut d = entry(0x2000 - 0x1000, 0x2000 - 0x1008, kind::ENTRY, 2);
        d.extend(entry(0x2040 - 0x1020, 0x2000 - 0x1028, kind::EXIT, 2));
        d.extend(entry(0x3000 - 0x1040, 0x3000 - 0x1048, kind::ENTRY, 2));
        let s = parse(&d, 0x1000, 0x10_0000);
        assert_eq!(s.len(), 3);
        assert_eq!((s[0].addr, s[0].func, s[0].id), (0x10_2000, 0x10_2000, 1));
        assert_eq!((s[1].addr, s[1].kind, s[1].id), (0x10_2040, kind::EXIT, 1));
        assert_eq!((s[2].func, s[2].id), (0x10_3000, 2));
        // Version 0: absolute.
        let d = entry(0x5000, 0x5000, kind::ENTRY, 0);
        assert_eq!(parse(&d, 0x1000, 0)[0].addr, 0x5000);
    }
}
