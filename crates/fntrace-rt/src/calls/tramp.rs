//! The trampolines every call-tracking mechanism shares: the exit
//! trampoline that hijacked returns land in, the entry and exit
//! trampolines of patched sites' call wrappers, and the
//! `saving_trampoline!` macro the mechanisms' own entry points are built
//! with.
//!
//! Register discipline (System V x86_64):
//! - `mcount` runs after the callee's prologue, `__fentry__` before it; in
//!   both, every argument register may be live: rdi, rsi, rdx, rcx, r8, r9,
//!   rax (the vector-argument count of variadic calls) and xmm0–7, plus
//!   r10 (static chain) and r11, which gcc's `-fipa-ra` may assume
//!   preserved across the call. All of them are saved. The Rust handler
//!   preserves rbx, rbp, r12–r15 itself (callee-saved). x87 and AVX upper
//!   halves are not touched by the handler, so they are not saved.
//! - Patched entry sites reach [`fntrace_site_entry`] from their call
//!   wrapper before the callee's prologue, as `__fentry__` is reached, and
//!   save the same set; [`fntrace_site_exit`] runs after the body returned
//!   into the wrapper and saves the return registers, like the exit
//!   trampoline.
//! - The exit trampoline runs when an instrumented function (or a recorded
//!   library call) returns: only the return registers are live (rax, rdx,
//!   xmm0, xmm1, saved at the width the CPU has: a `__m256`/`__m512`
//!   return value fills ymm0/zmm0; st0/st1 are not touched). It saves those, asks the shadow stack for the original
//!   return address and jumps to it through r11 (caller-saved, not a return
//!   register).
//!
//! Before saving anything the entry points test the recorder's session
//! word, so a program that is not recording pays a load and a branch.
//!
//! Stack alignment: `mcount` is called with rsp ≡ 8 (mod 16) on entry and
//! `__fentry__` (before the callee's prologue) with rsp ≡ 0, so both
//! realign with a frame of their own (rbp saved, rsp rounded down). The
//! exit trampoline realigns too, keeping the entry rsp in its frame.

use core::sync::atomic::{AtomicU8, Ordering};

use crate::recorder;

/// The exit trampoline, for the assembly fast path (which adds 1: hijacked
/// returns go past its padding byte).
pub(crate) static EXIT_TRAMPOLINE: unsafe extern "C" fn() = fntrace_exit_trampoline;

/// Address of the exit trampoline (past its leading padding byte).
#[inline(always)]
pub fn exit_trampoline_addr() -> u64 {
    fntrace_exit_trampoline as *const () as usize as u64 + 1
}

/// Rust side of the exit trampoline.
extern "C" fn exit_entry(slot: u64, rax: u64) -> u64 {
    crate::calls::entry::hook_exit(slot, rax)
}

/// Saves rax, the six integer argument registers, r10 (static chain) and
/// r11 at `rsp + 128` to `rsp + 192`: the general-register part of the
/// frame every full path builds (rdi, word 17, is what `-A` reads). With
/// [`restore_gprs!`], the one place these offsets are written.
macro_rules! save_gprs {
    () => {
        concat!(
            "mov [rsp + 128], rax\n",
            "mov [rsp + 136], rdi\n",
            "mov [rsp + 144], rsi\n",
            "mov [rsp + 152], rdx\n",
            "mov [rsp + 160], rcx\n",
            "mov [rsp + 168], r8\n",
            "mov [rsp + 176], r9\n",
            "mov [rsp + 184], r10\n",
            "mov [rsp + 192], r11\n",
        )
    };
}

/// Restores what [`save_gprs!`] saved.
macro_rules! restore_gprs {
    () => {
        concat!(
            "mov rax, [rsp + 128]\n",
            "mov rdi, [rsp + 136]\n",
            "mov rsi, [rsp + 144]\n",
            "mov rdx, [rsp + 152]\n",
            "mov rcx, [rsp + 160]\n",
            "mov r8, [rsp + 168]\n",
            "mov r9, [rsp + 176]\n",
            "mov r10, [rsp + 184]\n",
            "mov r11, [rsp + 192]\n",
        )
    };
}
pub(crate) use {restore_gprs, save_gprs};

