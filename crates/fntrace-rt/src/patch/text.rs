//! Writable windows over code pages and the stores that change code.
//!
//! A [`Writable`] makes the pages covering a set of byte ranges
//! read + write + execute with one `mprotect` per run of contiguous pages
//! and makes them read + execute again when dropped. The error names the
//! object and the address, and says when a W^X policy is the likely cause.

use super::PatchError;

/// Page size on x86_64 Linux.
const PAGE: u64 = 4096;

/// Code pages made writable; restored to read + execute on drop.
pub struct Writable {
    runs: Vec<(u64, usize)>,
}

impl Writable {
    /// Makes the pages covering every `(address, length)` range writable.
    /// `what` names the object for error messages.
    pub fn open<R: core::borrow::Borrow<(u64, u64)>>(
        ranges: impl IntoIterator<Item = R>,
        what: &str,
    ) -> Result<Writable, PatchError> {
        let runs = page_runs(ranges);
        let mut w = Writable { runs: vec![] };
        for (start, len) in runs {
            // SAFETY: changes the protection of mapped code pages only
            // (the callers pass ranges inside loaded objects' text or our
            // own stub pages); they stay executable, and `Drop` restores
            // read + execute.
            let r = unsafe {
                libc::mprotect(
                    start as *mut libc::c_void,
                    len,
                    libc::PROT_READ | libc::PROT_WRITE | libc::PROT_EXEC,
                )
            };
            if r != 0 {
                let e = std::io::Error::last_os_error();
                return Err(PatchError::Code(format!(
                    "{what}: cannot make code writable at {start:#x} ({e}); the system \
                     forbids writable code (a W^X policy such as SELinux deny_execmem or \
                     PaX MPROTECT)"
                )));
            }
            w.runs.push((start, len));
        }
        Ok(w)
    }

    /// The runs of pages this window covers (start, length).
    pub fn runs(&self) -> &[(u64, usize)] {
        &self.runs
    }
}

impl Drop for Writable {
    fn drop(&mut self) {
        for &(start, len) in &self.runs {
            // SAFETY: the pages `open` made writable; back to read +
            // execute.
            unsafe {
                libc::mprotect(
                    start as *mut libc::c_void,
                    len,
                    libc::PROT_READ | libc::PROT_EXEC,
                )
            };
        }
    }
}

/// The runs of whole pages (start, length) covering `ranges` (address,
/// length; empty ones ignored), sorted and merged where they touch.
fn page_runs<R: core::borrow::Borrow<(u64, u64)>>(
    ranges: impl IntoIterator<Item = R>,
) -> Vec<(u64, usize)> {
    // Runs of whole pages, merged in one pass over ranges sorted by
    // address (a large program's 100,000 sites are); a range before
    // the last run (a stub area listed after an object's sites) is set
    // aside and merged at the end.
    fn merge(runs: &mut Vec<(u64, usize)>, (first, last): (u64, u64)) -> bool {
        if let Some(r) = runs.last_mut() {
            if first < r.0 {
                return false;
            }
            let end = r.0 + r.1 as u64;
            if first <= end {
                r.1 = ((last + PAGE).max(end) - r.0) as usize;
                return true;
            }
        }
        runs.push((first, (last + PAGE - first) as usize));
        true
    }
    let pages = |&(a, n): &(u64, u64)| (a & !(PAGE - 1), (a + n - 1) & !(PAGE - 1));
    let mut runs: Vec<(u64, usize)> = vec![];
    let mut late: Vec<(u64, u64)> = vec![];
    for r in ranges {
        let r = r.borrow();
        if r.1 > 0 && !merge(&mut runs, pages(r)) {
            late.push(pages(r));
        }
    }
    if !late.is_empty() {
        late.extend(runs.drain(..).map(|(a, n)| (a, a + n as u64 - PAGE)));
        late.sort_unstable();
        for p in late {
            merge(&mut runs, p);
        }
    }
    runs
}

/// Writes `bytes` at `addr`, byte by byte, in order.
///
/// # Safety
/// `addr..addr + bytes.len()` must lie in a page made writable by a live
/// [`Writable`], and no thread may execute those bytes while they change
/// (the caller's protocol guarantees it: they are unreachable, or guarded
/// by an `int3`).
pub unsafe fn write_bytes(addr: u64, bytes: &[u8]) {
    for (i, &b) in bytes.iter().enumerate() {
        // SAFETY: the caller's contract.
        unsafe { core::ptr::write_volatile((addr + i as u64) as *mut u8, b) };
    }
}

