//! The enabled path of a static-key site (x86_64): the call that the
//! site's label block makes, built so that the block clobbers no
//! general-purpose register.
//!
//! Why: the label block of a static-key site is part of the firing
//! function's control flow, inside whatever loop the site is in. If it
//! contained an ordinary call, every value live across the site would have
//! to survive a clobber of the nine caller-saved registers (`rax`, `rcx`,
//! `rdx`, `rsi`, `rdi`, `r8`–`r11`); with more live values than the six
//! callee-saved registers, the register allocator spills some of them or
//! re-materialises constants *on the hot path* (measured: the word-count
//! benchmark's byte loop re-loaded a constant and compared against a
//! spilled end pointer), so a site that is a 5-byte NOP when disabled
//! still cost ~1 ns per firing. Here the block stores a [`KeyFrame`] (the
//! marker and a pointer to the argument tuple) and makes one `call` from
//! inline assembly to [`trampoline`], which saves and restores those nine
//! registers around the Rust dispatcher; the assembly declares only the
//! vector, mask, x87/MMX and tile registers and the flags as clobbered (as
//! `clobber_abi("C")` would, without the general-purpose ones). Integer
//! code keeps all its registers across the site.
//!
//! A panicking probe: with `std`, the panic is caught in the dispatcher
//! and resumed in the firing code after the trampoline returned, so it
//! unwinds through the firing function as with the other designs; without
//! `std`, the dispatcher is `extern "C"` and a panic aborts.

use crate::marker::MarkerCore;

#[cfg(feature = "std")]
use std::boxed::Box;

/// What a static-key site hands to [`trampoline`] (in `rdi`).
#[repr(C)]
pub struct KeyFrame {
    core: &'static MarkerCore,
    args: *const (),
    /// A probe's panic, to resume in the firing code.
    #[cfg(feature = "std")]
    panic: Option<Box<dyn core::any::Any + Send + 'static>>,
}

/// The dispatcher the trampoline calls: the probes of `frame.core` with
/// the argument tuple at `frame.args`.
///
/// # Safety
/// `frame` points to a live [`KeyFrame`] whose `args` is the marker's
/// argument tuple.
unsafe extern "C" fn key_dispatch(frame: *mut KeyFrame) {
    // SAFETY: the caller's contract; the frame lives in the firing
    // function's stack frame for the whole call.
    let f = unsafe { &mut *frame };
    #[cfg(feature = "std")]
    {
        let (core, args) = (f.core, f.args);
        if let Err(p) =
            std::panic::catch_unwind(core::panic::AssertUnwindSafe(|| core.dispatch_raw(args)))
        {
            f.panic = Some(p);
        }
    }
    #[cfg(not(feature = "std"))]
    f.core.dispatch_raw(f.args);
}

/// Calls [`key_dispatch`] with the frame in `rdi` and returns with every
/// general-purpose register and the stack as they were (flags excepted).
/// Entered by `call` from an `asm!` block without `nostack`, so the stack
/// is 16-byte aligned before the call: after the return address and nine
/// pushes it is aligned again for the inner call.
#[unsafe(naked)]
#[doc(hidden)]
pub unsafe extern "C" fn trampoline() {
    // SAFETY: pushes and pops balance, the inner call is made with the
    // stack aligned as the C ABI requires, and the nine caller-saved
    // general-purpose registers are restored; the CFI directives keep
    // the frame unwindable (for backtraces taken inside probes).
    core::arch::naked_asm!(
        ".cfi_startproc",
        "push rax",
        ".cfi_adjust_cfa_offset 8",
        "push rcx",
        ".cfi_adjust_cfa_offset 8",
        "push rdx",
        ".cfi_adjust_cfa_offset 8",
        "push rsi",
        ".cfi_adjust_cfa_offset 8",
        "push rdi",
        ".cfi_adjust_cfa_offset 8",
        "push r8",
        ".cfi_adjust_cfa_offset 8",
        "push r9",
        ".cfi_adjust_cfa_offset 8",
        "push r10",
        ".cfi_adjust_cfa_offset 8",
        "push r11",
        ".cfi_adjust_cfa_offset 8",
        "call {dispatch}",
        "pop r11",
        ".cfi_adjust_cfa_offset -8",
        "pop r10",
        ".cfi_adjust_cfa_offset -8",
        "pop r9",
        ".cfi_adjust_cfa_offset -8",
        "pop r8",
        ".cfi_adjust_cfa_offset -8",
        "pop rdi",
        ".cfi_adjust_cfa_offset -8",
        "pop rsi",
        ".cfi_adjust_cfa_offset -8",
        "pop rdx",
        ".cfi_adjust_cfa_offset -8",
        "pop rcx",
        ".cfi_adjust_cfa_offset -8",
        "pop rax",
        ".cfi_adjust_cfa_offset -8",
        "ret",
        ".cfi_endproc",
        dispatch = sym key_dispatch,
    )
}

/// Resumes a probe's panic in the firing code.
#[cfg(feature = "std")]
#[cold]
#[inline(never)]
fn resume(p: Box<dyn core::any::Any + Send + 'static>) -> ! {
    std::panic::resume_unwind(p)
}

/// The enabled path of a static-key site: calls the probes of `core` with
/// the argument tuple at `args`, through [`trampoline`]. Inlined into the
/// label block.
///
/// # Safety
/// `args` points to `core`'s argument tuple.
#[inline(always)]
pub(crate) unsafe fn call(core: &'static MarkerCore, args: *const ()) {
    let mut frame = KeyFrame {
        core,
        args,
        #[cfg(feature = "std")]
        panic: None,
    };
    // SAFETY: `trampoline` preserves every general-purpose register and
    // the stack pointer; what the called Rust code may clobber beyond
    // them (vector, mask, x87/MMX and AMX tile registers, flags) is
    // declared. No `nostack`: the stack is aligned for the call and the
    // red zone is not in use. The frame outlives the call.
    unsafe {
        core::arch::asm!(
            "call {t}",
            t = sym trampoline,
            in("rdi") &raw mut frame,
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
    if let Some(p) = frame.panic.take() {
        resume(p);
    }
}
