//! The per-thread shadow stack of calls whose return address was hijacked
//! (mcount, fentry) or whose exit is announced explicitly (cyg_profile).
//!
//! Each frame remembers the original return address, the address of the
//! stack slot that now holds the exit trampoline (or, for explicit exits,
//! a stack pointer inside the call's frame), and the function. Both are a
//! *stack mark*: a callee's mark is always below its caller's, so a frame
//! whose mark is below the stack pointer of a later event on the same
//! stack was unwound (exception, `longjmp`, panic) — see
//! `calls::entry::pop_dead`. The stack is reserved lazily with
//! `mmap(MAP_NORESERVE)` (only touched pages cost memory) and never
//! unmapped while a frame may still return through it; deeper recursion
//! than it holds is not hijacked (counted instead). A sentinel frame below
//! `base` has the highest mark, so the assembly fast path compares the
//! newest frame's mark without testing for an empty stack.
//!
//! Only the owning thread touches its shadow stack; the recorder's
//! per-thread `busy` flag keeps signal handlers out of a half-done update.

#![cfg_attr(not(feature = "compiler-hooks"), allow(dead_code))]

use core::ptr;

/// Frames a shadow stack holds (32 bytes each, reserved not committed).
pub const CAPACITY: usize = 1 << 17;

/// Frames kept after they were popped as unwound while their slots still
/// held the exit trampoline (a ring after the stack, in the same
/// reservation): see `Shadow::bury`.
pub const BURIED: usize = 4096;

/// The frame was recorded (its exit must be recorded too).
pub(crate) const F_RECORDED: u32 = 1;
/// The frame's slot holds the exit trampoline (clear while restored for
/// an unwinder).
pub(crate) const F_HIJACKED: u32 = 2;
/// The frame belongs to a `-N` function: nothing below it is recorded.
pub(crate) const F_NOTRACE: u32 = 4;
/// The frame belongs to a `-F` function: what is below it is recorded.
pub(crate) const F_TRACE: u32 = 8;
/// The frame's return value is recorded at its exit (`-R`).
pub(crate) const F_RETVAL: u32 = 16;
/// `slot` is a return-address slot this runtime took over (mcount, fentry,
/// call wrappers); without it the frame's exit is announced explicitly
/// (cyg_profile, XRay) and `slot` is only a stack mark.
pub(crate) const F_SLOT: u32 = 32;
/// The frame's call was recorded by an earlier session (the parent's,
/// before a fork): it writes no exit here, but counts for `--depth`
/// (`ThreadState::depth_base`).
pub(crate) const F_BASE: u32 = 64;

/// One call on the shadow stack.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub(crate) struct Frame {
    /// Original return address (0 for explicit-exit mechanisms).
    pub ret: u64,
    /// The frame's stack mark: the address of the hijacked return-address
    /// slot ([`F_SLOT`]), or for explicit exits the stack pointer of the
    /// entry event (the return-address slot for XRay, the stack pointer
    /// after the prologue for cyg_profile).
    pub slot: u64,
    /// Function key.
    pub func: u64,
    /// `F_*` flags.
    pub flags: u32,
    _pad: u32,
}

impl Frame {
    pub(crate) const fn new(ret: u64, slot: u64, func: u64, flags: u32) -> Frame {
        Frame {
            ret,
            slot,
            func,
            flags,
            _pad: 0,
        }
    }
}

/// A thread's shadow stack. All-zero is the empty, unreserved stack (it
/// lives in the recorder's zero-initialised TLS block).
#[derive(Debug)]
#[repr(C)]
pub(crate) struct Shadow {
    pub(crate) base: *mut Frame,
    /// Frames in use.
    pub len: usize,
    /// Calls not pushed because the stack was full (explicit-exit
    /// mechanisms pair them with their exits by count).
    pub overflow: u64,
    /// Some frames' slots were restored for an unwinder; they are
    /// re-hijacked at the next event (the frames a landing pad left behind
    /// were popped when it was installed).
    pub restored: bool,
    /// Stack walks in progress on this thread (frames stay restored: the
    /// walker's callbacks may run instrumented code).
    pub walking: u32,
    /// The reservation failed; never try again.
    failed: bool,
    /// The alternate signal stack the thread set through `sigaltstack`
    /// (interposed): `alt_lo..=alt_hi`, empty when none. Remembered
    /// because the kernel reports an `SS_AUTODISARM` stack as disabled
    /// while its handler runs.
    pub alt_lo: u64,
    /// See `alt_lo`.
    pub alt_hi: u64,
    /// `alt_lo`/`alt_hi` are known (else the kernel is asked).
    pub alt_known: bool,
}

impl Shadow {
    /// Whether another frame fits (reserving the stack on first use).
    #[inline(always)]
    pub(crate) fn has_room(&mut self) -> bool {
        if self.len < CAPACITY && !self.base.is_null() {
            return true;
        }
        self.reserve()
    }

