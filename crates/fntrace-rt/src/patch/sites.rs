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
//!   2): the prefix holds `jmp wrapper`, written while the site is off, and
//!   one 2-byte store at the entry switches it.
//!
//! A switched-on site jumps to its call wrapper (`calls::wrapper`).
//!
//! Runs of one-byte NOPs (what gcc emits) are neither: a thread may be
//! stopped between two of them. They are rewritten into one of the two
//! layouts ([`Fixup`]) only while no other thread can be inside them (at
//! start-up, in an object just loaded, or by `fntrace record -p` while
//! every thread is stopped and none is inside the run).
//!
//! Compiler hook calls are rewritten the same way, so that a recorded
//! `-pg` build goes through call wrappers instead of a hijacked return
//! address and can be switched like any patchable site: `call __fentry__`
//! at a function's start (`gcc -pg -mfentry`, found by [`fentry_call`])
//! becomes a 5-byte NOP site (plus a one-byte NOP for the 6-byte GOT
//! form); a prologue followed by `call mcount` (`gcc -pg`, `rustc
//! -Zinstrument-mcount`, found by [`mcount_call`]) is moved into a stub
//! and the function starts with a 5-byte `jmp` ([`Layout::Moved`]). While
//! other threads run, only the `call mcount` itself can change (one
//! instruction, with the `int3` protocol): it becomes a jump to code that
//! undoes the prologue ([`Layout::McountCall`], [`mcount_undo`]).

use std::borrow::Cow;

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
    /// `gcc -pg`/`rustc -Zinstrument-mcount` code: the function's
    /// prologue (`prologue` bytes at `addr`) and the `call mcount` after
    /// it (`call` bytes). Fixed up once ([`Fixup::Move`]): the prologue is
    /// copied into a stub that jumps back past the call, and `addr` holds
    /// a 5-byte `jmp` — to the stub when off, to the wrapper when on.
    Moved {
        /// An `endbr64` precedes the site.
        endbr: bool,
        /// Bytes of prologue before the call.
        prologue: u8,
        /// Bytes of the call (5 or 6).
        call: u8,
    },
    /// `gcc -pg`/`rustc -Zinstrument-mcount` code converted while the
    /// program runs: the `call mcount` at `addr` (`call` bytes, after
    /// `prologue` bytes of prologue) became a 5-byte NOP (plus a one-byte
    /// NOP for the 6-byte form), switched to a `jmp` to the function's
    /// undo stub, which restores what the prologue changed ([`mcount_undo`])
    /// and jumps to the wrapper, which calls a copy of the prologue. Only
    /// one instruction changes: no thread can be inside it.
    McountCall {
        /// An `endbr64` precedes the function's prologue.
        endbr: bool,
        /// Bytes of prologue before the call.
        prologue: u8,
        /// Bytes of the call (5 or 6).
        call: u8,
    },
}

/// A rewrite that turns a run of one-byte NOPs into a switchable layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fixup {
    /// Write [`NOP5`] at the site.
    Nop5,
    /// Write `66 90` at the site.
    Nop2,
    /// Replace a 5-byte `call __fentry__` (`e8`, to a PLT entry) by
    /// [`NOP5`].
    Call5,
    /// Replace a 6-byte `call *__fentry__@GOTPCREL(%rip)` (`ff 15`) by
    /// [`NOP5`] and a one-byte NOP (the body then starts at that NOP).
    Call6,
    /// Move a [`Layout::Moved`] site's prologue into a stub.
    Move,
    /// Replace `push %r10; <5-byte NOP>; pop %r10` (9 bytes: `gcc -pg
    /// -mfentry -mnop-mcount` in a function that takes a static chain, a
    /// GNU C nested function) by [`NOP5`] and a 4-byte NOP: the site is
    /// then the function's first instruction, like any other, and the
    /// body starts after the 9 bytes (the call wrapper saves r10 itself).
    /// `lead`: gcc put the push before an `endbr64` (`-fcf-protection`):
    /// the 4 bytes before the site are rewritten too, to the `endbr64`.
    Bracket {
        /// The push came before the `endbr64`.
        lead: bool,
    },
}

