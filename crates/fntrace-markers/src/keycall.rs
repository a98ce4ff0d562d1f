//! The enabled path of a static-key site (x86_64): the call that the
//! site's label block makes, built so that the block clobbers no
//! general-purpose register. Owns [`KeyFrame`], the dispatcher the block
//! calls ([`key_dispatch`]) and the inline assembly of that call (the
//! `__key_call!` macro, expanded in the label block).
//!
//! Why: the label block of a static-key site is part of the firing
//! function's control flow, inside whatever loop the site is in. With an
//! ordinary call there, every value live across the site has to survive a
//! clobber of the nine caller-saved registers (`rax`, `rcx`, `rdx`, `rsi`,
//! `rdi`, `r8`–`r11`); with more live values than the six callee-saved
//! registers, the register allocator spills or re-materialises some of
//! them, and not always in the cold block: the word-count benchmark's byte
//! loop re-materialised the FNV prime and compared against a spilled end
//! pointer on every byte (docs/ARCHITECTURE.md, Markers). Here the block
//! runs one `asm!` block that saves those nine registers into a
//! [`KeyFrame`] on the stack (which also holds the argument tuple), calls
//! the dispatcher with the frame (holding the marker), and restores them. Its
//! only operand is the frame's address, in a register of the allocator's
//! choosing (the marker's address comes from a relocated word the block
//! emits, the arguments sit at a fixed offset in the frame), so nothing is
//! pinned to a fixed register across the loop; it declares only the
//! vector, mask, x87/MMX and tile registers and the flags as clobbered
//! (what `clobber_abi("C")` declares, without the general-purpose
//! registers). So integer code keeps every register across the site and
//! the allocator has no reason to touch the hot path. The price is paid
//! only when enabled: nine stores and nine loads per firing.
//!
//! The enabled path is kept short (docs/ARCHITECTURE.md, Markers, "The
//! enabled path"): the site stores the marker's address into the frame and
//! passes only the frame; [`key_dispatch`] keeps three values in saved
//! registers (the frame, its read-side slot, the slot word it entered
//! with), calls the one probe straight from the probe array (which holds
//! its first entry and its marker) and returns the frame in `rax` and
//! whether a probe panicked in `rdx`.
//!
//! A panicking probe: with `std`, the panic is caught in the dispatcher,
//! boxed into the frame and reported in `rdx`; the site tests `rdx`
//! before restoring the registers (`mov` leaves the flags alone) and
//! branches to a label block that resumes the panic, so it unwinds through
//! the firing function as with the other designs, and the path without a
//! panic stores and loads nothing for it. Without `std` the dispatcher is
//! `extern "C"` and a panic aborts.

use core::mem::MaybeUninit;

use crate::marker::MarkerCore;

#[cfg(feature = "std")]
use std::boxed::Box;

/// The fixed part of a [`KeyFrame`]: the saved registers, the marker and
/// a probe's panic. Sized to a multiple of 16 so that the arguments that
/// follow are at [`ARGS_OFFSET`] for every argument tuple. The site leaves
/// it uninitialised (no store on its path): the assembly writes `saved`
/// and `marker`, [`key_dispatch`] writes `panic` when a probe panicked.
#[doc(hidden)]
#[repr(C, align(16))]
pub struct KeyHead {
    /// The nine caller-saved general-purpose registers, saved across the
    /// call.
    saved: [u64; 9],
    /// The marker that fires, stored by the site.
    marker: *const MarkerCore,
    /// A probe's panic, to resume in the firing code; written only when
    /// [`KeyRet::panicked`] says so.
    #[cfg(feature = "std")]
    panic: *mut Panic,
}

/// What [`key_dispatch`] returns, in `rax` and `rdx`: the frame (the site
/// restores the registers through it) and whether a probe panicked (then
/// the panic is in the frame). The site tests `rdx` before restoring it
/// and branches on the flags after the restores, so the path without a
/// panic stores and loads nothing for it.
#[doc(hidden)]
#[repr(C)]
pub struct KeyRet {
    frame: *mut KeyHead,
    panicked: usize,
}

/// A probe's panic, boxed once more to fit [`KeyHead`]'s one word.
#[cfg(feature = "std")]
type Panic = Box<dyn core::any::Any + Send + 'static>;

/// Offset of the saved registers in a frame.
#[doc(hidden)]
pub const SAVED_OFFSET: usize = core::mem::offset_of!(KeyHead, saved);

/// Offset of the marker's address in a frame.
#[doc(hidden)]
pub const MARKER_OFFSET: usize = core::mem::offset_of!(KeyHead, marker);

/// Offset of the argument tuple in a frame.
#[doc(hidden)]
pub const ARGS_OFFSET: usize = core::mem::size_of::<KeyHead>();

/// An enabled static-key firing, on the firing function's stack: room for
/// the saved registers and a probe's panic, then the argument tuple `A`.
#[doc(hidden)]
#[repr(C)]
pub struct KeyFrame<A> {
    head: MaybeUninit<KeyHead>,
    args: A,
}

