//! The call protocol every mechanism that must observe exits shares:
//! entries that push a shadow frame (and hijack the return address, or
//! wait for an explicit exit), exits through the exit trampoline or
//! announced explicitly, popping frames skipped by `longjmp` or unwound
//! by an exception, and putting return addresses back for unwinders and
//! backtraces. Filter, argument and counting decisions are asked of the
//! policy layer; events are written by the sink (`recorder`).
//!
//! Unwound frames. Every shadow frame has a stack mark (its return-address
//! slot, or the stack pointer of its entry event), and a callee's mark is
//! below its caller's. Frames that an exception, a panic or `longjmp`
//! leaves are closed (their exits recorded) at the first of:
//! - the landing pad being installed (`_Unwind_SetIP`, [`landing`]):
//!   the frames whose marks are below the landing frame's stack pointer
//!   (the frames left are taken over again there and then);
//! - the next entry on the thread (a frame whose mark is at or below the
//!   new frame's cannot be its caller) or the next exit (frames below the
//!   exiting one's mark). The assembly fast path only compares the newest
//!   frame's mark and leaves the rest to `pop_dead`.
//!
//! Marks are only compared on the same stack: a signal handler running on
//! a `sigaltstack` above the thread's stack does not close the frames it
//! interrupted, and frames left on the alternate stack (a handler that
//! threw or `siglongjmp`ed out) are closed once an event comes from
//! outside it.

use std::sync::atomic::{Ordering, compiler_fence};

use fntrace_format::event::Framed;

use crate::recorder::shadow::{
    self, F_HIJACKED, F_NOTRACE, F_RECORDED, F_RETVAL, F_SLOT, F_TRACE, Frame,
};
use crate::recorder::{self, SESSION, ThreadState, state, with_state};
use crate::{args, count, features, filter};

/// Entries that took the Rust path (for the fast-path test in `hooks`).
#[cfg(test)]
pub(crate) static RUST_ENTRIES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Whether a call of `func` is recorded given the thread's filter regions,
/// and the filter flags its shadow frame gets. `off`: the class bit
/// (`filter::OFF_*`) that keeps this mechanism's calls of a function out.
#[inline(always)]
fn hook_decision(t: &ThreadState, func: u64, feat: u32, off: u8) -> (bool, u32) {
    if feat & features::FEAT_FILTERS == 0 {
        return (
            feat & features::FEAT_DEPTH == 0 || filter::depth_ok(recorder::open_depth(t)),
            0,
        );
    }
    let class = filter::classify(func);
    if class & off != 0 {
        return (false, 0);
    }
    let class = class & filter::REGION;
    let mut flags = 0;
    if class == filter::NOTRACE {
        flags |= F_NOTRACE;
    }
    if class == filter::TRACE {
        flags |= F_TRACE;
    }
    let inside = !filter::has_trace_filters() || t.trace_regions > 0 || class == filter::TRACE;
    let record = inside && t.notrace_regions == 0 && class != filter::NOTRACE;
    (record && filter::depth_ok(recorder::open_depth(t)), flags)
}