    #[cold]
    #[inline(never)]
    fn reserve(&mut self) -> bool {
        if !self.base.is_null() || self.failed {
            return false;
        }
        // SAFETY: an anonymous private mapping at a kernel-chosen address
        // touches no existing memory.
        let p = unsafe {
            libc::mmap(
                ptr::null_mut(),
                (CAPACITY + 1 + BURIED) * core::mem::size_of::<Frame>(),
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            self.failed = true;
            return false;
        }
        let sentinel: *mut Frame = p.cast();
        // SAFETY: the first frame of the fresh mapping; `base` starts after
        // it. Its mark is above every stack address.
        unsafe {
            sentinel.write(Frame::new(0, u64::MAX, 0, 0));
            self.base = sentinel.add(1);
        }
        true
    }

    /// Gives the reservation back when its thread ends (each one is a few
    /// MB of address space and a page table page: a program that starts
    /// thousands of threads over its life would keep them all, and its
    /// forks would slow down). The thread records nothing more, and a
    /// frame of it can no longer return through the exit trampoline
    /// (its stack is being torn down), so the stack is never reserved
    /// again (`failed`).
    pub(crate) fn release(&mut self) {
        if !self.base.is_null() {
            // SAFETY: the mapping `reserve` made (the sentinel frame
            // before `base`), no longer used by this ending thread.
            unsafe {
                libc::munmap(
                    self.base.sub(1).cast(),
                    (CAPACITY + 1 + BURIED) * core::mem::size_of::<Frame>(),
                );
            }
        }
        self.base = ptr::null_mut();
        self.len = 0;
        self.failed = true;
    }

    /// Whether the stack was reserved (then `len < CAPACITY` means room).
    #[inline(always)]
    pub(crate) fn is_reserved(&self) -> bool {
        !self.base.is_null()
    }

    /// Pushes a frame; the caller checked [`Shadow::has_room`].
    #[inline(always)]
    pub(crate) fn push(&mut self, f: Frame) {
        debug_assert!(self.len < CAPACITY);
        // SAFETY: `has_room` guarantees a reserved stack with `len <
        // CAPACITY`, so the slot is inside the mapping.
        unsafe { self.base.add(self.len).write(f) };
        self.len += 1;
    }

    /// The frames in use, oldest first.
    #[inline(always)]
    pub(crate) fn frames(&mut self) -> &mut [Frame] {
        if self.base.is_null() {
            return &mut [];
        }
        // SAFETY: `len` frames from `base` were written by `push`, inside
        // the mapping, and only this thread accesses them.
        unsafe { core::slice::from_raw_parts_mut(self.base, self.len) }
    }

    /// Keeps `f`, popped as unwound while its slot still holds the exit
    /// trampoline, in case it was not unwound but suspended: a stack
    /// switched by code this runtime does not see (a coroutine library's
    /// own assembly) makes the frames of the context switched from look
    /// unwound. If that context runs again, its return through the slot
    /// finds the original return address here ([`Shadow::exhume`]) instead
    /// of aborting. The newest [`BURIED`] are kept; the count lives in the
    /// sentinel frame's spare word.
    pub(crate) fn bury(&mut self, f: Frame) {
        if self.base.is_null() {
            return;
        }
        // SAFETY: the sentinel is the frame before `base`, and the ring the
        // `BURIED` frames after the stack's `CAPACITY`, all inside the
        // reservation; only this thread touches them.
        unsafe {
            let sentinel = self.base.sub(1);
            let n = (*sentinel)._pad;
            self.base.add(CAPACITY + n as usize % BURIED).write(f);
            (*sentinel)._pad = n.wrapping_add(1);
        }
    }

    /// The original return address of the newest buried frame of `slot`
    /// (see [`Shadow::bury`]), which is then forgotten.
    pub(crate) fn exhume(&mut self, slot: u64) -> Option<u64> {
        if self.base.is_null() {
            return None;
        }
        // SAFETY: as in `bury`.
        unsafe {
            let n = (*self.base.sub(1))._pad as usize;
            for k in 1..=n.min(BURIED) {
                let f = &mut *self.base.add(CAPACITY + (n - k) % BURIED);
                if f.slot == slot && f.flags & F_SLOT != 0 {
                    f.slot = 0;
                    return Some(f.ret);
                }
            }
        }
        None
    }

    /// Index of the newest frame that took over the return-address slot
    /// `slot`.
    #[inline(always)]
    pub(crate) fn find_slot(&mut self, slot: u64) -> Option<usize> {
        self.frames()
            .iter()
            .rposition(|f| f.slot == slot && f.flags & F_SLOT != 0)
    }

    /// The newest frame's stack mark (the sentinel's, above every address,
    /// when the stack is empty or not reserved).
    #[inline(always)]
    pub(crate) fn top_mark(&mut self) -> u64 {
        self.frames().last().map_or(u64::MAX, |f| f.slot)
    }
}
