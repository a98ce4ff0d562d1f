//! The compiler-facing entry points and the exit trampoline.
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
static EXIT_TRAMPOLINE: unsafe extern "C" fn() = fntrace_exit_trampoline;

/// Address of the exit trampoline (past its leading padding byte).
#[inline(always)]
pub fn exit_trampoline_addr() -> u64 {
    fntrace_exit_trampoline as *const () as usize as u64 + 1
}

/// Rust side of `mcount`: `pc` is the return address of the `mcount` call
/// (inside the callee, after its prologue), `slot` the callee's
/// return-address slot (`8(%rbp)`).
unsafe extern "C" fn mcount_entry(pc: u64, slot: *mut u64) {
    // SAFETY: with frame pointers (which `-pg` and `-Zinstrument-mcount`
    // force) `8(%rbp)` in the callee is its live return-address slot.
    unsafe { recorder::hook_entry(pc, slot, exit_trampoline_addr(), core::ptr::null()) }
}

/// Rust side of `__fentry__` and of patched entry sites: `func` is the
/// callee's start address, `slot` its return-address slot, `regs` the
/// trampoline's save area (arguments intact: the callee's prologue has not
/// run).
unsafe extern "C" fn fentry_entry(func: u64, slot: *mut u64, regs: *const u64) {
    // SAFETY: `__fentry__` (or the patched site) is the callee's first
    // instruction, so the word above the trampoline's own return address is
    // the callee's live return-address slot; `regs` is our save area.
    unsafe { recorder::hook_entry(func, slot, exit_trampoline_addr(), regs) }
}

/// Rust side of the exit trampoline.
extern "C" fn exit_entry(slot: u64, rax: u64) -> u64 {
    recorder::hook_exit(slot, rax)
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

/// The body shared by `mcount` and `__fentry__`: test the session word,
/// set up an aligned frame (the two are called with different stack
/// alignments), save every argument register, load the handler's
/// arguments with `$args` (rbp points at the saved rbp, `[rbp + 8]` is our
/// return address), call `$entry`, restore, return.
macro_rules! entry_trampoline {
    ($entry:ident, $fast_func:expr, $fast_slot:expr, [$($count_args:literal),+], $($args:literal),+) => {
        saving_trampoline!(
            [
                "cmp dword ptr [rip + {word}], 0",
                "je 2f",
                "cmp byte ptr [rip + {count_mode}], 0",
                "jne 3f",
                "1:",
                super::fast::fast_entry!(
                    super::fast::fast_push_args!(),
                    $fast_func,
                    super::fast::check_restored!(),
                    super::fast::frame_hijack!($fast_slot),
                    concat!(super::fast::fast_pop_args!(), "ret\n"),
                    super::fast::fast_pop_args!()
                )
            ],
            [$($args),+],
            [],
            [
                // Counting mode fast path: linear probes of the thread's
                // arc table until the arc, an empty slot (the table is
                // never more than a quarter full) or the end of the slots;
                // a hit increments the count, anything else (no table yet,
                // a new arc, the end) takes the full path above. Uses rax,
                // rcx, rdx, r11, saved here. `$count_args` loads rdx = call
                // site and rcx = callee key (rsp + 32 is our return
                // address).
                "3:",
                "push rax",
                "push rcx",
                "push rdx",
                "push r11",
                $($count_args,)+
                "mov rax, qword ptr [rip + fntrace_thread_state@GOTTPOFF]",
                "mov rax, qword ptr fs:[rax + {arcs_off}]",
                "test rax, rax",
                "jz 4f",
                // i = ((from ^ rol(to, 29)) * K) >> 32, as count::hash.
                "mov r11, rcx",
                "rol r11, 29",
                "xor r11, rdx",
                "imul r11, r11, {hash_k}",
                "shr r11, 32",
                "and r11, [rax + {mask_off}]",
                "lea r11, [r11 + r11 * 2]",
                "lea r11, [rax + r11 * 8 + {slots_off}]",
                "5:",
                "cmp qword ptr [r11 + 16], 0",
                "je 4f",
                "cmp [r11], rdx",
                "jne 6f",
                "cmp [r11 + 8], rcx",
                "jne 6f",
                "inc qword ptr [r11 + 16]",
                "pop r11",
                "pop rdx",
                "pop rcx",
                "pop rax",
                "ret",
                "6:",
                "add r11, 24",
                "cmp r11, [rax + {end_off}]",
                "jb 5b",
                "4:",
                "pop r11",
                "pop rdx",
                "pop rcx",
                "pop rax",
                "jmp 1b"
            ],
            word = sym recorder::SESSION,
            count_mode = sym super::count::COUNT_MODE,
            arcs_off = const recorder::ARCS_OFFSET,
            hash_k = const super::count::HASH_K,
            end_off = const super::count::END_OFFSET,
            mask_off = const super::count::MASK_OFFSET,
            slots_off = const super::count::SLOTS_OFFSET,
            session = sym recorder::SESSION,
            features = sym crate::filter::FEATURES,
            switch = sym super::fast::fntrace_fast_switch,
            exit_ptr = sym EXIT_TRAMPOLINE,
            entry = sym $entry,
        )
    };
}

/// glibc-compatible `mcount`, called by `gcc -pg` and
/// `rustc -Zinstrument-mcount` code after the prologue.
///
/// # Safety
/// Only compiler-generated instrumentation may call this, with the calling
/// convention described in the module documentation.
#[unsafe(naked)]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mcount() {
    // pc: our return address; slot: 8 above the callee's frame pointer
    // (which our frame saved at [rbp]).
    entry_trampoline!(
        mcount_entry,
        // Fast path (7 registers pushed): pc is the return address, the
        // slot is 8 above the callee's frame pointer (rbp, untouched).
        "mov r8, qword ptr [rsp + 56]\n",
        "lea r9, [rbp + 8]\n",
        ["mov rdx, [rbp + 8]", "mov rcx, [rsp + 32]"],
        "mov rdi, [rbp + 8]",
        "mov rsi, [rbp]",
        "add rsi, 8"
    )
}