impl<A> KeyFrame<A> {
    /// A frame holding `args`.
    #[inline(always)]
    pub fn new(args: A) -> Self {
        const {
            assert!(
                core::mem::align_of::<A>() <= 16,
                "marker arguments aligned beyond 16 bytes"
            )
        };
        KeyFrame {
            head: MaybeUninit::uninit(),
            args,
        }
    }

    /// The frame's address, for the assembly.
    #[inline(always)]
    pub fn as_mut_ptr(&mut self) -> *mut Self {
        self
    }

    /// After a call that reported a panic: resumes the probe's panic in
    /// the firing code (without `std` no panic is reported: nothing).
    ///
    /// # Safety
    /// The assembly has called [`key_dispatch`] with this frame and it
    /// returned [`KeyRet::panicked`] set.
    #[inline(always)]
    pub unsafe fn resume_panic(self) {
        #[cfg(feature = "std")]
        {
            // SAFETY: `key_dispatch` wrote `panic` (caller's contract).
            let p = unsafe { core::ptr::addr_of!((*self.head.as_ptr()).panic).read() };
            // SAFETY: a box `key_dispatch` leaked.
            unsafe { resume(p) };
        }
    }
}

/// The dispatcher a static-key site calls: the probes of the frame's
/// marker with the argument tuple at [`ARGS_OFFSET`] in the frame; a
/// probe's panic goes into the frame ([`KeyRet`]).
///
/// Its common path (the thread has its read-side slot) keeps three values
/// across the probe call (the frame, the slot, the word it entered with):
/// three saved registers. The marker comes in the frame rather than in a
/// register because the thread-local access before it counts as a call
/// for the register allocator (general-dynamic TLS, relaxed by the linker
/// to a plain `%fs` load in an executable): a marker in a register would
/// have to be kept across it in a fourth saved register, and the stack
/// alignment would then cost a fifth push.
///
/// # Safety
/// `frame` points to a live `KeyFrame<A>` whose `marker` is set and `A`
/// is that marker's argument tuple.
#[doc(hidden)]
pub unsafe extern "C" fn key_dispatch(frame: *mut KeyHead) -> KeyRet {
    match crate::rcu::reader().and_then(|r| r.enter()) {
        // SAFETY: the caller's contract.
        Some(g) => unsafe { dispatch_in(frame, g) },
        // SAFETY: the caller's contract.
        None => unsafe { key_dispatch_first(frame) },
    }
}

/// [`key_dispatch`] in a thread's first section (it takes a read-side
/// slot) or in an exiting thread (probes skipped).
///
/// # Safety
/// As for [`key_dispatch`].
#[cold]
#[inline(never)]
unsafe extern "C" fn key_dispatch_first(frame: *mut KeyHead) -> KeyRet {
    let r = match crate::rcu::read_lock() {
        // SAFETY: the caller's contract.
        Some(g) => unsafe { dispatch_in(frame, g) },
        None => KeyRet { frame, panicked: 0 },
    };
    // Opaque: were it known to return its argument, `key_dispatch` would
    // keep that across the call instead of calling it last.
    core::hint::black_box(r)
}

/// The probes of the frame's marker, inside the read-side section `g`
/// (left on return).
///
/// # Safety
/// As for [`key_dispatch`].
#[inline(always)]
unsafe fn dispatch_in(frame: *mut KeyHead, g: crate::rcu::ReadGuard) -> KeyRet {
    // SAFETY: the site stored the marker (caller's contract).
    let core: &'static MarkerCore = unsafe { &*(*frame).marker };
    // SAFETY: the frame is a `KeyFrame`, whose arguments follow the head
    // at `ARGS_OFFSET` (caller's contract).
    let args = unsafe { frame.cast::<u8>().add(ARGS_OFFSET) }.cast::<()>();
    #[cfg(feature = "std")]
    {
        let r = std::panic::catch_unwind(core::panic::AssertUnwindSafe(|| {
            // SAFETY: inside the section `g` holds.
            unsafe { core.dispatch_locked(args) }
        }));
        if let Err(p) = r {
            drop(g);
            // SAFETY: the caller's contract.
            return unsafe { panicked(frame, p) };
        }
    }
    #[cfg(not(feature = "std"))]
    // SAFETY: inside the section `g` holds.
    unsafe {
        core.dispatch_locked(args)
    };
    // `g` is left here (without `std` it may have nothing to do).
    let _left = g;
    KeyRet { frame, panicked: 0 }
}

/// A probe's panic: into the frame (boxed once more: one word), reported.
///
/// # Safety
/// `frame` points to a live `KeyFrame`.
#[cfg(feature = "std")]
#[cold]
#[inline(never)]
unsafe fn panicked(frame: *mut KeyHead, p: Panic) -> KeyRet {
    let p = Box::into_raw(Box::new(p));
    // SAFETY: the caller's contract.
    unsafe { core::ptr::addr_of_mut!((*frame).panic).write(p) };
    KeyRet { frame, panicked: 1 }
}