/// Entry of a function whose exit is observed by replacing the return
/// address in `slot` with `tramp` (mcount, fentry, patchable entries).
/// `regs` points at the trampoline's saved registers (rdi, rsi, rdx, rcx,
/// r8, r9 at word offsets [`REG_ARGS`]..+6) where the arguments are
/// intact (fentry-style entries), or is null.
///
/// # Safety
/// `slot` must be the address of the live return-address slot of the
/// function being entered, `tramp` an exit trampoline that ends in
/// [`hook_exit`], and `regs` null or valid for reads of the save area.
#[inline(always)]
pub unsafe fn hook_entry(func: u64, slot: *mut u64, tramp: u64, regs: *const u64) {
    #[cfg(test)]
    RUST_ENTRIES.fetch_add(1, Ordering::Relaxed);
    let t = state();
    let feat = features::features();
    if feat & features::FEAT_COUNT != 0 {
        if !t.busy {
            t.busy = true;
            // SAFETY: as below, `slot` is the live return-address slot.
            count::count(&mut t.arcs, unsafe { slot.read() }, func);
            t.busy = false;
        }
        return;
    }
    let sid = SESSION.load(Ordering::Relaxed);
    // A thread that never attached has session 0, like "no session".
    if (t.session != sid || sid == 0 || t.busy) && !recorder::attach_slow(t) {
        return;
    }
    t.busy = true;
    compiler_fence(Ordering::SeqCst);
    // Dead frames first: a dead frame's slot may hold the new call's
    // return address, equal to its own `ret` (the same call site), which
    // `resync` would take for a live frame.
    if t.shadow.top_mark() <= slot as u64 {
        pop_dead(t, slot as u64, Some(tramp), false);
    }
    if t.shadow.restored && t.shadow.walking == 0 {
        resync(t, tramp);
    }
    // mcount passes no registers (its hook runs after the prologue);
    // `__fentry__` and call wrappers do.
    let off = if regs.is_null() {
        filter::OFF_MCOUNT
    } else {
        filter::OFF_FENTRY
    };
    let (record, flags) = hook_decision(t, func, feat, off);
    if (record || flags != 0) && t.shadow.has_room() {
        // SAFETY: by the caller's contract `slot` is the live return
        // slot of the function being entered, on this thread's stack.
        let ret = unsafe { slot.read() };
        let mut flags = flags;
        if record {
            recorder::record_entry_inner(t, func);
            if feat & features::FEAT_ARGS != 0 {
                // SAFETY: the caller's contract on `regs`.
                flags |= unsafe { capture_args(t, func, regs) };
            }
        }
        if flags & F_TRACE != 0 {
            t.trace_regions += 1;
        }
        if flags & F_NOTRACE != 0 {
            t.notrace_regions += 1;
        }
        let rec = if record { F_RECORDED } else { 0 };
        t.shadow.push(Frame::new(
            ret,
            slot as u64,
            func,
            flags | rec | F_HIJACKED | F_SLOT,
        ));
        // SAFETY: as above; the original is kept in the shadow frame.
        unsafe { slot.write(tramp) };
    } else if record {
        // Too deep for the shadow stack: not recorded, counted.
        t.lost += 1;
        recorder::too_deep(t);
    }
    compiler_fence(Ordering::SeqCst);
    t.busy = false;
}

/// Word offset of the saved rdi in a trampoline's save area (rsi, rdx,
/// rcx, r8, r9 follow).
pub const REG_ARGS: usize = 17;

/// Writes the `-A` arguments of a just-recorded entry; returns
/// [`F_RETVAL`] if its return value is to be recorded.
///
/// # Safety
/// `regs` is null or valid for reads of 6 words at [`REG_ARGS`].
#[cold]
unsafe fn capture_args(t: &mut ThreadState, func: u64, regs: *const u64) -> u32 {
    let m = args::mask(func);
    if m & 0x3f != 0 && regs.is_null() {
        no_registers_here();
    }
    if m & 0x3f != 0 && !regs.is_null() {
        let mut vals = [0i64; 6];
        let mut n = 0;
        for (i, v) in vals.iter_mut().enumerate() {
            if m & (1 << i) != 0 {
                // SAFETY: the caller's contract.
                *v = unsafe { regs.add(REG_ARGS + i).read() } as i64;
                n = i + 1;
            }
        }
        // Arguments up to the highest one asked for (the record holds a
        // prefix of the argument list).
        recorder::write_record(t, false, |_| Framed::Args { values: &vals[..n] });
    }
    if m & args::RETVAL != 0 { F_RETVAL } else { 0 }
}

/// Says once that `-A`/`-R` selected a function whose hook cannot see
/// what was asked: an explicit-exit mechanism (XRay,
/// `-finstrument-functions`: no arguments, no return value) or a `call
/// mcount` kept as a call (its hook runs after the prologue: no
/// arguments; `-F`/`-N` keep the calls).
#[cold]
fn no_registers_here() {
    static SAID: core::sync::atomic::AtomicBool = core::sync::atomic::AtomicBool::new(false);
    if !SAID.swap(true, Ordering::Relaxed) {
        crate::diag::diag!(
            "fntrace: -A/-R: a function they select is instrumented by XRay or \
             -finstrument-functions (whose hooks see neither arguments nor return values) \
             or by a `call mcount` kept as a call (after the prologue: no arguments): not \
             captured there (fentry, patchable entries and rewritten mcount calls can)"
        );
    }
}

