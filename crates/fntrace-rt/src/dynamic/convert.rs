//! The `call __fentry__`s and `call mcount`s the start-up scan leaves to a
//! runtime thread ([`set_convert_later`]): which objects qualify,
//! converting them while the program runs ([`convert_pending`]), requests
//! that must see them converted first ([`settle`]), and the `fork` gate
//! that keeps a child from inheriting the locks the conversion holds. Part
//! of `dynamic`: it uses its registry, classification and call wrappers.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};

use super::sites::{self, Fixup, Layout, Site};
use super::write::{on_target, prologue_copy, stub_size, wrapper_of, wrappers};
use super::{Changed, Found, Object, REG, Registry, find_sites, read_code, wanted};
use crate::patch::{self, PatchError, int3, text};

/// Whether the first scan leaves objects whose only sites are hook calls
/// to [`convert_pending`] (see [`set_convert_later`]).
pub(super) static CONVERT_LATER: AtomicBool = AtomicBool::new(false);

/// Asks the first scan (at start-up, before a second thread runs the
/// program's code) not to rewrite the `call __fentry__` and `call mcount`
/// sites of an object whose sites are nothing else, but to leave them to
/// [`convert_pending`], which rewrites each call with the breakpoint
/// protocol while the program runs: a `call __fentry__` straight into the
/// jump to its call wrapper, a `call mcount` into a jump to a stub that
/// undoes the prologue before the wrapper ([`sites::mcount_undo`]). Until
/// then the hooks record those calls. This takes the classification, the
/// wrappers and the code writes of a large program (15–20 ms for 100,000
/// functions) off its start. Objects with one-byte NOP runs or patchable
/// entries are rewritten at start as before (a NOP run another thread may
/// be inside cannot change while the program runs).
///
/// `mcount_by_size`: an object with `call mcount`s is left to the thread
/// only if it has more than [`crate::config::LAZY_MCOUNT_SYMBOLS`]
/// symbols (a converted `call mcount` costs about 2 ns more per call
/// than a moved prologue, which a small object can afford to have
/// rewritten at start).
pub fn set_convert_later(on: bool, mcount_by_size: bool) {
    CONVERT_LATER.store(on, Ordering::Release);
    MCOUNT_BY_SIZE.store(mcount_by_size, Ordering::Release);
}

/// See [`set_convert_later`].
static MCOUNT_BY_SIZE: AtomicBool = AtomicBool::new(true);

/// Whether every listed entry of `f` is a hook call and it calls
/// `__fentry__` or `mcount` (what [`convert_pending`] can rewrite while the
/// program runs).
pub(super) fn deferrable(f: &Found) -> bool {
    !(f.mcount_slots.is_empty() && f.fentry_slots.is_empty())
        && (f.mcount_slots.is_empty()
            || !MCOUNT_BY_SIZE.load(Ordering::Acquire)
            || f.symbols > crate::config::LAZY_MCOUNT_SYMBOLS)
        && f.entries.iter().all(|&e| {
            let c = read_code(e, 2);
            c[0] == 0xe8 || c[..] == [0xff, 0x15]
        })
}

/// An object left to [`convert_pending`].
pub(super) struct Pending {
    pub(super) start: u64,
    pub(super) size: u64,
    pub(super) bias: u64,
    pub(super) path: PathBuf,
    pub(super) found: Found,
}

/// Converts now, on the calling thread, what start-up left to the runtime
/// thread if that thread has not taken it yet (a `fntrace live` request
/// then lists and switches every site). Returns as
/// [`convert_pending`], which it waits for if the runtime thread runs it.
pub fn settle() -> (Changed, usize, usize) {
    if has_pending() {
        convert_pending()
    } else {
        // Waits for a conversion in progress (it holds the registry).
        let reg = REG.lock().unwrap_or_else(|e| e.into_inner());
        (Changed::default(), reg.convert_failed, reg.left_to_hooks)
    }
}

/// Whether objects wait for [`convert_pending`].
pub fn has_pending() -> bool {
    !REG.lock()
        .unwrap_or_else(|e| e.into_inner())
        .pending
        .is_empty()
}

