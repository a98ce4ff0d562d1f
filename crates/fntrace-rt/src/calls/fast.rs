//! The assembly fast path of the trampolines: records an entry or an exit
//! without calling into Rust, so a trampoline saves only the few registers
//! the fast path uses instead of every argument register and xmm0–7.
//!
//! The fast path handles the common case and nothing else: a recording
//! thread attached to the current session, not inside the recorder, no
//! `--depth`/`-A`/counting features, room on the shadow stack, and (for
//! exits) the newest shadow frame is the one returning. Under `-F`/`-N`
//! (`FEAT_FILTERS`), the entries of the compiler mechanisms decide a call
//! of a function whose class the filter cache holds as ordinary
//! (`fast_filter!`): outside every `-F` region or inside a `-N` one it
//! is left alone (no frame for a hijacked return; an unrecorded frame for
//! an explicit exit to pop), otherwise recorded as without filters; the
//! `-F`/`-N` functions themselves, a cache miss and a framework turned off
//! take the Rust path. Anything
//! else — and an event that does not encode in one 8-byte word — leaves
//! every register as it found it and falls through to the trampoline's
//! full path, which does the same work in Rust (`crate::calls::entry::hook_entry`,
//! `hook_exit`, `explicit_entry`, `explicit_exit`) and handles every
//! case. The two paths write the same bytes: the event encodings are the
//! ones of `fntrace_format::event` (`pack_entry_same`, `pack_entry_new`,
//! `pack_exit`), and a unit test in `recorder` runs both on the same
//! inputs.
//!
//! The fast path sets the thread's `busy` flag before reading any state it
//! updates and clears it after the last store, as the Rust path does, so a
//! signal handler that runs instrumented code in between is counted as
//! lost instead of interleaving its events. A chunk filled by the event is
//! switched by calling [`fntrace_fast_switch`] (every register saved).
//!
//! The record-time time filter (`-t`, `FEAT_TIME` alone) has a fast path
//! of its own, taken once the thread's `pend.fast` threshold is set (the
//! Rust path sets it at the thread's first held call; it stays 0 while
//! some function has a threshold of its own): an entry reads the TSC and
//! stores a 16-byte held call (`recorder::pending`), nothing encoded, no
//! chunk touched; an exit reads the TSC and, for a held call shorter than
//! the threshold, pops it, and nothing is written. Everything else (a long
//! call, whose held callers are written; a call written already; a full
//! stack) bails out to the Rust path (`pending::enter`/`exit`), which
//! does the same and more.
//!
//! Register use, for the trampolines' documentation:
//! - entries (`fast_entry!`, also the XRay tail exit, `fast_exit!` with
//!   `fast_push_args!`): rax, rdx, rcx, rsi, r8, r9, r11 are pushed and
//!   popped (argument registers and the scratch registers gcc may assume
//!   preserved); rdi, r10 and vector registers are not touched;
//! - exits (`fast_exit!`, `fast_hook_exit!`) run where only the return
//!   registers are live: rax and rdx are pushed and popped, rcx, rsi, r8,
//!   r9, r10, r11 are clobbered (dead at a `ret`), xmm0/xmm1 are not
//!   touched.
//!
//! Offsets into the thread state are literals here (an assembly template
//! cannot take them as `const` operands from a macro), checked against
//! `offset_of!` by `recorder::state` at compile time (the asm↔struct
//! contract lives there, next to the structures).

use crate::recorder;

/// Pushes the registers the entry fast path uses (7 words: the
/// trampoline's return address is then at `rsp + 56`).
macro_rules! fast_push_args {
    () => {
        "push rax\npush rdx\npush rcx\npush rsi\npush r8\npush r9\npush r11\n"
    };
}
/// Pops what [`fast_push_args!`] pushed.
macro_rules! fast_pop_args {
    () => {
        "pop r11\npop r9\npop r8\npop rsi\npop rcx\npop rdx\npop rax\n"
    };
}
pub(crate) use {fast_pop_args, fast_push_args};

