//! The compiler-facing entry points of `gcc -pg`/`rustc
//! -Zinstrument-mcount` (`mcount`, `_mcount`), `gcc -pg -mfentry`
//! (`__fentry__`) and `-finstrument-functions`
//! (`__cyg_profile_func_enter`/`_exit`).
//!
//! Register discipline (System V x86_64): `mcount` runs after the callee's
//! prologue, `__fentry__` before it; in both, every argument register may
//! be live: rdi, rsi, rdx, rcx, r8, r9, rax (the vector-argument count of
//! variadic calls) and xmm0–7, plus r10 (static chain) and r11, which
//! gcc's `-fipa-ra` may assume preserved across the call. All of them are
//! saved by `crate::calls::tramp::saving_trampoline!`; the Rust handler
//! preserves rbx, rbp, r12–r15 itself (callee-saved). The assembly fast
//! path saves fewer (see [`crate::calls::fast`]). The cyg hooks are
//! ordinary C calls: every caller-saved register is free.
//!
//! Stack alignment: `mcount` is called with rsp ≡ 8 (mod 16) on entry and
//! `__fentry__` (before the callee's prologue) with rsp ≡ 0, so both
//! realign with a frame of their own (rbp saved, rsp rounded down).

use crate::calls::tramp::{EXIT_TRAMPOLINE, exit_trampoline_addr, saving_trampoline};
use crate::recorder;

/// Rust side of `mcount`: `pc` is the return address of the `mcount` call
/// (inside the callee, after its prologue), `slot` the callee's
/// return-address slot (`8(%rbp)`).
unsafe extern "C" fn mcount_entry(pc: u64, slot: *mut u64) {
    // SAFETY: with frame pointers (which `-pg` and `-Zinstrument-mcount`
    // force) `8(%rbp)` in the callee is its live return-address slot.
    unsafe { crate::calls::entry::hook_entry(pc, slot, exit_trampoline_addr(), core::ptr::null()) }
}

/// Rust side of `__fentry__` and of patched entry sites: `func` is the
/// callee's start address, `slot` its return-address slot, `regs` the
/// trampoline's save area (arguments intact: the callee's prologue has not
/// run).
unsafe extern "C" fn fentry_entry(func: u64, slot: *mut u64, regs: *const u64) {
    // SAFETY: `__fentry__` (or the patched site) is the callee's first
    // instruction, so the word above the trampoline's own return address is
    // the callee's live return-address slot; `regs` is our save area.
    unsafe { crate::calls::entry::hook_entry(func, slot, exit_trampoline_addr(), regs) }
}