/// `push %r10`: gcc saves the static chain around the profiling hook of a
/// function that takes one (a GNU C nested function) with it before the
/// `call __fentry__` (or its NOP) ...
pub const PUSH_R10: [u8; 2] = [0x41, 0x52];
/// ... and `pop %r10` after it.
pub const POP_R10: [u8; 2] = [0x41, 0x5a];
/// The 4-byte NOP that ends a rewritten [`Fixup::Bracket`].
pub const NOP4: [u8; 4] = [0x0f, 0x1f, 0x40, 0x00];

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
pub fn classify<'c>(
    entry: u64,
    code: &dyn Fn(u64, usize) -> Cow<'c, [u8]>,
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
        let endbr = *code(f, 4) == ENDBR64;
        let sw = if endbr { f + 4 } else { f };
        if sw % 64 == 63 {
            // One 16-bit store is atomic for other cores' instruction
            // fetch only within a cache line.
            return Err(Skip::Unsupported(
                "the entry's 2-byte NOP straddles a cache line (align functions)".into(),
            ));
        }
        let e = code(sw, 2);
        return match &*e {
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
    // A NOP between `push %r10` and `pop %r10` (the static chain saved
    // around the hook): the function starts at the push, or at an
    // `endbr64` before it, or (gcc with `-fcf-protection`) at the push
    // before an `endbr64`.
    if b.len() >= 7 && b[..4] == NOP5[..4] && b[5..7] == POP_R10 {
        if entry >= 2 && *code(entry - 2, 2) == PUSH_R10 {
            let at = entry - 2;
            let endbr = at >= 4 && *code(at - 4, 4) == ENDBR64;
            return Ok(Site {
                addr: at,
                func: if endbr { at - 4 } else { at },
                layout: Layout::Nop5 { endbr },
                fixup: Some(Fixup::Bracket { lead: false }),
            });
        }
        if entry >= 6 && *code(entry - 4, 4) == ENDBR64 && *code(entry - 6, 2) == PUSH_R10 {
            return Ok(Site {
                addr: entry - 2,
                func: entry - 6,
                layout: Layout::Nop5 { endbr: true },
                fixup: Some(Fixup::Bracket { lead: true }),
            });
        }
    }
    let endbr = entry >= 4 && *code(entry - 4, 4) == ENDBR64;
    let func = if endbr { entry - 4 } else { entry };
    // `nopl disp8(%rax,%rax,1)`: gcc writes displacement 0, clang 8.
    if b.len() >= 5 && b[..4] == NOP5[..4] {
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

/// The GOT slot a PLT entry at `plt` jumps through: `ff 25 <disp32>`, or
/// with CET `f2 ff 25 <disp32>` (`bnd jmp`), possibly behind `endbr64`
/// (`.plt.sec`).
fn plt_slot<'c>(plt: u64, code: &dyn Fn(u64, usize) -> Cow<'c, [u8]>) -> Option<u64> {
    let b = code(plt, 11);
    let (at, op) = match &*b {
        [0xf3, 0x0f, 0x1e, 0xfa, 0xf2, 0xff, 0x25, ..] => (plt + 4, 3),
        [0xf2, 0xff, 0x25, ..] => (plt, 3),
        [0xff, 0x25, ..] => (plt, 2),
        _ => return None,
    };
    let o = (at - plt) as usize + op;
    let disp = i32::from_le_bytes(b.get(o..o + 4)?.try_into().ok()?);
    Some((at + op as u64 + 4).wrapping_add(disp as i64 as u64))
}

/// A `call __fentry__` as the first instruction of the function at `func`
/// (after an `endbr64`, if any), as `gcc -pg -mfentry` emits it: `ff 15
/// <disp32>` through a GOT slot (PIE), or `e8 <rel32>` to a PLT entry that
/// jumps through one. `slots`: the sorted GOT slots bound to `__fentry__`
/// (its `GLOB_DAT` and `JUMP_SLOT` relocations). Returns the site that
/// replaces the call (a 5-byte NOP site once fixed up).
pub fn fentry_call<'c>(
    func: u64,
    code: &dyn Fn(u64, usize) -> Cow<'c, [u8]>,
    slots: &[u64],
) -> Option<Site> {
    let endbr = *code(func, 4) == ENDBR64;
    let at = if endbr { func + 4 } else { func };
    // A call behind `push %r10` (a listed call of a function taking a
    // static chain: `func` is not its start) stays with the `__fentry__`
    // hook, which knows the layout.
    let behind_push = |a: u64| a >= 2 && *code(a - 2, 2) == PUSH_R10;
    if behind_push(at) || (at >= 4 && *code(at - 4, 4) == ENDBR64 && behind_push(at - 4)) {
        return None;
    }
    let (slot, len) = call_slot(at, &code(at, 6), code)?;
    slots.binary_search(&slot).ok()?;
    let fixup = if len == 6 { Fixup::Call6 } else { Fixup::Call5 };
    Some(Site {
        addr: at,
        func,
        layout: Layout::Nop5 { endbr },
        fixup: Some(fixup),
    })
}

