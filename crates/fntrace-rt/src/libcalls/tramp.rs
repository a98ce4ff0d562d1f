//! The library-call entry trampoline: where every hooked GOT slot's stub
//! jumps, before the library function runs.
//!
//! A stub (see [`super::stub_code`]) loads the address of its descriptor
//! (`[r11]` = the function's key, `[r11 + 8]` = the real target) into r11
//! and jumps here. At that point the caller has just executed its `call`
//! (through the PLT or a `-fno-plt` `call [rip + GOT]`): `[rsp]` is its
//! return address, and every argument register of the library function
//! may be live.
//!
//! Registers saved, and why (System V x86_64):
//! - rdi, rsi, rdx, rcx, r8, r9: integer arguments;
//! - rax: the number of vector registers a variadic call uses (`printf`);
//! - r10: the static chain (nested functions), and the syscall-argument
//!   register of hand-written stubs;
//! - r11: our descriptor (the caller treats r11 as clobbered at a call);
//! - the vector argument registers 0–7 at their full width: xmm0–7 on
//!   SSE-only CPUs, ymm0–7 with AVX, zmm0–7 with AVX-512 (`__m256`/`__m512`
//!   arguments, libmvec). The Rust handler may call the C library (whose
//!   `memcpy` ends with `vzeroupper`), so the upper halves are not safe
//!   without this. Vector registers 8–31 and the mask registers carry no
//!   arguments and are caller-saved: the caller expects them clobbered.
//!   x87 state is not an argument (long double goes on the stack) and the
//!   handler never touches it.
//!
//! Callee-saved registers (rbx, rbp, r12–r15) are preserved by the handler
//! itself. The stack arguments above the return address are untouched: the
//! trampoline works below it in a frame of its own (64-byte aligned for the
//! vector saves) and leaves rsp exactly as it found it before jumping to
//! the target, so the library function sees the caller's stack.
//!
//! The exit is observed by return-address replacement, as for `__fentry__`:
//! [`crate::calls::entry::hook_entry`] moves the caller's return address to
//! the shadow stack and puts [`crate::calls::tramp::fntrace_exit_trampoline`]
//! in its place; the library function's `ret` lands there, the exit is
//! recorded and the caller resumes. When nothing records, the trampoline
//! only tests the session word and jumps on.

use crate::calls::tramp::{VEC_MODE, fntrace_fast_switch_wide};
use crate::recorder;

/// Rust side: records the entry of library function `key` whose caller's
/// return address is in `slot`.
unsafe extern "C" fn libcall_entry(key: u64, slot: *mut u64, regs: *const u64) {
    // SAFETY: the trampoline runs at the library function's first
    // instruction (jumped to from its stub), so the word at `slot` is the
    // live return address of the call; `regs` is the save area.
    unsafe {
        crate::calls::entry::hook_entry(
            key,
            slot,
            crate::calls::tramp::exit_trampoline_addr(),
            regs,
        )
    }
}