/// A trampoline that runs a Rust handler before a function's body with
/// every argument register preserved: `$pre` (tests; may jump to `2f`,
/// the plain return), an aligned frame (rbp = our frame, `[rbp + 8]` our
/// return address), the save area (rax, rdi, rsi, rdx, rcx, r8, r9, r10,
/// r11 at rsp + 128.., xmm0–7 at rsp + 0..; rdi is word 17, what `-A`
/// reads), `$args`, `call {entry}`, `$post` (may store a result into a
/// save slot), everything restored, `ret`, then `$tail` (out-of-line
/// paths). x87 and AVX upper halves are not touched by the handlers, so
/// they are not saved.
macro_rules! saving_trampoline {
    ([$($pre:expr),*], [$($args:expr),*], [$($post:literal),*], [$($tail:expr),*], $($operands:tt)*) => {
        core::arch::naked_asm!(
            // An indirect-branch target (PLT jumps, `jmp [rip]` stubs):
            // a landing pad for CET's indirect branch tracking.
            "endbr64",
            $($pre,)*
            "push rbp",
            "mov rbp, rsp",
            "and rsp, -16",
            "sub rsp, 208",
            crate::calls::tramp::save_gprs!(),
            "movaps [rsp], xmm0",
            "movaps [rsp + 16], xmm1",
            "movaps [rsp + 32], xmm2",
            "movaps [rsp + 48], xmm3",
            "movaps [rsp + 64], xmm4",
            "movaps [rsp + 80], xmm5",
            "movaps [rsp + 96], xmm6",
            "movaps [rsp + 112], xmm7",
            $($args,)*
            "call {entry}",
            $($post,)*
            "movaps xmm0, [rsp]",
            "movaps xmm1, [rsp + 16]",
            "movaps xmm2, [rsp + 32]",
            "movaps xmm3, [rsp + 48]",
            "movaps xmm4, [rsp + 64]",
            "movaps xmm5, [rsp + 80]",
            "movaps xmm6, [rsp + 96]",
            "movaps xmm7, [rsp + 112]",
            crate::calls::tramp::restore_gprs!(),
            "mov rsp, rbp",
            "pop rbp",
            "2:",
            "ret",
            $($tail,)*
            $($operands)*
        )
    };
}

pub(crate) use saving_trampoline;
/// The body shared by the exit trampolines: entered with rsp just above
/// the function's return-address slot and only the return registers live
/// (rax, rdx, and xmm0, xmm1 at full width — ymm or zmm on CPUs that have
/// them, for vector return values — saved; r11: scratch), it calls [`exit_entry`]
/// with the slot and rax, restores, and leaves the original return address
/// in r11 for `$tail` to go to.
macro_rules! exit_trampoline {
    ([$($head:literal),*], $fast_done:expr, [$($tail:literal),+]) => {
        core::arch::naked_asm!(
            $($head,)*
            crate::calls::fast::fast_hook_exit!($fast_done, "pop rdx\npop rax\n"),
            // The slot the callee returned from is just below our entry rsp.
            "mov r11, rsp",
            "and rsp, -64",
            "sub rsp, 192",
            "mov [rsp + 144], r11",
            "mov [rsp + 128], rax",
            "mov [rsp + 136], rdx",
            // xmm0/xmm1 at the width the CPU has (a `__m256`/`__m512`
            // return value fills ymm0/zmm0).
            "movzx eax, byte ptr [rip + {vec_mode}]",
            "cmp eax, 1",
            "je 41f",
            "ja 42f",
            "movaps [rsp], xmm0",
            "movaps [rsp + 64], xmm1",
            "jmp 43f",
            "41:",
            "vmovdqu [rsp], ymm0",
            "vmovdqu [rsp + 64], ymm1",
            "jmp 43f",
            "42:",
            // vmovdqu64 [rsp], zmm0; vmovdqu64 [rsp + 64], zmm1 (as bytes:
            // the crate is not compiled with AVX-512 enabled).
            ".byte 0x62, 0xf1, 0xfe, 0x48, 0x7f, 0x04, 0x24",
            ".byte 0x62, 0xf1, 0xfe, 0x48, 0x7f, 0x4c, 0x24, 0x01",
            "43:",
            "lea rdi, [r11 - 8]",
            "mov rsi, [rsp + 128]",
            "call {exit}",
            "mov r11, rax",
            "movzx edx, byte ptr [rip + {vec_mode}]",
            "cmp edx, 1",
            "je 44f",
            "ja 45f",
            "movaps xmm0, [rsp]",
            "movaps xmm1, [rsp + 64]",
            "jmp 46f",
            "44:",
            "vmovdqu ymm0, [rsp]",
            "vmovdqu ymm1, [rsp + 64]",
            "jmp 46f",
            "45:",
            ".byte 0x62, 0xf1, 0xfe, 0x48, 0x6f, 0x04, 0x24",
            ".byte 0x62, 0xf1, 0xfe, 0x48, 0x6f, 0x4c, 0x24, 0x01",
            "46:",
            "mov rax, [rsp + 128]",
            "mov rdx, [rsp + 136]",
            "mov rsp, [rsp + 144]",
            $($tail,)+
            exit = sym exit_entry,
            session = sym recorder::SESSION,
            features = sym crate::features::FEATURES,
            vec_mode = sym crate::calls::tramp::VEC_MODE,
            switch = sym crate::calls::tramp::fntrace_fast_switch_wide,
        )
    };
}