/// Bytes of a ModRM operand fntrace can copy elsewhere unchanged: a
/// register, or memory addressed by a register plus a displacement (no
/// SIB byte, no RIP-relative form).
fn modrm_len(m: u8) -> Option<usize> {
    let (md, rm) = (m >> 6, m & 7);
    match md {
        3 => Some(1),
        0 if rm != 4 && rm != 5 => Some(1),
        1 if rm != 4 => Some(2),
        2 if rm != 4 => Some(5),
        _ => None,
    }
}

/// Length of a prologue instruction that runs the same anywhere (a push,
/// a register move or a store relative to a register, a stack
/// adjustment): what may be copied out of an mcount function's prologue.
fn movable_len(b: &[u8]) -> Option<usize> {
    match b {
        [0x50..=0x57, ..] => Some(1),
        [0x41, 0x50..=0x57, ..] => Some(2),
        [0x48, 0x83, 0xec, _, ..] => Some(4),
        [0x48, 0x81, 0xec, _, _, _, _, ..] => Some(7),
        [0x40..=0x4f, 0x89, m, ..] => modrm_len(*m).map(|n| 2 + n),
        [0x89, m, ..] => modrm_len(*m).map(|n| 1 + n),
        _ => None,
    }
}

/// The target slot of a call at `at` whose bytes start `b` (`ff 15
/// <disp32>` through the GOT, or `e8 <rel32>` to a PLT entry, read with
/// `code`) and the call's length.
fn call_slot<'c>(
    at: u64,
    b: &[u8],
    code: &dyn Fn(u64, usize) -> Cow<'c, [u8]>,
) -> Option<(u64, u8)> {
    let rel = |o: usize| -> Option<u64> {
        Some(i32::from_le_bytes(b.get(o..o + 4)?.try_into().ok()?) as i64 as u64)
    };
    match b {
        [0xff, 0x15, ..] => Some(((at + 6).wrapping_add(rel(2)?), 6)),
        [0xe8, ..] => Some((plt_slot((at + 5).wrapping_add(rel(1)?), code)?, 5)),
        _ => None,
    }
}

/// An mcount function (`gcc -pg`, `rustc -Zinstrument-mcount`) starting
/// at `func`: an optional `endbr64`, a prologue that starts with `push
/// rbp` and holds only instructions that run the same anywhere
/// (`movable_len`), then `call mcount` through one of `slots` (the GOT
/// slots bound to `mcount`/`_mcount`, sorted). Returns the site (fixed up
/// with [`Fixup::Move`]).
pub fn mcount_call<'c>(
    func: u64,
    code: &dyn Fn(u64, usize) -> Cow<'c, [u8]>,
    slots: &[u64],
) -> Option<Site> {
    let endbr = *code(func, 4) == ENDBR64;
    let at = if endbr { func + 4 } else { func };
    let b = code(at, 48);
    if b.first() != Some(&0x55) {
        return None;
    }
    let mut p = 0;
    while p < 40 {
        if let Some((slot, call)) = call_slot(at + p as u64, b.get(p..)?, code) {
            slots.binary_search(&slot).ok()?;
            return Some(Site {
                addr: at,
                func,
                layout: Layout::Moved {
                    endbr,
                    prologue: p as u8,
                    call,
                },
                fixup: Some(Fixup::Move),
            });
        }
        p += movable_len(b.get(p..)?)?;
    }
    None
}

