//! A cheap clock for telemetry: the time-stamp counter on x86_64 (a few
//! cycles, no syscall, no vDSO call), `Instant` elsewhere and under Miri and
//! loom. Ticks convert to nanoseconds with a rate calibrated once per
//! process, when the first pool is built.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The process's time anchor for the `Instant` fallback and calibration.
fn anchor() -> Instant {
    static ANCHOR: OnceLock<Instant> = OnceLock::new();
    *ANCHOR.get_or_init(Instant::now)
}

/// A monotonic tick count.
#[cfg(all(target_arch = "x86_64", not(miri), not(loom)))]
#[inline]
pub(crate) fn ticks() -> u64 {
    // SAFETY: RDTSC has no preconditions; every x86_64 CPU has it.
    unsafe { core::arch::x86_64::_rdtsc() }
}

/// A monotonic tick count (nanoseconds since the anchor).
#[cfg(all(not(all(target_arch = "x86_64", not(miri))), not(loom)))]
#[inline]
pub(crate) fn ticks() -> u64 {
    anchor().elapsed().as_nanos() as u64
}

/// Under loom the clock stands still: a model must not depend on real time.
#[cfg(loom)]
#[inline]
pub(crate) fn ticks() -> u64 {
    0
}

/// Nanoseconds per tick, measured over 2 ms the first time it is asked
/// (pool construction asks, so no dispatch pays for it).
pub(crate) fn ns_per_tick() -> f64 {
    static RATE: OnceLock<f64> = OnceLock::new();
    *RATE.get_or_init(|| {
        if cfg!(not(all(target_arch = "x86_64", not(miri), not(loom)))) {
            return 1.0;
        }
        let (start, t0) = (anchor().elapsed(), ticks());
        let window = Duration::from_millis(2);
        while anchor().elapsed() - start < window {
            std::hint::spin_loop();
        }
        let (end, t1) = (anchor().elapsed(), ticks());
        let ns = (end - start).as_nanos() as f64;
        if t1 > t0 {
            ns / (t1 - t0) as f64
        } else {
            1.0
        }
    })
}