/// Resumes a probe's panic in the firing code (out of line: the site
/// only tests the frame's word and calls this).
///
/// # Safety
/// `p` is a box [`panicked`] leaked.
#[cfg(feature = "std")]
#[cold]
#[inline(never)]
unsafe fn resume(p: *mut Panic) -> ! {
    // SAFETY: the caller's contract.
    let p = unsafe { Box::from_raw(p) };
    std::panic::resume_unwind(*p)
}

/// The enabled path of a static-key site (expanded in its label block):
/// calls the probes of marker `$m` with the argument tuple `$args` (already
/// of the marker's types), keeping every general-purpose register.
#[doc(hidden)]
#[macro_export]
macro_rules! __key_call {
    ($m:path, $args:expr) => {{
        let mut __frame = $crate::keycall::KeyFrame::new($args);
        // SAFETY: the block saves the nine caller-saved general-purpose
        // registers into the frame (its address in `{f}`, a register of
        // the compiler's choosing), puts the frame's address in `rdi` and
        // the marker's (from a relocated word in `.data.rel.ro`) into the
        // frame, calls `key_dispatch(frame)` (C ABI: it preserves the
        // callee-saved registers and returns the frame's address in `rax`
        // and whether a probe panicked in `rdx`), tests `rdx`, restores the
        // nine from the frame (`rax` last; `mov` leaves the flags alone)
        // and branches to the label block on a panic: every
        // general-purpose register is as before, `{f}` included, on both
        // ways out. What the called Rust code may clobber beyond them
        // (vector, mask, x87/MMX and AMX tile registers, flags) is
        // declared. No `nostack`: the stack is aligned for the call and
        // the red zone is not in use; the stack pointer does not move, so
        // the firing function's unwind information stays valid during the
        // call. The frame (arguments included) outlives the call; `$m` is
        // the marker whose argument tuple the frame holds.
        unsafe {
            ::core::arch::asm!(
                "mov [{f} + {s}], rax",
                "mov [{f} + {s} + 8], rcx",
                "mov [{f} + {s} + 16], rdx",
                "mov [{f} + {s} + 24], rsi",
                "mov [{f} + {s} + 32], rdi",
                "mov [{f} + {s} + 40], r8",
                "mov [{f} + {s} + 48], r9",
                "mov [{f} + {s} + 56], r10",
                "mov [{f} + {s} + 64], r11",
                "mov rdi, {f}",
                ".pushsection .data.rel.ro,\"aw\",@progbits",
                ".balign 8",
                "3: .quad {m}",
                ".popsection",
                "mov rsi, qword ptr [rip + 3b]",
                "mov [rdi + {mk}], rsi",
                "call {dispatch}",
                "test rdx, rdx",
                "mov rcx, [rax + {s} + 8]",
                "mov rdx, [rax + {s} + 16]",
                "mov rsi, [rax + {s} + 24]",
                "mov rdi, [rax + {s} + 32]",
                "mov r8, [rax + {s} + 40]",
                "mov r9, [rax + {s} + 48]",
                "mov r10, [rax + {s} + 56]",
                "mov r11, [rax + {s} + 64]",
                "mov rax, [rax + {s}]",
                "jnz {panicked}",
                f = in(reg) __frame.as_mut_ptr(),
                s = const $crate::keycall::SAVED_OFFSET,
                mk = const $crate::keycall::MARKER_OFFSET,
                m = sym $m,
                dispatch = sym $crate::keycall::key_dispatch,
                // SAFETY: `key_dispatch` reported a panic in the frame.
                panicked = label { unsafe { __frame.resume_panic() } },
                out("zmm0") _, out("zmm1") _, out("zmm2") _, out("zmm3") _,
                out("zmm4") _, out("zmm5") _, out("zmm6") _, out("zmm7") _,
                out("zmm8") _, out("zmm9") _, out("zmm10") _, out("zmm11") _,
                out("zmm12") _, out("zmm13") _, out("zmm14") _, out("zmm15") _,
                out("zmm16") _, out("zmm17") _, out("zmm18") _, out("zmm19") _,
                out("zmm20") _, out("zmm21") _, out("zmm22") _, out("zmm23") _,
                out("zmm24") _, out("zmm25") _, out("zmm26") _, out("zmm27") _,
                out("zmm28") _, out("zmm29") _, out("zmm30") _, out("zmm31") _,
                out("k0") _, out("k1") _, out("k2") _, out("k3") _,
                out("k4") _, out("k5") _, out("k6") _, out("k7") _,
                out("mm0") _, out("mm1") _, out("mm2") _, out("mm3") _,
                out("mm4") _, out("mm5") _, out("mm6") _, out("mm7") _,
                out("st(0)") _, out("st(1)") _, out("st(2)") _, out("st(3)") _,
                out("st(4)") _, out("st(5)") _, out("st(6)") _, out("st(7)") _,
                out("tmm0") _, out("tmm1") _, out("tmm2") _, out("tmm3") _,
                out("tmm4") _, out("tmm5") _, out("tmm6") _, out("tmm7") _,
            );
        }
    }};
}
