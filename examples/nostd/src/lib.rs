//! A `#![no_std]` library with markers of every design, fired from its
//! functions. `cargo build -p fntrace-nostd-check` on its own (so that no
//! other workspace member turns on `fntrace-markers/std`) proves that
//! declaring, firing and attaching probes need neither `std` nor an
//! operating system: probes run inside a `critical-section`, which is also
//! the grace period.

#![no_std]

extern crate alloc;

use fntrace_markers::{declare_marker, fire};

declare_marker! {
    /// A sample was taken (static key: a patchable NOP on x86_64).
    pub static SAMPLE: nostd_sample(channel: u8, value: i32);
}
declare_marker! {
    /// An overflow (flag design).
    pub static OVERFLOW: nostd_overflow(count: u32) as Flag;
}
declare_marker! {
    /// Function-pointer design.
    pub static FNPTR: nostd_fnptr(x: u64) as FnPtr;
}
declare_marker! {
    /// Empty-function design.
    pub static EMPTY: nostd_empty(x: u64) as EmptyFn;
}

/// Sums samples, firing a marker per sample.
pub fn process(samples: &[i32]) -> i64 {
    let mut sum = 0i64;
    let mut overflows = 0u32;
    for (i, &s) in samples.iter().enumerate() {
        fire!(SAMPLE, (i % 4) as u8, s);
        if s > 1000 {
            overflows += 1;
            fire!(OVERFLOW, overflows);
        }
        fire!(FNPTR, i as u64);
        fire!(EMPTY, i as u64);
        sum += s as i64;
    }
    fntrace_markers::marker!(nostd_done as Flag, total: i64 = sum);
    sum
}

/// Attaches a probe to the overflow marker (needs `alloc` and a
/// `critical-section` implementation).
pub fn watch_overflows(
    f: impl Fn(u32) + Send + Sync + 'static,
) -> Result<fntrace_markers::ProbeHandle, fntrace_markers::Error> {
    OVERFLOW.attach(f)
}

#[cfg(test)]
mod tests {
    extern crate std;
    use core::sync::atomic::{AtomicU32, Ordering};

    #[test]
    fn probes_work_without_std() {
        static SEEN: AtomicU32 = AtomicU32::new(0);
        assert_eq!(super::process(&[1, 2000, 3]), 2004);
        let h = super::watch_overflows(|c| {
            SEEN.fetch_add(c, Ordering::Relaxed);
        })
        .unwrap();
        assert_eq!(super::process(&[5000, 6000]), 11000);
        h.remove().map_err(|e| e.0).unwrap();
        super::process(&[7000]);
        assert_eq!(SEEN.load(Ordering::Relaxed), 1 + 2);
    }
}