/// Copies `bytes` to `addr` in one block (no order between bytes): for
/// fresh stubs and wrappers no thread can reach yet.
///
/// # Safety
/// `addr..addr + bytes.len()` must lie in a page made writable by a live
/// [`Writable`], and nothing may execute or jump to those bytes until the
/// caller publishes them.
pub unsafe fn write_fresh(addr: u64, bytes: &[u8]) {
    // SAFETY: the caller's contract; the source is a distinct slice.
    unsafe { core::ptr::copy_nonoverlapping(bytes.as_ptr(), addr as *mut u8, bytes.len()) };
}

/// Stores two bytes of code with one 16-bit store, which x86 makes atomic
/// (also for instruction fetch on other cores) when it does not cross a
/// cache line; a pair that straddles a line is written second byte first.
///
/// # Safety
/// `addr..addr + 2` must lie in a page made writable by a live
/// [`Writable`], and both the old and the new pair must be valid
/// instruction starts at `addr` for any thread that may execute it.
pub unsafe fn store2(addr: u64, pair: [u8; 2]) {
    let v = u16::from_le_bytes(pair);
    if addr % 64 != 63 {
        // SAFETY: the caller's contract; one aligned-enough 16-bit store.
        unsafe {
            core::arch::asm!(
                "mov word ptr [{a}], {v:x}",
                a = in(reg) addr,
                v = in(reg) v,
                options(nostack, preserves_flags),
            );
        }
    } else {
        // SAFETY: the caller's contract.
        unsafe {
            core::ptr::write_volatile((addr + 1) as *mut u8, pair[1]);
            core::ptr::write_volatile(addr as *mut u8, pair[0]);
        }
    }
}

/// Reads `N` bytes of (mapped, readable) code.
///
/// # Safety
/// `addr..addr + N` must be mapped and readable.
pub unsafe fn read<const N: usize>(addr: u64) -> [u8; N] {
    let mut b = [0u8; N];
    for (i, x) in b.iter_mut().enumerate() {
        // SAFETY: the caller's contract.
        *x = unsafe { core::ptr::read_volatile((addr + i as u64) as *const u8) };
    }
    b
}

/// Faults `len` bytes of writable pages at `addr` in at once (one system
/// call instead of one fault per page), before a large write such as the
/// call wrappers of a big program. Best effort: kernels without
/// `MADV_POPULATE_WRITE` (before 5.14) fault them in as they are written.
pub fn populate_write(addr: u64, len: u64) {
    const MADV_POPULATE_WRITE: libc::c_int = 23;
    // SAFETY: only faults in pages of a mapping the caller made writable;
    // populating changes no contents.
    unsafe { libc::madvise(addr as *mut libc::c_void, len as usize, MADV_POPULATE_WRITE) };
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The one-pass merge gives the runs of a sort-then-merge, for sorted
    /// ranges, sorted ranges with stragglers, and shuffled ones.
    #[test]
    fn page_runs_match_sorting_every_page() {
        let naive = |ranges: &[(u64, u64)]| {
            let mut pages: Vec<u64> = ranges
                .iter()
                .filter(|r| r.1 > 0)
                .flat_map(|&(a, n)| (a / PAGE..=(a + n - 1) / PAGE).map(|p| p * PAGE))
                .collect();
            pages.sort_unstable();
            pages.dedup();
            let mut runs: Vec<(u64, usize)> = vec![];
            for p in pages {
                match runs.last_mut() {
                    Some(r) if r.0 + r.1 as u64 == p => r.1 += PAGE as usize,
                    _ => runs.push((p, PAGE as usize)),
                }
            }
            runs
        };
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut rnd = move |m: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % m
        };
        for round in 0..200 {
            let n = 1 + rnd(300) as usize;
            let mut v: Vec<(u64, u64)> = (0..n)
                .map(|_| (0x40_0000 + rnd(64 * PAGE), rnd(3 * PAGE)))
                .collect();
            match round % 3 {
                0 => v.sort_unstable(),
                1 => {
                    v.sort_unstable();
                    v.push((0x10_0000 + rnd(8 * PAGE), 1 + rnd(4 * PAGE)));
                }
                _ => {}
            }
            assert_eq!(page_runs(&v), naive(&v), "{v:?}");
        }
    }
}