/// The other spelling of [`mcount`] some toolchains emit.
///
/// # Safety
/// Only compiler-generated instrumentation may call this, with the calling
/// convention described in the module documentation.
#[unsafe(naked)]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn _mcount() {
    core::arch::naked_asm!("jmp {m}", m = sym mcount)
}

/// `__fentry__`, called by `gcc -pg -mfentry` code as the first
/// instruction of every function.
///
/// # Safety
/// Only compiler-generated instrumentation may call this, with the calling
/// convention described in the module documentation.
#[unsafe(naked)]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __fentry__() {
    // func: our return address minus the 5-byte call; slot: the word above
    // our return address.
    entry_trampoline!(
        fentry_entry,
        // Fast path (7 registers pushed): our return address minus the
        // call, and the slot above it.
        "mov r8, qword ptr [rsp + 56]\nsub r8, 5\n",
        "lea r9, [rsp + 64]\n",
        ["mov rdx, [rsp + 40]", "mov rcx, [rsp + 32]", "sub rcx, 5"],
        "mov rdi, [rbp + 8]",
        "sub rdi, 5",
        "lea rsi, [rbp + 16]",
        "mov rdx, rsp"
    )
}

/// The body shared by the exit trampolines: entered with rsp just above
/// the function's return-address slot and only the return registers live
/// (rax, rdx, xmm0, xmm1: saved; r11: scratch), it calls [`exit_entry`]
/// with the slot and rax, restores, and leaves the original return address
/// in r11 for `$tail` to go to.
macro_rules! exit_trampoline {
    ([$($head:literal),*], $fast_done:expr, [$($tail:literal),+]) => {
        core::arch::naked_asm!(
            $($head,)*
            super::fast::fast_hook_exit!($fast_done, "pop rdx\npop rax\n"),
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
            features = sym crate::filter::FEATURES,
            switch = sym super::fast::fntrace_fast_switch,
        )
    };
}

/// Entry trampoline of a patched site's call wrapper (see
/// [`crate::dynamic::wrapper`]): called by the wrapper's first
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
            super::fast::fast_entry!(
                "push rax\npush rdx\npush rcx\npush rsi\npush r8\npush r9\n",
                "mov r8, qword ptr [rsp + 48]\nmov r8, qword ptr [r8 + 27]\n",
                super::fast::check_restored!(),
                super::fast::frame_hijack!("lea r9, [rsp + 56]\n"),
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
        features = sym crate::filter::FEATURES,
        switch = sym super::fast::fntrace_fast_switch,
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
    unsafe { recorder::hook_entry(func, slot, tramp, regs) };
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
    exit_trampoline!([], "pop rdx\npop rax\npush r10\nret\n", ["push r11", "ret"])
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

/// `-finstrument-functions` entry hook: an ordinary C call, so every
/// caller-saved register is free. The assembly fast path keeps only rsi
/// (the call site, which counting mode needs); anything it does not handle
/// goes to [`cyg_enter`] with both arguments intact.
///
/// # Safety
/// Called by `-finstrument-functions` code with the function's address.
#[unsafe(naked)]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __cyg_profile_func_enter(_this_fn: *mut u8, _call_site: *mut u8) {
    core::arch::naked_asm!(
        super::fast::fast_entry!(
            "push rsi\n",
            "mov r8, rdi\n",
            "",
            super::fast::frame_explicit!(),
            "pop rsi\nret\n",
            "pop rsi\n"
        ),
        "jmp {slow}",
        session = sym recorder::SESSION,
        features = sym crate::filter::FEATURES,
        switch = sym super::fast::fntrace_fast_switch,
        slow = sym cyg_enter,
    )
}

/// Rust side of [`__cyg_profile_func_enter`].
extern "C" fn cyg_enter(this_fn: *mut u8, call_site: *mut u8) {
    recorder::explicit_entry(this_fn as u64, call_site as u64)
}

/// `-finstrument-functions` exit hook (the assembly fast path, then
/// [`cyg_exit`]; rdi is kept).
///
/// # Safety
/// Called by `-finstrument-functions` code with the function's address.
#[unsafe(naked)]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __cyg_profile_func_exit(_this_fn: *mut u8, _call_site: *mut u8) {
    core::arch::naked_asm!(
        super::fast::fast_exit!("", "mov r8, rdi\n", "ret\n", ""),
        "jmp {slow}",
        session = sym recorder::SESSION,
        features = sym crate::filter::FEATURES,
        switch = sym super::fast::fntrace_fast_switch,
        slow = sym cyg_exit,
    )
}

/// Rust side of [`__cyg_profile_func_exit`].
extern "C" fn cyg_exit(this_fn: *mut u8, _call_site: *mut u8) {
    recorder::explicit_exit(this_fn as u64)
}
