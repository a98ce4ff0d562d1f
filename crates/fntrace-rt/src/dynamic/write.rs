//! Writing a loaded object's code and the code fntrace adds for it: the
//! fix-ups that turn one-byte NOP runs and compiler hook calls into
//! switchable layouts at start ([`fix_up`]), the stubs holding moved
//! prologues, the call wrappers ([`wrappers`]), and switching sites on and
//! off ([`switch`]: in place while no other thread exists, with the `int3`
//! protocol otherwise). Part of `dynamic`: the registry and the selection
//! rules decide what this module writes.

use super::sites::{self, Fixup, Layout, Site};
use super::{Changed, Object, read_code, single_threaded};
use crate::calls::wrapper;
use crate::patch::{self, PatchError, int3, text};

/// Rewrites one-byte NOP runs and compiler hook calls into switchable
/// layouts; returns, by site, the stub holding a moved prologue (0 for
/// sites that have none).
pub(super) fn fix_up(
    found: &[Site],
    path: &std::path::Path,
    start: u64,
    size: u64,
) -> Result<Vec<u64>, PatchError> {
    let what = path.display().to_string();
    let mut moved = vec![0u64; found.len()];
    // The bytes each fix-up writes (an iterator, not a list: a large
    // program has 100,000 sites, and every page of a list is a fault).
    let ranges = || {
        found.iter().filter_map(|s| match (s.fixup?, s.layout) {
            (Fixup::Call6, _) => Some((s.addr, 6)),
            (Fixup::Bracket { lead: false }, _) => Some((s.addr, 9)),
            (Fixup::Bracket { lead: true }, _) => Some((s.addr - 4, 13)),
            (Fixup::Move, Layout::Moved { prologue, call, .. }) => {
                Some((s.addr, u64::from(prologue) + u64::from(call)))
            }
            _ => Some((s.addr, 5)),
        })
    };
    if ranges().next().is_none() {
        return Ok(moved);
    }
    // Moved prologues: a stub per site, packed (the prologue, at most 47
    // bytes, and a jump back past the call, rounded up to 16 bytes: a
    // large program has 100,000 of them, and every page of stubs is a
    // page fault at start-up and a page to free at exit).
    let stub_len = |s: &Site| match (s.fixup, s.layout) {
        (Some(Fixup::Move), Layout::Moved { prologue, .. }) => stub_size(prologue, 0),
        _ => 0,
    };
    let total: u64 = found.iter().map(stub_len).sum();
    let area = if total > 0 {
        patch::stubs::area_near(start, start + size, total, &what)?
    } else {
        0
    };
    let w = text::Writable::open(ranges().chain((total > 0).then_some((area, total))), &what)?;
    // Every page written below, made private and writable in one call per
    // run instead of a fault per page.
    for &(a, n) in w.runs() {
        text::populate_write(a, n as u64);
    }
    let mut next = area;
    // No other thread runs (the caller checked), and no signal handler of
    // the program runs on this one while a site is half written.
    crate::procinfo::with_async_signals_blocked(|| {
        for (k, s) in found.iter().enumerate() {
            if let (Some(Fixup::Move), Layout::Moved { prologue, call, .. }) = (s.fixup, s.layout) {
                let (p, c) = (u64::from(prologue), u64::from(call));
                let stub = next;
                next += stub_len(s);
                let (code, len) = prologue_copy(stub, s.addr, prologue, s.addr + p + c);
                // SAFETY: our fresh mapping, writable through `w`; nothing
                // jumps to it yet.
                unsafe { text::write_fresh(stub, &code[..len]) };
                // The function now starts with a jump to the stub (the
                // site's off state); the rest of the old prologue and the
                // call are never executed again and become `int3`s.
                let mut head = [0xccu8; 64];
                head[..5].copy_from_slice(&sites::jmp5(s.addr, stub));
                // SAFETY: writable (`w`); no other thread can be inside
                // these bytes (the caller checked: one thread, or an object
                // just loaded), so none decodes them while they change.
                unsafe { text::write_bytes(s.addr, &head[..(p + c) as usize]) };
                moved[k] = stub;
                continue;
            }
            let call6 = [
                int3::NOP5[0],
                int3::NOP5[1],
                int3::NOP5[2],
                int3::NOP5[3],
                int3::NOP5[4],
                0x90,
            ];
            // `endbr64`, the site's NOP, a 4-byte NOP over the pop.
            let mut bracket = [0u8; 13];
            bracket[..4].copy_from_slice(&sites::ENDBR64);
            bracket[4..9].copy_from_slice(&int3::NOP5);
            bracket[9..].copy_from_slice(&sites::NOP4);
            let (at, bytes): (u64, &[u8]) = match s.fixup {
                Some(Fixup::Nop5 | Fixup::Call5) => (s.addr, &int3::NOP5),
                Some(Fixup::Call6) => (s.addr, &call6),
                Some(Fixup::Bracket { lead: false }) => (s.addr, &bracket[4..]),
                Some(Fixup::Bracket { lead: true }) => (s.addr - 4, &bracket),
                Some(Fixup::Nop2) => (s.addr, &sites::PREFIX_OFF),
                Some(Fixup::Move) | None => continue,
            };
            // SAFETY: the pages are writable (`w`) and no other thread can
            // be inside these NOP runs or calls (the caller checked: one
            // thread, or an object just loaded), so no thread decodes the
            // bytes while they change. The new bytes keep every
            // instruction boundary a thread could return to (after a 5- or
            // 6-byte call).
            unsafe { text::write_bytes(at, bytes) };
        }
    });
    drop(w);
    Ok(moved)
}

