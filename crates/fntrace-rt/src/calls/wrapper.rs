//! Call wrappers: what a switched-on patchable site jumps to.
//!
//! A hook that runs at a function's entry sees its exit only if it takes
//! over the return. Replacing the return address (what `__fentry__` and
//! mcount do) makes the function's `ret` go somewhere the CPU's return
//! stack buffer did not predict, and the trampoline's jump back to the
//! caller is an indirect jump too: about two mispredicted branches per
//! call. A patched site can do better, because fntrace chooses the code it
//! jumps to: a wrapper per function that *calls* the body itself.
//!
//! ```text
//! +0   e8 <rel32>    call fntrace_site_entry     records the entry; r11 = 1 if
//!                                                the return address was moved to
//!                                                the shadow stack
//! +5   4d 85 db      test r11, r11
//! +8   74 0f         jz +25
//! +10  48 83 c4 08   add rsp, 8                  drop the caller's return address
//! +14  e8 <rel32>    call BODY                   its return address takes that slot
//! +19  e9 <rel32>    jmp fntrace_site_exit       records the exit, push + ret to
//!                                                the caller
//! +24  cc
//! +25  e9 <rel32>    jmp BODY                    not taken over: run it untouched
//! +30  cc cc
//! +32  <u64>         the function's start address
//! +40  cc × 8
//! ```
//!
//! BODY is the code after the site (after the 5-byte site, or after the
//! prefix layout's 2-byte switch). Every branch is direct, every `ret` is
//! predicted: the caller's `call` entry on the return stack buffer is used
//! by the final `ret`, the wrapper's own calls are balanced. The body runs
//! with the same stack as without the wrapper (its return address in the
//! caller's slot, stack arguments above it), so unwinding, `longjmp` and
//! backtraces are handled as for hijacked returns: the slot is listed in
//! the shadow frame and restored for unwinders (see `calls::unwind`).
//! Wrappers are written once, before any site can reach them, and never
//! change.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// Bytes per wrapper.
pub const SIZE: u64 = 48;

/// Offset of the return point of the wrapper's call into the body (what
/// the function's return-address slot holds while the body runs).
pub const RETURN_POINT: u64 = 19;

/// Offset of the function's start address in a wrapper.
const FUNC: u64 = 32;

/// Wrapper areas (start, length), append-only, for [`is_return_point`].
const AREAS: usize = 1024;
static AREA_START: [AtomicU64; AREAS] = [const { AtomicU64::new(0) }; AREAS];
static AREA_LEN: [AtomicU64; AREAS] = [const { AtomicU64::new(0) }; AREAS];
static NAREAS: AtomicUsize = AtomicUsize::new(0);

/// Registers a wrapper area (callers hold `patch::LOCK`); false when the
/// table is full (then the area must not be used).
pub fn register_area(start: u64, len: u64) -> bool {
    let n = NAREAS.load(Ordering::Acquire);
    if n >= AREAS {
        return false;
    }
    AREA_START[n].store(start, Ordering::Relaxed);
    AREA_LEN[n].store(len, Ordering::Relaxed);
    NAREAS.store(n + 1, Ordering::Release);
    true
}

/// Whether `v`, read from a return-address slot of a call of `func`, is
/// the return point of `func`'s wrapper. Async-signal-safe: reads only
/// registered areas (mapped for the life of the process).
pub fn is_return_point(v: u64, func: u64) -> bool {
    let n = NAREAS.load(Ordering::Acquire);
    (0..n).any(|i| {
        let (a, l) = (
            AREA_START[i].load(Ordering::Relaxed),
            AREA_LEN[i].load(Ordering::Relaxed),
        );
        v >= a
            && v < a + l
            && (v - a) % SIZE == RETURN_POINT
            // SAFETY: inside a registered (never unmapped) wrapper area.
            && unsafe { ((v - RETURN_POINT + FUNC) as *const u64).read_unaligned() } == func
    })
}

/// The wrapper at `at` for the function starting at `func` whose body
/// starts at `body`; `enter` and `exit` are reachable addresses of
/// [`crate::calls::tramp::fntrace_site_entry`] and
/// [`crate::calls::tramp::fntrace_site_exit`] (stubs near `at`).
pub fn code(at: u64, func: u64, body: u64, enter: u64, exit: u64) -> [u8; SIZE as usize] {
    let rel = |from_end: u64, to: u64| ((to as i64) - (from_end as i64)) as i32;
    let mut b = [0xccu8; SIZE as usize];
    b[0] = 0xe8;
    b[1..5].copy_from_slice(&rel(at + 5, enter).to_le_bytes());
    b[5..8].copy_from_slice(&[0x4d, 0x85, 0xdb]);
    b[8..10].copy_from_slice(&[0x74, 0x0f]);
    b[10..14].copy_from_slice(&[0x48, 0x83, 0xc4, 0x08]);
    b[14] = 0xe8;
    b[15..19].copy_from_slice(&rel(at + 19, body).to_le_bytes());
    b[19] = 0xe9;
    b[20..24].copy_from_slice(&rel(at + 24, exit).to_le_bytes());
    b[25] = 0xe9;
    b[26..30].copy_from_slice(&rel(at + 30, body).to_le_bytes());
    b[FUNC as usize..FUNC as usize + 8].copy_from_slice(&func.to_le_bytes());
    b
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_matches_the_entry_trampoline() {
        let b = code(0x10_000, 0x4000, 0x4005, 0x20_000, 0x30_000);
        let rel = |o: usize| i32::from_le_bytes(b[o..o + 4].try_into().unwrap()) as i64;
        assert_eq!(0x10_005 + rel(1), 0x20_000);
        assert_eq!(0x10_013 + rel(15), 0x4005);
        assert_eq!(0x10_018 + rel(20), 0x30_000);
        assert_eq!(0x10_01e + rel(26), 0x4005);
        // jz lands on the plain jump.
        assert_eq!(10 + b[9] as usize, 25);
        // `fntrace_site_entry` reads the function at its return address
        // (+5) + 27.
        assert_eq!(
            u64::from_le_bytes(b[5 + 27..5 + 35].try_into().unwrap()),
            0x4000
        );
    }
}
