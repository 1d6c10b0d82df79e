//! The facade: the only file in pool-core that names std or loom primitives.
//!
//! Everything the dispatch protocol touches (atomics, fences, `UnsafeCell`,
//! threads, park/unpark, spin hints, locks, thread-locals) is re-exported
//! from here, from `std` in normal builds and from `loom` when the crate is
//! compiled with `RUSTFLAGS="--cfg loom"`. The loom models in `loom-tests/`
//! therefore check the very same protocol code that ships.
//!
//! Under loom the spin counts shrink (see [`SPIN_SCALE_SHIFT`]) so that a
//! model explores interleavings rather than iterations.

#[cfg(not(loom))]
mod imp {
    pub(crate) use std::hint::spin_loop;
    pub(crate) use std::sync::atomic::{fence, AtomicBool, AtomicU64, AtomicUsize, Ordering};
    pub(crate) use std::sync::{Arc, Condvar, Mutex, MutexGuard};
    pub(crate) use std::thread::{self, JoinHandle, Thread};
    pub(crate) use std::thread_local;

    /// `UnsafeCell` with loom's closure-based access API, so call sites
    /// read the same under both builds.
    #[derive(Debug)]
    pub(crate) struct UnsafeCell<T>(std::cell::UnsafeCell<T>);

    impl<T> UnsafeCell<T> {
        pub(crate) const fn new(value: T) -> Self {
            Self(std::cell::UnsafeCell::new(value))
        }

        #[inline(always)]
        pub(crate) fn with<R>(&self, f: impl FnOnce(*const T) -> R) -> R {
            f(self.0.get())
        }

        #[inline(always)]
        pub(crate) fn with_mut<R>(&self, f: impl FnOnce(*mut T) -> R) -> R {
            f(self.0.get())
        }
    }

    /// Spins are counted in real iterations outside loom and Miri.
    #[cfg(not(miri))]
    pub(crate) const SPIN_SCALE_SHIFT: u32 = 0;
    /// Under Miri a spinning thread takes interpreter time from the one
    /// doing the work (it runs one thread at a time): budgets are divided
    /// by 2^4, so a budget of 4000 spins 250 times before parking. Both
    /// paths, the spin and the park, still run.
    #[cfg(miri)]
    pub(crate) const SPIN_SCALE_SHIFT: u32 = 4;
}

#[cfg(loom)]
mod imp {
    pub(crate) use loom::cell::UnsafeCell;
    pub(crate) use loom::hint::spin_loop;
    pub(crate) use loom::sync::atomic::{fence, AtomicBool, AtomicU64, AtomicUsize, Ordering};
    pub(crate) use loom::sync::{Arc, Mutex, MutexGuard};
    pub(crate) use loom::thread::{self, JoinHandle, Thread};
    pub(crate) use loom::thread_local;

    /// Under loom every spin is a scheduling point: divide budgets by 2^10
    /// so a budget of 4000 becomes 3 model steps instead of 4000.
    pub(crate) const SPIN_SCALE_SHIFT: u32 = 10;
}

pub(crate) use imp::*;

/// What stays `std` even under loom: process-wide counters and registries
/// (loom objects cannot live in a `static`: the spinner budget, the caller
/// registration, the foreign-load sample, the global pool and the tid
/// registry), the `Arc` holding a user's start hook (loom's `Arc` cannot
/// hold a `dyn`), and the trials' locks (`trials.rs`), taken with
/// `try_lock` only. None of them is part of the protocol's correctness:
/// they decide how long to spin or whom to invite, or hold a pool, never
/// whether a job is seen.
pub(crate) mod process {
    /// Cells handed out as slices (`PhaseOutput`): loom's cells give one
    /// element at a time. Ordered by the barrier, which loom does model.
    pub(crate) use std::cell::UnsafeCell as UnsafeSliceCell;
    pub(crate) use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
    pub(crate) use std::sync::{Arc, Mutex, TryLockError};
    pub(crate) use std::thread::yield_now;
    #[cfg_attr(loom, allow(unused_imports))]
    pub(crate) use std::thread_local;
}

/// A lock that tolerates poisoning: the pool re-raises participant panics
/// itself, so a poisoned guard carries no information we need.
#[inline]
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    match mutex.lock() {
        Ok(guard) => guard,
        Err(poisoned) => poisoned.into_inner(),
    }
}
