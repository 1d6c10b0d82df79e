//! `run_phased`'s barrier inside a job: every interleaving (within the
//! preemption bound) of its arrive/release/leave protocol, including reuse
//! across phases, a panic mid-phase and a skipped barrier.
#![cfg(loom)]

use std::panic::{catch_unwind, AssertUnwindSafe};

use loom::sync::atomic::{AtomicUsize, Ordering};
use loom_tests::model;
use pool_core::__loom::SeededBug;
use pool_core::Pool;

/// Three phases on caller + one worker: each participant stamps its slot
/// (`Relaxed`), passes the barrier, and must read the other's stamp of the
/// same phase: only the barrier's ordering makes it visible. Three
/// episodes reuse the one arrival count, so a fast participant's next
/// arrival races the other's wait for the one before.
fn phases_see_each_others_writes(pool: &Pool) {
    let slots = [AtomicUsize::new(0), AtomicUsize::new(0)];
    pool.run_phased(|idx, n, barrier| {
        assert_eq!(n, 2, "the job is dispatched, not run inline");
        for phase in 1..=3 {
            slots[idx].store(phase, Ordering::Relaxed);
            barrier.wait();
            for slot in &slots[..n] {
                let seen = slot.load(Ordering::Relaxed);
                // The other may already be in the next phase, never behind.
                assert!(
                    seen == phase || seen == phase + 1,
                    "phase {phase}: saw {seen}"
                );
            }
        }
    });
}

#[test]
fn a_barrier_publishes_every_write_before_it_and_is_reused_across_phases() {
    model(|| phases_see_each_others_writes(&Pool::with_spin(1, 0)));
}

/// A worker panics before the barrier the caller waits at: the caller is
/// released, `run_phased` re-raises the worker's panic, and the next job
/// runs on the same pool.
#[test]
fn a_panic_mid_phase_releases_the_waiting_participant() {
    model(|| {
        let pool = Pool::with_spin(1, 0);
        let result = catch_unwind(AssertUnwindSafe(|| {
            pool.run_phased(|idx, n, barrier| {
                if idx != n - 1 {
                    panic!("worker fails");
                }
                barrier.wait();
            })
        }));
        let payload = result.expect_err("the worker's panic reaches the caller");
        assert_eq!(payload.downcast_ref::<&str>(), Some(&"worker fails"));
        let ran = AtomicUsize::new(0);
        pool.run_phased(|_, _, barrier| {
            barrier.wait();
            ran.fetch_add(1, Ordering::Relaxed);
        });
        assert_eq!(ran.load(Ordering::Relaxed), 2);
    });
}

/// Misuse, not a panic: one participant skips the barrier the other waits
/// at. The waiter is released and `run_phased` says why.
#[test]
fn a_skipped_barrier_is_reported_not_hung() {
    model(|| {
        let pool = Pool::with_spin(1, 0);
        let result = catch_unwind(AssertUnwindSafe(|| {
            pool.run_phased(|idx, _, barrier| {
                if idx == 0 {
                    barrier.wait();
                }
            })
        }));
        let payload = result.expect_err("a skipped barrier panics");
        let message = payload
            .downcast_ref::<String>()
            .expect("a formatted message");
        assert!(message.contains("fewest 0, most 1"), "{message}");
    });
}

/// The seeded bug: arrivals counted with a `Relaxed` RMW. A participant
/// released by the count has not acquired the other's stamp, and reads the
/// phase before.
#[test]
#[should_panic(expected = "saw")]
fn a_relaxed_arrival_hides_the_writes_before_the_barrier() {
    model(|| {
        let pool = Pool::builder()
            .workers(1)
            .spin(0)
            .seeded_bug(SeededBug::BarrierArrivalRelaxed)
            .build()
            .unwrap();
        phases_see_each_others_writes(&pool);
    });
}
