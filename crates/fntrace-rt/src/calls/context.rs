//! User-level context switches (`ucontext` coroutines, green threads):
//! `swapcontext` and `setcontext` are interposed so that the shadow stack
//! follows the context that runs. Every shadow frame is a call of the
//! context running on the thread; without this, a switch back to the
//! caller of `swapcontext` made the frames of the context switched from
//! look unwound (they were popped, their slots still holding the exit
//! trampoline), and the first of them to return aborted the program.
//!
//! - `swapcontext(from, to)` moves the thread's frames into the
//!   interposed function's own stack frame (`Suspended`, on the stack of
//!   the context being left), records the exits of its recorded calls
//!   after an `EXT_SUSPEND` record, switches, and when the context runs
//!   again (its `swapcontext` returns, on any thread) puts them back and
//!   records entries after an `EXT_RESUME` record: a call suspended across
//!   a switch appears in pieces, each piece inside what the thread was
//!   doing while it ran.
//! - `setcontext(to)` never returns. When `to` was saved by `getcontext`
//!   further up the running stack (a retry loop, an error exit), it is a
//!   `longjmp`: the frames below its stack pointer are closed, the others
//!   stay. Otherwise the frames of the context left get their original
//!   return addresses back and their exits (suspended); if that context
//!   runs again, it returns normally, untraced until its next traced call.
//! - A context started by `makecontext` begins with no frames; when its
//!   function returns, glibc switches to `uc_link` internally (not through
//!   the interposed functions), which is fine: by then its frames have
//!   returned.
//!
//! Switches that do not go through these functions (hand-written
//! assembly such as Boost.Context's `jump_fcontext`) are not seen.

use core::ffi::{c_int, c_void};
use core::sync::atomic::{Ordering, compiler_fence};

use fntrace_format::event::Framed;

use super::entry::{held_by_us, pop_frames};
use super::unwind::Next;
use crate::features;
use crate::recorder::shadow::{F_HIJACKED, F_NOTRACE, F_RECORDED, F_SLOT, F_TRACE, Frame};
use crate::recorder::{self, SESSION, ThreadState, with_state};

/// Frames kept inline in a [`Suspended`] (more go to a mapping of their
/// own).
const INLINE_FRAMES: usize = 16;

/// The shadow frames of a user-level context suspended by `swapcontext`,
/// kept in the interposed function's own stack frame on that context's
/// stack until it runs again (a context that is never resumed takes them
/// with its stack; only a context suspended with more than
/// [`INLINE_FRAMES`] open frames leaves a mapping behind then).
pub(crate) struct Suspended {
    inline: [Frame; INLINE_FRAMES],
    /// Frames kept (oldest first).
    n: usize,
    /// More than [`INLINE_FRAMES`]: all of them in a mapping of
    /// `map_len` bytes.
    map: *mut Frame,
    map_len: usize,
}

impl Suspended {
    /// Nothing kept.
    pub(crate) const fn new() -> Suspended {
        Suspended {
            inline: [Frame::new(0, 0, 0, 0); INLINE_FRAMES],
            n: 0,
            map: core::ptr::null_mut(),
            map_len: 0,
        }
    }

    fn frames(&self) -> &[Frame] {
        if self.map.is_null() {
            &self.inline[..self.n]
        } else {
            // SAFETY: `n` frames were copied into the mapping by `suspend`.
            unsafe { core::slice::from_raw_parts(self.map, self.n) }
        }
    }
}