/// The thread state into r11 and the checks every fast path makes: a
/// session is active (a thread that never attached has session 0 too),
/// the thread is attached to it, no hot-path feature but the time filter
/// (`FEAT_TIME`, 16) is on — and the filters (`FEAT_FILTERS`, 1) in the
/// `filtered` form, for paths that decide them ([`fast_filter!`]) or
/// whose shadow frame carries the decision (exits) — the thread is not
/// inside the recorder. Jumps to `89f` otherwise.
/// Operands: `session` (`recorder::SESSION`), `features`
/// (`features::FEATURES`).
macro_rules! fast_checks {
    () => {
        $crate::calls::fast::fast_checks!("0xffffffef")
    };
    (filtered) => {
        $crate::calls::fast::fast_checks!("0xffffffee")
    };
    ($mask:literal) => {
        concat!(
            "mov r11, qword ptr fs:[0]\n",
            "add r11, qword ptr [rip + fntrace_thread_state@GOTTPOFF]\n",
            "mov eax, dword ptr [rip + {session}]\n",
            "test eax, eax\n",
            "jz 89f\n",
            "cmp dword ptr [r11 + ",
            $crate::recorder::t_session!(),
            "], eax\n",
            "jne 89f\n",
            "test dword ptr [rip + {features}], ",
            $mask,
            "\n",
            "jne 89f\n",
            "cmp byte ptr [r11 + ",
            $crate::recorder::t_busy!(),
            "], 0\n",
            "jne 89f\n",
        )
    };
}
pub(crate) use fast_checks;

/// Sets `busy`, reads the TSC and leaves the delta from the chunk's last
/// timed record in rax (0 if the TSC went backwards) and the new
/// `last_tsc` in rsi. Clobbers rdx.
macro_rules! fast_delta {
    () => {
        concat!(
            "mov byte ptr [r11 + ",
            $crate::recorder::t_busy!(),
            "], 1\n",
            "rdtsc\n",
            "shl rdx, 32\n",
            "or rax, rdx\n",
            "mov rsi, rax\n",
            "sub rax, qword ptr [r11 + ",
            $crate::recorder::t_last_tsc!(),
            "]\n",
            "jae 81f\n",
            "xor eax, eax\n",
            "mov rsi, qword ptr [r11 + ",
            $crate::recorder::t_last_tsc!(),
            "]\n",
            "81:\n",
        )
    };
}
pub(crate) use fast_delta;

/// Appends the LEB128 encoding of r9 to the word in rax at bit offset ecx
/// (advanced past it); jumps to `88f` if the word would exceed 8 bytes.
/// `$l` is a fresh local label number, `$m` another. Clobbers rdx, r9.
macro_rules! fast_varint {
    ($l:literal, $m:literal) => {
        concat!(
            $l,
            ":\n",
            "cmp ecx, 56\n",
            "ja 88f\n",
            "mov edx, r9d\n",
            "and edx, 0x7f\n",
            "shr r9, 7\n",
            "jz ",
            $m,
            "f\n",
            "or edx, 0x80\n",
            "shl rdx, cl\n",
            "or rax, rdx\n",
            "add ecx, 8\n",
            "jmp ",
            $l,
            "b\n",
            $m,
            ":\n",
            "shl rdx, cl\n",
            "or rax, rdx\n",
            "add ecx, 8\n",
        )
    };
}
pub(crate) use fast_varint;

/// Turns the delta in rax into a record's first byte (`$base` | the low
/// `$bits` bits | `$cont` when more follow) followed by the LEB128 rest;
/// the word is left in rax and its length in bits in ecx. A rest below 128
/// (one more byte at most, the common case) is encoded without branches,
/// since whether it is zero changes from event to event; larger ones go
/// through the loop. `$shift` is log2(`$cont`). Clobbers rdx, r9. `$l`,
/// `$m`, `$n`: fresh local label numbers.
macro_rules! fast_first {
    ($bits:literal, $mask:literal, $base:literal, $shift:literal, $l:literal, $m:literal, $n:literal) => {
        concat!(
            "mov r9, rax\n",
            "shr r9, ",
            $bits,
            "\n",
            "and eax, ",
            $mask,
            "\n",
            "or eax, ",
            $base,
            "\n",
            "cmp r9, 127\n",
            "ja ",
            $n,
            "f\n",
            "xor edx, edx\n",
            "test r9, r9\n",
            "setnz dl\n",
            "lea ecx, [8 + rdx * 8]\n",
            "shl edx, ",
            $shift,
            "\n",
            "or eax, edx\n",
            "shl r9, 8\n",
            "or rax, r9\n",
            "jmp ",
            $n,
            "0f\n",
            $n,
            ":\n",
            "or eax, 1 << ",
            $shift,
            "\n",
            "mov ecx, 8\n",
            $crate::calls::fast::fast_varint!($l, $m),
            $n,
            "0:\n",
        )
    };
}
pub(crate) use fast_first;

