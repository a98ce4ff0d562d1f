//! Patchable entry sites: where they are and what their NOPs look like.
//!
//! Sites come from two sections of a loaded object, both arrays of 8-byte
//! addresses, read from memory (so PIE relocations are applied):
//! `__patchable_function_entries` (`-fpatchable-function-entry=N[,M]` in
//! gcc and clang, `-Zpatchable-function-entry` and
//! `#[patchable_function_entry]` in rustc; each entry is the first NOP,
//! which is M bytes before the function when M prefix NOPs are asked for)
//! and `__mcount_loc` (`gcc -pg -mfentry -mnop-mcount -mrecord-mcount`).
//!
//! Two layouts can be switched while other threads run (see
//! `docs/PATCHING.md`):
//! - [`Layout::Nop5`]: a 5-byte NOP as the function's first instruction
//!   (after an `endbr64`, if any), changed to `call` with the `int3`
//!   protocol;
//! - [`Layout::Prefix`]: at least 7 NOP bytes before the function and a
//!   2-byte NOP at its entry (rustc and clang with `N,M`, M ≥ 7 and N − M =
//!   2): the prefix holds `call tramp; jmp short entry+2`, written while the
//!   site is off, and one 2-byte store at the entry switches it.
//!
//! Runs of one-byte NOPs (what gcc emits) are neither: a thread may be
//! stopped between two of them. They are rewritten into one of the two
//! layouts ([`Fixup`]) only while no other thread can be inside them.

use crate::patch::int3::NOP5;

/// `endbr64`.
pub const ENDBR64: [u8; 4] = [0xf3, 0x0f, 0x1e, 0xfa];

/// How a site is switched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// A 5-byte NOP at `addr`, changed to `call` with the `int3` protocol;
    /// `endbr`: the function starts 4 bytes earlier, with `endbr64`.
    Nop5 {
        /// An `endbr64` precedes the site.
        endbr: bool,
    },
    /// Prefix NOPs before the function, a 2-byte NOP at `addr` (the
    /// function's entry, or 4 bytes after it behind an `endbr64`).
    Prefix,
}

/// A rewrite that turns a run of one-byte NOPs into a switchable layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fixup {
    /// Write [`NOP5`] at the site.
    Nop5,
    /// Write `66 90` at the site.
    Nop2,
}

/// One site, classified.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Site {
    /// The bytes that switch it (the 5-byte NOP, or the entry's 2-byte NOP).
    pub addr: u64,
    /// Start of its function.
    pub func: u64,
    /// Its layout.
    pub layout: Layout,
    /// A rewrite still needed before it can be switched.
    pub fixup: Option<Fixup>,
}

/// Why a listed address is not a site we switch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Skip {
    /// A call is already there (e.g. `-mrecord-mcount` with real
    /// `__fentry__` calls): the compiler-hooks runtime handles it.
    Native,
    /// A layout we cannot switch safely, with the reason.
    Unsupported(String),
}

/// Classifies the entry listed at `entry`. `code(addr, n)` reads `n`
/// bytes of mapped code; `next_func` is the lowest function start at or
/// after `entry` (from the symbol table), if any.
pub fn classify(
    entry: u64,
    code: &dyn Fn(u64, usize) -> Vec<u8>,
    next_func: Option<u64>,
) -> Result<Site, Skip> {
    let b = code(entry, 24);
    let nops = b.iter().take_while(|&&x| x == 0x90).count() as u64;
    // Prefix NOPs: the function starts inside the NOP run.
    if let Some(f) = next_func.filter(|&f| f > entry && f <= entry + nops) {
        if f - entry < 7 {
            return Err(Skip::Unsupported(format!(
                "{} prefix NOP bytes before the function (7 are needed for a call and a \
                 short jump)",
                f - entry
            )));
        }
        let endbr = code(f, 4) == ENDBR64;
        let sw = if endbr { f + 4 } else { f };
        let e = code(sw, 2);
        return match e.as_slice() {
            [0x66, 0x90] => Ok(Site {
                addr: sw,
                func: f,
                layout: Layout::Prefix,
                fixup: None,
            }),
            [0x90, 0x90] => Ok(Site {
                addr: sw,
                func: f,
                layout: Layout::Prefix,
                fixup: Some(Fixup::Nop2),
            }),
            _ => Err(Skip::Unsupported(
                "prefix NOPs but no 2-byte NOP at the function's entry (use N - M = 2)".into(),
            )),
        };
    }
    let endbr = entry >= 4 && code(entry - 4, 4) == ENDBR64;
    let func = if endbr { entry - 4 } else { entry };
    if b.len() >= 5 && b[..5] == NOP5 {
        return Ok(Site {
            addr: entry,
            func,
            layout: Layout::Nop5 { endbr },
            fixup: None,
        });
    }
    if nops >= 5 {
        return Ok(Site {
            addr: entry,
            func,
            layout: Layout::Nop5 { endbr },
            fixup: Some(Fixup::Nop5),
        });
    }
    if b.first() == Some(&0xe8) {
        return Err(Skip::Native);
    }
    Err(Skip::Unsupported(format!(
        "{} NOP bytes at the entry (5 are needed)",
        nops
    )))
}