/// The code that takes a thread stopped at the `call mcount` of a moved
/// prologue (`prologue`, the bytes before the call) back to the state at
/// the function's entry, so that a call wrapper can call a copy of the
/// prologue: every register the prologue wrote is reloaded from the slot
/// the prologue pushed it to, then `leave` restores `rsp` and `rbp`. The
/// caller appends the jump to the wrapper. `None` unless the prologue is
/// `push rbp; mov rbp, rsp` followed only by pushes, `sub rsp`, stores to
/// `rbp`-relative memory, and register moves into registers it pushed
/// before (as `rustc` writes: `push rbx; mov rbx, rdi`): running such a
/// prologue again from the restored state does the same.
///
/// Returns the code and its length (7 bytes per reloaded register, plus
/// one for `leave`).
pub fn mcount_undo(prologue: &[u8]) -> Option<([u8; 64], usize)> {
    const PUSH_RBP_MOV_RBP_RSP: [u8; 4] = [0x55, 0x48, 0x89, 0xe5];
    if prologue.get(..4)? != PUSH_RBP_MOV_RBP_RSP {
        return None;
    }
    // Below rbp: the slot of each pushed register (its offset), and the
    // registers written since.
    let mut depth: i64 = 0;
    let mut slot: [Option<i64>; 16] = [None; 16];
    let mut written = [false; 16];
    // Stores to frame slots (displacement from rbp, width). rustc spills
    // into the slot of a `push rax` (a `sub rsp, 8` in one byte): harmless
    // unless the stub must reload a register from it.
    let mut stores: Vec<(i64, i64)> = Vec::with_capacity(16);
    let mut p = 4;
    while p < prologue.len() {
        let b = &prologue[p..];
        let n = movable_len(b)?;
        match b {
            [0x50..=0x57, ..] | [0x41, 0x50..=0x57, ..] => {
                let r = if b[0] == 0x41 {
                    8 + (b[1] & 7)
                } else {
                    b[0] & 7
                } as usize;
                depth += 8;
                // A register pushed twice keeps its first (original) slot,
                // unless it was written before the first push.
                if slot[r].is_none() && !written[r] {
                    slot[r] = Some(depth);
                }
            }
            [0x48, 0x83, 0xec, imm, ..] if (*imm as i8) >= 0 => depth += i64::from(*imm),
            [0x48, 0x81, 0xec, a, b2, c, d, ..] => {
                let imm = i32::from_le_bytes([*a, *b2, *c, *d]);
                if imm < 0 {
                    return None;
                }
                depth += i64::from(imm);
            }
            [0x48, 0x83 | 0x81, ..] => return None,
            _ => {
                // `mov r/m, reg` (`89`), with an optional REX prefix.
                let (rex, m) = if b[0] == 0x89 {
                    (0, b[1])
                } else {
                    (b[0], b[2])
                };
                let (md, rm) = (m >> 6, m & 7);
                if md == 3 {
                    let dst = (rm | if rex & 1 != 0 { 8 } else { 0 }) as usize;
                    // Never rsp or rbp; only a register saved before.
                    if dst == 4 || dst == 5 || slot[dst].is_none() {
                        return None;
                    }
                    written[dst] = true;
                } else {
                    // Only a frame slot (`disp(%rbp)`), checked below
                    // against the slots of the registers to reload.
                    if rm != 5 || stores.len() == stores.capacity() {
                        return None;
                    }
                    let d = &b[n - if md == 1 { 1 } else { 4 }..n];
                    let disp = if md == 1 {
                        i64::from(d[0] as i8)
                    } else {
                        i64::from(i32::from_le_bytes([d[0], d[1], d[2], d[3]]))
                    };
                    let width = if rex & 8 != 0 { 8 } else { 4 };
                    stores.push((disp, width));
                }
            }
        }
        p += n;
    }
    let reloaded = |r: usize| if written[r] { slot[r] } else { None };
    if (0..16)
        .filter_map(reloaded)
        .any(|o| stores.iter().any(|&(d, w)| d < -o + 8 && -o < d + w))
    {
        return None;
    }
    let mut out = [0xccu8; 64];
    let mut n = 0;
    for r in 0..16 {
        if !written[r] {
            continue;
        }
        let off = -(slot[r]?);
        // mov r64, [rbp + disp32]
        let code = [
            0x48 | if r >= 8 { 4 } else { 0 },
            0x8b,
            0x85 | ((r as u8 & 7) << 3),
        ];
        if n + 7 + 1 > out.len() {
            return None;
        }
        out[n..n + 3].copy_from_slice(&code);
        out[n + 3..n + 7].copy_from_slice(&(off as i32).to_le_bytes());
        n += 7;
    }
    out[n] = 0xc9; // leave
    Some((out, n + 1))
}

/// The bytes of a `jmp rel32` at `at` to `target` (within ±2 GiB).
pub fn jmp5(at: u64, target: u64) -> [u8; 5] {
    let rel = (target as i64 - (at as i64 + 5)) as i32;
    let mut b = [0xe9, 0, 0, 0, 0];
    b[1..].copy_from_slice(&rel.to_le_bytes());
    b
}