/// Entry trampoline of a patched site's call wrapper (see
/// [`crate::calls::wrapper`]): called by the wrapper's first
/// instruction, before the function's prologue, with every argument
/// register intact. `[rsp]` is the wrapper's return point, whose slot
/// holds the function's start 27 bytes further; `[rsp + 8]` is the
/// function's return-address slot.
///
/// Saves the same registers as `__fentry__` (rax, rdi, rsi, rdx, rcx,
/// r8, r9, r10, xmm0–7; the save area is what `-A` reads). Returns with
/// every register as it was except r11 — free at a function's entry —
/// which is 1 when the call was taken over (its return address moved to
/// the shadow stack: the wrapper then calls the body itself) and 0
/// otherwise (not recording, filtered out, shadow stack full, inside the
/// runtime: the wrapper jumps to the body untouched).
///
/// # Safety
/// Only reached from a wrapper this runtime wrote.
#[unsafe(naked)]
pub unsafe extern "C" fn fntrace_site_entry() {
    saving_trampoline!(
        [
            "xor r11d, r11d",
            "cmp dword ptr [rip + {word}], 0",
            "je 2f",
            // Fast path (6 registers pushed: r11 is the answer, not
            // preserved): the function's start is stored 27 bytes after
            // our return address, its slot is above that return address.
            crate::calls::fast::fast_entry!(
                filtered "pop r9\npop r8\npop rsi\npop rcx\npop rdx\npop rax\nxor r11d, r11d\nret\n",
                "push rax\npush rdx\npush rcx\npush rsi\npush r8\npush r9\n",
                "mov r8, qword ptr [rsp + 48]\nmov r8, qword ptr [r8 + 27]\n",
                crate::calls::fast::check_restored!(),
                "lea r9, [rsp + 56]\n",
                crate::calls::fast::frame_hijack!("lea r9, [rsp + 56]\n"),
                "pop r9\npop r8\npop rsi\npop rcx\npop rdx\npop rax\nmov r11d, 1\nret\n",
                "pop r9\npop r8\npop rsi\npop rcx\npop rdx\npop rax\nxor r11d, r11d\n"
            )
        ],
        [
            "mov rdi, [rbp + 8]",
            "mov rdi, [rdi + 27]",
            "lea rsi, [rbp + 16]",
            "mov rdx, rsp"
        ],
        // The answer comes back in r11.
        ["mov [rsp + 192], rax"],
        [],
        word = sym recorder::SESSION,
        session = sym recorder::SESSION,
        features = sym crate::features::FEATURES,
        switch = sym crate::calls::fast::fntrace_fast_switch,
        exit_ptr = sym EXIT_TRAMPOLINE,
        fcache = sym crate::filter::CACHE,
        has_trace = sym crate::filter::HAS_TRACE,
        entry = sym site_entry,
    )
}

/// Rust side of [`fntrace_site_entry`]: records the entry like
/// `__fentry__` and says whether the return address was taken over.
unsafe extern "C" fn site_entry(func: u64, slot: *mut u64, regs: *const u64) -> u64 {
    let tramp = exit_trampoline_addr();
    // SAFETY: the wrapper is the function's first code, so `slot` is its
    // live return-address slot; `regs` is our save area.
    unsafe { crate::calls::entry::hook_entry(func, slot, tramp, regs) };
    // Taken over exactly when the slot now holds the exit trampoline (a
    // caller's return address never does).
    // SAFETY: as above.
    u64::from(unsafe { slot.read() } == tramp)
}

