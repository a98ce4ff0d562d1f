//! The grace period that lets a removed probe (its closure data, its code)
//! be freed: read-side sections around every probe call and
//! [`synchronize`], which returns only when no thread can still be inside
//! a section that began before it was called.
//!
//! With `std` (Linux): each thread owns a slot holding one word,
//! `generation << 8 | depth`. Entering a section stores depth + 1, leaving
//! the outermost one stores depth 0 with the generation advanced: plain
//! stores by the owning thread plus compiler fences, no atomic
//! read-modify-write and no fence instruction. The writer publishes the new
//! probe array, then `membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED)` runs a
//! full memory barrier on every running thread of the process; after it,
//! a thread whose slot still reads depth 0 cannot hold the old array (it
//! loads the array after storing its depth, and the barrier orders the
//! two), and a thread inside a section is waited for until its depth is 0
//! or its generation moved. Slots are never freed (a thread's slot is
//! reused after it exits), so the writer can always read them. The read
//! side costs a thread-local load, one comparison (no slot yet, or the
//! thread is exiting: both below a slot's address), a load and a store;
//! leaving, one store.
//!
//! Without `std`, with the `critical-section` feature: probes run inside
//! `critical_section::with`, and a grace period is entering and leaving a
//! critical section once.

#[cfg(feature = "std")]
pub use self::tls::{ReadGuard, in_read_section, read_lock, synchronize};

#[cfg(feature = "std")]
pub(crate) use self::tls::reader;

#[cfg(all(not(feature = "std"), feature = "critical-section"))]
pub use self::cs::{ReadGuard, in_read_section, read_lock, synchronize};

#[cfg(not(feature = "std"))]
pub(crate) use self::nostd::reader;

#[cfg(all(not(feature = "std"), not(feature = "critical-section")))]
pub use self::none::{ReadGuard, in_read_section, read_lock};

#[cfg(not(feature = "std"))]
mod nostd {
    use super::{ReadGuard, read_lock};

    /// What [`reader`] finds: nothing to remember without `std`.
    #[derive(Clone, Copy)]
    pub struct Reader;

    /// Always a reader without `std`.
    #[inline(always)]
    pub fn reader() -> Option<Reader> {
        Some(Reader)
    }

    impl Reader {
        /// Enters a read-side section ([`read_lock`]).
        #[inline(always)]
        pub fn enter(self) -> Option<ReadGuard> {
            read_lock()
        }
    }
}