/// Where the body of site `k` of `o` continues after the site (for a
/// moved prologue: the stub that runs it). A rewritten 6-byte call
/// continues after its 6 bytes: at start-up its last byte became a NOP,
/// but one converted while the program runs may still hold the old byte
/// there while a thread that trapped on the site goes through the wrapper.
pub(super) fn body(o: &Object, k: usize) -> u64 {
    let s = &o.sites[k];
    match s.layout {
        Layout::Nop5 { .. } if s.fixup == Some(Fixup::Call6) => s.addr + 6,
        Layout::Nop5 { .. } if matches!(s.fixup, Some(Fixup::Bracket { .. })) => s.addr + 9,
        Layout::Nop5 { .. } => s.addr + 5,
        Layout::Prefix => s.addr + 2,
        Layout::Moved { .. } | Layout::McountCall { .. } => o.moved[k],
    }
}

/// Where site `k` of `o` jumps when on: its call wrapper, or for a
/// converted `call mcount` ([`Layout::McountCall`]) the undo code after
/// the prologue's copy in its stub, which jumps to the wrapper.
pub(super) fn on_target(o: &Object, k: usize) -> u64 {
    match o.sites[k].layout {
        Layout::McountCall { prologue, .. } => o.moved[k] + u64::from(prologue) + 5,
        _ => wrapper_of(o, k),
    }
}

/// The call wrapper of site `k` of `o` (once [`wrappers`] wrote them).
pub(super) fn wrapper_of(o: &Object, k: usize) -> u64 {
    o.wrappers + k as u64 * wrapper::SIZE
}

/// Bytes of a stub that holds a `prologue`-byte copy and the jump back,
/// then `extra` bytes (a converted `call mcount`'s undo code and its jump
/// to the wrapper), rounded up to 16: a large program has 100,000 stubs,
/// and every page of them is a fault to take and a page to free.
pub(super) fn stub_size(prologue: u8, extra: usize) -> u64 {
    (u64::from(prologue) + 5 + extra as u64).next_multiple_of(16)
}

/// The start of a stub at `stub`: a copy of the `prologue` bytes of code
/// at `at`, then a `jmp` to `back`. Returns the bytes and their length
/// (at most 44: the classifier moves prologues shorter than 40 bytes).
pub(super) fn prologue_copy(stub: u64, at: u64, prologue: u8, back: u64) -> ([u8; 64], usize) {
    let p = usize::from(prologue);
    let mut code = [0xccu8; 64];
    code[..p].copy_from_slice(&read_code(at, p));
    code[p..p + 5].copy_from_slice(&sites::jmp5(stub + p as u64, back));
    (code, p + 5)
}

/// The function key a site's wrapper records: the function's start, or
/// for a `call mcount` converted while the program runs
/// ([`Layout::McountCall`]) the address after the call (what the `mcount`
/// hook records, gprof's `selfpc`), so that calls recorded by the hook
/// before the site was converted and by the wrapper after it are one
/// function. (A prologue moved at start is never mixed with hook calls:
/// its calls are all recorded by the wrapper.)
fn key_of(s: &Site) -> u64 {
    match s.layout {
        Layout::McountCall { call, .. } => s.addr + u64::from(call),
        _ => s.func,
    }
}

