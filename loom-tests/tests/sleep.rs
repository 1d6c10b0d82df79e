//! Long waits that park (`sleep.rs`): the caller at its join and a
//! participant at a `JobBarrier`, and what wakes them. Under loom every
//! wait that does not end at its first check goes on to park, so these
//! models cover the sleep handshake in every interleaving; the seeded bugs
//! `SleepFlagByStore` and `MissingDepartureFence` (seeded_bugs.rs) show
//! they would catch a lost wakeup. Also: no lock is held across a job
//! (`unbind_two_nodes`).
#![cfg(loom)]

use loom::sync::atomic::{AtomicUsize, Ordering};
use loom_tests::model;
use pool_core::Pool;

#[test]
fn a_caller_asleep_at_the_join_is_woken_by_the_last_decrement() {
    model(|| {
        let pool = Pool::with_spin(1, 0);
        let entries = AtomicUsize::new(0);
        for _ in 0..2 {
            pool.run(|_, _| {
                entries.fetch_add(1, Ordering::Relaxed);
            });
        }
        assert_eq!(entries.load(Ordering::Relaxed), 4);
    });
}

#[test]
fn a_participant_asleep_at_a_barrier_is_woken_by_the_last_arrival() {
    model(|| {
        let pool = Pool::with_spin(1, 0);
        let before = AtomicUsize::new(0);
        pool.run_phased(|_, n, barrier| {
            before.fetch_add(1, Ordering::Relaxed);
            barrier.wait();
            assert_eq!(before.load(Ordering::Relaxed), n, "past the barrier early");
        });
    });
}

#[test]
fn an_unbind_inside_a_job_beside_one_from_outside_never_deadlocks() {
    model(|| {
        let pool = std::sync::Arc::new(Pool::with_spin(1, 0));
        loom_tests::unbind_inside_and_outside(&pool);
    });
}

#[test]
fn a_participant_asleep_at_a_barrier_another_left_is_released() {
    model(|| {
        let pool = Pool::with_spin(1, 0);
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            pool.run_phased(|idx, n, barrier| {
                if idx == n - 1 {
                    barrier.wait();
                }
            });
        }));
        assert!(outcome.is_err(), "a skipped barrier is reported");
    });
}
