//! XRay trampolines and the event dispatcher.
//!
//! A patched entry, tail-exit or log-args sled runs `mov r10d, id` and
//! calls its trampoline (through a nearby stub) at the very start of the
//! function or just before a tail call: every argument register is live.
//! Saved: rdi, rsi, rdx, rcx, r8, r9, rax (vector count of variadic calls),
//! r11 and xmm0–7, like compiler-rt, and r10 (the body is the one
//! `__fentry__` uses, `calls::tramp::saving_trampoline`). xmm8–15 are not
//! saved: the System V
//! ABI passes no arguments in them and they are caller-saved, so nothing
//! live is in them at a function boundary; the upper halves of ymm/zmm
//! registers (AVX arguments) survive because the handler is built for
//! baseline x86_64 and never executes VEX-encoded instructions, and x87 is
//! never touched. r10 holds the id.
//!
//! A patched exit sled jumps (not calls) to the exit trampoline at the
//! function's `ret`: only the return registers rax, rdx, xmm0 and xmm1 are
//! live; they are saved, the handler runs, and the trampoline's own `ret`
//! returns to the function's caller (a correctly predicted return).
//!
//! All trampolines realign the stack with a frame of their own (rbp saved).

use core::sync::atomic::{AtomicBool, AtomicPtr, Ordering};

use super::sleds::kind;
use crate::recorder;

/// compiler-rt handler: `void (*)(int32_t id, XRayEntryType type)`.
pub type Handler = extern "C" fn(i32, u32);
/// compiler-rt arg1 handler: `void (*)(int32_t, XRayEntryType, uint64_t)`.
pub type HandlerArg1 = extern "C" fn(i32, u32, u64);

/// The handler set with `__xray_set_handler` (null: none).
pub static HANDLER: AtomicPtr<()> = AtomicPtr::new(core::ptr::null_mut());
/// The handler set with `__xray_set_handler_arg1` (null: none).
pub static HANDLER_ARG1: AtomicPtr<()> = AtomicPtr::new(core::ptr::null_mut());
/// Events go to the fntrace recorder when no handler is set.
pub static RECORD: AtomicBool = AtomicBool::new(false);

/// A user handler is set (either kind).
pub static USER: AtomicBool = AtomicBool::new(false);

/// Calls the user's handler for an event; false if none is set.
#[cold]
#[inline(never)]
fn user_handler(id: i32, kind: u32, arg1: u64) -> bool {
    if kind == u32::from(kind::LOG_ARGS) {
        let h = HANDLER_ARG1.load(Ordering::Acquire);
        if !h.is_null() {
            // SAFETY: only `HandlerArg1` values are stored here.
            let h: HandlerArg1 = unsafe { core::mem::transmute(h) };
            recorder::guarded(|| h(id, kind, arg1));
            return true;
        }
    }
    let h = HANDLER.load(Ordering::Acquire);
    if h.is_null() {
        return false;
    }
    // SAFETY: only `Handler` values are stored here.
    let h: Handler = unsafe { core::mem::transmute(h) };
    recorder::guarded(|| h(id, kind));
    true
}

/// Handles an entry (or log-args entry) event. Unlike compiler-rt, a
/// handler that runs instrumented code does not recurse: events inside it
/// are dropped. `slot` is the function's return-address slot (its stack
/// mark, see `calls::entry`).
extern "C" fn dispatch_entry(id: i32, kind: u32, arg1: u64, slot: u64) {
    if USER.load(Ordering::Relaxed) && user_handler(id, kind, arg1) {
        return;
    }
    if RECORD.load(Ordering::Relaxed) {
        let func = super::patch::function_address(id);
        if func != 0 {
            crate::calls::entry::explicit_entry(func, 0, slot, true);
        }
    }
}

/// Handles an exit or tail-exit event; `slot` is the function's
/// return-address slot.
extern "C" fn dispatch_exit(id: i32, kind: u32, arg1: u64, slot: u64) {
    if USER.load(Ordering::Relaxed) && user_handler(id, kind, arg1) {
        return;
    }
    if RECORD.load(Ordering::Relaxed) {
        let func = super::patch::function_address(id);
        if func != 0 {
            crate::calls::entry::explicit_exit(func, slot);
        }
    }
}

/// The assembly fast path's function lookup: recording without a user
/// handler, and the start of function r10d (object `id >> 24`, function
/// `id & 0xffffff` of `patch::FUNCS`) into r8. Jumps to `89f` otherwise.
/// Uses r8 and r9.
macro_rules! xray_func {
    () => {
        concat!(
            "cmp byte ptr [rip + {user}], 0\n",
            "jne 89f\n",
            "cmp byte ptr [rip + {record}], 0\n",
            "je 89f\n",
            "mov r8d, r10d\n",
            "shr r8d, 24\n",
            "lea r9, [rip + {funcs}]\n",
            "mov r9, qword ptr [r9 + r8 * 8]\n",
            "test r9, r9\n",
            "jz 89f\n",
            "mov r8d, r10d\n",
            "and r8d, 0xffffff\n",
            "jz 89f\n",
            "cmp r8, qword ptr [r9]\n",
            "ja 89f\n",
            "mov r8, qword ptr [r9 + r8 * 8]\n",
            "test r8, r8\n",
            "jz 89f\n",
        )
    };
}

