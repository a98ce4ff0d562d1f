//! The assembly fast path (`calls::fast`) against the format's decoder:
//! calls of a function that starts with `call __fentry__` (what
//! `gcc -pg -mfentry` emits), with the thread's last timestamp and last
//! function set so that the deltas and function deltas take every
//! encoded length.

use std::ptr;
use std::sync::atomic::Ordering;

use fntrace_format::event::MAX_COMPACT_LEN;

use crate::calls::entry::RUST_ENTRIES;
use crate::clock;
use crate::recorder::{self, Options, SESSION, state};
use fntrace_format::event::Decoder;

/// A function instrumented like `gcc -pg -mfentry` output.
#[unsafe(naked)]
extern "C" fn probe() {
    core::arch::naked_asm!(
        "call {f}",
        "ret",
        f = sym super::tramp::__fentry__,
    )
}

#[test]
fn fast_path_events_decode() {
    let path = std::env::temp_dir().join(format!("fntrace-fast-{}.data", std::process::id()));
    recorder::start(&Options {
        path: path.clone(),
        max_size: 1 << 30,
        ..Options::new(path.clone())
    })
    .unwrap();
    let func = probe as *const () as u64;
    // Attach (the first event takes the Rust path).
    probe();
    let deltas = [
        0u64,
        1,
        31,
        32,
        63,
        64,
        127,
        128,
        4095,
        4096,
        8191,
        8192,
        1 << 20,
        1 << 27,
        1 << 34,
        1 << 41,
        1 << 48,
        1 << 55,
    ];
    let prevs = [
        func,
        func - 1,
        func + 1,
        func - 100,
        func + 20_000,
        func - (1 << 27) + 1,
        func + (1 << 27),
        func - (1 << 20),
        func + (1 << 33),
        0,
        func ^ (1 << 46),
    ];
    let mut fast = 0;
    for &d in &deltas {
        for &prev in &prevs {
            let t = state();
            assert_eq!(t.session, SESSION.load(Ordering::Relaxed));
            let now = clock::tsc();
            let base = now.saturating_sub(d);
            t.cur.last_tsc = base;
            t.cur.last_func = prev;
            let pos = t.cur.pos;
            let before = RUST_ENTRIES.load(Ordering::Relaxed);
            probe();
            let t = state();
            let rust = RUST_ENTRIES.load(Ordering::Relaxed) != before;
            // SAFETY: the bytes between the two positions were just
            // written by this thread into the mapped chunk (no chunk
            // switch: asserted below).
            let bytes =
                unsafe { core::slice::from_raw_parts(pos, t.cur.pos.offset_from(pos) as usize) };
            assert!(t.cur.pos > pos && bytes.len() <= 2 * MAX_COMPACT_LEN);
            let mut dec = Decoder::resume(bytes, 0, base, prev);
            let entry = dec.next_compact().unwrap().unwrap();
            let exit = dec.next_compact().unwrap().unwrap();
            assert_eq!(dec.position(), bytes.len(), "{d} {prev:#x} {bytes:x?}");
            assert_eq!((entry.0, entry.1), (0, func), "{d} {prev:#x} {bytes:x?}");
            assert!(entry.2 >= now && entry.2 <= exit.2, "{d} {prev:#x}");
            assert_eq!(exit.0, 1);
            assert_eq!(exit.2, t.cur.last_tsc);
            assert_eq!(t.cur.last_func, func);
            assert_eq!(t.depth, 0);
            assert_eq!(t.shadow.len, 0);
            // The assembly handles exactly the entries that fit in one
            // word (`pack_*` say which); longer ones take the Rust path.
            let d_entry = entry.2 - base;
            let word = if prev == func {
                fntrace_format::event::pack_entry_same(d_entry)
            } else {
                fntrace_format::event::pack_entry_new(d_entry, func, prev)
            };
            assert_eq!(!rust, word.is_some(), "{d} {prev:#x} {bytes:x?}");
            fast += usize::from(!rust);
        }
    }
    assert!(fast > deltas.len() * prevs.len() / 2, "{fast}");
    recorder::finish(false, &|_| {});
    let _ = std::fs::remove_file(&path);
    // With no session, a thread that never attached (session 0, like
    // the current one) must not take the fast path: it has no chunk.
    std::thread::spawn(move || {
        // SAFETY: the hooks take any function address.
        unsafe {
            super::tramp::__cyg_profile_func_enter(func as *mut u8, ptr::null_mut());
            super::tramp::__cyg_profile_func_exit(func as *mut u8, ptr::null_mut());
        }
        probe();
    })
    .join()
    .unwrap();
}
