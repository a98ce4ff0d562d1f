//! The assembly fast path (`calls::fast`) against the format's decoder:
//! calls of a function that starts with `call __fentry__` (what
//! `gcc -pg -mfentry` emits), with the thread's last timestamp and last
//! function set so that the deltas and function deltas take every
//! encoded length; and the time filter's fast path (`-t`), which holds
//! and drops short calls without the Rust path and without writing.

use std::ptr;
use std::sync::Mutex;
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

/// One recording session at a time in this process.
static ONE: Mutex<()> = Mutex::new(());

#[test]
fn fast_path_events_decode() {
    let _one = ONE.lock().unwrap_or_else(|e| e.into_inner());
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

/// Sleeps the time filter test's long call.
extern "C" fn sleep_long() {
    std::thread::sleep(std::time::Duration::from_millis(LONG_MS));
}

/// The long call's duration, above the threshold below.
const LONG_MS: u64 = 60;
/// The time filter's threshold: far above a short call even when the
/// thread is preempted (nothing a loaded machine does to a call of a few
/// instructions takes 20 ms).
const THRESHOLD_MS: u64 = 20;

/// A function instrumented like `gcc -pg -mfentry` output that sleeps
/// [`LONG_MS`].
#[unsafe(naked)]
extern "C" fn probe_long() {
    core::arch::naked_asm!(
        "call {f}",
        "push rax",
        "call {s}",
        "pop rax",
        "ret",
        f = sym super::tramp::__fentry__,
        s = sym sleep_long,
    )
}

#[test]
fn time_filter_fast_path_drops_short_calls_and_writes_long_ones() {
    let _one = ONE.lock().unwrap_or_else(|e| e.into_inner());
    let path = std::env::temp_dir().join(format!("fntrace-fast-t-{}.data", std::process::id()));
    recorder::start(&Options {
        path: path.clone(),
        max_size: 1 << 30,
        time_filter_ns: THRESHOLD_MS * 1_000_000,
        ..Options::new(path.clone())
    })
    .unwrap();
    let func = probe as *const () as u64;
    let long = probe_long as *const () as u64;
    // Attach and reserve the held calls (the Rust path, which arms the
    // fast one).
    probe();
    let t = state();
    assert_eq!(t.session, SESSION.load(Ordering::Relaxed));
    assert_ne!(t.pend.fast, 0);
    let pos = t.cur.pos;
    let before = RUST_ENTRIES.load(Ordering::Relaxed);
    for _ in 0..1000 {
        probe();
    }
    let t = state();
    // Every short call went through the assembly: held, dropped, nothing
    // written.
    assert_eq!(RUST_ENTRIES.load(Ordering::Relaxed), before);
    assert_eq!(t.cur.pos, pos);
    assert_eq!((t.pend.len, t.pend.written, t.shadow.len), (0, 0, 0));
    // A long call: held by the assembly, written at its exit by the Rust
    // path (the exit bails out), entry then exit, as long as it lasted.
    let (last_tsc, last_func) = (t.cur.last_tsc, t.cur.last_func);
    probe_long();
    let t = state();
    assert_eq!(RUST_ENTRIES.load(Ordering::Relaxed), before);
    assert_eq!((t.pend.len, t.pend.written, t.shadow.len), (0, 0, 0));
    // SAFETY: the bytes between the two positions were just written by
    // this thread into the mapped chunk (asserted: no chunk switch).
    let bytes = unsafe { core::slice::from_raw_parts(pos, t.cur.pos.offset_from(pos) as usize) };
    assert!(t.cur.pos > pos && bytes.len() <= 2 * MAX_COMPACT_LEN);
    let mut dec = Decoder::resume(bytes, 0, last_tsc, last_func);
    let entry = dec.next_compact().unwrap().unwrap();
    let exit = dec.next_compact().unwrap().unwrap();
    assert_eq!(dec.position(), bytes.len(), "{bytes:x?}");
    assert_eq!((entry.0, entry.1, exit.0), (0, long, 1));
    // SAFETY: reads the session's header of a live session.
    let hz = unsafe { (*t.session_ptr).header.tsc_hz };
    let lasted_ms = (exit.2 - entry.2) as u128 * 1000 / u128::from(hz);
    assert!(lasted_ms >= u128::from(LONG_MS), "{lasted_ms} ms");
    assert_ne!(long, func);
    recorder::finish(false, &|_| {});
    let _ = std::fs::remove_file(&path);
}

/// With `-F` given (`FEAT_FILTERS`), a call of a function the filter
/// cache knows as unselected is decided by the assembly: left alone
/// (nothing written, no frame) outside every `-F` region and inside a
/// `-N` one, recorded inside a `-F` region — none of them through Rust
/// once the first call has filled the cache.
#[test]
fn filter_fast_path_leaves_unselected_calls_alone_and_records_inside_regions() {
    let _one = ONE.lock().unwrap_or_else(|e| e.into_inner());
    let path = std::env::temp_dir().join(format!("fntrace-fast-f-{}.data", std::process::id()));
    recorder::start(&Options {
        path: path.clone(),
        max_size: 1 << 30,
        ..Options::new(path.clone())
    })
    .unwrap();
    crate::filter::set_filters(&["^no_such_function_anywhere$"], &[]).unwrap();
    // Attach and classify (the Rust path fills the cache).
    probe();
    let t = state();
    assert_eq!(t.session, SESSION.load(Ordering::Relaxed));
    let pos = t.cur.pos;
    let before = RUST_ENTRIES.load(Ordering::Relaxed);
    for _ in 0..1000 {
        probe();
    }
    let t = state();
    assert_eq!(RUST_ENTRIES.load(Ordering::Relaxed), before, "left to Rust");
    assert_eq!((t.cur.pos, t.shadow.len, t.depth), (pos, 0, 0));
    // Inside a `-F` region (as if a selected function were running): the
    // first recorded call reserves the shadow stack (the Rust path).
    t.trace_regions = 1;
    probe();
    let t = state();
    let pos = t.cur.pos;
    let before = RUST_ENTRIES.load(Ordering::Relaxed);
    probe();
    let t = state();
    assert_eq!(RUST_ENTRIES.load(Ordering::Relaxed), before, "left to Rust");
    // SAFETY: the bytes between the two positions were just written by
    // this thread into the mapped chunk (asserted: no chunk switch).
    let bytes = unsafe { core::slice::from_raw_parts(pos, t.cur.pos.offset_from(pos) as usize) };
    assert!(t.cur.pos > pos && bytes.len() <= 2 * MAX_COMPACT_LEN);
    let func = probe as *const () as u64;
    let mut dec = Decoder::resume(bytes, 0, 0, func);
    let entry = dec.next_compact().unwrap().unwrap();
    let exit = dec.next_compact().unwrap().unwrap();
    assert_eq!((entry.0, entry.1, exit.0), (0, func, 1));
    // Inside a `-N` region too: left alone.
    let pos = t.cur.pos;
    t.notrace_regions = 1;
    probe();
    let t = state();
    assert_eq!(RUST_ENTRIES.load(Ordering::Relaxed), before, "left to Rust");
    assert_eq!((t.cur.pos, t.shadow.len), (pos, 0));
    t.trace_regions = 0;
    t.notrace_regions = 0;
    crate::filter::set_filters(&[], &[]).unwrap();
    recorder::finish(false, &|_| {});
    let _ = std::fs::remove_file(&path);
}
