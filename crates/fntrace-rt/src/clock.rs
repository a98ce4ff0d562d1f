//! Timestamps: the raw TSC on the hot path, CLOCK_MONOTONIC/CLOCK_REALTIME
//! for calibration, and the start-up calibration of the TSC frequency.

/// Reads the timestamp counter.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub fn tsc() -> u64 {
    // SAFETY: `rdtsc` is available on every x86_64 CPU and has no memory
    // effects; the intrinsic only reads the counter into registers.
    unsafe { core::arch::x86_64::_rdtsc() }
}

/// Without a TSC, timestamps are CLOCK_MONOTONIC nanoseconds (1 GHz).
#[cfg(not(target_arch = "x86_64"))]
#[inline(always)]
pub fn tsc() -> u64 {
    monotonic_ns()
}

fn clock_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; clock_gettime writes only
    // into it and cannot fail for the clocks used here.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// CLOCK_MONOTONIC in nanoseconds (vDSO, no system call).
pub fn monotonic_ns() -> u64 {
    clock_ns(libc::CLOCK_MONOTONIC)
}

/// CLOCK_REALTIME in nanoseconds since the Unix epoch.
pub fn realtime_ns() -> u64 {
    clock_ns(libc::CLOCK_REALTIME)
}

/// A (TSC, CLOCK_MONOTONIC) pair read as close together as possible: the
/// monotonic read is bracketed by two TSC reads and the midpoint is used;
/// of a few tries the tightest bracket wins.
pub fn clock_pair() -> (u64, u64) {
    let mut best = (u64::MAX, 0u64, 0u64);
    for _ in 0..5 {
        let a = tsc();
        let m = monotonic_ns();
        let b = tsc();
        let width = b.wrapping_sub(a);
        if width < best.0 {
            best = (width, a + width / 2, m);
        }
    }
    (best.1, best.2)
}

/// A clock pair taken earlier by [`anchor`] (0, 0: none).
static ANCHOR_TSC: core::sync::atomic::AtomicU64 = core::sync::atomic::AtomicU64::new(0);
static ANCHOR_NS: core::sync::atomic::AtomicU64 = core::sync::atomic::AtomicU64::new(0);

/// Takes a clock pair now (once per process) for later calibrations to
/// measure from instead of waiting: a runtime attaching to a running
/// program takes it when it is loaded, so that its session's start
/// measures the frequency over the milliseconds that passed since rather
/// than over a busy wait.
pub fn anchor() {
    use core::sync::atomic::Ordering;
    if ANCHOR_NS.load(Ordering::Acquire) == 0 {
        let (t, m) = clock_pair();
        ANCHOR_TSC.store(t, Ordering::Relaxed);
        ANCHOR_NS.store(m, Ordering::Release);
    }
}

/// Measures TSC ticks per second against CLOCK_MONOTONIC over about
/// `window_ns` of busy waiting (or since the [`anchor`], when it is older).
pub fn calibrate(window_ns: u64) -> u64 {
    use core::sync::atomic::Ordering;
    if cfg!(not(target_arch = "x86_64")) {
        return 1_000_000_000;
    }
    let m = ANCHOR_NS.load(Ordering::Acquire);
    if m != 0 {
        let a = (ANCHOR_TSC.load(Ordering::Relaxed), m);
        let now = clock_pair();
        if now.1.saturating_sub(m) >= window_ns
            && let Some(hz) = hz_between(a, now)
        {
            return hz;
        }
    }
    let (t0, m0) = clock_pair();
    while monotonic_ns() < m0 + window_ns {
        core::hint::spin_loop();
    }
    let (t1, m1) = clock_pair();
    hz_between((t0, m0), (t1, m1)).unwrap_or(1_000_000_000)
}

/// Frequency implied by two clock pairs, when they are far enough apart.
pub fn hz_between(a: (u64, u64), b: (u64, u64)) -> Option<u64> {
    let dt = b.1.checked_sub(a.1)?;
    let dc = b.0.checked_sub(a.0)?;
    (dt > 0).then(|| (dc as u128 * 1_000_000_000 / dt as u128) as u64)
}

/// Whether the CPU says its TSC is invariant (constant rate, runs in deep
/// idle states): CPUID leaf 0x8000_0007, EDX bit 8.
#[cfg(target_arch = "x86_64")]
pub fn tsc_invariant() -> bool {
    use core::arch::x86_64::__cpuid;
    // Leaves above the maximum are only queried after checking it.
    if __cpuid(0x8000_0000).eax < 0x8000_0007 {
        return false;
    }
    __cpuid(0x8000_0007).edx & (1 << 8) != 0
}

/// Without a TSC the monotonic clock is used, which is invariant.
#[cfg(not(target_arch = "x86_64"))]
pub fn tsc_invariant() -> bool {
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calibration_is_plausible() {
        let hz = calibrate(5_000_000);
        // Any x86_64 TSC of the last twenty years runs between 100 MHz and 10 GHz.
        assert!((100_000_000..10_000_000_000).contains(&hz), "{hz}");
        let (t, m) = clock_pair();
        assert!(t > 0 && m > 0);
    }
}
