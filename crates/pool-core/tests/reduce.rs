//! `Pool::reduce`: one value per participant, folded in participant order
//! whatever the order they finish in; inline and nested runs fold one
//! value; wide pools (slots on the heap) fold as narrow ones; a panic
//! reaches the caller and drops every value already made; pinned,
//! oversubscribed and several-caller settings fold as the lab case.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use pool_core::{Pool, STACK_SLOTS};
use testkit::{panic_message, watched};

const JOBS: usize = if cfg!(miri) { 3 } else { 200 };

/// The participants, in the order `reduce` folds them: a fold that only
/// appends records it.
fn fold_order(pool: &Pool) -> Vec<(usize, usize)> {
    pool.reduce(
        |idx, n| vec![(idx, n)],
        |mut a, b| {
            a.extend(b);
            a
        },
    )
}

#[test]
fn values_are_folded_in_participant_order_whoever_finishes_first() {
    watched("reduce_order", |stage| {
        for workers in [1, 2, 3] {
            let pool = Pool::with_spin(workers, 1000);
            for job in 0..JOBS {
                stage.set(format!("{workers} workers, job {job}"));
                // Participant 0 finishes last in odd jobs.
                let order = pool.reduce(
                    |idx, n| {
                        if idx == 0 && job % 2 == 1 && !cfg!(miri) {
                            std::thread::sleep(Duration::from_micros(200));
                        }
                        vec![(idx, n)]
                    },
                    |mut a, b| {
                        a.extend(b);
                        a
                    },
                );
                let n = order.len();
                let expected: Vec<_> = (0..n).map(|idx| (idx, n)).collect();
                assert_eq!(order, expected, "{workers} workers, job {job}");
            }
        }
    });
}

#[test]
fn a_float_sum_is_the_same_bits_as_the_shares_folded_in_order() {
    watched("reduce_bits", |_| {
        // A fixed spin budget invites every worker: always 3 participants.
        let pool = Pool::with_spin(2, 1000);
        // Shares of 10^8, -10^8 and about 1: in order the 1 survives,
        // backwards it is lost in 10^8's rounding.
        let values: Vec<f32> = (0..3000).map(|i| [1e5, -1e5, 1e-3][i / 1000]).collect();
        let share = values.len().div_ceil(3);
        let shares: Vec<f32> = values.chunks(share).map(|c| c.iter().sum()).collect();
        // ((s0 + s1) + s2), each share summed in order.
        let expected = (shares[0] + shares[1]) + shares[2];
        assert_ne!(
            expected.to_bits(),
            ((shares[2] + shares[1]) + shares[0]).to_bits(),
            "the data must tell the orders apart"
        );
        for job in 0..JOBS {
            let got = pool.reduce(
                |idx, n| {
                    assert_eq!(n, 3);
                    values.iter().skip(idx * share).take(share).sum::<f32>()
                },
                |a, b| a + b,
            );
            assert_eq!(got.to_bits(), expected.to_bits(), "job {job}");
        }
    });
}

#[test]
fn an_inline_run_and_a_nested_call_fold_one_value() {
    watched("reduce_inline", |_| {
        let pool = Pool::with_spin(0, 0);
        assert_eq!(fold_order(&pool), vec![(0, 1)]);
        let outer = Pool::with_spin(1, 1000);
        let inner = outer.reduce(
            |_, _| fold_order(&outer),
            |mut a, b| {
                a.extend(b);
                a
            },
        );
        // Each participant's nested call on the same pool ran inline.
        assert!(inner.iter().all(|&step| step == (0, 1)), "{inner:?}");
    });
}

#[test]
fn a_pool_wider_than_the_stack_slots_folds_every_participant() {
    watched("reduce_wide", |_| {
        let pool = Pool::with_spin(STACK_SLOTS + 1, 100);
        for _ in 0..if cfg!(miri) { 1 } else { 20 } {
            let order = fold_order(&pool);
            let n = order.len();
            assert!(n == 1 || n == STACK_SLOTS + 2, "{n} participants");
            assert_eq!(order, (0..n).map(|idx| (idx, n)).collect::<Vec<_>>());
        }
    });
}

/// Counts drops, to check no value is leaked or dropped twice.
struct Counted<'a>(&'a AtomicUsize);

impl Drop for Counted<'_> {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
}

#[test]
fn a_panicking_participant_reaches_the_caller_and_every_value_is_dropped_once() {
    watched("reduce_panic", |_| {
        let pool = Pool::with_spin(2, 1000);
        for job in 0..JOBS.min(20) {
            let made = AtomicUsize::new(0);
            let dropped = AtomicUsize::new(0);
            let caught = catch_unwind(AssertUnwindSafe(|| {
                pool.reduce(
                    |idx, n| {
                        if idx == job % n {
                            panic!("participant {idx} of {n}");
                        }
                        made.fetch_add(1, Ordering::Relaxed);
                        Counted(&dropped)
                    },
                    |a, _| a,
                )
            }));
            let message = panic_message(caught.err().expect("the panic reached the caller"));
            assert!(message.starts_with("participant "), "{message}");
            assert_eq!(
                dropped.load(Ordering::Relaxed),
                made.load(Ordering::Relaxed),
                "job {job}: a value was leaked or dropped twice"
            );
            // The pool still works.
            assert!(!fold_order(&pool).is_empty());
        }
    });
}

/// Every participant's value, checked in order, many times over.
fn check_folds(pool: &Pool) {
    for job in 0..JOBS {
        let order = fold_order(pool);
        let n = order.len();
        assert_eq!(
            order,
            (0..n).map(|idx| (idx, n)).collect::<Vec<_>>(),
            "job {job}"
        );
    }
}

#[test]
fn folds_hold_with_pinned_workers_and_a_pinned_caller() {
    watched("reduce_pinned", |_| {
        let cpus = pool_topo::process_affinity_cpus();
        if cpus.len() < 2 {
            eprintln!("needs two usable CPUs: skipping");
            return;
        }
        // The watched body runs on its own thread: pinning it is harmless.
        pool_topo::pin_current_thread(&[cpus[0]]).unwrap();
        let pool = Pool::builder()
            .workers(1)
            .pin_workers(vec![cpus[1]])
            .spin(1000)
            .build()
            .unwrap();
        check_folds(&pool);
        // Oversubscribed: three workers pinned beside the caller's CPU.
        let pool = Pool::builder()
            .workers(3)
            .pin_workers(vec![cpus[1], cpus[0], cpus[1]])
            .spin(1000)
            .build()
            .unwrap();
        check_folds(&pool);
    });
}

#[test]
fn several_threads_reducing_on_one_pool_each_get_their_own_values_in_order() {
    watched("reduce_callers", |_| {
        // The adaptive policy: with three callers on 2 CPUs some jobs run
        // inline (n = 1), which the check allows.
        let pool = Pool::new(2);
        std::thread::scope(|s| {
            for caller in 0..3usize {
                let pool = &pool;
                s.spawn(move || {
                    for job in 0..JOBS {
                        // Each value carries its caller: a slot shared
                        // between two callers' jobs would mix them.
                        let got = pool.reduce(
                            |idx, n| vec![(caller, idx, n)],
                            |mut a, b| {
                                a.extend(b);
                                a
                            },
                        );
                        let n = got.len();
                        let expected: Vec<_> = (0..n).map(|idx| (caller, idx, n)).collect();
                        assert_eq!(got, expected, "caller {caller}, job {job}");
                    }
                });
            }
        });
    });
}