/// Exit trampoline of a patched site's call wrapper: jumped to after the
/// function body, which the wrapper called, returned into the wrapper.
/// `rsp` is the function's return-address slot + 8; only the return
/// registers are live (rax, rdx, xmm0, xmm1: saved, as in
/// [`fntrace_exit_trampoline`]; r11 is scratch). It records the exit and
/// returns to the original caller with `push; ret`, which the return stack
/// buffer predicts: the caller's own `call` entry is still on top of it,
/// because the wrapper's `call` into the body was balanced by the body's
/// `ret`.
///
/// # Safety
/// Only reached from a wrapper this runtime wrote.
#[unsafe(naked)]
pub unsafe extern "C" fn fntrace_site_exit() {
    // Back to the caller with a `ret` the return stack buffer predicts.
    // Reached through a `jmp [rip]` stub: a landing pad for CET.
    exit_trampoline!(
        ["endbr64"],
        "pop rdx\npop rax\npush r10\nret\n",
        ["push r11", "ret"]
    )
}

/// Where hijacked returns land. Never called directly.
///
/// # Safety
/// Only reached by a `ret` through a return-address slot hijacked by this
/// runtime; never call it.
#[unsafe(naked)]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fntrace_exit_trampoline() {
    exit_trampoline!(
        // A byte before the entry so that `ret_addr - 1` lookups of
        // unwinders and symbolisers fall inside this function.
        ["nop"],
        "pop rdx\npop rax\njmp r10\n",
        ["jmp r11"]
    )
}

/// Width at which the exit trampoline (return values: `__m256`/`__m512`
/// in ymm0/zmm0) and the library-call trampoline (arguments) save vector
/// registers: 0 SSE (xmm), 1 AVX (ymm), 2 AVX-512 (zmm). Set when a
/// session starts ([`detect_vector_width`]).
pub(crate) static VEC_MODE: AtomicU8 = AtomicU8::new(0);

/// Sets `VEC_MODE` from CPUID and XGETBV (whether the OS enabled the
/// state), at most `cap` (`config::ENV_VECTOR_WIDTH`: 0 SSE, 1 AVX, 2
/// AVX-512).
pub fn detect_vector_width(cap: u8) {
    use core::arch::x86_64::{__cpuid, __cpuid_count, _xgetbv};
    let l1 = __cpuid(1);
    let osxsave = l1.ecx & (1 << 27) != 0;
    let avx = l1.ecx & (1 << 28) != 0;
    let mut mode = 0u8;
    if osxsave && avx {
        // SAFETY: XGETBV is available when OSXSAVE is set (checked).
        let xcr0 = unsafe { _xgetbv(0) };
        if xcr0 & 0x6 == 0x6 {
            mode = 1;
            let l7 = __cpuid_count(7, 0);
            if l7.ebx & (1 << 16) != 0 && xcr0 & 0xe6 == 0xe6 {
                mode = 2;
            }
        }
    }
    VEC_MODE.store(mode.min(cap), Ordering::Relaxed);
}