/// The calling thread leaves its user-level context for another one
/// (`swapcontext`): its shadow frames, all on the context being left, are
/// moved into `keep` and their recorded calls get their exits now, after a
/// record saying that they are suspended, not returning. The context
/// switched to starts with an empty shadow stack (a fresh `makecontext`
/// context) or takes its own frames back ([`resume`]). The slots stay
/// taken over: nothing returns through them before [`resume`].
pub(crate) fn suspend(keep: &mut Suspended) {
    with_state(|t| {
        if t.busy {
            // A signal handler that switches contexts while the recorder
            // was interrupted: the frames stay (nothing is moved).
            return;
        }
        let n = t.shadow.len;
        if n == 0 {
            return;
        }
        t.busy = true;
        compiler_fence(Ordering::SeqCst);
        if n <= INLINE_FRAMES {
            keep.inline[..n].copy_from_slice(t.shadow.frames());
        } else {
            let len = (n * core::mem::size_of::<Frame>()).next_multiple_of(4096);
            // SAFETY: an anonymous private mapping at a kernel-chosen
            // address touches no existing memory.
            let p = unsafe {
                libc::mmap(
                    core::ptr::null_mut(),
                    len,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                    -1,
                    0,
                )
            };
            if p == libc::MAP_FAILED {
                // Nowhere to keep them: give the slots their return
                // addresses back; the calls end here in the trace.
                unhijack(t.shadow.frames());
                let record = t.session != 0 && t.session == SESSION.load(Ordering::Relaxed);
                pop_frames(t, 0, record);
                compiler_fence(Ordering::SeqCst);
                t.busy = false;
                return;
            }
            let map: *mut Frame = p.cast();
            // SAFETY: `len` bytes hold `n` frames; the source is the
            // thread's shadow stack, which does not overlap a new mapping.
            unsafe { core::ptr::copy_nonoverlapping(t.shadow.frames().as_ptr(), map, n) };
            keep.map = map;
            keep.map_len = len;
        }
        keep.n = n;
        leave(t, false);
        compiler_fence(Ordering::SeqCst);
        t.busy = false;
    })
}

/// The context whose frames [`suspend`] kept in `keep` runs again (its
/// `swapcontext` returned), on this thread or another one: the frames go
/// back on the thread's shadow stack on top of what it holds (normally
/// nothing: whoever switched here went through `swapcontext` too), and
/// their recorded calls get entries now, after a record saying that they
/// continue. Frames that do not fit get their return addresses back.
pub(crate) fn resume(keep: &mut Suspended) {
    if keep.n == 0 {
        return;
    }
    with_state(|t| {
        let was_busy = t.busy;
        // A thread that runs a resumed context for the first time attaches
        // here (its first event).
        let attached = !was_busy
            && (t.session == SESSION.load(Ordering::Relaxed) && t.session != 0
                || recorder::attach_slow(t));
        t.busy = true;
        compiler_fence(Ordering::SeqCst);
        if attached {
            note_switch(t, recorded(keep.frames()), true);
        }
        for &f in keep.frames() {
            let mut f = f;
            if !t.shadow.has_room() {
                unhijack(core::slice::from_ref(&f));
                continue;
            }
            if f.flags & F_TRACE != 0 {
                t.trace_regions += 1;
            }
            if f.flags & F_NOTRACE != 0 {
                t.notrace_regions += 1;
            }
            if f.flags & crate::recorder::shadow::F_BASE != 0 {
                t.depth_base += 1;
            }
            if f.flags & F_RECORDED != 0 {
                if attached {
                    recorder::record_entry_inner(t, f.func);
                } else {
                    f.flags &= !F_RECORDED;
                }
            }
            t.shadow.push(f);
        }
        if !keep.map.is_null() {
            // SAFETY: the mapping `suspend` made, no longer used.
            unsafe { libc::munmap(keep.map.cast(), keep.map_len) };
            keep.map = core::ptr::null_mut();
        }
        keep.n = 0;
        compiler_fence(Ordering::SeqCst);
        t.busy = was_busy;
    })
}

/// The calling thread leaves its user-level context for good or for a
/// context saved elsewhere (`setcontext`): nothing says whether or where
/// the context left runs again, so its frames' slots get their original
/// return addresses back (it returns normally if it is ever resumed) and
/// their recorded calls get their exits now, after a record saying that
/// they are suspended. A context resumed this way runs untraced until its
/// next traced call.
pub(crate) fn abandon_context() {
    with_state(|t| {
        if t.busy || t.shadow.len == 0 {
            return;
        }
        t.busy = true;
        compiler_fence(Ordering::SeqCst);
        leave(t, true);
        compiler_fence(Ordering::SeqCst);
        t.busy = false;
    })
}