/// Pops shadow frames `from..` (newest first), recording the exits of the
/// recorded ones (if `record`) and leaving their filter regions.
#[inline(always)]
pub(super) fn pop_frames(t: &mut ThreadState, from: usize, record: bool) {
    while t.shadow.len > from {
        let top = t.shadow.len - 1;
        let f = t.shadow.frames()[top];
        t.shadow.len = top;
        if f.flags & F_TRACE != 0 {
            t.trace_regions = t.trace_regions.saturating_sub(1);
        }
        if f.flags & F_NOTRACE != 0 {
            t.notrace_regions = t.notrace_regions.saturating_sub(1);
        }
        if record && f.flags & F_RECORDED != 0 {
            recorder::exit_inner(t);
        }
        if f.flags & shadow::F_BASE != 0 {
            t.depth_base = t.depth_base.saturating_sub(1);
        }
    }
}

/// Whether stack address `a` is on the alternate signal stack `alt`.
fn on_alt(alt: Option<(u64, u64)>, a: u64) -> bool {
    alt.is_some_and(|(lo, hi)| a >= lo && a <= hi)
}

/// The calling thread's alternate signal stack (lowest and highest
/// address), if one is set: as the thread last set it through the
/// interposed `sigaltstack` ([`set_altstack`]), else as the kernel reports
/// it. Async-signal-safe (at most one system call).
#[cold]
fn altstack(t: &ThreadState) -> Option<(u64, u64)> {
    if t.shadow.alt_known {
        return (t.shadow.alt_hi > t.shadow.alt_lo).then_some((t.shadow.alt_lo, t.shadow.alt_hi));
    }
    // SAFETY: all-zero is a valid `stack_t`; `sigaltstack` with a null new
    // stack only writes the current one into `ss`.
    unsafe {
        let mut ss: libc::stack_t = core::mem::zeroed();
        if libc::sigaltstack(core::ptr::null(), &mut ss) != 0
            || ss.ss_flags & libc::SS_DISABLE != 0
            || ss.ss_size == 0
        {
            return None;
        }
        let lo = ss.ss_sp as u64;
        Some((lo, lo + ss.ss_size as u64))
    }
}

/// The calling thread has set its alternate signal stack to `lo..lo +
/// size` (`None`: disabled) through `sigaltstack`.
pub fn set_altstack(stack: Option<(u64, u64)>) {
    with_state(|t| {
        let (lo, size) = stack.unwrap_or((0, 0));
        t.shadow.alt_lo = lo;
        t.shadow.alt_hi = lo + size;
        t.shadow.alt_known = true;
    })
}

/// Pops, recording their exits now, the newest shadow frames that were
/// unwound given that the thread runs at stack address `sp`: a stack
/// pointer of the running code, or the return-address slot of a function
/// being entered when `same_slot` is given (the exit trampoline's
/// address): a frame with the same mark is then dead too, unless its slot
/// still holds our trampoline or its wrapper's return point (the live
/// caller of a tail call, whose callee returns through the same slot). A
/// frame is dead when its mark is below `sp` on the same stack, or
/// (`leaving_alt`: an unwinder's landing frame) when it is on the
/// alternate signal stack and `sp` is not. Frames on the thread's stack
/// are never closed by an event on the alternate stack: the handler
/// interrupted them. The alternate stack is only asked for (a system
/// call) when the newest frame is a candidate.
#[cold]
#[inline(never)]
pub(crate) fn pop_dead(t: &mut ThreadState, sp: u64, same_slot: Option<u64>, leaving_alt: bool) {
    let mut alt = None;
    let mut n = t.shadow.len;
    while n > 0 {
        let f = t.shadow.frames()[n - 1];
        let m = f.slot;
        let below = m < sp || (m == sp && same_slot.is_some_and(|tr| !tail_caller(&f, tr)));
        if !below && !leaving_alt {
            break;
        }
        let a = *alt.get_or_insert_with(|| altstack(t));
        let dead = if on_alt(a, m) == on_alt(a, sp) {
            below
        } else {
            on_alt(a, m)
        };
        if !dead {
            break;
        }
        n -= 1;
    }
    if n == t.shadow.len {
        return;
    }
    let record = t.session == SESSION.load(Ordering::Relaxed);
    let was_busy = t.busy;
    t.busy = true;
    compiler_fence(Ordering::SeqCst);
    bury_above(t, n);
    pop_frames(t, n, record);
    compiler_fence(Ordering::SeqCst);
    t.busy = was_busy;
}

