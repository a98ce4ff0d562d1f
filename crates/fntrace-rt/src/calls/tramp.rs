//! The trampolines every call-tracking mechanism shares: the exit
//! trampoline that hijacked returns land in, the entry and exit
//! trampolines of patched sites' call wrappers, and the
//! [`saving_trampoline!`] macro the mechanisms' own entry points are built
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
//! - The exit trampoline runs when an instrumented function returns: only
//!   the return registers are live (rax, rdx, xmm0, xmm1; st0/st1 are not
//!   touched). It saves those, asks the shadow stack for the original
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
    ([$($pre:expr),*], [$($args:literal),*], [$($post:literal),*], [$($tail:literal),*], $($operands:tt)*) => {
        core::arch::naked_asm!(
            // An indirect-branch target (PLT jumps, `jmp [rip]` stubs):
            // a landing pad for CET's indirect branch tracking.
            "endbr64",
            $($pre,)*
            "push rbp",
            "mov rbp, rsp",
            "and rsp, -16",
            "sub rsp, 208",
            "mov [rsp + 128], rax",
            "mov [rsp + 136], rdi",
            "mov [rsp + 144], rsi",
            "mov [rsp + 152], rdx",
            "mov [rsp + 160], rcx",
            "mov [rsp + 168], r8",
            "mov [rsp + 176], r9",
            "mov [rsp + 184], r10",
            "mov [rsp + 192], r11",
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
            "mov rax, [rsp + 128]",
            "mov rdi, [rsp + 136]",
            "mov rsi, [rsp + 144]",
            "mov rdx, [rsp + 152]",
            "mov rcx, [rsp + 160]",
            "mov r8, [rsp + 168]",
            "mov r9, [rsp + 176]",
            "mov r10, [rsp + 184]",
            "mov r11, [rsp + 192]",
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
/// (rax, rdx, xmm0, xmm1: saved; r11: scratch), it calls [`exit_entry`]
/// with the slot and rax, restores, and leaves the original return address
/// in r11 for `$tail` to go to.
macro_rules! exit_trampoline {
    ([$($head:literal),*], $fast_done:expr, [$($tail:literal),+]) => {
        core::arch::naked_asm!(
            $($head,)*
            crate::calls::fast::fast_hook_exit!($fast_done, "pop rdx\npop rax\n"),
            // The slot the callee returned from is just below our entry rsp.
            "mov r11, rsp",
            "and rsp, -16",
            "sub rsp, 64",
            "mov [rsp + 48], r11",
            "mov [rsp], rax",
            "mov [rsp + 8], rdx",
            "movaps [rsp + 16], xmm0",
            "movaps [rsp + 32], xmm1",
            "lea rdi, [r11 - 8]",
            "mov rsi, rax",
            "call {exit}",
            "mov r11, rax",
            "mov rax, [rsp]",
            "mov rdx, [rsp + 8]",
            "movaps xmm0, [rsp + 16]",
            "movaps xmm1, [rsp + 32]",
            "mov rsp, [rsp + 48]",
            $($tail,)+
            exit = sym exit_entry,
            session = sym recorder::SESSION,
            features = sym crate::features::FEATURES,
            switch = sym crate::calls::fast::fntrace_fast_switch,
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
/// Saves the same registers as [`__fentry__`] (rax, rdi, rsi, rdx, rcx,
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
