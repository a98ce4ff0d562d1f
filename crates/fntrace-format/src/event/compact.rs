//! The compact event forms written on the hot path: entries, exits and
//! tail exits with their inline delta bits ([`Compact`],
//! [`encode_compact`]), and the `pack_*` functions that build one of them
//! as a single little-endian word of at most 8 bytes.

use crate::varint::{put_uvarint, uvarint_len, zigzag};

/// Longest encoding of a compact event (entry with a far function).
pub const MAX_COMPACT_LEN: usize = 1 + 10 + 10;

/// Packs a first byte and the LEB128 continuation of `rest` into one
/// little-endian word, when the whole record fits in 8 bytes.
#[inline(always)]
fn pack_word(first: u64, mut rest: u64, mut n: u32) -> Option<(u64, u32)> {
    let mut w = first;
    while rest != 0 {
        if n >= 8 {
            return None;
        }
        let mut b = rest & 0x7f;
        rest >>= 7;
        if rest != 0 {
            b |= 0x80;
        }
        w |= b << (8 * n);
        n += 1;
    }
    Some((w, n))
}

/// Encodes an exit with TSC delta `d` as a word of at most 8 bytes.
#[inline(always)]
pub fn pack_exit(d: u64) -> Option<(u64, u32)> {
    let rest = d >> 6;
    let first = 0x80 | (d & 0x3f) | if rest != 0 { 0x40 } else { 0 };
    pack_word(first, rest, 1)
}

/// Encodes a tail exit with TSC delta `d` as a word of at most 8 bytes.
#[inline(always)]
pub fn pack_tail_exit(d: u64) -> Option<(u64, u32)> {
    let rest = d >> 3;
    let first = 0x10 | (d & 0x7) | if rest != 0 { 0x08 } else { 0 };
    pack_word(first, rest, 1)
}

/// Encodes an entry of the previous entry's function as a word.
#[inline(always)]
pub fn pack_entry_same(d: u64) -> Option<(u64, u32)> {
    let rest = d >> 5;
    let first = 0x40 | (d & 0x1f) | if rest != 0 { 0x20 } else { 0 };
    pack_word(first, rest, 1)
}

/// Encodes an entry of function `func` (previous entry `prev`) as a word.
#[inline(always)]
pub fn pack_entry_new(d: u64, func: u64, prev: u64) -> Option<(u64, u32)> {
    let rest = d >> 4;
    let first = 0x20 | (d & 0xf) | if rest != 0 { 0x10 } else { 0 };
    let (w, n) = pack_word(first, rest, 1)?;
    let fd = zigzag(func.wrapping_sub(prev) as i64);
    // The function delta is a complete varint of its own (it may be zero).
    let len = uvarint_len(fd) as u32;
    if n + len > 8 {
        return None;
    }
    let mut w = w;
    let mut v = fd;
    for i in 0..len {
        let mut b = v & 0x7f;
        v >>= 7;
        if i + 1 < len {
            b |= 0x80;
        }
        w |= b << (8 * (n + i));
    }
    Some((w, n + len))
}

/// A compact event to encode with [`encode_compact`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compact {
    /// Entry of `func`; `prev` is the function of the previous entry in the
    /// chunk (0 at the chunk start).
    Entry {
        /// TSC delta.
        d: u64,
        /// Function key.
        func: u64,
        /// Previous entry's function key.
        prev: u64,
    },
    /// Exit of the innermost open function.
    Exit {
        /// TSC delta.
        d: u64,
    },
    /// Tail exit (XRay) of the innermost open function.
    TailExit {
        /// TSC delta.
        d: u64,
    },
}

/// Encodes any compact event into `out` (at least [`MAX_COMPACT_LEN`]
/// bytes), returning its length. Produces exactly the bytes of the `pack_*`
/// functions when those succeed.
pub fn encode_compact(ev: Compact, out: &mut [u8]) -> usize {
    let (first, bits, d) = match ev {
        Compact::Exit { d } => (0x80u8, 6u32, d),
        Compact::TailExit { d } => (0x10, 3, d),
        Compact::Entry { d, func, prev } if func == prev => (0x40, 5, d),
        Compact::Entry { d, .. } => (0x20, 4, d),
    };
    let rest = d >> bits;
    out[0] = first | (d & ((1 << bits) - 1)) as u8 | if rest != 0 { 1 << bits } else { 0 };
    let mut pos = 1;
    if rest != 0 {
        put_uvarint(out, &mut pos, rest);
    }
    if let Compact::Entry { func, prev, .. } = ev {
        if func != prev {
            put_uvarint(out, &mut pos, zigzag(func.wrapping_sub(prev) as i64));
        }
    }
    pos
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check_pack(ev: Compact, packed: Option<(u64, u32)>) {
        let mut buf = [0u8; 32];
        let n = encode_compact(ev, &mut buf);
        match packed {
            Some((w, len)) => {
                assert_eq!(len as usize, n, "{ev:?}");
                assert_eq!(&w.to_le_bytes()[..n], &buf[..n], "{ev:?}");
                assert!(w.to_le_bytes()[n..].iter().all(|&b| b == 0));
            }
            None => assert!(n > 8, "{ev:?} fits in 8 bytes but pack refused"),
        }
    }

    #[test]
    fn packers_match_encoder() {
        let deltas = [
            0u64,
            1,
            15,
            16,
            31,
            32,
            63,
            64,
            127,
            128,
            5000,
            1 << 40,
            1 << 54,
            u64::MAX,
        ];
        let funcs = [0u64, 1, 0x5555_0000, 0x7fff_ffff_f000, u64::MAX];
        for &d in &deltas {
            check_pack(Compact::Exit { d }, pack_exit(d));
            check_pack(Compact::TailExit { d }, pack_tail_exit(d));
            check_pack(
                Compact::Entry {
                    d,
                    func: 9,
                    prev: 9,
                },
                pack_entry_same(d),
            );
            for &f in &funcs {
                for &p in &funcs {
                    if f != p {
                        check_pack(
                            Compact::Entry {
                                d,
                                func: f,
                                prev: p,
                            },
                            pack_entry_new(d, f, p),
                        );
                    }
                }
            }
        }
    }
}