/// The bytes of a `call rel32` at `at` to `target`.
pub fn call5(at: u64, target: u64) -> [u8; 5] {
    let rel = (target as i64 - (at as i64 + 5)) as i32;
    let mut b = [0xe8, 0, 0, 0, 0];
    b[1..].copy_from_slice(&rel.to_le_bytes());
    b
}

/// The 7 prefix bytes of a [`Layout::Prefix`] site whose function starts at
/// `func` and whose switch is at `sw`: `call target` at `func - 7`, then
/// `jmp short sw + 2` at `func - 2`.
pub fn prefix7(func: u64, sw: u64, target: u64) -> [u8; 7] {
    let mut b = [0u8; 7];
    b[..5].copy_from_slice(&call5(func - 7, target));
    b[5] = 0xeb;
    b[6] = (sw + 2 - func) as u8;
    b
}

/// The 2 bytes that switch a [`Layout::Prefix`] site on: `jmp short` from
/// the switch back to the call at `func - 7`.
pub fn prefix_on(func: u64, sw: u64) -> [u8; 2] {
    [0xeb, ((func as i64 - 7) - (sw as i64 + 2)) as i8 as u8]
}

/// The 2 bytes of a [`Layout::Prefix`] site that is off.
pub const PREFIX_OFF: [u8; 2] = [0x66, 0x90];

#[cfg(test)]
mod tests {
    use super::*;

    fn mem(base: u64, bytes: Vec<u8>) -> impl Fn(u64, usize) -> Vec<u8> {
        move |a, n| {
            // Below `base` reads as int3 (not ours), like past the end.
            let Some(o) = a.checked_sub(base) else {
                return vec![0xcc; n];
            };
            let o = o as usize;
            let mut v = bytes[o.min(bytes.len())..(o + n).min(bytes.len())].to_vec();
            v.resize(n, 0xcc);
            v
        }
    }

    #[test]
    fn rustc_prefix_layout_and_its_switch_bytes() {
        // 8 prefix NOPs, `66 90` at the function (rustc 10,8).
        let mut b = vec![0x90; 8];
        b.extend([0x66, 0x90, 0x48, 0x89, 0xf8, 0xc3]);
        let s = classify(0x1000, &mem(0x1000, b), Some(0x1008)).unwrap();
        assert_eq!(
            (s.addr, s.func, s.layout, s.fixup),
            (0x1008, 0x1008, Layout::Prefix, None)
        );
        // The call returns to func - 2, which jumps to the switch + 2.
        let p = prefix7(0x1008, 0x1008, 0x2000);
        assert_eq!(p[0], 0xe8);
        assert_eq!(
            i32::from_le_bytes(p[1..5].try_into().unwrap()),
            0x2000 - 0x1006
        );
        assert_eq!((p[5], p[6]), (0xeb, 2));
        // The switch jumps from 0x100a back to 0x1001.
        assert_eq!(prefix_on(0x1008, 0x1008), [0xeb, (-9i8) as u8]);
    }

    #[test]
    fn gcc_layouts() {
        // -pg -mfentry -mnop-mcount: one 5-byte NOP.
        let mut b = NOP5.to_vec();
        b.push(0xc3);
        let s = classify(0x1000, &mem(0x1000, b), Some(0x1000)).unwrap();
        assert_eq!(
            (s.layout, s.fixup, s.func),
            (Layout::Nop5 { endbr: false }, None, 0x1000)
        );
        // -fpatchable-function-entry=5: five 1-byte NOPs, behind endbr64.
        let mut b = ENDBR64.to_vec();
        b.extend([0x90; 5]);
        b.push(0xc3);
        let s = classify(0x1004, &mem(0x1000, b), None).unwrap();
        assert_eq!(
            (s.layout, s.fixup, s.func),
            (Layout::Nop5 { endbr: true }, Some(Fixup::Nop5), 0x1000)
        );
        // gcc 10,8: eight prefix NOPs and two 1-byte NOPs at the entry.
        let mut b = vec![0x90; 10];
        b.push(0xc3);
        let s = classify(0x1000, &mem(0x1000, b), Some(0x1008)).unwrap();
        assert_eq!((s.layout, s.fixup), (Layout::Prefix, Some(Fixup::Nop2)));
        // A real call: the compiler-hooks runtime's business.
        let b = vec![0xe8, 1, 2, 3, 4, 0xc3];
        assert_eq!(
            classify(0x1000, &mem(0x1000, b), Some(0x1000)),
            Err(Skip::Native)
        );
        // Too few bytes.
        let b = vec![0x90, 0x90, 0x90, 0xc3];
        assert!(matches!(
            classify(0x1000, &mem(0x1000, b), Some(0x1000)),
            Err(Skip::Unsupported(_))
        ));
        let mut b = vec![0x90; 4];
        b.extend([0x66, 0x90, 0xc3]);
        assert!(matches!(
            classify(0x1000, &mem(0x1000, b), Some(0x1004)),
            Err(Skip::Unsupported(m)) if m.contains("prefix")
        ));
    }
}
