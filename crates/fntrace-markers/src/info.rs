//! The marker table read from a binary without running it
//! (`fntrace markers BINARY`): each declaration puts one self-contained
//! record in section `fntrace_marker_info`, with no pointers (so no
//! relocations to apply when reading the file).
//!
//! Record: `FNTM` magic, u32 total length (little-endian, including the
//! header), u32 line, u32 count of strings, then that many NUL-terminated
//! UTF-8 strings: name, module, file, design, then argument name and type
//! pairs. Records may be separated by zero padding.

/// Record magic.
pub const MAGIC: [u8; 4] = *b"FNTM";
/// Section name.
pub const SECTION: &str = "fntrace_marker_info";

/// Length of the record holding `parts`.
pub const fn info_len(parts: &[&str]) -> usize {
    let mut n = 16;
    let mut i = 0;
    while i < parts.len() {
        n += parts[i].len() + 1;
        i += 1;
    }
    n
}

/// The record holding `parts` (`N` = [`info_len`]).
pub const fn info_record<const N: usize>(line: u32, parts: &[&str]) -> [u8; N] {
    let mut out = [0u8; N];
    let mut i = 0;
    while i < 4 {
        out[i] = MAGIC[i];
        i += 1;
    }
    let len = (N as u32).to_le_bytes();
    let line = line.to_le_bytes();
    let count = (parts.len() as u32).to_le_bytes();
    let mut k = 0;
    while k < 4 {
        out[4 + k] = len[k];
        out[8 + k] = line[k];
        out[12 + k] = count[k];
        k += 1;
    }
    let mut pos = 16;
    let mut p = 0;
    while p < parts.len() {
        let b = parts[p].as_bytes();
        let mut j = 0;
        while j < b.len() {
            out[pos] = b[j];
            pos += 1;
            j += 1;
        }
        pos += 1; // NUL
        p += 1;
    }
    out
}