/// Writes the word in rax (ecx bits) at the cursor and advances it (the
/// new position stays in rdx for [`fast_tail!`]); rsi becomes `last_tsc`.
macro_rules! fast_store {
    () => {
        concat!(
            "shr ecx, 3\n",
            "mov rdx, qword ptr [r11 + ",
            $crate::recorder::t_pos!(),
            "]\n",
            "mov qword ptr [rdx], rax\n",
            "add rdx, rcx\n",
            "mov qword ptr [r11 + ",
            $crate::recorder::t_pos!(),
            "], rdx\n",
            "mov qword ptr [r11 + ",
            $crate::recorder::t_last_tsc!(),
            "], rsi\n",
        )
    };
}
pub(crate) use fast_store;

/// The end of every fast path once the event is stored: the chunk switch
/// if the write crossed the limit, `busy` cleared, then `$done` (the
/// registers restored and the way out). `88`: a bail-out after `busy` was
/// set, `89`: before; both end at `$bail` with nothing changed.
macro_rules! fast_tail {
    ($done:expr, $bail:expr) => {
        concat!(
            // rdx: the new position, left by `fast_store!` (nothing
            // between them touches rdx).
            "cmp rdx, qword ptr [r11 + ",
            $crate::recorder::t_limit!(),
            "]\n",
            "ja 86f\n",
            "mov byte ptr [r11 + ",
            $crate::recorder::t_busy!(),
            "], 0\n",
            "85:\n",
            $done,
            "86:\n",
            // Clears `busy` itself, after the switch.
            "call {switch}\n",
            "jmp 85b\n",
            "88:\n",
            "mov byte ptr [r11 + ",
            $crate::recorder::t_busy!(),
            "], 0\n",
            "89:\n",
            $bail,
        )
    };
}
pub(crate) use fast_tail;

/// The entry under the time filter (`FEAT_TIME` is the only feature): the
/// call `r8` is held (its TSC and function stored on the thread's
/// `pend` stack); bails out (`89f` before setting `busy`, `88f` after)
/// when the thread's `pend.fast` is 0, the stack is full, calls were
/// opened past it or values were captured. Leaves rdx 0 (below any chunk
/// limit, for [`fast_tail!`]) and jumps to `51f`, the shadow frame's push.
/// Clobbers rax, rcx, rdx, rsi.
macro_rules! fast_time_entry {
    () => {
        concat!(
            "cmp qword ptr [r11 + ",
            $crate::recorder::t_pend_fast!(),
            "], 0\n",
            "je 89f\n",
            "mov byte ptr [r11 + ",
            $crate::recorder::t_busy!(),
            "], 1\n",
            "mov ecx, dword ptr [r11 + ",
            $crate::recorder::t_pend_len!(),
            "]\n",
            "cmp ecx, ",
            $crate::recorder::pend_capacity!(),
            "\n",
            "jae 88f\n",
            "cmp dword ptr [r11 + ",
            $crate::recorder::t_pend_over!(),
            "], 0\n",
            "jne 88f\n",
            "cmp byte ptr [r11 + ",
            $crate::recorder::t_pend_captured!(),
            "], 0\n",
            "jne 88f\n",
            // `fast` is only set once `base` is reserved.
            "mov rsi, qword ptr [r11 + ",
            $crate::recorder::t_pend_base!(),
            "]\n",
            "rdtsc\n",
            "shl rdx, 32\n",
            "or rax, rdx\n",
            "shl rcx, 4\n",
            "mov qword ptr [rsi + rcx], rax\n",
            "mov qword ptr [rsi + rcx + 8], r8\n",
            "inc dword ptr [r11 + ",
            $crate::recorder::t_pend_len!(),
            "]\n",
            "xor edx, edx\n",
            "jmp 51f\n",
        )
    };
}
pub(crate) use fast_time_entry;

