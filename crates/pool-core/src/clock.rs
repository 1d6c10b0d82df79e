//! A cheap clock for telemetry: the time-stamp counter on x86_64 (a few
//! cycles, no syscall, no vDSO call), `Instant` elsewhere and under Miri and
//! loom. Ticks convert to nanoseconds with a rate calibrated once per
//! process, when the first pool is built.

use std::sync::atomic::{AtomicPtr, Ordering};
use std::time::{Duration, Instant};

use crate::fork_safe::OnceU64;

/// The process's time anchor for the `Instant` fallback and calibration:
/// set once, without a lock a fork could leave held (`fork_safe.rs`).
fn anchor() -> Instant {
    static ANCHOR: AtomicPtr<Instant> = AtomicPtr::new(std::ptr::null_mut());
    // Acquire: pairs with the Release compare-exchange that published it.
    let mut current = ANCHOR.load(Ordering::Acquire);
    if current.is_null() {
        let mine = Box::into_raw(Box::new(Instant::now()));
        current = match ANCHOR.compare_exchange(
            std::ptr::null_mut(),
            mine,
            Ordering::Release,
            Ordering::Acquire,
        ) {
            Ok(_) => mine,
            Err(first) => {
                // SAFETY: `mine` came from `Box::into_raw` just above and
                // was never published.
                drop(unsafe { Box::from_raw(mine) });
                first
            }
        };
    }
    // SAFETY: a published anchor is never freed or written again.
    unsafe { *current }
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
    static RATE: OnceU64 = OnceU64::new();
    RATE.get_or_init_f64(|| {
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
