//! The `#[instrument_fn]` policy of a loaded object: its `fntrace_policy`
//! table (per-framework on/off and per-function options, written by the
//! macro; layout below) and the older `fntrace_off`
//! table (functions off for every framework), read from the object's
//! memory (relocated) when a mechanism scans it. Never used on the event
//! hot path: mechanisms decide once per site or function.
//!
//! The layout of the `fntrace_policy` table: 48-byte little-endian entries
//! `{u64 function address, u64 name address, u64 name length, u32 magic,
//! u32 flags, u64 threshold in ns, u32 capture mask, u32 reserved}`; the two
//! addresses are relocated like any pointer (a position-independent file
//! holds them in its dynamic relocations).

use object::{Object, ObjectSection};

/// Size of one entry.
pub const ENTRY_SIZE: usize = 48;
/// `magic` of a valid entry (`FNP1`).
pub const MAGIC: u32 = u32::from_le_bytes(*b"FNP1");
/// Source instrumentation (the `#[instrument_fn]` guard) is off.
pub const SOURCE_OFF: u32 = 1;
/// mcount (`-pg`, `-Zinstrument-mcount`) never records the function.
pub const MCOUNT_OFF: u32 = 2;
/// fentry (`__fentry__`, patchable entries) never records the function.
pub const FENTRY_OFF: u32 = 4;
/// XRay never patches the function's sleds.
pub const XRAY_OFF: u32 = 8;
/// Its patchable entry is XRay's always-instrument (a
/// `cargo fntrace --instrument=xray:instruction-threshold=N` build):
/// [`XRAY_OFF`], not [`FENTRY_OFF`], decides whether it is switched on.
pub const ENTRY_IS_XRAY: u32 = 1 << 8;
/// Capture bit of the return value (bits 0–5: arguments 1–6).
pub const CAPTURE_RETVAL: u32 = 0x80;
/// The frameworks, in flag bit order.
pub const FRAMEWORKS: [&str; 4] = ["source", "mcount", "fentry", "xray"];

/// One decoded entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decoded {
    /// Function start address (run time or link time, as read).
    pub func: u64,
    /// Address of the name.
    pub name: u64,
    /// Length of the name.
    pub name_len: u64,
    /// Flags (`*_OFF`, [`ENTRY_IS_XRAY`]).
    pub flags: u32,
    /// Keep only calls at least this long (ns; 0: all).
    pub threshold_ns: u64,
    /// What to capture (bits 0–5: arguments 1–6, [`CAPTURE_RETVAL`]).
    pub capture: u32,
}

/// Decodes the table's bytes with `addr(offset, raw)` giving the
/// relocated value of the pointer at byte `offset` of the table (raw:
/// the bytes stored there). Entries without the magic are skipped (a
/// linker may pad the section).
pub fn decode(data: &[u8], addr: impl Fn(usize, u64) -> u64) -> Vec<Decoded> {
    let mut out = vec![];
    for (i, e) in data.chunks_exact(ENTRY_SIZE).enumerate() {
        let u64_at = |o: usize| u64::from_le_bytes(e[o..o + 8].try_into().unwrap());
        let u32_at = |o: usize| u32::from_le_bytes(e[o..o + 4].try_into().unwrap());
        if u32_at(24) != MAGIC {
            continue;
        }
        let base = i * ENTRY_SIZE;
        out.push(Decoded {
            func: addr(base, u64_at(0)),
            name: addr(base + 8, u64_at(8)),
            name_len: u64_at(16),
            flags: u32_at(28),
            threshold_ns: u64_at(32),
            capture: u32_at(40),
        });
    }
    out
}

/// Every framework off (an `fntrace_off` entry).
const ALL_OFF: u32 = SOURCE_OFF | MCOUNT_OFF | FENTRY_OFF | XRAY_OFF;

/// One function's policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    /// Run-time start address of the function.
    pub func: u64,
    /// `*_OFF` and [`ENTRY_IS_XRAY`] flags.
    pub flags: u32,
    /// Capture mask (bits 0–5: arguments 1–6, `0x80`: return value).
    pub capture: u8,
    /// Keep only calls at least this long (ns; 0: all).
    pub threshold_ns: u64,
    /// Run-time address and length of its name (a static string).
    pub name: (u64, u64),
}

/// The policies of one object, sorted by function.
#[derive(Debug, Default, Clone)]
pub struct Policies(Vec<Entry>);

impl Policies {
    /// Reads both tables of `obj` (its ELF file, parsed), loaded with
    /// `bias`, from memory.
    pub fn read(obj: &object::File<'_>, bias: u64) -> Policies {
        let mut v = vec![];
        // Only sections loaded with the object (`SHF_ALLOC`, an address)
        // can be read from memory.
        let loaded = |name: &str| {
            obj.section_by_name(name).filter(|s| {
                s.address() != 0
                    && matches!(s.flags(), object::SectionFlags::Elf { sh_flags }
                        if sh_flags & u64::from(object::elf::SHF_ALLOC) != 0)
            })
        };
        if let Some(s) = loaded("fntrace_off") {
            let (addr, size) = (s.address().wrapping_add(bias), s.size());
            for i in 0..size / 8 {
                // SAFETY: the section is allocated (statics of the object)
                // and mapped with it; 8-byte reads inside its size.
                let func = unsafe { ((addr + 8 * i) as *const u64).read_unaligned() };
                v.push(Entry {
                    func,
                    flags: ALL_OFF,
                    capture: 0,
                    threshold_ns: 0,
                    name: (0, 0),
                });
            }
        }
        if let Some(s) = loaded("fntrace_policy") {
            let (addr, size) = (s.address().wrapping_add(bias), s.size());
            // SAFETY: as above: the allocated section, mapped with its
            // object, read within its size.
            let data = unsafe { core::slice::from_raw_parts(addr as *const u8, size as usize) };
            for d in decode(data, |_, raw| raw) {
                v.push(Entry {
                    func: d.func,
                    flags: d.flags,
                    capture: d.capture as u8,
                    threshold_ns: d.threshold_ns,
                    name: (d.name, d.name_len),
                });
            }
        }
        v.sort_by_key(|e| e.func);
        // An `fntrace_off` entry and a policy entry of the same function:
        // the policy (written by the same macro) is the more precise one.
        v.dedup_by(|b, a| {
            if a.func == b.func {
                if a.flags == ALL_OFF && a.name.1 == 0 {
                    *a = *b;
                }
                true
            } else {
                false
            }
        });
        Policies(v)
    }