/// The exit under the time filter, `busy` not set yet: the newest held
/// call, not written yet, lasted less than `pend.fast` ticks: it is
/// popped with the newest shadow frame (nothing is written). Anything else
/// bails out (`89f`/`88f`) to the Rust path, which writes a long call.
/// Leaves rdx 0 for [`fast_tail!`], then jumps to `57f`. Clobbers rax,
/// rcx, rdx, rsi.
macro_rules! fast_time_exit {
    () => {
        concat!(
            "mov rsi, qword ptr [r11 + ",
            $crate::recorder::t_pend_fast!(),
            "]\n",
            "test rsi, rsi\n",
            "jz 89f\n",
            "mov byte ptr [r11 + ",
            $crate::recorder::t_busy!(),
            "], 1\n",
            "mov ecx, dword ptr [r11 + ",
            $crate::recorder::t_pend_len!(),
            "]\n",
            "cmp ecx, dword ptr [r11 + ",
            $crate::recorder::t_pend_written!(),
            "]\n",
            "jbe 88f\n",
            "cmp dword ptr [r11 + ",
            $crate::recorder::t_pend_over!(),
            "], 0\n",
            "jne 88f\n",
            "cmp byte ptr [r11 + ",
            $crate::recorder::t_pend_captured!(),
            "], 0\n",
            "jne 88f\n",
            "dec ecx\n",
            "shl rcx, 4\n",
            "add rcx, qword ptr [r11 + ",
            $crate::recorder::t_pend_base!(),
            "]\n",
            "rdtsc\n",
            "shl rdx, 32\n",
            "or rax, rdx\n",
            "sub rax, qword ptr [rcx]\n",
            "cmp rax, rsi\n",
            "jae 88f\n",
            "dec dword ptr [r11 + ",
            $crate::recorder::t_pend_len!(),
            "]\n",
            "dec qword ptr [r11 + ",
            $crate::recorder::t_sh_len!(),
            "]\n",
            "xor edx, edx\n",
            "jmp 57f\n",
        )
    };
}
pub(crate) use fast_time_exit;

/// The `-F`/`-N` decision of an entry (`FEAT_FILTERS`), for a function in
/// r8 on the thread in r11, the new frame's mark in r9 (kept): a hit of
/// class `NORMAL` in the filter cache (`filter::CACHE`, the same slot
/// formula; the entry is then exactly `r8 << 4`) is decided here — left
/// alone when the thread is inside a `-N` region, or outside every `-F`
/// region while `-F` is given: `$reject` runs (it must leave: restore the
/// pushed registers and return; `busy` is not set); otherwise the entry
/// goes on to be recorded. A miss or any other class (`-F`, `-N`, a
/// framework turned off) bails out (`89f`) to the Rust path, which fills
/// the cache. Without the feature, nothing. `$go` (default `83f`, the
/// end of this code) is where a call to record goes. Clobbers rax, rdx.
/// Operands: `fcache` (`filter::CACHE`), `has_trace` (`filter::HAS_TRACE`).
macro_rules! fast_filter {
    ($reject:expr) => {
        $crate::calls::fast::fast_filter!($reject, "83f")
    };
    ($reject:expr, $go:literal) => {
        concat!(
            "test dword ptr [rip + {features}], 1\n",
            "jz ",
            $go,
            "\n",
            "mov rax, r8\n",
            "shr rax, 4\n",
            "mov rdx, r8\n",
            "shr rdx, 16\n",
            "xor rax, rdx\n",
            "and eax, 4095\n",
            "lea rdx, [rip + {fcache}]\n",
            "mov rax, qword ptr [rdx + rax * 8]\n",
            "mov rdx, r8\n",
            "shl rdx, 4\n",
            "cmp rax, rdx\n",
            "jne 89f\n",
            "cmp dword ptr [r11 + ",
            $crate::recorder::t_notrace_regions!(),
            "], 0\n",
            "jne 84f\n",
            "cmp byte ptr [rip + {has_trace}], 0\n",
            "je ",
            $go,
            "\n",
            "cmp dword ptr [r11 + ",
            $crate::recorder::t_trace_regions!(),
            "], 0\n",
            "jne ",
            $go,
            "\n",
            "84:\n",
            $reject,
            "83:\n",
        )
    };
}
pub(crate) use fast_filter;

