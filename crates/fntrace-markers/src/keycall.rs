//! The enabled path of a static-key site (x86_64): the call that the
//! site's label block makes, built so that the block clobbers no
//! general-purpose register. Owns [`KeyFrame`], the dispatcher the block
//! calls (`key_dispatch`) and the inline assembly of that call.
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
//! [`KeyFrame`] on the stack, calls the dispatcher with the marker and a
//! pointer to the argument tuple, and restores them; it declares only the
//! vector, mask, x87/MMX and tile registers and the flags as clobbered
//! (what `clobber_abi("C")` declares, without the general-purpose
//! registers). So integer code keeps every register across the site and
//! the allocator has no reason to touch the hot path. The price is paid
//! only when enabled: nine stores and nine loads per firing.
//!
//! A panicking probe: with `std`, the panic is caught in the dispatcher
//! and resumed in the firing code once the registers are restored, so it
//! unwinds through the firing function as with the other designs; without
//! `std` the dispatcher is `extern "C"` and a panic aborts.

use crate::marker::MarkerCore;

#[cfg(feature = "std")]
use std::boxed::Box;

/// The firing site's part of an enabled static-key call, on the firing
/// function's stack: room for the saved registers and for a probe's
/// panic.
#[repr(C)]
pub struct KeyFrame {
    /// A probe's panic, to resume in the firing code.
    #[cfg(feature = "std")]
    panic: Option<Box<dyn core::any::Any + Send + 'static>>,
    /// The general-purpose registers saved across the call.
    saved: core::mem::MaybeUninit<[u64; 9]>,
}

/// The dispatcher a static-key site calls: the probes of `core` with the
/// argument tuple at `args`; a probe's panic goes into the frame. Returns
/// `frame` (the site restores the registers through it).
///
/// # Safety
/// `frame` points to a live [`KeyFrame`]; `args` points to `core`'s
/// argument tuple.
unsafe extern "C" fn key_dispatch(
    frame: *mut KeyFrame,
    core: &'static MarkerCore,
    args: *const (),
) -> *mut KeyFrame {
    let Some(_g) = crate::rcu::read_lock() else {
        return frame;
    };
    #[cfg(feature = "std")]
    if let Err(p) = std::panic::catch_unwind(core::panic::AssertUnwindSafe(|| {
        // SAFETY: inside the section `_g` holds.
        unsafe { core.dispatch_locked(args) }
    })) {
        // SAFETY: the caller's contract; the frame lives in the firing
        // function's stack frame for the whole call. Its `panic` is
        // `None` (set by the site), so there is nothing to drop.
        unsafe { core::ptr::addr_of_mut!((*frame).panic).write(Some(p)) };
    }
    #[cfg(not(feature = "std"))]
    // SAFETY: inside the section `_g` holds.
    unsafe {
        core.dispatch_locked(args)
    };
    frame
}

/// Resumes a probe's panic in the firing code.
#[cfg(feature = "std")]
#[cold]
#[inline(never)]
fn resume(p: Box<dyn core::any::Any + Send + 'static>) -> ! {
    std::panic::resume_unwind(p)
}

/// The enabled path of a static-key site: calls the probes of `core` with
/// the argument tuple at `args`, keeping every general-purpose register.
/// Inlined into the label block.
///
/// # Safety
/// `args` points to `core`'s argument tuple.
#[inline(always)]
pub(crate) unsafe fn call(core: &'static MarkerCore, args: *const ()) {
    let mut frame = KeyFrame {
        #[cfg(feature = "std")]
        panic: None,
        saved: core::mem::MaybeUninit::uninit(),
    };
    // SAFETY: the block saves the nine caller-saved general-purpose
    // registers into the frame (its address is in `rdi`), calls
    // `key_dispatch(frame, core, args)` (C ABI, arguments in `rdi`, `rsi`,
    // `rdx`: it preserves the callee-saved registers and returns the
    // frame's address in `rax`) and restores the nine from the frame,
    // `rax` last: every general-purpose register is as before, the three
    // inputs included. What the called Rust code may clobber beyond them
    // (vector, mask, x87/MMX and AMX tile registers, flags) is declared.
    // No `nostack`: the stack is aligned for the call and the red zone is
    // not in use; the stack pointer does not move, so the firing
    // function's unwind information stays valid during the call. The
    // frame outlives the call.
    unsafe {
        core::arch::asm!(
            "mov [rdi + {s}], rax",
            "mov [rdi + {s} + 8], rcx",
            "mov [rdi + {s} + 16], rdx",
            "mov [rdi + {s} + 24], rsi",
            "mov [rdi + {s} + 32], rdi",
            "mov [rdi + {s} + 40], r8",
            "mov [rdi + {s} + 48], r9",
            "mov [rdi + {s} + 56], r10",
            "mov [rdi + {s} + 64], r11",
            "call {dispatch}",
            "mov rcx, [rax + {s} + 8]",
            "mov rdx, [rax + {s} + 16]",
            "mov rsi, [rax + {s} + 24]",
            "mov rdi, [rax + {s} + 32]",
            "mov r8, [rax + {s} + 40]",
            "mov r9, [rax + {s} + 48]",
            "mov r10, [rax + {s} + 56]",
            "mov r11, [rax + {s} + 64]",
            "mov rax, [rax + {s}]",
            s = const core::mem::offset_of!(KeyFrame, saved),
            dispatch = sym key_dispatch,
            in("rdi") &raw mut frame,
            in("rsi") core,
            in("rdx") args,
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
    #[cfg(feature = "std")]
    if let Some(p) = frame.panic {
        resume(p);
    }
}