/// Keeps the frames from index `from` up, about to be popped as unwound,
/// whose slots are still taken over (see `Shadow::bury`).
fn bury_above(t: &mut ThreadState, from: usize) {
    let len = t.shadow.len;
    for k in from..len {
        let f = t.shadow.frames()[k];
        if f.flags & (F_SLOT | F_HIJACKED) == F_SLOT | F_HIJACKED {
            t.shadow.bury(f);
        }
    }
}

/// Whether `f`, whose mark is the slot a function is being entered with,
/// is the live caller of that function's tail call: its slot is still
/// taken over (a dead frame's slot holds the new call's return address).
fn tail_caller(f: &Frame, tramp: u64) -> bool {
    if f.flags & (F_SLOT | F_HIJACKED) != F_SLOT | F_HIJACKED {
        return false;
    }
    // SAFETY: `f.slot` is the return-address slot of the function being
    // entered on this thread's stack (equal marks), live and readable.
    held_by_us(unsafe { (f.slot as *const u64).read() }, f, tramp)
}

/// Exit through a hijacked return address: `slot` is the stack slot the
/// trampoline was returned from. Pops the matching shadow frame (and any
/// newer ones, skipped by `longjmp`) and returns the original return
/// address. `rax` is the function's return value (recorded for `-R`). A
/// slot without a frame aborts with a message: there is no address to
/// return to.
#[inline(always)]
pub fn hook_exit(slot: u64, rax: u64) -> u64 {
    let t = state();
    let Some(i) = t.shadow.find_slot(slot) else {
        // A frame popped as unwound that was only suspended (its stack was
        // switched away by code we do not see): its exit was written then.
        return match t.shadow.exhume(slot) {
            Some(ret) => ret,
            None => lost_return_address(slot),
        };
    };
    bury_above(t, i + 1);
    let f = t.shadow.frames()[i];
    let ret = f.ret;
    let record = !t.busy && t.session == SESSION.load(Ordering::Relaxed);
    let was_busy = t.busy;
    t.busy = true;
    compiler_fence(Ordering::SeqCst);
    if record && f.flags & (F_RETVAL | F_RECORDED) == F_RETVAL | F_RECORDED {
        pop_frames(t, i + 1, record);
        recorder::write_record(t, false, |_| Framed::RetVal { value: rax as i64 });
    }
    pop_frames(t, i, record);
    compiler_fence(Ordering::SeqCst);
    t.busy = was_busy;
    ret
}

#[cold]
fn lost_return_address(slot: u64) -> ! {
    let mut msg = *b"fntrace: no shadow frame for return slot 0x0000000000000000; aborting\n";
    let hex = b"0123456789abcdef";
    for i in 0..16 {
        msg[43 + i] = hex[((slot >> (60 - 4 * i)) & 15) as usize];
    }
    // SAFETY: writes a stack buffer to stderr, then aborts.
    unsafe {
        libc::write(2, msg.as_ptr().cast(), msg.len());
        libc::abort()
    }
}

/// Entry of a function that announces its exit explicitly
/// (`__cyg_profile_func_enter`, XRay). `sp` is the frame's stack mark: its
/// return-address slot (XRay, at the function's first instruction:
/// `exact`, each live frame has its own) or the stack pointer of its call
/// to the hook (cyg_profile, after the prologue: not `exact`, since the
/// hooks of an inlined function run in its caller's frame with the
/// caller's stack pointer).
#[inline(always)]
pub fn explicit_entry(func: u64, call_site: u64, sp: u64, exact: bool) {
    let t = state();
    let feat = features::features();
    // Fast path: no filters, depth limit or counting; attached, not busy,
    // room on the shadow stack, nothing unwound.
    if feat == 0
        && !t.busy
        && t.session != 0
        && t.session == SESSION.load(Ordering::Relaxed)
        && t.shadow.len < shadow::CAPACITY
        && t.shadow.is_reserved()
        && t.shadow.top_mark() > sp - u64::from(!exact)
    {
        t.busy = true;
        compiler_fence(Ordering::SeqCst);
        recorder::record_entry_inner(t, func);
        t.shadow.push(Frame::new(0, sp, func, F_RECORDED));
        compiler_fence(Ordering::SeqCst);
        t.busy = false;
        return;
    }
    explicit_entry_slow(t, func, call_site, feat, sp, exact)
}