/// What an explicit-exit entry (cyg_profile, XRay) does with a call the
/// filters leave alone, as the Rust path does: an unrecorded shadow frame
/// (flags 0, mark `$mark` loaded into r9) for its exit to pop, then
/// `$done`. Clobbers rax, rcx.
macro_rules! reject_explicit {
    ($mark:expr, $done:expr) => {
        concat!(
            "mov rcx, qword ptr [r11 + ",
            $crate::recorder::t_sh_len!(),
            "]\n",
            "mov rax, rcx\n",
            "shl rax, 5\n",
            "add rax, qword ptr [r11 + ",
            $crate::recorder::t_sh_base!(),
            "]\n",
            "mov qword ptr [rax + 16], r8\n",
            $mark,
            "mov qword ptr [rax], 0\n",
            "mov qword ptr [rax + 8], r9\n",
            "mov qword ptr [rax + 24], 0\n",
            "inc rcx\n",
            "mov qword ptr [r11 + ",
            $crate::recorder::t_sh_len!(),
            "], rcx\n",
            $done,
        )
    };
}
pub(crate) use reject_explicit;

/// The entry fast path: `$push` saves what it must of rax, rdx, rcx, rsi,
/// r8, r9 and r11 (usually [`fast_push_args!`]), `$func` loads the
/// function key into r8 (it may jump to `89f`); `$restored_check` is
/// [`check_restored!`] for entries whose exit is taken over; `$mark` loads
/// the new frame's stack mark into r9 (its return-address slot, or the
/// stack pointer of the hook call); `$frame` fills the frame at rax
/// ([`frame_explicit!`] or [`frame_hijack!`]); `$done` and `$bail` as in
/// [`fast_tail!`] (the pushed registers are still on the stack at both).
/// A newest frame whose mark is at or below the new one's was unwound
/// (exception, `longjmp`): the Rust path closes it (an empty stack has a
/// sentinel frame with the highest mark below `base`). Operands:
/// `session`, `features`, `switch` and those of `$func`/`$frame`.
macro_rules! fast_entry {
    ($push:expr, $func:expr, $restored_check:expr, $mark:expr, $frame:expr, $done:expr, $bail:expr) => {
        $crate::calls::fast::fast_entry!(
            @ $crate::calls::fast::fast_checks!(),
            "",
            "",
            $push,
            $func,
            $restored_check,
            $mark,
            $frame,
            $done,
            $bail
        )
    };
    (filtered $reject:expr, $push:expr, $func:expr, $restored_check:expr, $mark:expr, $frame:expr, $done:expr, $bail:expr) => {
        $crate::calls::fast::fast_entry!(
            @ $crate::calls::fast::fast_checks!(filtered),
            $crate::calls::fast::fast_filter!($reject),
            // No shadow stack yet: nothing to unwind, the filters can
            // still leave the call alone (a thread whose every call is
            // outside the selection never reserves one); anything else
            // is for the Rust path, which reserves it.
            $crate::calls::fast::fast_filter!($reject, "89f"),
            $push,
            $func,
            $restored_check,
            $mark,
            $frame,
            $done,
            $bail
        )
    };
    (@ $checks:expr, $filter:expr, $nostack:expr, $push:expr, $func:expr, $restored_check:expr, $mark:expr, $frame:expr, $done:expr, $bail:expr) => {
        concat!(
            $push,
            $func,
            $checks,
            $restored_check,
            "mov rcx, qword ptr [r11 + ",
            $crate::recorder::t_sh_len!(),
            "]\n",
            "cmp rcx, ",
            $crate::recorder::sh_capacity!(),
            "\n",
            "jae 89f\n",
            "mov rax, qword ptr [r11 + ",
            $crate::recorder::t_sh_base!(),
            "]\n",
            "test rax, rax\n",
            "jnz 78f\n",
            $nostack,
            "jmp 89f\n",
            "78:\n",
            // The newest frame's mark (the sentinel's when empty) must be
            // above the new frame's (rcx, the length, is loaded again for
            // the push).
            "shl rcx, 5\n",
            $mark,
            "cmp qword ptr [rax + rcx - 24], r9\n",
            "jbe 89f\n",
            $filter,
            "test dword ptr [rip + {features}], 16\n",
            "jz 53f\n",
            $crate::calls::fast::fast_time_entry!(),
            "53:\n",
            $crate::calls::fast::fast_delta!(),
            "cmp r8, qword ptr [r11 + ",
            $crate::recorder::t_last_func!(),
            "]\n",
            "jne 82f\n",
            // Same function as the last entry: 01cddddd.
            $crate::calls::fast::fast_first!("5", "0x1f", "0x40", "5", "70", "71", "72"),
            "jmp 87f\n",
            "82:\n",
            // A new function: 001cdddd, the rest of the delta, then the
            // function as a zigzag delta from the last entry's.
            $crate::calls::fast::fast_first!("4", "0x0f", "0x20", "4", "73", "74", "75"),
            "mov r9, r8\n",
            "sub r9, qword ptr [r11 + ",
            $crate::recorder::t_last_func!(),
            "]\n",
            "lea rdx, [r9 + r9]\n",
            "sar r9, 63\n",
            "xor r9, rdx\n",
            $crate::calls::fast::fast_varint!("76", "77"),
            "87:\n",
            $crate::calls::fast::fast_store!(),
            "mov qword ptr [r11 + ",
            $crate::recorder::t_last_func!(),
            "], r8\n",
            "inc dword ptr [r11 + ",
            $crate::recorder::t_depth!(),
            "]\n",
            "51:\n",
            // The shadow frame at base + len * 32: ret, slot, func, flags.
            "mov rcx, qword ptr [r11 + ",
            $crate::recorder::t_sh_len!(),
            "]\n",
            "mov rax, rcx\n",
            "shl rax, 5\n",
            "add rax, qword ptr [r11 + ",
            $crate::recorder::t_sh_base!(),
            "]\n",
            "mov qword ptr [rax + 16], r8\n",
            $frame,
            "inc rcx\n",
            "mov qword ptr [r11 + ",
            $crate::recorder::t_sh_len!(),
            "], rcx\n",
            $crate::calls::fast::fast_tail!($done, $bail),
        )
    };
}
pub(crate) use fast_entry;