/// Rewrites the hook calls of the objects the first scan left pending
/// ([`set_convert_later`]) while the program runs: each call becomes a
/// jump (a 6-byte call: the jump and a one-byte NOP) if the rules select
/// it, a NOP otherwise, with the breakpoint protocol. A `call __fentry__`
/// jumps to its call wrapper; a `call mcount` to its undo stub
/// ([`sites::Layout::McountCall`]), which takes the thread back to the
/// state at the function's entry and jumps to the wrapper, whose body is
/// a copy of the prologue. A thread that traps on a site while it changes
/// resumes where the new state goes, or after the call (for a site
/// switched off: neither state records). A call made through the hook
/// before its site changed is recorded by the hooks, its exit by the
/// hijacked return, which still works after the change (the bytes after
/// the call, where a hook returns, never change). Holds the code lock and
/// the registry throughout, and `fork` waits for it (see `fork_gate`),
/// so that a child never inherits either lock held. Returns what changed,
/// how many objects kept some of their hook calls so far, by any caller
/// (not converted, or with `mcount` prologues that cannot be undone:
/// those calls stay with the hooks), and how many functions of converted
/// objects kept theirs.
pub fn convert_pending() -> (Changed, usize, usize) {
    let _gate = fork_gate::Held::take();
    let _code = patch::lock();
    let mut reg = REG.lock().unwrap_or_else(|e| e.into_inner());
    let mut total = Changed::default();
    for p in std::mem::take(&mut reg.pending) {
        let id = (p.start, p.path.clone());
        match convert_object(&mut reg, p) {
            Ok(c) => {
                total.on += c.on;
                total.off += c.off;
            }
            Err(e) => {
                reg.convert_failed += 1;
                crate::diag::diag!("fntrace: {e}");
                // Never scanned again: a later scan would take it for an
                // object just loaded, which may be rewritten without the
                // `int3` protocol.
                reg.none.push(id);
            }
        }
    }
    (total, reg.convert_failed, reg.left_to_hooks)
}

/// [`convert_pending`] for one object.
fn convert_object(reg: &mut Registry, p: Pending) -> Result<Changed, PatchError> {
    let Pending {
        start,
        size,
        bias,
        path,
        found,
    } = p;
    let what = path.display().to_string();
    let policy = found.policy.clone();
    let mut skipped = vec![];
    let sites = find_sites(
        start,
        size,
        bias,
        &path,
        found,
        &mut Some(true),
        &mut skipped,
    );
    // Only rewritten hook calls (a deferred object has no other sites);
    // a moved `call mcount` prologue becomes a switchable call when its
    // prologue can be undone, and stays with the hooks otherwise.
    let mut left = 0;
    let sites: Vec<Site> = sites
        .into_iter()
        .filter_map(|s| match (s.fixup, s.layout) {
            (Some(Fixup::Call5 | Fixup::Call6), _) => Some(s),
            (
                Some(Fixup::Move),
                Layout::Moved {
                    endbr,
                    prologue,
                    call,
                },
            ) if sites::mcount_undo(&read_code(s.addr, prologue.into())).is_some() => Some(Site {
                addr: s.addr + u64::from(prologue),
                func: s.func,
                layout: Layout::McountCall {
                    endbr,
                    prologue,
                    call,
                },
                fixup: Some(if call == 6 {
                    Fixup::Call6
                } else {
                    Fixup::Call5
                }),
            }),
            _ => {
                left += 1;
                None
            }
        })
        .collect();
    reg.left_to_hooks += left;
    if left > 0 {
        reg.convert_failed += 1;
    }
    let n = sites.len();
    let mut o = Object::new(
        (path, start, size, bias),
        sites,
        vec![int3::NOP5; n],
        vec![0; n],
        policy,
    );
    if n == 0 {
        reg.none.push((o.start, o.path));
        return Ok(Changed::default());
    }
    let want: Vec<bool> = o.sites.iter().map(|s| wanted(reg, &o, s)).collect();
    // `call mcount` sites: a stub each, the copy of the prologue the
    // wrapper calls (then a jump past the call), and the undo code the
    // site jumps to (then a jump to the wrapper).
    let undo = |s: &Site| match s.layout {
        Layout::McountCall { prologue, .. } => {
            let p = u64::from(prologue);
            sites::mcount_undo(&read_code(s.addr - p, p as usize))
        }
        _ => None,
    };
    let undo_len: Vec<usize> = o.sites.iter().map(|s| undo(s).map_or(0, |u| u.1)).collect();
    let stub_len = |k: usize| match o.sites[k].layout {
        Layout::McountCall { prologue, .. } if undo_len[k] > 0 => {
            stub_size(prologue, undo_len[k] + 5)
        }
        _ => 0,
    };
    let lens: Vec<u64> = (0..n).map(stub_len).collect();
    let total: u64 = lens.iter().sum();
    let area = if total > 0 {
        patch::stubs::area_near(o.start, o.start + o.size, total, &what)?
    } else {
        0
    };
    let mut next = area;
    for (k, &l) in lens.iter().enumerate() {
        if l > 0 {
            o.moved[k] = next;
            next += l;
        }
    }
    o.wrappers = wrappers(&o, &what)?;
    if total > 0 {
        let w = text::Writable::open([(area, total)], &what)?;
        text::populate_write(area, total);
        for (k, s) in o.sites.iter().enumerate() {
            let (Layout::McountCall { prologue, call, .. }, Some((u, ulen))) = (s.layout, undo(s))
            else {
                continue;
            };
            let (p, stub) = (u64::from(prologue), o.moved[k]);
            let mut code = [0xccu8; 128];
            let (copy, j) = prologue_copy(stub, s.addr - p, prologue, s.addr + u64::from(call));
            code[..j].copy_from_slice(&copy[..j]);
            code[j..j + ulen].copy_from_slice(&u[..ulen]);
            let j = j + ulen;
            code[j..j + 5].copy_from_slice(&sites::jmp5(stub + j as u64, wrapper_of(&o, k)));
            // SAFETY: our fresh mapping, writable through `w`; no site
            // jumps here until the pokes below.
            unsafe { text::write_fresh(stub, &code[..j + 5]) };
        }
        drop(w);
    }
    let len = |s: &Site| {
        if s.fixup == Some(Fixup::Call6) {
            6usize
        } else {
            5
        }
    };
    let resume: Vec<(u64, u64)> = o
        .sites
        .iter()
        .enumerate()
        .map(|(k, s)| {
            let to = if want[k] {
                on_target(&o, k)
            } else {
                s.addr + len(s) as u64
            };
            (s.addr, to)
        })
        .collect();
    if !int3::register(o.sites.iter().map(|s| s.addr).collect()) || !int3::register_resume(resume) {
        reg.skipped += n;
        return Err(PatchError::Code(format!(
            "{what}: {n} patchable sites not used (too many objects with 5-byte sites for the \
             breakpoint handler's table); the hooks record its calls"
        )));
    }
    let ranges: Vec<(u64, u64)> = o.sites.iter().map(|s| (s.addr, len(s) as u64)).collect();
    let w = text::Writable::open(&ranges, &what)?;
    let mut pokes = Vec::with_capacity(n);
    pokes.extend(o.sites.iter().enumerate().map(|(k, s)| {
        let mut b = [0x90u8; 6];
        b[..5].copy_from_slice(&if want[k] {
            sites::jmp5(s.addr, on_target(&o, k))
        } else {
            int3::NOP5
        });
        (s.addr, b, len(s))
    }));
    int3::poke(&w, &pokes);
    drop(w);
    let mut c = Changed::default();
    for (k, &on) in want.iter().enumerate() {
        o.on[k] = on;
        if on {
            c.on += 1;
        }
    }
    reg.objects.push(o);
    Ok(c)
}