#[inline(never)]
fn explicit_entry_slow(
    t: &mut ThreadState,
    func: u64,
    call_site: u64,
    feat: u32,
    sp: u64,
    exact: bool,
) {
    if feat & features::FEAT_COUNT != 0 {
        if !t.busy {
            t.busy = true;
            count::count(&mut t.arcs, call_site, func);
            t.busy = false;
        }
        return;
    }
    let sid = SESSION.load(Ordering::Relaxed);
    // A thread that never attached has session 0, like "no session".
    if (t.session != sid || sid == 0 || t.busy) && !recorder::attach_slow(t) {
        return;
    }
    if t.shadow.top_mark() <= sp {
        // An explicit frame never takes over a slot, so it is never a
        // tail caller; a hijacked frame with the same mark (a library call
        // under `--libcalls` that tail-calls an XRay function, such as
        // libstdc++'s `__once_proxy`) is, while its slot still holds the
        // exit trampoline.
        #[cfg(feature = "compiler-hooks")]
        let tramp = crate::calls::tramp::exit_trampoline_addr();
        #[cfg(not(feature = "compiler-hooks"))]
        let tramp = 0;
        pop_dead(t, sp, exact.then_some(tramp), false);
    }
    t.busy = true;
    compiler_fence(Ordering::SeqCst);
    let (record, flags) = hook_decision(t, func, feat, 0);
    if record && feat & features::FEAT_ARGS != 0 && args::mask(func) != 0 {
        no_registers_here();
    }
    if t.shadow.has_room() {
        if record {
            recorder::record_entry_inner(t, func);
        }
        if flags & F_TRACE != 0 {
            t.trace_regions += 1;
        }
        if flags & F_NOTRACE != 0 {
            t.notrace_regions += 1;
        }
        let rec = if record { F_RECORDED } else { 0 };
        t.shadow.push(Frame::new(0, sp, func, flags | rec));
    } else {
        t.shadow.overflow += 1;
        if record {
            t.lost += 1;
            recorder::too_deep(t);
        }
    }
    compiler_fence(Ordering::SeqCst);
    t.busy = false;
}

/// Exit announced explicitly (`__cyg_profile_func_exit`, XRay): pops to
/// the newest frame of `func` (newer ones were skipped by `longjmp` or
/// unwound). `sp` is the stack pointer of the exit event (XRay: the
/// return-address slot; cyg_profile: the stack pointer of the hook call,
/// in the function's frame), at or below the frame's mark.
#[inline(always)]
pub fn explicit_exit(func: u64, sp: u64) {
    let t = state();
    // Fast path: the newest frame is this function's (not a dead
    // recursive call of it below `sp`), recorded, nothing else to undo.
    let n = t.shadow.len;
    if n > 0 && !t.busy && t.shadow.overflow == 0 && features::features() == 0 {
        let f = t.shadow.frames()[n - 1];
        if f.func == func && f.flags == F_RECORDED && f.slot >= sp {
            t.shadow.len = n - 1;
            if t.session == SESSION.load(Ordering::Relaxed) {
                t.busy = true;
                compiler_fence(Ordering::SeqCst);
                recorder::exit_inner(t);
                compiler_fence(Ordering::SeqCst);
                t.busy = false;
            }
            return;
        }
    }
    explicit_exit_slow(t, func, sp)
}

#[inline(never)]
fn explicit_exit_slow(t: &mut ThreadState, func: u64, sp: u64) {
    if features::features() & features::FEAT_COUNT != 0 {
        return;
    }
    if t.busy {
        return;
    }
    if t.shadow.overflow > 0 {
        t.shadow.overflow -= 1;
        return;
    }
    // The frame of this call: the newest one of `func` whose mark is at or
    // above the exit's stack pointer (deeper ones are dead recursive calls),
    // else the newest one of `func`.
    let frames = t.shadow.frames();
    let mine = |f: &Frame| f.func == func && f.flags & F_SLOT == 0;
    let Some(i) = frames
        .iter()
        .rposition(|f| mine(f) && f.slot >= sp)
        .or_else(|| frames.iter().rposition(mine))
    else {
        return;
    };
    let record = t.session == SESSION.load(Ordering::Relaxed);
    t.busy = true;
    compiler_fence(Ordering::SeqCst);
    pop_frames(t, i, record);
    compiler_fence(Ordering::SeqCst);
    t.busy = false;
}