/// Frame of an explicit-exit call (cyg_profile, XRay): no return
/// address, the stack mark `$mark` loads into r9, `F_RECORDED`.
macro_rules! frame_explicit {
    ($mark:expr) => {
        concat!(
            $mark,
            "mov qword ptr [rax], 0\n",
            "mov qword ptr [rax + 8], r9\n",
            "mov qword ptr [rax + 24], 1\n",
        )
    };
}
pub(crate) use frame_explicit;

/// Frame of a call whose return is taken over: `$slot` loads the address
/// of its return-address slot into r9; the original return address is
/// kept, the slot gets the exit trampoline (operand `exit_ptr`, a static
/// holding its address, plus the padding byte), flags `F_RECORDED |
/// F_HIJACKED | F_SLOT`.
macro_rules! frame_hijack {
    ($slot:expr) => {
        concat!(
            $slot,
            "mov rsi, qword ptr [r9]\n",
            "mov qword ptr [rax], rsi\n",
            "mov qword ptr [rax + 8], r9\n",
            "mov qword ptr [rax + 24], 35\n",
            "mov rsi, qword ptr [rip + {exit_ptr}]\n",
            "inc rsi\n",
            "mov qword ptr [r9], rsi\n",
        )
    };
}
pub(crate) use frame_hijack;

/// A hijacking entry must first re-hijack frames restored for an unwinder:
/// that is the Rust path's job.
macro_rules! check_restored {
    () => {
        concat!(
            "cmp byte ptr [r11 + ",
            $crate::recorder::t_sh_restored!(),
            "], 0\n",
            "jne 89f\n",
        )
    };
}
pub(crate) use check_restored;

/// The exit of the thread in r11 once its newest shadow frame matched:
/// under the time filter [`fast_time_exit!`]; otherwise (the depth must
/// not be 0) the exit record (1cdddddd and the rest of the delta), `busy`
/// set by [`fast_delta!`], the newest shadow frame popped and the depth
/// decremented.
macro_rules! fast_exit_record {
    () => {
        concat!(
            "test dword ptr [rip + {features}], 16\n",
            "jz 56f\n",
            $crate::calls::fast::fast_time_exit!(),
            "56:\n",
            "cmp dword ptr [r11 + ",
            $crate::recorder::t_depth!(),
            "], 0\n",
            "je 89f\n",
            $crate::calls::fast::fast_delta!(),
            $crate::calls::fast::fast_first!("6", "0x3f", "0x80", "6", "60", "61", "62"),
            $crate::calls::fast::fast_store!(),
            "dec dword ptr [r11 + ",
            $crate::recorder::t_depth!(),
            "]\n",
            "dec qword ptr [r11 + ",
            $crate::recorder::t_sh_len!(),
            "]\n",
            "57:\n",
        )
    };
}
pub(crate) use fast_exit_record;

