//! Process-wide state a forked child can always use.
//!
//! `fork()` copies memory but only the calling thread. A `std` lock that
//! another thread held at that moment stays locked in the child for ever,
//! and so does a `OnceLock` another thread was initialising: the child
//! hangs at its first use (26 of 40 forks did, when the tid registry,
//! the foreign-load sampler's CPU cache and the global pool's build lock
//! were `std` mutexes). The rule (docs/design.md, "Locks in statics"): a
//! `static` in this workspace holds no `std` lock and no `OnceLock`; it
//! holds one of these.
//!
//! - [`ForkSafeMutex`]: a lock stamped with the fork generation of its
//!   holder. A child finds a lock held by an earlier generation (a thread
//!   that does not exist in it), takes it over, and starts from a fresh
//!   value, never reading or dropping one that may be half-written.
//! - [`OnceU64`]: a value computed once, with no lock: threads that race
//!   to compute it each compute it (it must be the same answer), and the
//!   first store wins. Nothing to be left half-done by a fork.

use std::cell::UnsafeCell;
use std::ops::{Deref, DerefMut};

use crate::fork;
use crate::sync::process::{AtomicU64, AtomicUsize, Ordering};

/// A mutex for `static`s that a forked child can always take (module
/// docs). Contended locking spins, then yields: it guards short critical
/// sections that never run user code.
///
/// # Invariants
///
/// `holder` is 0 when free, else 1 + the fork generation of the thread
/// holding it; only that holder touches `value`. A lock taken over from an
/// earlier generation gets `fresh()` written over its value, unread.
pub(crate) struct ForkSafeMutex<T> {
    holder: AtomicUsize,
    value: UnsafeCell<T>,
    fresh: fn() -> T,
}

// SAFETY: `value` is reached only through a guard, and one holder at a
// time has one (invariants): the access a `Mutex<T>` gives, which needs
// `T: Send` only.
unsafe impl<T: Send> Sync for ForkSafeMutex<T> {}

/// Access to a [`ForkSafeMutex`]'s value; unlocks on drop.
pub(crate) struct ForkSafeGuard<'a, T> {
    lock: &'a ForkSafeMutex<T>,
}

impl<T> ForkSafeMutex<T> {
    /// A lock holding `value`; a forked child that takes it over from a
    /// thread it does not have starts from `fresh()`.
    pub(crate) const fn new(value: T, fresh: fn() -> T) -> Self {
        ForkSafeMutex {
            holder: AtomicUsize::new(0),
            value: UnsafeCell::new(value),
            fresh,
        }
    }

    /// Takes the lock.
    pub(crate) fn lock(&self) -> ForkSafeGuard<'_, T> {
        // The child handler must exist before anyone can hold a lock a
        // child would find taken: it is what moves the generation on.
        fork::register_handler();
        let mine = fork::generation() + 1;
        let mut tries: u32 = 0;
        loop {
            // Acquire: pairs with the Release store in the guard's drop,
            // so the last holder's writes to `value` are visible.
            match self
                .holder
                .compare_exchange_weak(0, mine, Ordering::Acquire, Ordering::Relaxed)
            {
                Ok(_) => return ForkSafeGuard { lock: self },
                Err(0) => continue,
                Err(held) if held != mine => {
                    // Held by a thread of an earlier generation: the parent
                    // that forked this process. It will never unlock here.
                    if self
                        .holder
                        .compare_exchange(held, mine, Ordering::Acquire, Ordering::Relaxed)
                        .is_ok()
                    {
                        // SAFETY: we hold the lock now (invariants); the
                        // old value may be half-written, so it is
                        // overwritten without being read or dropped.
                        unsafe { std::ptr::write(self.value.get(), (self.fresh)()) };
                        return ForkSafeGuard { lock: self };
                    }
                }
                Err(_) => {
                    tries += 1;
                    if tries < 64 {
                        std::hint::spin_loop();
                    } else {
                        std::thread::yield_now();
                    }
                }
            }
        }
    }
}

impl<T> Deref for ForkSafeGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: the guard is the lock's one holder (invariants).
        unsafe { &*self.lock.value.get() }
    }
}

impl<T> DerefMut for ForkSafeGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: as in `deref`, and `&mut self` makes this access unique.
        unsafe { &mut *self.lock.value.get() }
    }
}

impl<T> Drop for ForkSafeGuard<'_, T> {
    fn drop(&mut self) {
        // Release: pairs with the next holder's Acquire compare-exchange.
        self.lock.holder.store(0, Ordering::Release);
    }
}

/// A `u64` computed once without a lock (module docs). 0 means "not yet":
/// the value computed must not be 0.
pub(crate) struct OnceU64(AtomicU64);

impl OnceU64 {
    pub(crate) const fn new() -> Self {
        OnceU64(AtomicU64::new(0))
    }

    /// The value, computing it with `compute` if no thread has stored it
    /// yet. Racing threads may each compute it; the first store wins and
    /// every caller returns that one.
    #[inline]
    pub(crate) fn get_or_init(&self, compute: impl FnOnce() -> u64) -> u64 {
        // Relaxed: the value is self-contained (no other memory is
        // published through it).
        match self.0.load(Ordering::Relaxed) {
            0 => self.init(compute),
            value => value,
        }
    }

    #[cold]
    fn init(&self, compute: impl FnOnce() -> u64) -> u64 {
        let value = compute();
        debug_assert_ne!(value, 0, "OnceU64 values must not be 0");
        match self
            .0
            .compare_exchange(0, value, Ordering::Relaxed, Ordering::Relaxed)
        {
            Ok(_) => value,
            Err(first) => first,
        }
    }

    /// As [`OnceU64::get_or_init`] for a positive `f64` (stored as bits).
    #[inline]
    pub(crate) fn get_or_init_f64(&self, compute: impl FnOnce() -> f64) -> f64 {
        f64::from_bits(self.get_or_init(|| compute().to_bits()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lock_held_by_an_earlier_generation_is_taken_over_with_a_fresh_value() {
        // A value that owns no allocation: the one taken over is leaked
        // on purpose (its state is unknown), and Miri reports leaks.
        static LOCK: ForkSafeMutex<u32> = ForkSafeMutex::new(0, || 0);
        *LOCK.lock() = 7;
        assert_eq!(*LOCK.lock(), 7);
        // What a forked child sees: the lock stamped by a generation that
        // is not its own (a parent thread that never unlocks here). A test
        // cannot fork, so it writes such a stamp.
        LOCK.holder.store(fork::generation() + 2, Ordering::Relaxed);
        let taken = LOCK.lock();
        assert_eq!(*taken, 0, "a fresh value, not the old one");
    }

    #[test]
    fn once_u64_keeps_the_first_value() {
        let once = OnceU64::new();
        assert_eq!(once.get_or_init(|| 5), 5);
        assert_eq!(once.get_or_init(|| 9), 5);
        let float = OnceU64::new();
        assert_eq!(float.get_or_init_f64(|| 0.25), 0.25);
        assert_eq!(float.get_or_init_f64(|| 3.0), 0.25);
    }
}
