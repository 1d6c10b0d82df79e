//! A panic in any participant never hangs or poisons the pool.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};

use pool_core::Pool;
use testkit::{panic_message, watched};

fn assert_pool_whole(pool: &Pool) {
    let calls = AtomicUsize::new(0);
    let jobs = if cfg!(miri) { 2 } else { 20 };
    for _ in 0..jobs {
        pool.run(|_, _| {
            calls.fetch_add(1, Ordering::Relaxed);
        });
    }
    assert_eq!(calls.load(Ordering::Relaxed), jobs * (pool.n_workers() + 1));
}

#[test]
fn a_worker_panic_is_reraised_in_the_caller_after_every_participant_finished() {
    watched("worker_panic", |_| {
        let pool = Pool::with_spin(3, 1000);
        let finished = AtomicUsize::new(0);
        let result = catch_unwind(AssertUnwindSafe(|| {
            pool.run(|idx, _| {
                if idx == 1 {
                    panic!("worker one fails");
                }
                std::thread::sleep(std::time::Duration::from_millis(2));
                finished.fetch_add(1, Ordering::Relaxed);
            });
        }));
        assert_eq!(panic_message(result.unwrap_err()), "worker one fails");
        assert_eq!(
            finished.load(Ordering::Relaxed),
            3,
            "the others still ran to the end"
        );
        assert_pool_whole(&pool);
    });
}

#[test]
fn the_callers_own_panic_wins_over_a_workers() {
    watched("caller_panic", |_| {
        let pool = Pool::with_spin(2, 1000);
        let result = catch_unwind(AssertUnwindSafe(|| {
            pool.run(|idx, n| {
                if idx == n - 1 {
                    panic!("the caller fails");
                }
                if idx == 0 {
                    panic!("a worker fails");
                }
            });
        }));
        assert_eq!(panic_message(result.unwrap_err()), "the caller fails");
        assert_pool_whole(&pool);
    });
}

#[test]
fn several_panicking_participants_reraise_one_payload_and_the_pool_keeps_working() {
    watched("many_panics", |stage| {
        let pool = Pool::with_spin(4, 0);
        for round in 0..if cfg!(miri) { 3 } else { 20 } {
            stage.set(format!("round {round}"));
            let result = catch_unwind(AssertUnwindSafe(|| {
                pool.run(|idx, n| {
                    if idx < n - 1 {
                        panic!("worker {idx} fails");
                    }
                });
            }));
            let message = panic_message(result.unwrap_err());
            assert!(message.starts_with("worker "), "{message}");
            assert_pool_whole(&pool);
        }
    });
}

#[test]
fn a_panic_in_a_limited_job_leaves_uninvited_workers_untouched() {
    watched("limited_panic", |_| {
        let pool = Pool::with_spin(3, 1000);
        let result = catch_unwind(AssertUnwindSafe(|| {
            pool.run_limited(1, |idx, n| {
                assert_eq!(n, 2);
                if idx == 0 {
                    panic!("limited worker fails");
                }
            });
        }));
        assert!(result.is_err());
        assert_pool_whole(&pool);
    });
}

#[test]
fn a_panic_in_a_nested_inline_job_unwinds_through_the_outer_job() {
    watched("nested_panic", |_| {
        let pool = Pool::with_spin(1, 1000);
        let result = catch_unwind(AssertUnwindSafe(|| {
            pool.run(|idx, _| {
                if idx == 0 {
                    pool.run(|_, _| panic!("inner fails"));
                }
            });
        }));
        assert_eq!(panic_message(result.unwrap_err()), "inner fails");
        assert_pool_whole(&pool);
    });
}