/// Makes `fork` wait while [`convert_pending`] runs: a child forked in
/// the middle would inherit the code lock and the registry held by a
/// thread it does not have (its later `dlopen` or `fntrace live` request
/// would wait for ever), and sites holding `int3`s.
mod fork_gate {
    use std::cell::UnsafeCell;

    struct Gate(UnsafeCell<libc::pthread_mutex_t>);
    // SAFETY: the mutex is only used through the pthread functions, which
    // synchronise.
    unsafe impl Sync for Gate {}

    static GATE: Gate = Gate(UnsafeCell::new(libc::PTHREAD_MUTEX_INITIALIZER));
    static INSTALL: std::sync::Once = std::sync::Once::new();

    extern "C" fn lock() {
        // SAFETY: a static, initialised mutex.
        unsafe { libc::pthread_mutex_lock(GATE.0.get()) };
    }

    extern "C" fn unlock() {
        // SAFETY: the forking thread locked it in `lock` (in the child it
        // is the same thread).
        unsafe { libc::pthread_mutex_unlock(GATE.0.get()) };
    }

    /// The gate, held while alive.
    pub(super) struct Held;

    impl Held {
        /// Installs the `fork` handlers once and takes the gate.
        pub(super) fn take() -> Held {
            INSTALL.call_once(|| {
                // SAFETY: handlers that only lock and unlock a static mutex.
                unsafe { libc::pthread_atfork(Some(lock), Some(unlock), Some(unlock)) };
            });
            lock();
            Held
        }
    }

    impl Drop for Held {
        fn drop(&mut self) {
            unlock();
        }
    }
}