/// Maps and writes the call wrappers of every site of `o` (once, before
/// any site is switched on); returns the address of the first.
pub(super) fn wrappers(o: &Object, what: &str) -> Result<u64, PatchError> {
    use crate::calls::tramp;
    let len = o.sites.len() as u64 * wrapper::SIZE;
    let area = patch::stubs::area_near(o.start, o.start + o.size, len, what)?;
    if !wrapper::register_area(area, len) {
        return Err(PatchError::Code(format!(
            "{what}: too many objects with patchable sites"
        )));
    }
    let near = |t: u64| patch::stubs::stub(t, area, area + len, what);
    let enter = near(tramp::fntrace_site_entry as *const () as u64)?;
    let exit = near(tramp::fntrace_site_exit as *const () as u64)?;
    let _w = text::Writable::open([(area, len)], what)?;
    text::populate_write(area, len);
    for (k, s) in o.sites.iter().enumerate() {
        let at = area + k as u64 * wrapper::SIZE; // `wrapper_of` once published
        // SAFETY: our fresh mapping, writable through `_w`; no site jumps
        // here yet.
        unsafe { text::write_fresh(at, &wrapper::code(at, key_of(s), body(o, k), enter, exit)) };
    }
    Ok(area)
}

/// Switches the sites of `o` whose state differs from `want`.
pub(super) fn switch(o: &mut Object, want: &[bool]) -> Result<Changed, PatchError> {
    let what = o.path.display().to_string();
    // Sites to change, by index (iterated, not listed: a large program's
    // start-up switches 100,000 sites, and every page of a list is a
    // fault).
    let n = o.sites.len();
    if (0..n).all(|k| o.on[k] == want[k]) {
        return Ok(Changed::default());
    }
    if o.wrappers == 0 {
        o.wrappers = wrappers(o, &what)?;
        crate::diag::step("wrappers");
    }
    let w = {
        let o = &*o;
        text::Writable::open(
            (0..n).filter(|&k| o.on[k] != want[k]).map(|k| {
                let s = o.sites[k];
                match s.layout {
                    Layout::Nop5 { .. } | Layout::Moved { .. } | Layout::McountCall { .. } => {
                        (s.addr, 5)
                    }
                    Layout::Prefix => (s.func - 7, s.addr + 2 - (s.func - 7)),
                }
            }),
            &what,
        )?
    };
    crate::diag::step("writable");
    // Prefix sites: the prefix first (unreachable while the entry holds
    // its 2-byte NOP), every core serialised, then the 2-byte switches.
    let mut wrote_prefix = false;
    for (k, &on) in want.iter().enumerate() {
        let s = o.sites[k];
        if o.on[k] != on && (s.layout, on, o.prefixed[k]) == (Layout::Prefix, true, false) {
            // SAFETY: the prefix lies before the function, is never
            // executed while the switch holds `66 90`, and is writable.
            unsafe { text::write_bytes(s.func - 7, &sites::prefix7(s.func, wrapper_of(o, k))) };
            o.prefixed[k] = true;
            wrote_prefix = true;
        }
    }
    if wrote_prefix {
        patch::sync::serialize_all(w.runs()[0].0);
    }
    // The 5 bytes a site of the other layouts gets.
    let poke = |o: &Object, k: usize| -> Option<(u64, [u8; 5])> {
        let a = o.sites[k].addr;
        let new = match o.sites[k].layout {
            Layout::Prefix => return None,
            _ if want[k] => sites::jmp5(a, on_target(o, k)),
            Layout::Nop5 { .. } => o.nop[k],
            Layout::Moved { .. } => sites::jmp5(a, o.moved[k]),
            Layout::McountCall { .. } => int3::NOP5,
        };
        Some((a, new))
    };
    for (k, &on) in want.iter().enumerate() {
        let s = o.sites[k];
        if o.on[k] != on && s.layout == Layout::Prefix {
            let pair = if on {
                sites::prefix_on(s.func, s.addr)
            } else {
                sites::PREFIX_OFF
            };
            // SAFETY: writable; both pairs are whole instructions at the
            // entry (`66 90`, or a short jump to the finished prefix).
            unsafe { text::store2(s.addr, pair) };
        }
    }
    if single_threaded() {
        // No other thread can decode a site while it changes, and no
        // signal handler runs on this one meanwhile: each site is written
        // in place, without the `int3` protocol and its serialisations
        // (a large program's start-up: 100,000 sites).
        let o = &*o;
        crate::procinfo::with_async_signals_blocked(|| {
            for (a, new) in (0..n)
                .filter(|&k| o.on[k] != want[k])
                .filter_map(|k| poke(o, k))
            {
                // SAFETY: writable (`w`); see above.
                unsafe { text::write_bytes(a, &new) };
            }
        });
    } else {
        let pokes: Vec<(u64, [u8; 5])> = (0..n)
            .filter(|&k| o.on[k] != want[k])
            .filter_map(|k| poke(o, k))
            .collect();
        int3::poke5(&w, &pokes);
    }
    let mut c = Changed::default();
    for (k, &on) in want.iter().enumerate() {
        if o.on[k] == on {
            continue;
        }
        o.on[k] = on;
        if on {
            c.on += 1;
        } else {
            c.off += 1;
        }
    }
    Ok(c)
}
