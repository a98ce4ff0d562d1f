//! Jump stubs near patched code.
//!
//! A site rewritten into `call rel32` or `jmp rel32` reaches only ±2 GiB,
//! and the trampolines (in the runtime's own object) may be farther from
//! the patched object. A stub is 16 bytes, `jmp [rip + 0]` followed by the
//! 8-byte target, in a page mapped close to the object. Pages are shared by
//! every object in range and by every target; a stub, once written, never
//! changes, so code may call it at any time.

use super::PatchError;
use std::sync::Mutex;

/// Stub pages: (page address, stubs used, targets in slot order).
static PAGES: Mutex<Vec<(u64, Vec<u64>)>> = Mutex::new(Vec::new());

const STUB: u64 = 16;
const PER_PAGE: usize = 4096 / STUB as usize;

/// Whether every address of `[lo, hi)` can reach every address of the page
/// at `p` with a 32-bit displacement.
fn near(p: u64, lo: u64, hi: u64) -> bool {
    near_len(p, 4096, lo, hi)
}

/// Whether every address of `[lo, hi)` and of `[p, p + len)` can reach
/// each other with a 32-bit displacement.
fn near_len(p: u64, len: u64, lo: u64, hi: u64) -> bool {
    let a = lo.min(p);
    let b = hi.max(p + len);
    b - a < (1 << 31) - 4096
}

/// A stub jumping to `target`, reachable with `rel32` from all of
/// `[lo, hi)` (an object's mapped range). `what` names the object for the
/// error message.
pub fn stub(target: u64, lo: u64, hi: u64, what: &str) -> Result<u64, PatchError> {
    let mut pages = PAGES.lock().unwrap_or_else(|e| e.into_inner());
    for (page, slots) in pages.iter() {
        if near(*page, lo, hi)
            && let Some(i) = slots.iter().position(|&t| t == target)
        {
            return Ok(page + STUB * i as u64);
        }
    }
    let idx = pages
        .iter()
        .position(|(p, s)| near(*p, lo, hi) && s.len() < PER_PAGE);
    let idx = match idx {
        Some(i) => i,
        None => {
            let p = map_near(lo, hi).ok_or_else(|| {
                PatchError::Code(format!(
                    "{what}: no free page within 2 GiB of it for trampoline stubs"
                ))
            })?;
            pages.push((p, vec![]));
            pages.len() - 1
        }
    };
    let (page, slots) = &mut pages[idx];
    let addr = *page + STUB * slots.len() as u64;
    let mut code = [0u8; 16];
    code[..6].copy_from_slice(&[0xff, 0x25, 0, 0, 0, 0]);
    code[6..14].copy_from_slice(&target.to_le_bytes());
    let w = super::text::Writable::open([(addr, STUB)], "fntrace stub page")?;
    // SAFETY: the slot is ours, unused (no code jumps to it yet) and
    // writable through `w`.
    unsafe { super::text::write_bytes(addr, &code) };
    drop(w);
    slots.push(target);
    Ok(addr)
}

/// Maps a read + execute page within reach of `[lo, hi)`.
fn map_near(lo: u64, hi: u64) -> Option<u64> {
    map_near_len(lo, hi, 4096)
}

/// Maps `len` bytes (a multiple of the page size) of read + execute
/// memory within reach of `[lo, hi)`, for code written once (call
/// wrappers). `what` names the object for the error message.
pub fn area_near(lo: u64, hi: u64, len: u64, what: &str) -> Result<u64, PatchError> {
    let len = len.div_ceil(4096) * 4096;
    map_near_len(lo, hi, len).ok_or_else(|| {
        PatchError::Code(format!(
            "{what}: no free memory within 2 GiB of it for {len} bytes of wrappers"
        ))
    })
}

/// The lowest address stubs and wrappers are mapped at.
const LOWEST: u64 = 1 << 20;

fn map_near_len(lo: u64, hi: u64, len: u64) -> Option<u64> {
    for k in 1..64u64 {
        for hint in [
            lo.saturating_sub((k << 24) + len) & !0xfff,
            (hi + (k << 24)) & !0xfff,
        ] {
            // Never near address 0 (a non-PIE executable sits at 4 MiB):
            // root may map page 0, and a program's null pointers must keep
            // faulting.
            if hint < LOWEST {
                continue;
            }
            // SAFETY: MAP_FIXED_NOREPLACE never replaces an existing
            // mapping; the memory is ours.
            let p = unsafe {
                libc::mmap(
                    hint as *mut libc::c_void,
                    len as usize,
                    libc::PROT_READ | libc::PROT_EXEC,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED_NOREPLACE,
                    -1,
                    0,
                )
            };
            if p == libc::MAP_FAILED {
                continue;
            }
            if near_len(p as u64, len, lo, hi) {
                return Some(p as u64);
            }
            // SAFETY: unmapping what we just mapped.
            unsafe { libc::munmap(p, len as usize) };
        }
    }
    None
}