#[cfg(feature = "std")]
mod tls {
    use core::cell::Cell;
    use core::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, Ordering, compiler_fence};
    use std::boxed::Box;

    /// One thread's reader state.
    pub(super) struct Slot {
        /// `generation << 8 | depth`; written only by the owning thread.
        word: AtomicU64,
        in_use: AtomicBool,
        next: *const Slot,
    }

    // SAFETY: `next` is written before the slot is published and never
    // changed; the other fields are atomics.
    unsafe impl Sync for Slot {}

    /// Every slot ever created (a push-only list; slots are leaked).
    static SLOTS: AtomicPtr<Slot> = AtomicPtr::new(core::ptr::null_mut());

    /// What `MINE` holds in a thread that is exiting (its own slot was
    /// given back): sections there skip the probes. Never a slot's
    /// address (slots are heap allocations), and with null the only
    /// values at or below it, so the hot path tells both apart from a
    /// slot with one comparison.
    const EXITING: *const Slot = core::ptr::dangling();

    std::thread_local! {
        /// The thread's slot: null before its first section, [`EXITING`]
        /// once given back. It never changes while a section is open (a
        /// section is a function call on this thread; the slot is taken
        /// at the first one and given back by a thread-local destructor,
        /// which does not run inside one), so leaving uses the slot it
        /// entered with.
        static MINE: Cell<*const Slot> = const { Cell::new(core::ptr::null()) };
        static RELEASE: Release = const { Release };
    }

    /// Gives the thread's slot back when the thread exits.
    struct Release;

    impl Drop for Release {
        fn drop(&mut self) {
            let _ = MINE.try_with(|m| {
                let p = m.replace(EXITING);
                if !p.is_null() && p != EXITING {
                    // SAFETY: slots are leaked, never freed.
                    let s = unsafe { &*p };
                    s.in_use.store(false, Ordering::Release);
                }
            });
        }
    }

    /// Takes a free slot or creates one (the thread's first section).
    #[cold]
    #[inline(never)]
    fn acquire() -> *const Slot {
        let mut p = SLOTS.load(Ordering::Acquire) as *const Slot;
        while !p.is_null() {
            // SAFETY: slots are leaked, never freed.
            let s = unsafe { &*p };
            if !s.in_use.load(Ordering::Relaxed)
                && s.in_use
                    .compare_exchange(false, true, Ordering::AcqRel, Ordering::Relaxed)
                    .is_ok()
            {
                break;
            }
            p = s.next;
        }
        if p.is_null() {
            register_atfork();
            let s = Box::into_raw(Box::new(Slot {
                word: AtomicU64::new(0),
                in_use: AtomicBool::new(true),
                next: core::ptr::null(),
            }));
            let mut head = SLOTS.load(Ordering::Acquire);
            loop {
                // SAFETY: `s` is ours until the exchange below publishes it.
                unsafe { (*s).next = head };
                match SLOTS.compare_exchange(head, s, Ordering::AcqRel, Ordering::Acquire) {
                    Ok(_) => break,
                    Err(h) => head = h,
                }
            }
            p = s;
        }
        if RELEASE.try_with(|_| ()).is_err() {
            // The thread is already destroying its thread-locals: do not
            // keep a slot nobody would give back.
            // SAFETY: slots are leaked, never freed.
            unsafe { (*p).in_use.store(false, Ordering::Release) };
            return EXITING;
        }
        let _ = MINE.try_with(|m| m.set(p));
        p
    }

    /// After `fork` only the forking thread exists in the child: the
    /// slots of the others are given back and marked outside any section,
    /// or the child's first grace period would wait for them forever.
    fn register_atfork() {
        static ONCE: std::sync::Once = std::sync::Once::new();
        ONCE.call_once(|| {
            extern "C" fn child() {
                let mine = MINE.try_with(|m| m.get()).unwrap_or(core::ptr::null());
                let mut p = SLOTS.load(Ordering::Acquire) as *const Slot;
                while !p.is_null() {
                    // SAFETY: slots are leaked, never freed.
                    let s = unsafe { &*p };
                    if !core::ptr::eq(p, mine) {
                        let w = s.word.load(Ordering::Relaxed);
                        s.word.store((w & !0xff) + 0x100, Ordering::Relaxed);
                        s.in_use.store(false, Ordering::Relaxed);
                    }
                    p = s.next;
                }
            }
            // SAFETY: registers a handler that only touches our own leaked
            // slots (no allocation, no lock: fine in a fork child).
            unsafe { libc::pthread_atfork(None, None, Some(child)) };
        });
    }

    /// Marks the calling thread as inside a read-side section until the
    /// guard is dropped. Sections nest (a probe firing a marker, a signal
    /// handler).
    pub struct ReadGuard {
        slot: *const Slot,
        /// The word this section stored on entry: leaving computes the
        /// next one from it instead of loading the slot again (the load
        /// would wait for the entry's store to be forwarded).
        entered: u64,
    }

    /// Enters a read-side section; `None` in a thread that is exiting
    /// (after its thread-locals were destroyed), where probes are skipped.
    #[inline(always)]
    pub fn read_lock() -> Option<ReadGuard> {
        let mut p = MINE.try_with(|m| m.get()).unwrap_or(EXITING);
        if p.is_null() {
            p = acquire();
        }
        if p == EXITING {
            return None;
        }
        Some(enter(p))
    }

    /// The calling thread's reader state, when it has a slot: `None` in a
    /// thread that has none yet (its first section; use [`read_lock`],
    /// which takes one) or is exiting. One TLS load and one comparison,
    /// no call: the static key's dispatcher branches on it before it
    /// needs any saved register.
    #[inline(always)]
    pub fn reader() -> Option<Reader> {
        let p = MINE.try_with(|m| m.get()).unwrap_or(EXITING);
        if p.addr() <= EXITING.addr() {
            return None;
        }
        Some(Reader(p))
    }

    /// The calling thread's slot, as [`reader`] found it.
    #[derive(Clone, Copy)]
    #[repr(transparent)]
    pub struct Reader(*const Slot);

    impl Reader {
        /// Enters a read-side section (on the calling thread: a `Reader`
        /// is only valid on the thread [`reader`] returned it to).
        #[inline(always)]
        pub fn enter(self) -> Option<ReadGuard> {
            Some(enter(self.0))
        }
    }

    /// Enters a section on slot `p` (the calling thread's).
    #[inline(always)]
    fn enter(p: *const Slot) -> ReadGuard {
        // SAFETY: slots are leaked, never freed.
        let s = unsafe { &*p };
        let entered = s.word.load(Ordering::Relaxed) + 1;
        s.word.store(entered, Ordering::Relaxed);
        // The writer's membarrier orders this store before the array load
        // that follows (see the module comment).
        compiler_fence(Ordering::SeqCst);
        ReadGuard { slot: p, entered }
    }

    impl Drop for ReadGuard {
        #[inline(always)]
        fn drop(&mut self) {
            compiler_fence(Ordering::SeqCst);
            // SAFETY: slots are leaked, never freed.
            let s = unsafe { &*self.slot };
            // A signal handler that fired a marker meanwhile left the word
            // as we stored it (its sections nest inside ours).
            // Depth back to what it was; the outermost section's leaving
            // also advances the generation.
            let before = self.entered - 1;
            let next = if before & 0xff == 0 {
                before + 0x100
            } else {
                before
            };
            s.word.store(next, Ordering::Release);
        }
    }

    /// Whether the calling thread is inside a read-side section (then a
    /// grace period would wait for itself).
    pub fn in_read_section() -> bool {
        let p = MINE.try_with(|m| m.get()).unwrap_or(core::ptr::null());
        if p.is_null() || p == EXITING {
            return false;
        }
        // SAFETY: slots are leaked, never freed.
        unsafe { (*p).word.load(Ordering::Relaxed) & 0xff != 0 }
    }

    const MEMBARRIER_CMD_GLOBAL: libc::c_long = 1;
    const MEMBARRIER_CMD_PRIVATE_EXPEDITED: libc::c_long = 1 << 3;
    const MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED: libc::c_long = 1 << 4;

    /// 0 = not tried, 1 = private expedited, 2 = global, 3 = none.
    static MODE: core::sync::atomic::AtomicU8 = core::sync::atomic::AtomicU8::new(0);

    fn membarrier(cmd: libc::c_long) -> bool {
        // SAFETY: plain system call with integer arguments.
        unsafe { libc::syscall(libc::SYS_membarrier, cmd, 0, 0) == 0 }
    }

    /// Runs a full memory barrier on every thread of the process.
    fn barrier_all() {
        let mut mode = MODE.load(Ordering::Acquire);
        if mode == 0 {
            mode = if membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED) {
                1
            } else if membarrier(MEMBARRIER_CMD_GLOBAL) {
                2
            } else {
                3
            };
            MODE.store(mode, Ordering::Release);
        }
        let ok = match mode {
            1 => membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED),
            2 => membarrier(MEMBARRIER_CMD_GLOBAL),
            _ => false,
        };
        if !ok {
            mprotect_barrier();
        }
        core::sync::atomic::fence(Ordering::SeqCst);
    }

    /// Without membarrier (old kernels, valgrind): downgrading the
    /// protection of a present page makes the kernel shoot down its TLB
    /// entry with an interrupt on every core running the process, which
    /// is a full barrier there.
    fn mprotect_barrier() {
        static ONE: std::sync::Mutex<()> = std::sync::Mutex::new(());
        let _one = ONE.lock().unwrap_or_else(|e| e.into_inner());
        static PAGE: AtomicPtr<u8> = AtomicPtr::new(core::ptr::null_mut());
        let mut p = PAGE.load(Ordering::Acquire);
        if p.is_null() {
            // SAFETY: a private anonymous page of our own.
            let m = unsafe {
                libc::mmap(
                    core::ptr::null_mut(),
                    4096,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                    -1,
                    0,
                )
            };
            if m == libc::MAP_FAILED {
                return;
            }
            p = m.cast();
            if let Err(other) = PAGE.compare_exchange(
                core::ptr::null_mut(),
                p,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                // SAFETY: unmapping the page we just mapped and lost.
                unsafe { libc::munmap(m, 4096) };
                p = other;
            }
        }
        // SAFETY: the page is ours; it is written only between the two
        // protection changes, under `ONE`.
        unsafe {
            libc::mprotect(p.cast(), 4096, libc::PROT_READ | libc::PROT_WRITE);
            core::ptr::write_volatile(p, 1);
            libc::mprotect(p.cast(), 4096, libc::PROT_READ);
        }
    }

    /// Waits until every read-side section that was running when this was
    /// called has ended. Must not be called inside one (it would wait for
    /// itself): check [`in_read_section`] first.
    pub fn synchronize() {
        barrier_all();
        let mut p = SLOTS.load(Ordering::Acquire) as *const Slot;
        while !p.is_null() {
            // SAFETY: slots are leaked, never freed.
            let s = unsafe { &*p };
            let w0 = s.word.load(Ordering::Acquire);
            if w0 & 0xff != 0 {
                let mut spins = 0u32;
                loop {
                    let w = s.word.load(Ordering::Acquire);
                    if w & 0xff == 0 || w >> 8 != w0 >> 8 {
                        break;
                    }
                    spins += 1;
                    if spins < 64 {
                        core::hint::spin_loop();
                    } else {
                        // The reader was probably preempted inside its
                        // section: let it run.
                        std::thread::yield_now();
                    }
                }
            }
            p = s.next;
        }
        // Order the reads of the slots before the caller frees anything,
        // on every thread (what the readers did before leaving is done).
        barrier_all();
    }
}