/// The body shared by `mcount` and `__fentry__`: test the session word,
/// set up an aligned frame (the two are called with different stack
/// alignments), save every argument register, load the handler's
/// arguments with `$args` (rbp points at the saved rbp, `[rbp + 8]` is our
/// return address), call `$entry`, restore, return.
macro_rules! entry_trampoline {
    ($entry:ident, $fast_func:expr, $fast_slot:expr, [$($count_args:expr),+], $($args:expr),+) => {
        saving_trampoline!(
            [
                "cmp dword ptr [rip + {word}], 0",
                "je 2f",
                "cmp byte ptr [rip + {count_mode}], 0",
                "jne 3f",
                "1:",
                crate::calls::fast::fast_entry!(
                    filtered concat!(crate::calls::fast::fast_pop_args!(), "ret\n"),
                    crate::calls::fast::fast_push_args!(),
                    $fast_func,
                    crate::calls::fast::check_restored!(),
                    $fast_slot,
                    crate::calls::fast::frame_hijack!($fast_slot),
                    concat!(crate::calls::fast::fast_pop_args!(), "ret\n"),
                    crate::calls::fast::fast_pop_args!()
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
            count_mode = sym crate::count::COUNT_MODE,
            arcs_off = const recorder::ARCS_OFFSET,
            hash_k = const crate::count::HASH_K,
            end_off = const crate::count::END_OFFSET,
            mask_off = const crate::count::MASK_OFFSET,
            slots_off = const crate::count::SLOTS_OFFSET,
            session = sym recorder::SESSION,
            features = sym crate::features::FEATURES,
            switch = sym crate::calls::fast::fntrace_fast_switch,
            exit_ptr = sym EXIT_TRAMPOLINE,
            fcache = sym crate::filter::CACHE,
            has_trace = sym crate::filter::HAS_TRACE,
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
    core::arch::naked_asm!("endbr64", "jmp {m}", m = sym mcount)
}

/// Turns the return address of a `call __fentry__` in register `$r` into
/// the start of the calling function, the same address a converted site's
/// call wrapper records (so that calls made through the hook and through
/// the wrapper have one key): back over the call, 5 bytes (`e8 rel32`, to
/// the PLT) or 6 (`ff 15 disp32`, through the GOT: its second byte is not
/// `e8`), then over a `push %r10` before it (a function taking a static
/// chain, a GNU C nested function: gcc saves r10 around the call, so the
/// function's return-address slot is one word higher; `$bracket` runs
/// then, before the push is stepped over), then over an `endbr64` (and
/// over a `push %r10` before that: gcc's order with `-fcf-protection`).
/// Reads the code just executed and the 8 bytes before it (inside the
/// object's text or its headers); clobbers the flags only.
macro_rules! fentry_start {
    ($r:literal, $bracket:literal) => {
        concat!(
            "sub ",
            $r,
            ", 5\n",
            "cmp byte ptr [",
            $r,
            "], 0xe8\n",
            "je 63f\n",
            "dec ",
            $r,
            "\n",
            "63:\n",
            "cmp word ptr [",
            $r,
            " - 2], 0x5241\n",
            "jne 65f\n",
            $bracket,
            "\n",
            "sub ",
            $r,
            ", 2\n",
            "65:\n",
            // gcc -fcf-protection puts the push before the endbr64.
            "cmp dword ptr [",
            $r,
            " - 4], 0xfa1e0ff3\n",
            "jne 64f\n",
            "sub ",
            $r,
            ", 4\n",
            "cmp word ptr [",
            $r,
            " - 2], 0x5241\n",
            "jne 64f\n",
            $bracket,
            "\n",
            "sub ",
            $r,
            ", 2\n",
            "64:\n",
        )
    };
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
    // func: the start of the function whose call returns to our return
    // address (`fentry_start!`); slot: the word above our return address,
    // or the one above that behind a `push %r10` (the full path only: the
    // fast path and counting mode leave such calls to it).
    entry_trampoline!(
        fentry_entry,
        // Fast path (7 registers pushed): the function from our return
        // address, and the slot above it.
        concat!(
            "mov r8, qword ptr [rsp + 56]\n",
            fentry_start!("r8", "jmp 89f")
        ),
        "lea r9, [rsp + 64]\n",
        [
            "mov rdx, [rsp + 40]",
            "mov rcx, [rsp + 32]",
            fentry_start!("rcx", "jmp 4f")
        ],
        "lea rsi, [rbp + 16]",
        "mov rdi, [rbp + 8]",
        fentry_start!("rdi", "add rsi, 8"),
        "mov rdx, rsp"
    )
}

///
/// # Safety
/// Called by `-finstrument-functions` code with the function's address.
#[unsafe(naked)]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __cyg_profile_func_enter(_this_fn: *mut u8, _call_site: *mut u8) {
    core::arch::naked_asm!(
        "endbr64",
        // The stack mark: the stack pointer of the function that called
        // us (rsi is pushed). The newest frame's must be above it (hooks
        // of inlined functions run with the same stack pointer as their
        // caller's, so an equal mark is not a sign of unwinding): the
        // comparison is with the mark minus 1.
        crate::calls::fast::fast_entry!(
            filtered crate::calls::fast::reject_explicit!("lea r9, [rsp + 16]\n", "pop rsi\nret\n"),
            "push rsi\n",
            "mov r8, rdi\n",
            "",
            "lea r9, [rsp + 15]\n",
            crate::calls::fast::frame_explicit!("lea r9, [rsp + 16]\n"),
            "pop rsi\nret\n",
            "pop rsi\n"
        ),
        "lea rdx, [rsp + 8]",
        "jmp {slow}",
        session = sym recorder::SESSION,
        features = sym crate::features::FEATURES,
        switch = sym crate::calls::fast::fntrace_fast_switch,
        fcache = sym crate::filter::CACHE,
        has_trace = sym crate::filter::HAS_TRACE,
        slow = sym cyg_enter,
    )
}

/// Rust side of [`__cyg_profile_func_enter`]: `sp` is the stack pointer
/// of the instrumented function at its call of the hook.
extern "C" fn cyg_enter(this_fn: *mut u8, call_site: *mut u8, sp: u64) {
    crate::calls::entry::explicit_entry(this_fn as u64, call_site as u64, sp, false)
}

/// `-finstrument-functions` exit hook (the assembly fast path, then
/// `cyg_exit`; rdi is kept).
///
/// # Safety
/// Called by `-finstrument-functions` code with the function's address.
#[unsafe(naked)]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __cyg_profile_func_exit(_this_fn: *mut u8, _call_site: *mut u8) {
    core::arch::naked_asm!(
        "endbr64",
        crate::calls::fast::fast_exit!("", "mov r8, rdi\n", "lea r9, [rsp + 8]\n", "ret\n", ""),
        "lea rdx, [rsp + 8]",
        "jmp {slow}",
        session = sym recorder::SESSION,
        features = sym crate::features::FEATURES,
        switch = sym crate::calls::fast::fntrace_fast_switch,
        slow = sym cyg_exit,
    )
}

/// Rust side of [`__cyg_profile_func_exit`]: `sp` as in [`cyg_enter`].
extern "C" fn cyg_exit(this_fn: *mut u8, _call_site: *mut u8, sp: u64) {
    crate::calls::entry::explicit_exit(this_fn as u64, sp)
}