/// A fast path's chunk switch that also keeps vector registers 0–7 at
/// full width (`VEC_MODE`) around
/// [`crate::calls::fast::fntrace_fast_switch`] (which saves the general
/// registers and xmm0–7 only, and calls Rust code that may call the C
/// library's AVX `memcpy`, whose `vzeroupper` clears the upper halves):
/// what the exit trampoline (vector return values) and the library-call
/// entry (vector arguments) need.
///
/// # Safety
/// Only the fast paths call it.
#[unsafe(naked)]
pub unsafe extern "C" fn fntrace_fast_switch_wide() {
    core::arch::naked_asm!(
        "push rbp",
        "mov rbp, rsp",
        "and rsp, -64",
        "sub rsp, 576",
        "mov [rsp + 512], rax",
        "movzx eax, byte ptr [rip + {mode}]",
        "cmp eax, 1",
        "je 11f",
        "ja 12f",
        "movaps [rsp], xmm0",
        "movaps [rsp + 16], xmm1",
        "movaps [rsp + 32], xmm2",
        "movaps [rsp + 48], xmm3",
        "movaps [rsp + 64], xmm4",
        "movaps [rsp + 80], xmm5",
        "movaps [rsp + 96], xmm6",
        "movaps [rsp + 112], xmm7",
        "jmp 13f",
        "11:",
        "vmovdqu [rsp], ymm0",
        "vmovdqu [rsp + 32], ymm1",
        "vmovdqu [rsp + 64], ymm2",
        "vmovdqu [rsp + 96], ymm3",
        "vmovdqu [rsp + 128], ymm4",
        "vmovdqu [rsp + 160], ymm5",
        "vmovdqu [rsp + 192], ymm6",
        "vmovdqu [rsp + 224], ymm7",
        "jmp 13f",
        "12:",
        // vmovdqu64 [rsp + 64 * i], zmm_i
        ".byte 0x62, 0xf1, 0xfe, 0x48, 0x7f, 0x04, 0x24",
        ".byte 0x62, 0xf1, 0xfe, 0x48, 0x7f, 0x4c, 0x24, 0x01",
        ".byte 0x62, 0xf1, 0xfe, 0x48, 0x7f, 0x54, 0x24, 0x02",
        ".byte 0x62, 0xf1, 0xfe, 0x48, 0x7f, 0x5c, 0x24, 0x03",
        ".byte 0x62, 0xf1, 0xfe, 0x48, 0x7f, 0x64, 0x24, 0x04",
        ".byte 0x62, 0xf1, 0xfe, 0x48, 0x7f, 0x6c, 0x24, 0x05",
        ".byte 0x62, 0xf1, 0xfe, 0x48, 0x7f, 0x74, 0x24, 0x06",
        ".byte 0x62, 0xf1, 0xfe, 0x48, 0x7f, 0x7c, 0x24, 0x07",
        "13:",
        "mov rax, [rsp + 512]",
        "call {switch}",
        "mov [rsp + 512], rax",
        "movzx eax, byte ptr [rip + {mode}]",
        "cmp eax, 1",
        "je 21f",
        "ja 22f",
        "movaps xmm0, [rsp]",
        "movaps xmm1, [rsp + 16]",
        "movaps xmm2, [rsp + 32]",
        "movaps xmm3, [rsp + 48]",
        "movaps xmm4, [rsp + 64]",
        "movaps xmm5, [rsp + 80]",
        "movaps xmm6, [rsp + 96]",
        "movaps xmm7, [rsp + 112]",
        "jmp 23f",
        "21:",
        "vmovdqu ymm0, [rsp]",
        "vmovdqu ymm1, [rsp + 32]",
        "vmovdqu ymm2, [rsp + 64]",
        "vmovdqu ymm3, [rsp + 96]",
        "vmovdqu ymm4, [rsp + 128]",
        "vmovdqu ymm5, [rsp + 160]",
        "vmovdqu ymm6, [rsp + 192]",
        "vmovdqu ymm7, [rsp + 224]",
        "jmp 23f",
        "22:",
        // vmovdqu64 zmm_i, [rsp + 64 * i]
        ".byte 0x62, 0xf1, 0xfe, 0x48, 0x6f, 0x04, 0x24",
        ".byte 0x62, 0xf1, 0xfe, 0x48, 0x6f, 0x4c, 0x24, 0x01",
        ".byte 0x62, 0xf1, 0xfe, 0x48, 0x6f, 0x54, 0x24, 0x02",
        ".byte 0x62, 0xf1, 0xfe, 0x48, 0x6f, 0x5c, 0x24, 0x03",
        ".byte 0x62, 0xf1, 0xfe, 0x48, 0x6f, 0x64, 0x24, 0x04",
        ".byte 0x62, 0xf1, 0xfe, 0x48, 0x6f, 0x6c, 0x24, 0x05",
        ".byte 0x62, 0xf1, 0xfe, 0x48, 0x6f, 0x74, 0x24, 0x06",
        ".byte 0x62, 0xf1, 0xfe, 0x48, 0x6f, 0x7c, 0x24, 0x07",
        "23:",
        "mov rax, [rsp + 512]",
        "mov rsp, rbp",
        "pop rbp",
        "ret",
        mode = sym VEC_MODE,
        switch = sym crate::calls::fast::fntrace_fast_switch,
    )
}