/// The entry trampoline the stubs jump to (see the module documentation).
///
/// # Safety
/// Only reached from a stub this runtime wrote, with r11 pointing at its
/// descriptor.
#[unsafe(naked)]
pub unsafe extern "C" fn fntrace_libcall_entry() {
    core::arch::naked_asm!(
        // Reached by `jmp [rip]`: a landing pad for CET.
        "endbr64",
        "cmp dword ptr [rip + {session}], 0",
        "je 3f",
        // The common case in assembly (see `calls::fast`): 7 general
        // registers pushed (r11, our descriptor, last: `[rsp]`), the key
        // from the descriptor, the caller's return-address slot 56 bytes
        // up (our entry rsp), the return taken over as `__fentry__` does.
        // Vector registers are not touched, except around a chunk switch
        // (`fntrace_fast_switch_wide` saves them at full width).
        crate::calls::fast::fast_entry!(
            crate::calls::fast::fast_push_args!(),
            "mov r8, qword ptr [r11]\n",
            crate::calls::fast::check_restored!(),
            "lea r9, [rsp + 56]\n",
            crate::calls::fast::frame_hijack!("lea r9, [rsp + 56]\n"),
            concat!(crate::calls::fast::fast_pop_args!(), "jmp qword ptr [r11 + 8]\n"),
            crate::calls::fast::fast_pop_args!()
        ),
        "push rbp",
        "mov rbp, rsp",
        "and rsp, -64",
        "sub rsp, 768",
        // General registers where `saving_trampoline!` keeps them (rdi is
        // word 17 of the area: what `-A` reads).
        crate::calls::tramp::save_gprs!(),
        "movzx eax, byte ptr [rip + {mode}]",
        "cmp eax, 1",
        "je 11f",
        "ja 12f",
        "movaps [rsp + 256], xmm0",
        "movaps [rsp + 272], xmm1",
        "movaps [rsp + 288], xmm2",
        "movaps [rsp + 304], xmm3",
        "movaps [rsp + 320], xmm4",
        "movaps [rsp + 336], xmm5",
        "movaps [rsp + 352], xmm6",
        "movaps [rsp + 368], xmm7",
        "jmp 13f",
        "11:",
        "vmovdqu [rsp + 256], ymm0",
        "vmovdqu [rsp + 288], ymm1",
        "vmovdqu [rsp + 320], ymm2",
        "vmovdqu [rsp + 352], ymm3",
        "vmovdqu [rsp + 384], ymm4",
        "vmovdqu [rsp + 416], ymm5",
        "vmovdqu [rsp + 448], ymm6",
        "vmovdqu [rsp + 480], ymm7",
        "jmp 13f",
        "12:",
        // vmovdqu64 [rsp + 256 + 64 * i], zmm_i (EVEX, disp8 scaled by 64),
        // as bytes: the crate is not compiled with AVX-512 enabled.
        ".byte 0x62, 0xf1, 0xfe, 0x48, 0x7f, 0x44, 0x24, 0x04",
        ".byte 0x62, 0xf1, 0xfe, 0x48, 0x7f, 0x4c, 0x24, 0x05",
        ".byte 0x62, 0xf1, 0xfe, 0x48, 0x7f, 0x54, 0x24, 0x06",
        ".byte 0x62, 0xf1, 0xfe, 0x48, 0x7f, 0x5c, 0x24, 0x07",
        ".byte 0x62, 0xf1, 0xfe, 0x48, 0x7f, 0x64, 0x24, 0x08",
        ".byte 0x62, 0xf1, 0xfe, 0x48, 0x7f, 0x6c, 0x24, 0x09",
        ".byte 0x62, 0xf1, 0xfe, 0x48, 0x7f, 0x74, 0x24, 0x0a",
        ".byte 0x62, 0xf1, 0xfe, 0x48, 0x7f, 0x7c, 0x24, 0x0b",
        "13:",
        "mov rdi, [r11]",
        "lea rsi, [rbp + 8]",
        "mov rdx, rsp",
        "call {entry}",
        "movzx eax, byte ptr [rip + {mode}]",
        "cmp eax, 1",
        "je 21f",
        "ja 22f",
        "movaps xmm0, [rsp + 256]",
        "movaps xmm1, [rsp + 272]",
        "movaps xmm2, [rsp + 288]",
        "movaps xmm3, [rsp + 304]",
        "movaps xmm4, [rsp + 320]",
        "movaps xmm5, [rsp + 336]",
        "movaps xmm6, [rsp + 352]",
        "movaps xmm7, [rsp + 368]",
        "jmp 23f",
        "21:",
        "vmovdqu ymm0, [rsp + 256]",
        "vmovdqu ymm1, [rsp + 288]",
        "vmovdqu ymm2, [rsp + 320]",
        "vmovdqu ymm3, [rsp + 352]",
        "vmovdqu ymm4, [rsp + 384]",
        "vmovdqu ymm5, [rsp + 416]",
        "vmovdqu ymm6, [rsp + 448]",
        "vmovdqu ymm7, [rsp + 480]",
        "jmp 23f",
        "22:",
        // vmovdqu64 zmm_i, [rsp + 256 + 64 * i]
        ".byte 0x62, 0xf1, 0xfe, 0x48, 0x6f, 0x44, 0x24, 0x04",
        ".byte 0x62, 0xf1, 0xfe, 0x48, 0x6f, 0x4c, 0x24, 0x05",
        ".byte 0x62, 0xf1, 0xfe, 0x48, 0x6f, 0x54, 0x24, 0x06",
        ".byte 0x62, 0xf1, 0xfe, 0x48, 0x6f, 0x5c, 0x24, 0x07",
        ".byte 0x62, 0xf1, 0xfe, 0x48, 0x6f, 0x64, 0x24, 0x08",
        ".byte 0x62, 0xf1, 0xfe, 0x48, 0x6f, 0x6c, 0x24, 0x09",
        ".byte 0x62, 0xf1, 0xfe, 0x48, 0x6f, 0x74, 0x24, 0x0a",
        ".byte 0x62, 0xf1, 0xfe, 0x48, 0x6f, 0x7c, 0x24, 0x0b",
        "23:",
        crate::calls::tramp::restore_gprs!(),
        "mov rsp, rbp",
        "pop rbp",
        "3:",
        "jmp qword ptr [r11 + 8]",
        session = sym recorder::SESSION,
        features = sym crate::features::FEATURES,
        switch = sym fntrace_fast_switch_wide,
        exit_ptr = sym crate::calls::tramp::EXIT_TRAMPOLINE,
        mode = sym VEC_MODE,
        entry = sym libcall_entry,
    )
}