#[cfg(all(not(feature = "std"), feature = "critical-section"))]
mod cs {
    use core::sync::atomic::{AtomicUsize, Ordering};

    /// Sections currently open (only used to refuse a grace period inside
    /// one; with interrupts off there is one execution context).
    static OPEN: AtomicUsize = AtomicUsize::new(0);

    /// A read-side section: a critical section held until drop.
    pub struct ReadGuard {
        restore: critical_section::RestoreState,
    }

    /// Enters a read-side section (a critical section).
    #[inline(always)]
    pub fn read_lock() -> Option<ReadGuard> {
        // SAFETY: released exactly once, by the guard's drop, in nesting
        // order (guards are scoped to `dispatch`).
        let restore = unsafe { critical_section::acquire() };
        OPEN.fetch_add(1, Ordering::Relaxed);
        Some(ReadGuard { restore })
    }

    impl Drop for ReadGuard {
        fn drop(&mut self) {
            OPEN.fetch_sub(1, Ordering::Relaxed);
            // SAFETY: the state `acquire` returned, released once.
            unsafe { critical_section::release(self.restore) };
        }
    }

    /// Whether a read-side section is open.
    pub fn in_read_section() -> bool {
        OPEN.load(Ordering::Relaxed) != 0
    }

    /// Waits for every read-side section: a reader holds the critical
    /// section for the whole probe call, so acquiring it once suffices.
    pub fn synchronize() {
        critical_section::with(|_| {});
    }
}

#[cfg(all(not(feature = "std"), not(feature = "critical-section")))]
mod none {
    /// Without `std` or `critical-section` no probe can be attached, so
    /// firing never runs one; the guard is empty.
    pub struct ReadGuard;

    /// Enters an (empty) read-side section.
    #[inline(always)]
    pub fn read_lock() -> Option<ReadGuard> {
        Some(ReadGuard)
    }

    /// Always false here.
    pub fn in_read_section() -> bool {
        false
    }
}