/// The 7 prefix bytes of a [`Layout::Prefix`] site whose function starts
/// at `func`: `jmp wrapper` at `func - 7` (where the switch jumps back
/// to), then two NOPs.
pub fn prefix7(func: u64, wrapper: u64) -> [u8; 7] {
    let mut b = [0x90u8; 7];
    b[..5].copy_from_slice(&jmp5(func - 7, wrapper));
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

    fn mem(base: u64, bytes: Vec<u8>) -> impl Fn(u64, usize) -> Cow<'static, [u8]> {
        // Bytes outside `bytes` read as `int3` padding.
        move |a, n| {
            Cow::Owned(
                (a..a + n as u64)
                    .map(|x| {
                        x.checked_sub(base)
                            .and_then(|o| bytes.get(o as usize).copied())
                            .unwrap_or(0xcc)
                    })
                    .collect(),
            )
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
        // The prefix jumps to the wrapper.
        let p = prefix7(0x1008, 0x2000);
        assert_eq!(p[0], 0xe9);
        assert_eq!(
            i32::from_le_bytes(p[1..5].try_into().unwrap()),
            0x2000 - 0x1006
        );
        assert_eq!((p[5], p[6]), (0x90, 0x90));
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
        let s = classify(0x1000, &mem(0x1000, b.clone()), Some(0x1008)).unwrap();
        assert_eq!((s.layout, s.fixup), (Layout::Prefix, Some(Fixup::Nop2)));
        // The same at the last byte of a cache line: no atomic switch.
        assert!(matches!(
            classify(0x1037, &mem(0x1037, b), Some(0x103f)),
            Err(Skip::Unsupported(m)) if m.contains("cache line")
        ));
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

    /// The static chain saved around the hook (GNU C nested functions):
    /// the site starts at the push, or the push before an `endbr64` is
    /// rewritten too; a real call behind the push stays with the hook.
    #[test]
    fn nested_function_brackets() {
        // push r10; nopl; pop r10; push rbx.
        let mut b = PUSH_R10.to_vec();
        b.extend(NOP5);
        b.extend(POP_R10);
        b.push(0x53);
        let s = classify(0x1002, &mem(0x1000, b), None).unwrap();
        assert_eq!(
            (s.addr, s.func, s.layout, s.fixup),
            (
                0x1000,
                0x1000,
                Layout::Nop5 { endbr: false },
                Some(Fixup::Bracket { lead: false })
            )
        );
        // endbr64; push r10; nopl; pop r10.
        let mut b = ENDBR64.to_vec();
        b.extend(PUSH_R10);
        b.extend(NOP5);
        b.extend(POP_R10);
        let s = classify(0x1006, &mem(0x1000, b), None).unwrap();
        assert_eq!(
            (s.addr, s.func, s.fixup),
            (0x1004, 0x1000, Some(Fixup::Bracket { lead: false }))
        );
        // gcc -fcf-protection: push r10; endbr64; nopl; pop r10.
        let mut b = PUSH_R10.to_vec();
        b.extend(ENDBR64);
        b.extend(NOP5);
        b.extend(POP_R10);
        let s = classify(0x1006, &mem(0x1000, b), None).unwrap();
        assert_eq!(
            (s.addr, s.func, s.layout, s.fixup),
            (
                0x1004,
                0x1000,
                Layout::Nop5 { endbr: true },
                Some(Fixup::Bracket { lead: true })
            )
        );
        // No pop after the NOP: an ordinary site (whatever precedes it).
        let mut b = PUSH_R10.to_vec();
        b.extend(NOP5);
        b.push(0x53);
        let s = classify(0x1002, &mem(0x1000, b), None).unwrap();
        assert_eq!((s.addr, s.fixup), (0x1002, None));
        // A listed call behind the push, either order: left to the hook.
        for lead in [false, true] {
            let mut b = vec![];
            if lead {
                b.extend(PUSH_R10);
                b.extend(ENDBR64);
            } else {
                b.extend(ENDBR64);
                b.extend(PUSH_R10);
            }
            b.extend([0xff, 0x15, 0xa6, 0x2d, 0, 0]);
            b.extend(POP_R10);
            let slot = 0x100c + 0x2da6;
            let m = mem(0x1000, b);
            let f = if lead { 0x1002 } else { 0x1000 };
            assert!(fentry_call(f, &m, &[slot]).is_none(), "lead {lead}");
            assert!(fentry_call(0x1006 - 4 * u64::from(!lead), &m, &[slot]).is_none());
        }
    }

    #[test]
    fn fentry_calls_through_the_got_and_the_plt() {
        // PIE: endbr64; call *0x2da6(%rip) -> slot 0x1004 + 6 + 0x2da6.
        let mut b = ENDBR64.to_vec();
        b.extend([0xff, 0x15, 0xa6, 0x2d, 0, 0, 0x55]);
        let slot = 0x100a + 0x2da6;
        let s = fentry_call(0x1000, &mem(0x1000, b.clone()), &[slot]).unwrap();
        assert_eq!(
            (s.addr, s.func, s.layout, s.fixup),
            (
                0x1004,
                0x1000,
                Layout::Nop5 { endbr: true },
                Some(Fixup::Call6)
            )
        );
        // Another slot: not `__fentry__`.
        assert!(fentry_call(0x1000, &mem(0x1000, b), &[slot + 8]).is_none());
        // Non-PIE: call rel32 to a PLT entry `ff 25 <disp>` at 0x0f80.
        let mut code = vec![0xcc; 0x100];
        code[0x80..0x86].copy_from_slice(&[0xff, 0x25, 0xa2, 0x2f, 0, 0]);
        let rel = (0x0f80i64 - 0x1005) as i32;
        code.extend([0xe8]);
        code.extend(rel.to_le_bytes());
        code.push(0x55);
        let m = mem(0x0f00, code.clone());
        let slot = 0x0f86 + 0x2fa2;
        let s = fentry_call(0x1000, &m, &[1, slot, u64::MAX]).unwrap();
        assert_eq!(
            (s.addr, s.layout, s.fixup),
            (0x1000, Layout::Nop5 { endbr: false }, Some(Fixup::Call5))
        );
        assert!(fentry_call(0x1000, &m, &[slot - 1]).is_none());
        // CET PLT (`.plt.sec`): endbr64; bnd jmp *disp(%rip).
        code[0x80..0x8b]
            .copy_from_slice(&[0xf3, 0x0f, 0x1e, 0xfa, 0xf2, 0xff, 0x25, 0x10, 0, 0, 0]);
        let s = fentry_call(0x1000, &mem(0x0f00, code), &[0x0f8b + 0x10]);
        assert_eq!(s.map(|s| s.fixup), Some(Some(Fixup::Call5)));
        // Anything else at the entry.
        assert!(fentry_call(0x1000, &mem(0x1000, vec![0x55, 0xc3]), &[0]).is_none());
    }

    #[test]
    fn mcount_prologues() {
        // gcc -pg: push rbp; mov rbp,rsp; push r12; push rbx;
        // call *0x2d93(%rip).
        let b = vec![
            0x55, 0x48, 0x89, 0xe5, 0x41, 0x54, 0x53, 0xff, 0x15, 0x93, 0x2d, 0, 0, 0x48,
        ];
        let slot = 0x100d + 0x2d93;
        let s = mcount_call(0x1000, &mem(0x1000, b.clone()), &[slot]).unwrap();
        assert_eq!(
            (s.addr, s.func, s.layout, s.fixup),
            (
                0x1000,
                0x1000,
                Layout::Moved {
                    endbr: false,
                    prologue: 7,
                    call: 6
                },
                Some(Fixup::Move)
            )
        );
        assert!(mcount_call(0x1000, &mem(0x1000, b), &[slot + 1]).is_none());
        // rustc: push rbp; mov rbp,rsp; sub rsp,0x20; mov [rbp-8],rdi;
        // mov rbx,rsi (49 89 f6 = mov r14,rsi); call rel32 to a PLT entry.
        let mut code = vec![0xcc; 0x100];
        code[0x80..0x86].copy_from_slice(&[0xff, 0x25, 0x10, 0, 0, 0]);
        let mut f = ENDBR64.to_vec();
        f.extend([
            0x55, 0x48, 0x89, 0xe5, 0x48, 0x83, 0xec, 0x20, 0x48, 0x89, 0x7d, 0xf8,
        ]);
        f.extend([0x49, 0x89, 0xf6]);
        let call_at = 0x1000 + f.len() as i64;
        f.push(0xe8);
        f.extend(((0x0f80 - (call_at + 5)) as i32).to_le_bytes());
        code.extend(f);
        let s = mcount_call(0x1000, &mem(0x0f00, code.clone()), &[0x0f86 + 0x10]).unwrap();
        assert_eq!(
            s.layout,
            Layout::Moved {
                endbr: true,
                prologue: 15,
                call: 5
            }
        );
        assert_eq!(s.addr, 0x1004);
        // A RIP-relative load in the prologue cannot be moved.
        let b = vec![0x55, 0x48, 0x8b, 0x05, 1, 2, 3, 4, 0xe8, 0, 0, 0, 0];
        assert!(mcount_call(0x1000, &mem(0x1000, b), &[0]).is_none());
        // Not starting with push rbp.
        assert!(mcount_call(0x1000, &mem(0x1000, vec![0x53, 0xc3]), &[0]).is_none());
    }

    #[test]
    fn undoing_mcount_prologues() {
        let undo = |b: &[u8]| mcount_undo(b).map(|(c, n)| c[..n].to_vec());
        // gcc -pg: push rbp; mov rbp,rsp; sub rsp,0x20: only `leave`.
        assert_eq!(
            undo(&[0x55, 0x48, 0x89, 0xe5, 0x48, 0x83, 0xec, 0x20]),
            Some(vec![0xc9])
        );
        // rustc: push rbx; push rax; mov rbx,rdi: rbx back from rbp-8.
        assert_eq!(
            undo(&[0x55, 0x48, 0x89, 0xe5, 0x53, 0x50, 0x48, 0x89, 0xfb]),
            Some(vec![0x48, 0x8b, 0x9d, 0xf8, 0xff, 0xff, 0xff, 0xc9])
        );
        // rustc: push r15, r14, r12, rbx; mov r14,rsi; mov rbx,rdi: rbx
        // from rbp-32, r14 from rbp-16 (register order).
        let b = [
            0x55, 0x48, 0x89, 0xe5, 0x41, 0x57, 0x41, 0x56, 0x41, 0x54, 0x53, 0x49, 0x89, 0xf6,
            0x48, 0x89, 0xfb,
        ];
        assert_eq!(
            undo(&b),
            Some(vec![
                0x48, 0x8b, 0x9d, 0xe0, 0xff, 0xff, 0xff, 0x4c, 0x8b, 0xb5, 0xf0, 0xff, 0xff, 0xff,
                0xc9
            ])
        );
        // A store to a local below the pushed registers: fine.
        assert_eq!(
            undo(&[
                0x55, 0x48, 0x89, 0xe5, 0x53, 0x48, 0x83, 0xec, 0x18, 0x48, 0x89, 0x7d, 0xe8
            ]),
            Some(vec![0xc9])
        );
        // rustc: push rbx; push rax; mov [rbp-16],rdi (the slot of rax,
        // never reloaded); mov rbx,rsi: fine.
        assert_eq!(
            undo(&[
                0x55, 0x48, 0x89, 0xe5, 0x53, 0x50, 0x48, 0x89, 0x7d, 0xf0, 0x48, 0x89, 0xf3
            ]),
            Some(vec![0x48, 0x8b, 0x9d, 0xf8, 0xff, 0xff, 0xff, 0xc9])
        );
        // Not restorable: a move into a register never pushed (rax), into
        // rsp, a store over the slot of a register to reload (before or
        // after the move), a store through another register, no frame
        // pointer, `add rsp` as a negative sub.
        for b in [
            &[0x55, 0x48, 0x89, 0xe5, 0x48, 0x89, 0xf8][..],
            &[0x55, 0x48, 0x89, 0xe5, 0x48, 0x89, 0xec],
            &[
                0x55, 0x48, 0x89, 0xe5, 0x53, 0x48, 0x89, 0x7d, 0xf8, 0x48, 0x89, 0xfb,
            ],
            &[
                0x55, 0x48, 0x89, 0xe5, 0x53, 0x48, 0x89, 0xfb, 0x89, 0x75, 0xfc,
            ],
            &[0x55, 0x48, 0x89, 0xe5, 0x48, 0x89, 0x3b],
            &[0x55, 0x53, 0x48, 0x89, 0xfb],
            &[0x55, 0x48, 0x89, 0xe5, 0x48, 0x83, 0xec, 0xf0],
        ] {
            assert_eq!(undo(b), None, "{b:x?}");
        }
    }
}