/// The thread leaves its context (it holds `busy`): the record saying so,
/// the exits of its recorded frames, every frame popped; `give_back`: the
/// taken-over slots get their return addresses back first.
fn leave(t: &mut ThreadState, give_back: bool) {
    let record = t.session != 0 && t.session == SESSION.load(Ordering::Relaxed);
    if record {
        let calls = recorded(t.shadow.frames());
        note_switch(t, calls, false);
    }
    if give_back {
        unhijack(t.shadow.frames());
    }
    pop_frames(t, 0, record);
}

/// Writes the context-switch record for the recorded calls of `frames`
/// that the exits (or, `resumed`, the entries) about to be written
/// suspend (or continue); none under the record-time time filter, whose
/// held-back calls it would flush.
fn note_switch(t: &mut ThreadState, calls: u64, resumed: bool) {
    if calls > 0 && features::features() & features::FEAT_TIME == 0 {
        recorder::write_record(t, false, |_| Framed::ContextSwitch { resumed, calls });
    }
}

/// The recorded calls among `frames`.
fn recorded(frames: &[Frame]) -> u64 {
    frames.iter().filter(|f| f.flags & F_RECORDED != 0).count() as u64
}

/// Gives every taken-over slot of `frames` its original return address
/// back (newest first), where it still holds what this runtime put there.
fn unhijack(frames: &[Frame]) {
    #[cfg(feature = "compiler-hooks")]
    let tramp = super::tramp::exit_trampoline_addr();
    #[cfg(not(feature = "compiler-hooks"))]
    let tramp = 0;
    for f in frames.iter().rev() {
        if f.flags & (F_SLOT | F_HIJACKED) != F_SLOT | F_HIJACKED {
            continue;
        }
        let slot = f.slot as *mut u64;
        // SAFETY: the slot is a return-address slot of a frame of the
        // context being left (this thread's current stack, live), written
        // only if it still holds what was put there.
        unsafe {
            if held_by_us(slot.read(), f, tramp) {
                slot.write(f.ret);
            }
        }
    }
}

static SWAPCONTEXT: Next = Next::new(b"swapcontext\0");
static SETCONTEXT: Next = Next::new(b"setcontext\0");

/// Interposed `swapcontext`: the frames of the context being left wait in
/// this function's frame (on that context's stack) until it runs again.
///
/// # Safety
/// As `swapcontext`: `from` and `to` are valid `ucontext_t`s, `to` was
/// filled by `getcontext`/`makecontext`/`swapcontext`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn swapcontext(from: *mut c_void, to: *const c_void) -> c_int {
    let mut keep = Suspended::new();
    suspend(&mut keep);
    // SAFETY: the real function has this signature; the caller's contexts.
    let r = unsafe {
        let f: unsafe extern "C" fn(*mut c_void, *const c_void) -> c_int =
            core::mem::transmute(SWAPCONTEXT.get());
        f(from, to)
    };
    // Back in this context (or the switch failed at once).
    resume(&mut keep);
    r
}

/// Interposed `setcontext`: a context saved further up the same stack is
/// jumped to as by `longjmp` (the frames below it are closed); any other
/// context being left gets its return addresses back and its recorded
/// calls their exits.
///
/// # Safety
/// As `setcontext`: `to` is a valid `ucontext_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn setcontext(to: *const c_void) -> c_int {
    // SAFETY: the caller's contract: `to` is a valid `ucontext_t`.
    let target =
        unsafe { (*to.cast::<libc::ucontext_t>()).uc_mcontext.gregs[libc::REG_RSP as usize] }
            as u64;
    let here_mark = 0u8;
    let here = core::ptr::addr_of!(here_mark) as u64;
    if target >= here && target - here < 1 << 30 {
        // A context saved by `getcontext` further up this stack: as a
        // `longjmp` there, the frames below it are gone.
        super::entry::jumping_to(target);
    } else {
        abandon_context();
    }
    // SAFETY: the real function has this signature; the caller's context.
    unsafe {
        let f: unsafe extern "C" fn(*const c_void) -> c_int =
            core::mem::transmute(SETCONTEXT.get());
        f(to)
    }
}