    /// The policy of the function starting at `func`, if it has one.
    pub fn get(&self, func: u64) -> Option<&Entry> {
        self.0
            .binary_search_by_key(&func, |e| e.func)
            .ok()
            .map(|i| &self.0[i])
    }

    /// Whether the function starting at `func` has every flag of `off`.
    pub fn is_off(&self, func: u64, off: u32) -> bool {
        self.get(func).is_some_and(|e| e.flags & off == off)
    }

    /// Every entry, sorted by function.
    pub fn entries(&self) -> &[Entry] {
        &self.0
    }
}

/// The functions of the object at `path` (loaded with `bias`) whose
/// policy `want` maps to a value: `(start, end, value)`, the end from the
/// function's symbol (one byte when it has none). Reads the file once.
pub fn function_ranges<T>(
    path: &std::path::Path,
    bias: u64,
    want: impl Fn(&Entry) -> Option<T>,
) -> Vec<(u64, u64, T)> {
    use object::ObjectSymbol;
    let Some(map) = super::FileMap::open(path) else {
        return vec![];
    };
    let Ok(obj) = object::File::parse(map.as_slice()) else {
        return vec![];
    };
    let pol = Policies::read(&obj, bias);
    let picked: Vec<(u64, T)> = pol
        .entries()
        .iter()
        .filter_map(|e| want(e).map(|v| (e.func, v)))
        .collect();
    if picked.is_empty() {
        return vec![];
    }
    let mut sizes: Vec<(u64, u64)> = obj
        .symbols()
        .chain(obj.dynamic_symbols())
        .filter(|s| s.kind() == object::SymbolKind::Text && s.size() > 0)
        .map(|s| (s.address().wrapping_add(bias), s.size()))
        .collect();
    sizes.sort_unstable();
    picked
        .into_iter()
        .map(|(f, v)| {
            let size = sizes
                .binary_search_by_key(&f, |s| s.0)
                .map_or(1, |i| sizes[i].1);
            (f, f + size, v)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(func: u64, name: u64, len: u64, flags: u32, threshold: u64, capture: u32) -> Vec<u8> {
        let mut e = vec![];
        e.extend(func.to_le_bytes());
        e.extend(name.to_le_bytes());
        e.extend(len.to_le_bytes());
        e.extend(MAGIC.to_le_bytes());
        e.extend(flags.to_le_bytes());
        e.extend(threshold.to_le_bytes());
        e.extend(capture.to_le_bytes());
        e.extend(0u32.to_le_bytes());
        assert_eq!(e.len(), ENTRY_SIZE);
        e
    }

    #[test]
    fn decodes_entries_and_skips_padding() {
        let mut data = entry(0x1000, 0x2000, 9, MCOUNT_OFF | ENTRY_IS_XRAY, 10_000, 0x83);
        data.extend([0u8; ENTRY_SIZE]);
        data.extend(entry(0x3000, 0x4000, 4, XRAY_OFF, 0, 0));
        data.extend([0u8; 7]);
        // Pointers relocated by the caller: here, by their offset.
        let d = decode(&data, |off, raw| raw + off as u64);
        assert_eq!(d.len(), 2);
        assert_eq!(
            d[0],
            Decoded {
                func: 0x1000,
                name: 0x2008,
                name_len: 9,
                flags: MCOUNT_OFF | ENTRY_IS_XRAY,
                threshold_ns: 10_000,
                capture: 0x83,
            }
        );
        assert_eq!(d[1].func, 0x3000 + 2 * ENTRY_SIZE as u64);
        assert_eq!(d[1].flags, XRAY_OFF);
    }

    #[test]
    fn the_macro_entry_has_the_documented_layout() {
        assert_eq!(core::mem::size_of::<crate::site::PolicyEntry>(), ENTRY_SIZE);
        fn f() {}
        static E: crate::site::PolicyEntry =
            crate::site::PolicyEntry::new(f as *const (), "m::f", FENTRY_OFF, 0x81, 5);
        // SAFETY: a static of ENTRY_SIZE bytes (asserted above), read as bytes.
        let bytes = unsafe { core::slice::from_raw_parts(&E as *const _ as *const u8, ENTRY_SIZE) };
        let d = decode(bytes, |_, raw| raw);
        assert_eq!(d.len(), 1);
        assert_eq!(d[0].func, f as *const () as u64);
        assert_eq!(d[0].name_len, 4);
        assert_eq!(d[0].flags, FENTRY_OFF);
        assert_eq!(d[0].capture, 0x81);
        assert_eq!(d[0].threshold_ns, 5);
    }
}