/// The checks on the newest shadow frame before an exit: there is one,
/// and `$match` (comparing the frame at rax) holds.
/// Leaves the frame's address in rax.
macro_rules! fast_top {
    ($match:expr) => {
        concat!(
            "mov rcx, qword ptr [r11 + ",
            $crate::recorder::t_sh_len!(),
            "]\n",
            "test rcx, rcx\n",
            "jz 89f\n",
            "mov rax, rcx\n",
            "shl rax, 5\n",
            "add rax, qword ptr [r11 + ",
            $crate::recorder::t_sh_base!(),
            "]\n",
            "sub rax, 32\n",
            $match,
        )
    };
}
pub(crate) use fast_top;

/// The exit fast path of an explicit-exit call (cyg_profile, XRay exit and
/// tail exit): `$func` loads the function into r8 (or jumps to `89f`),
/// `$sp` the exit's stack pointer into r9 (XRay: the return-address slot;
/// cyg_profile: the stack pointer of the hook call); the newest frame must
/// be that function's and explicit — recorded (flags exactly
/// `F_RECORDED`: its exit is written) or not (flags 0: a call the filters
/// left alone, popped) — with its mark at or above r9 (below it, it is a
/// recursive call of the same function that was unwound), and nothing may
/// have overflowed the shadow stack. Operands: as [`fast_checks!`].
macro_rules! fast_exit {
    ($push:expr, $func:expr, $sp:expr, $done:expr, $bail:expr) => {
        concat!(
            $push,
            $func,
            $crate::calls::fast::fast_checks!(filtered),
            "cmp qword ptr [r11 + ",
            $crate::recorder::t_sh_overflow!(),
            "], 0\n",
            "jne 89f\n",
            $crate::calls::fast::fast_top!(concat!(
                "cmp qword ptr [rax + 16], r8\n",
                "jne 89f\n",
                "mov esi, dword ptr [rax + 24]\n",
                "cmp esi, 1\n",
                "ja 89f\n",
                $sp,
                "cmp qword ptr [rax + 8], r9\n",
                "jb 89f\n",
            )),
            // An unrecorded frame (a call the filters left alone): popped.
            "test esi, esi\n",
            "jnz 58f\n",
            "dec qword ptr [r11 + ",
            $crate::recorder::t_sh_len!(),
            "]\n",
            "jmp 85f\n",
            "58:\n",
            $crate::calls::fast::fast_exit_record!(),
            $crate::calls::fast::fast_tail!($done, $bail),
        )
    };
}
pub(crate) use fast_exit;

/// The exit fast path of a hijacked return (the exit trampoline, a call
/// wrapper's exit): rax and rdx are pushed, the slot returned from is at
/// `rsp + 8`; the newest frame must own it, recorded and hijacked (flags
/// `F_RECORDED | F_HIJACKED | F_SLOT`). The
/// original return address is left in r10 for `$done`.
macro_rules! fast_hook_exit {
    ($done:expr, $bail:expr) => {
        concat!(
            "push rax\n",
            "push rdx\n",
            $crate::calls::fast::fast_checks!(filtered),
            $crate::calls::fast::fast_top!(concat!(
                "lea rdx, [rsp + 8]\n",
                "cmp qword ptr [rax + 8], rdx\n",
                "jne 89f\n",
                "cmp dword ptr [rax + 24], 35\n",
                "jne 89f\n",
                "mov r10, qword ptr [rax]\n",
            )),
            $crate::calls::fast::fast_exit_record!(),
            $crate::calls::fast::fast_tail!($done, $bail),
        )
    };
}
pub(crate) use fast_hook_exit;

/// Where a fast path goes when its event filled the chunk: saves every
/// register a trampoline must preserve and moves the thread to a new chunk
/// (clearing `busy`).
///
/// # Safety
/// Only the fast paths call it, with `busy` set by them.
#[unsafe(naked)]
pub unsafe extern "C" fn fntrace_fast_switch() {
    super::tramp::saving_trampoline!([], [], [], [], entry = sym recorder::fast_chunk_switch)
}
