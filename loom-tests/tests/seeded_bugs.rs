//! Proof that the models catch the bugs they exist for: each model runs a
//! pool with one known bug reinstated (`pool_core::__loom::SeededBug`) and
//! must fail, for the right reason (the expected message).
#![cfg(loom)]

use loom::sync::atomic::{AtomicUsize, Ordering};
use loom_tests::{assert_model_deadlocks, model};
use pool_core::__loom::SeededBug;
use pool_core::{Pool, Side};

fn pool_with(bug: SeededBug, workers: usize) -> Pool {
    Pool::builder()
        .workers(workers)
        .spin(0)
        .seeded_bug(bug)
        .build()
        .unwrap()
}

/// Invariant 4 broken: a ticket issued before the worker first runs is
/// taken as already seen. The caller waits for ever: asleep at the join,
/// beside the worker parked for a ticket it thinks it has seen, which loom
/// reports as a deadlock.
#[test]
fn a_live_ticket_baseline_loses_a_job() {
    assert_model_deadlocks("seeded_live_ticket_model");
}

#[test]
#[ignore = "run in a child process by a_live_ticket_baseline_loses_a_job"]
fn seeded_live_ticket_model() {
    model(|| {
        let pool = pool_with(SeededBug::LiveTicketBaseline, 1);
        pool.run(|_, _| {});
    });
}

/// The wake fence gone: the worker parks on an old ticket while the caller
/// reads `parked` as false and never unparks it; the caller then sleeps at
/// the join for ever.
#[test]
fn a_missing_wake_fence_loses_a_wakeup() {
    assert_model_deadlocks("seeded_wake_fence_model");
}

#[test]
#[ignore = "run in a child process by a_missing_wake_fence_loses_a_wakeup"]
fn seeded_wake_fence_model() {
    model(|| {
        let pool = pool_with(SeededBug::MissingWakeFence, 1);
        for _ in 0..2 {
            pool.run(|_, _| {});
        }
    });
}

/// The nesting check of before: A -> B -> A on one thread blocks on A's
/// turn, which that thread holds. loom reports the deadlock and then aborts
/// the process (destructors touch the torn-down model while unwinding), so
/// the model runs in a child process of this test binary and the verdict is
/// read from its output.
#[test]
fn a_nesting_check_that_sees_only_the_innermost_pool_deadlocks() {
    assert_model_deadlocks("seeded_nesting_deadlock_model");
}

#[test]
#[ignore = "run in a child process by a_nesting_check_that_sees_only_the_innermost_pool_deadlocks"]
fn seeded_nesting_deadlock_model() {
    model(|| {
        let a = pool_with(SeededBug::NestingSeesInnermostOnly, 1);
        let b = Pool::with_spin(1, 0);
        a.run(|idx, n| {
            if idx == n - 1 {
                b.run(|idx, n| {
                    if idx == n - 1 {
                        a.run(|_, _| {});
                    }
                });
            }
        });
    });
}

/// The far count read outside the job: a nested (inline) `run_sides` on a
/// bound pool skips the near side.
#[test]
#[should_panic(expected = "run_sides lost near items")]
fn a_far_count_read_outside_the_job_loses_items() {
    model(|| {
        let pool = pool_with(SeededBug::FarCountOutsideJob, 1);
        pool.__mark_far(|worker| worker == 0).unwrap();
        pool.run(|idx, n| {
            if idx == n - 1 {
                let near = AtomicUsize::new(0);
                pool.run_sides(2, 2, |side, start, end| {
                    if side == Side::Near {
                        near.fetch_add(end - start, Ordering::Relaxed);
                    }
                });
                assert_eq!(near.load(Ordering::Relaxed), 2, "run_sides lost near items");
            }
        });
    });
}

/// The caller announces its sleep at the join with a plain store instead
/// of a compare-exchange: a decrement between its load and its store is
/// lost, and it sleeps for ever beside the worker parked for its next
/// ticket.
#[test]
fn a_sleep_flag_stored_over_a_decrement_loses_the_joins_wakeup() {
    assert_model_deadlocks("seeded_sleep_flag_model");
}

#[test]
#[ignore = "run in a child process by a_sleep_flag_stored_over_a_decrement_loses_the_joins_wakeup"]
fn seeded_sleep_flag_model() {
    model(|| {
        let pool = pool_with(SeededBug::SleepFlagByStore, 1);
        pool.run(|_, _| {});
    });
}

/// A departing participant skips its fence before looking for sleepers:
/// the caller, asleep at a barrier the worker left without reaching,
/// sleeps for ever.
#[test]
fn a_departure_without_its_fence_leaves_a_barrier_sleeper_asleep() {
    assert_model_deadlocks("seeded_departure_fence_model");
}

#[test]
#[ignore = "run in a child process by a_departure_without_its_fence_leaves_a_barrier_sleeper_asleep"]
fn seeded_departure_fence_model() {
    model(|| {
        let pool = pool_with(SeededBug::MissingDepartureFence, 1);
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            pool.run_phased(|idx, n, barrier| {
                if idx == n - 1 {
                    barrier.wait();
                }
            });
        }));
    });
}

/// The saved-masks lock held across the restoring job: an unbind from
/// outside holds it while it waits for the turn, and an unbind from
/// inside the job that holds the turn waits for the lock.
#[test]
fn a_lock_held_across_a_job_deadlocks_two_unbinds() {
    assert_model_deadlocks("seeded_lock_across_job_model");
}

#[test]
#[ignore = "run in a child process by a_lock_held_across_a_job_deadlocks_two_unbinds"]
fn seeded_lock_across_job_model() {
    model(|| {
        let pool = std::sync::Arc::new(pool_with(SeededBug::LockHeldAcrossJob, 1));
        loom_tests::unbind_inside_and_outside(&pool);
    });
}

/// A seat taken without checking whose job the seats word names: a worker
/// late for a withdrawn job takes a seat of the next one and reads that
/// job's inbox through a ticket that never published it.
#[test]
#[should_panic(expected = "Causality violation")]
fn a_seat_taken_from_a_later_job_reads_an_unpublished_inbox() {
    model(|| {
        let pool = pool_with(SeededBug::SeatFromStaleWord, 1);
        for _ in 0..2 {
            let cursor = AtomicUsize::new(0);
            pool.run_optional_workers(
                1,
                |_, _| {
                    while cursor.fetch_add(1, Ordering::Relaxed) < 2 {}
                },
            );
        }
    });
}