/// A trampoline called from a sled: the assembly fast path
/// (`calls::fast`; `$fast` is `entry` or `tail`), then the shared
/// register-saving body with the dispatcher's arguments (id from r10d, the
/// kind, the first argument from rdi for log-args).
macro_rules! call_trampoline {
    ($kind:expr, $dispatch:ident, entry) => {
        call_trampoline!(
            @ $kind,
            $dispatch,
            // The mark: the function's return-address slot, above our
            // return address and the 7 pushed registers.
            crate::calls::fast::fast_entry!(
                filtered crate::calls::fast::reject_explicit!(
                    "lea r9, [rsp + 64]\n",
                    concat!(crate::calls::fast::fast_pop_args!(), "ret\n")
                ),
                crate::calls::fast::fast_push_args!(),
                xray_func!(),
                "",
                "lea r9, [rsp + 64]\n",
                crate::calls::fast::frame_explicit!("lea r9, [rsp + 64]\n"),
                concat!(crate::calls::fast::fast_pop_args!(), "ret\n"),
                crate::calls::fast::fast_pop_args!()
            ),
            fcache = sym crate::filter::CACHE,
            has_trace = sym crate::filter::HAS_TRACE,
        )
    };
    ($kind:expr, $dispatch:ident, tail) => {
        call_trampoline!(
            @ $kind,
            $dispatch,
            crate::calls::fast::fast_exit!(
                crate::calls::fast::fast_push_args!(),
                xray_func!(),
                "lea r9, [rsp + 64]\n",
                concat!(crate::calls::fast::fast_pop_args!(), "ret\n"),
                crate::calls::fast::fast_pop_args!()
            )
        )
    };
    (@ $kind:expr, $dispatch:ident, $fast:expr $(, $($ops:tt)*)?) => {
        crate::calls::tramp::saving_trampoline!(
            [$fast],
            // The function's return-address slot is above our return
            // address.
            ["mov rdx, rdi", "mov edi, r10d", "mov esi, {kind}", "lea rcx, [rbp + 16]"],
            [],
            [],
            kind = const $kind,
            user = sym USER,
            record = sym RECORD,
            funcs = sym super::patch::FUNCS,
            session = sym recorder::SESSION,
            features = sym crate::features::FEATURES,
            switch = sym crate::calls::fast::fntrace_fast_switch,
            entry = sym $dispatch,
            $($($ops)*)?
        )
    };
}

/// Entry trampoline (called from entry sleds).
///
/// # Safety
/// Only patched sleds call it, with the id in r10d.
#[unsafe(naked)]
pub unsafe extern "C" fn fntrace_xray_entry() {
    call_trampoline!(kind::ENTRY as u32, dispatch_entry, entry)
}

/// Tail-exit trampoline (called from tail sleds).
///
/// # Safety
/// Only patched sleds call it, with the id in r10d.
#[unsafe(naked)]
pub unsafe extern "C" fn fntrace_xray_tail() {
    call_trampoline!(kind::TAIL as u32, dispatch_exit, tail)
}

/// Log-args entry trampoline: the handler also gets the first argument.
///
/// # Safety
/// Only patched sleds call it, with the id in r10d.
#[unsafe(naked)]
pub unsafe extern "C" fn fntrace_xray_log_args() {
    call_trampoline!(kind::LOG_ARGS as u32, dispatch_entry, entry)
}

/// Exit trampoline (jumped to from exit sleds, in place of the `ret`).
///
/// # Safety
/// Only patched exit sleds jump here, with the id in r10d and the
/// function's return address on top of the stack.
#[unsafe(naked)]
pub unsafe extern "C" fn fntrace_xray_exit() {
    core::arch::naked_asm!(
        // Reached through a `jmp [rip]` stub: a landing pad for CET.
        "endbr64",
        // Fast path: rax and rdx saved, r8, r9, r11, rcx, rsi clobbered
        // (dead at a `ret`).
        // The function's return-address slot is at our entry rsp.
        crate::calls::fast::fast_exit!(
            "push rax\npush rdx\n",
            xray_func!(),
            "lea r9, [rsp + 16]\n",
            "pop rdx\npop rax\nret\n",
            "pop rdx\npop rax\n"
        ),
        "push rbp",
        "mov rbp, rsp",
        "and rsp, -16",
        "sub rsp, 64",
        "movaps [rsp], xmm0",
        "movaps [rsp + 16], xmm1",
        "mov [rsp + 32], rax",
        "mov [rsp + 40], rdx",
        "mov edi, r10d",
        "mov esi, {kind}",
        "xor edx, edx",
        "lea rcx, [rbp + 8]",
        "call {dispatch}",
        "movaps xmm0, [rsp]",
        "movaps xmm1, [rsp + 16]",
        "mov rax, [rsp + 32]",
        "mov rdx, [rsp + 40]",
        "mov rsp, rbp",
        "pop rbp",
        "ret",
        kind = const kind::EXIT as u32,
        dispatch = sym dispatch_exit,
        user = sym USER,
        record = sym RECORD,
        funcs = sym super::patch::FUNCS,
        session = sym recorder::SESSION,
        features = sym crate::features::FEATURES,
        switch = sym crate::calls::fast::fntrace_fast_switch,
    )
}

/// Addresses of the entry, exit, tail and log-args trampolines (the stub
/// order of `patch`).
pub fn targets() -> [u64; 4] {
    [
        fntrace_xray_entry as *const () as u64,
        fntrace_xray_exit as *const () as u64,
        fntrace_xray_tail as *const () as u64,
        fntrace_xray_log_args as *const () as u64,
    ]
}
