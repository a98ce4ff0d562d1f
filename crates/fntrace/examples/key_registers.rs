//! A check program for static-key markers in optimised code, run by
//! `tests/key_codegen.rs` from a release build (a debug build keeps every
//! value in memory, so it cannot show a register the enabled path
//! clobbers).
//!
//! It runs two loops whose state lives in registers — fourteen integer
//! accumulators, eight floating-point ones — each firing a static-key
//! marker per iteration, without a probe and with a probe that uses many
//! registers itself, and checks that the results agree; then a probe that
//! panics, whose panic must reach the firing code and leave the marker
//! working (the probe's removal, a grace period, must still complete).
//! Prints `ok ...` lines and, for the disassembly check, the offsets of
//! the integer loop's static-key site and label block from the function's
//! start: `site <site offset> <target offset>`.
//!
//! Run: `cargo run --release -p fntrace --example key_registers`

use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};

use fntrace::{declare_marker, fire};
use fntrace_markers::sites::sites_of;

declare_marker! { static INT: key_regs_int(i: u64, x: u64); }
declare_marker! { static FLOAT: key_regs_float(i: u64, x: f64); }
declare_marker! { static PANICKY: key_regs_panic(i: u64); }

static SINK: AtomicU64 = AtomicU64::new(0);

/// Fourteen accumulators, updated together: more live integer values
/// than callee-saved registers.
#[inline(never)]
pub fn int_loop(n: u64, seed: u64) -> [u64; 14] {
    let mut a = [0u64; 14];
    for (k, v) in a.iter_mut().enumerate() {
        *v = seed.wrapping_mul(k as u64 + 1) ^ 0x9e37_79b9_7f4a_7c15;
    }
    let [
        mut a0,
        mut a1,
        mut a2,
        mut a3,
        mut a4,
        mut a5,
        mut a6,
        mut a7,
        mut a8,
        mut a9,
        mut a10,
        mut a11,
        mut a12,
        mut a13,
    ] = a;
    for i in 0..n {
        a0 = a0.wrapping_add(a1 ^ i).rotate_left(5);
        a1 = a1.wrapping_add(a2 ^ a0).rotate_left(7);
        a2 = a2.wrapping_add(a3 ^ a1).rotate_left(11);
        a3 = a3.wrapping_add(a4 ^ a2).rotate_left(13);
        a4 = a4.wrapping_add(a5 ^ a3).rotate_left(17);
        a5 = a5.wrapping_add(a6 ^ a4).rotate_left(19);
        a6 = a6.wrapping_add(a7 ^ a5).rotate_left(23);
        fire!(INT, i, a3 ^ a6);
        a7 = a7.wrapping_add(a8 ^ a6).rotate_left(29);
        a8 = a8.wrapping_add(a9 ^ a7).rotate_left(31);
        a9 = a9.wrapping_add(a10 ^ a8).rotate_left(37);
        a10 = a10.wrapping_add(a11 ^ a9).rotate_left(41);
        a11 = a11.wrapping_add(a12 ^ a10).rotate_left(43);
        a12 = a12.wrapping_add(a13 ^ a11).rotate_left(47);
        a13 = a13.wrapping_add(a0 ^ a12).rotate_left(53);
    }
    [a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13]
}

/// Eight floating-point accumulators live across the site.
#[inline(never)]
pub fn float_loop(n: u64) -> [f64; 8] {
    let mut a = [1.0f64, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5];
    for i in 0..n {
        let x = i as f64 * 0.001;
        for v in &mut a[..4] {
            *v = *v * 0.999 + x;
        }
        fire!(FLOAT, i, a[0] + a[3]);
        let (lo, hi) = a.split_at_mut(4);
        for (h, l) in hi.iter_mut().zip(lo.iter()) {
            *h = *h * 0.998 + *l;
        }
    }
    a
}

/// Work that uses many registers, integer and vector.
#[inline(never)]
fn busy(i: u64, x: u64) -> u64 {
    let mut h = [i, x, i ^ x, i.wrapping_mul(x), 1, 2, 3, 4, 5, 6, 7, 8];
    for r in 0..4 {
        for k in 0..h.len() {
            h[k] = h[k].wrapping_mul(0x100_0000_01b3).rotate_left(r + k as u32) ^ h[(k + 5) % 12];
        }
    }
    let f: f64 = h.iter().map(|&v| (v >> 11) as f64 * 1e-9).sum();
    h.iter().fold(f.to_bits(), |a, &b| a ^ b)
}

#[inline(never)]
fn fire_panicky(i: u64) {
    fire!(PANICKY, i);
}

fn main() {
    let n = black_box(20_000u64);

    // Registers: the same results with the site disabled and enabled.
    let int_off = int_loop(n, 7);
    let float_off = float_loop(n);
    let h1 = INT
        .attach(|i, x| {
            SINK.fetch_add(busy(i, x), Ordering::Relaxed);
        })
        .expect("attach key_regs_int");
    let h2 = FLOAT
        .attach(|i, x| {
            SINK.fetch_add(busy(i, x.to_bits()), Ordering::Relaxed);
        })
        .expect("attach key_regs_float");
    let int_on = int_loop(n, 7);
    let float_on = float_loop(n);
    h1.remove().map_err(|e| e.0).unwrap();
    h2.remove().map_err(|e| e.0).unwrap();
    assert_eq!(
        int_on, int_off,
        "an enabled static-key site changed the integer loop's registers"
    );
    assert_eq!(
        float_on.map(f64::to_bits),
        float_off.map(f64::to_bits),
        "an enabled static-key site changed the floating-point loop's registers"
    );
    assert_ne!(SINK.load(Ordering::Relaxed), 0, "the probes did not run");
    println!("ok registers");

    // A probe's panic unwinds through the firing code.
    let h = PANICKY
        .attach(|i| {
            if i == 3 {
                panic!("probe panic at {i}");
            }
        })
        .expect("attach key_regs_panic");
    std::panic::set_hook(Box::new(|_| {}));
    let r = std::panic::catch_unwind(|| {
        for i in 0..10 {
            fire_panicky(i);
        }
    });
    let _ = std::panic::take_hook();
    let msg = r
        .expect_err("the probe's panic did not reach the firing code")
        .downcast::<String>()
        .map(|s| *s)
        .unwrap_or_default();
    assert_eq!(msg, "probe panic at 3");
    fire_panicky(4);
    // A read-side section left open by the panic would make this wait
    // forever.
    h.remove().map_err(|e| e.0).unwrap();
    println!("ok panic");

    let site = sites_of(INT.core())
        .next()
        .expect("no static-key site of key_regs_int");
    let f = int_loop as fn(u64, u64) -> [u64; 14] as usize;
    println!(
        "site {:#x} {:#x}",
        site.site.wrapping_sub(f),
        site.target.wrapping_sub(f)
    );
}