/// Puts the original return addresses back into every hijacked slot of
/// the calling thread, for an unwinder or a backtrace that reads them.
/// Slots that no longer hold `tramp` belong to dead frames and are left.
pub fn restore_return_addresses(tramp: u64) {
    with_state(|t| {
        if t.busy {
            return;
        }
        for f in t.shadow.frames().iter_mut().rev() {
            if f.flags & F_HIJACKED == 0 {
                continue;
            }
            f.flags &= !F_HIJACKED;
            let slot = f.slot as *mut u64;
            // SAFETY: the slot was a return-address slot of this thread's
            // stack. It is only written if it still holds the trampoline
            // (the frame is live, or nobody reused the memory), newest
            // frames first, so a reused slot is restored by its newest owner
            // and then no longer matches for older, dead frames.
            unsafe {
                if held_by_us(slot.read(), f, tramp) {
                    slot.write(f.ret);
                }
            }
        }
        t.shadow.restored = true;
    })
}

/// A landing pad is being installed in a frame whose stack pointer is
/// `sp` (what `_Unwind_GetCFA` returns for the context a personality
/// routine is handed: the landing frame's stack pointer at its call, the
/// CFA of the frame it called, not its own CFA). Every shadow frame below
/// it is gone: their exits are recorded now. The frames left
/// (the landing frame and its callers, all live) get their return
/// addresses taken over again at once, so that a function that catches
/// and returns before making another traced call still has its exit
/// recorded. The unwinder reads no return address above the landing frame
/// after this point; a cleanup pad that resumes unwinding restores them
/// again (`_Unwind_Resume`).
pub fn landing(sp: u64, tramp: u64) {
    with_state(|t| {
        if t.busy {
            return;
        }
        pop_dead(t, sp, None, true);
        if t.shadow.restored && t.shadow.walking == 0 {
            t.busy = true;
            compiler_fence(Ordering::SeqCst);
            resync(t, tramp);
            compiler_fence(Ordering::SeqCst);
            t.busy = false;
        }
    })
}

/// A `longjmp` is about to resume at stack pointer `target`: the frames
/// below it (on the same stack, or on the alternate signal stack being
/// left) are gone, and their exits are recorded now. A target that is not
/// plausible — misaligned, or neither at most 1 GiB above the running code
/// on its stack nor off the alternate stack the code runs on — is ignored
/// (the frames are then closed at the thread's next event). A jump out of
/// a signal handler whose signal interrupted the recorder (`busy` set)
/// first gives the thread back to the recorder when it abandons that code
/// (`recorder::abandoned`).
pub fn jumping_to(target: u64) {
    let here_mark = 0u8;
    let here = core::ptr::addr_of!(here_mark) as u64;
    with_state(|t| {
        if target % 8 != 0 {
            return;
        }
        if t.busy {
            // A handler whose signal interrupted the recorder is leaving
            // it for good: take the thread back (the event being written
            // is lost), or it would never record again.
            if !leaves_interrupted_runtime(t, target, here) {
                return;
            }
            match_depth_to_frames(t);
            recorder::abandoned(t);
        }
        if t.shadow.len == 0 {
            return;
        }
        let up = target >= here && target - here < 1 << 30;
        if !up {
            let alt = altstack(t);
            if !on_alt(alt, here) || on_alt(alt, target) {
                return;
            }
        }
        pop_dead(t, target, None, true);
    })
}

