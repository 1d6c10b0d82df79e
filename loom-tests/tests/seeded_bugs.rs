//! Proof that the models catch the bugs they exist for: each model runs a
//! pool with one known bug reinstated (`pool_core::__loom::SeededBug`) and
//! must fail, for the right reason (the expected message).
#![cfg(loom)]

use loom::sync::atomic::{AtomicUsize, Ordering};
use loom_tests::{model, model_of_a_hang};
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
/// taken as already seen; the caller waits for ever.
#[test]
#[should_panic(expected = "Model exceeded maximum number of branches")]
fn a_live_ticket_baseline_loses_a_job() {
    model_of_a_hang(|| {
        let pool = pool_with(SeededBug::LiveTicketBaseline, 1);
        pool.run(&|_, _| {});
    });
}

/// The wake fence gone: the worker parks on an old ticket while the caller
/// reads `parked` as false and never unparks it.
#[test]
#[should_panic(expected = "Model exceeded maximum number of branches")]
fn a_missing_wake_fence_loses_a_wakeup() {
    model_of_a_hang(|| {
        let pool = pool_with(SeededBug::MissingWakeFence, 1);
        for _ in 0..2 {
            pool.run(&|_, _| {});
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
    let output = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "seeded_nesting_deadlock_model",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .output()
        .expect("run this test binary again");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        !output.status.success(),
        "the seeded model passed:\n{stderr}"
    );
    assert!(
        stderr.contains("deadlock; threads"),
        "the seeded model failed for another reason:\n{stderr}"
    );
}

#[test]
#[ignore = "run in a child process by a_nesting_check_that_sees_only_the_innermost_pool_deadlocks"]
fn seeded_nesting_deadlock_model() {
    model(|| {
        let a = pool_with(SeededBug::NestingSeesInnermostOnly, 1);
        let b = Pool::with_spin(1, 0);
        a.run(&|idx, n| {
            if idx == n - 1 {
                b.run(&|idx, n| {
                    if idx == n - 1 {
                        a.run(&|_, _| {});
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
        pool.run(&|idx, n| {
            if idx == n - 1 {
                let near = AtomicUsize::new(0);
                pool.run_sides(2, 2, &|side, start, end| {
                    if side == Side::Near {
                        near.fetch_add(end - start, Ordering::Relaxed);
                    }
                });
                assert_eq!(near.load(Ordering::Relaxed), 2, "run_sides lost near items");
            }
        });
    });
}