/// Makes the trace's open calls and the shadow stack agree again after
/// the recorder was abandoned in the middle of an event (`busy` held): the
/// cursor's state is read back from the chunk ([`recorder::resync_cursor`]),
/// then an entry written whose frame was not pushed yet gets its exit now,
/// and a
/// frame whose exit was written but which was not popped yet (the newest
/// ones) no longer counts as recorded, so that popping it writes nothing.
/// Only when every open call has a frame (no source-instrumented function
/// ran, no call held back by the time filter).
fn match_depth_to_frames(t: &mut ThreadState) {
    if recorder::any_source_site()
        || features::features() & features::FEAT_TIME != 0
        || t.session == 0
        || t.session != SESSION.load(Ordering::Relaxed)
    {
        return;
    }
    // What the trace itself says: the balance of open calls, last entry
    // and last time at the cursor (the interrupted code may have written
    // an event without counting it, or counted one it had not written).
    if !recorder::resync_cursor(t) {
        return;
    }
    let recorded = t
        .shadow
        .frames()
        .iter()
        .filter(|f| f.flags & F_RECORDED != 0)
        .count() as u32;
    if t.depth > recorded {
        for _ in recorded..t.depth {
            recorder::exit_inner(t);
        }
    } else if t.depth < recorded {
        let mut extra = recorded - t.depth;
        for f in t.shadow.frames().iter_mut().rev() {
            if extra == 0 {
                break;
            }
            if f.flags & F_RECORDED != 0 {
                f.flags &= !F_RECORDED;
                extra -= 1;
            }
        }
    }
}

/// Whether a jump to `target` from `here` (inside a signal handler, with
/// the thread's `busy` flag set) abandons the runtime code the signal
/// interrupted: the signal frame above the handler says where the signal
/// landed, and the jump leaves that code when it lands above its stack
/// pointer. The search covers the stack between `here` and `target`, or
/// the alternate signal stack the handler runs on.
fn leaves_interrupted_runtime(t: &ThreadState, target: u64, here: u64) -> bool {
    #[cfg(feature = "compiler-hooks")]
    {
        let alt = altstack(t);
        let (lo, hi) = match alt {
            Some((_, top)) if on_alt(alt, here) => (here, top),
            _ if target > here && target - here < 1 << 30 => (here, target),
            _ => return false,
        };
        // SAFETY: the range is this thread's stack above its current
        // stack pointer, up to a live frame (`target`), or its alternate
        // signal stack: mapped and readable.
        let at = unsafe { super::interrupted::runtime_interrupted_at(lo, hi.min(lo + (64 << 20))) };
        at.is_some_and(|sp| target > sp)
    }
    #[cfg(not(feature = "compiler-hooks"))]
    {
        let _ = (t, target, here);
        false
    }
}

/// Starts a stack walk (a backtrace): original return addresses are put
/// back and stay there, even while code called by the walker runs, until
/// [`end_walk`].
pub fn begin_walk(tramp: u64) {
    restore_return_addresses(tramp);
    with_state(|t| t.shadow.walking += 1);
}

/// Ends a stack walk begun with [`begin_walk`] and re-hijacks the frames.
pub fn end_walk(tramp: u64) {
    with_state(|t| {
        t.shadow.walking = t.shadow.walking.saturating_sub(1);
        if !t.busy && t.shadow.restored && t.shadow.walking == 0 {
            t.busy = true;
            resync(t, tramp);
            t.busy = false;
        }
    })
}

/// Whether a return-address slot holding `v` is taken over by frame `f`:
/// it holds the exit trampoline, or (a patched site's call wrapper called
/// the body) the return point of `f`'s wrapper.
pub(super) fn held_by_us(v: u64, f: &Frame, tramp: u64) -> bool {
    if v == tramp {
        return true;
    }
    #[cfg(feature = "compiler-hooks")]
    if super::wrapper::is_return_point(v, f.func) {
        return true;
    }
    let _ = f;
    false
}

/// Re-hijacks frames restored for an unwinder whose slots still hold
/// their original return address.
#[cold]
#[inline(never)]
fn resync(t: &mut ThreadState, tramp: u64) {
    for f in t.shadow.frames().iter_mut() {
        if f.flags & (F_HIJACKED | F_SLOT) != F_SLOT {
            continue;
        }
        let slot = f.slot as *mut u64;
        // SAFETY: the frames a landing pad left behind were popped when it
        // was installed (`landing`), so the remaining ones are live; a
        // live frame's slot holds `ret`, and a slot holding anything else
        // is left alone.
        unsafe {
            if slot.read() == f.ret {
                slot.write(tramp);
                f.flags |= F_HIJACKED;
            }
        }
    }
    t.shadow.restored = false;
}
