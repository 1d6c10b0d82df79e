//! `Pool::reduce` under loom: the caller folds every participant's value,
//! in participant order, and reads each slot only after its writer's
//! completion is visible (the slots are loom cells: an early read is a
//! causality violation). The seeded variant (`CompletionRelaxed`) must
//! fail.
#![cfg(loom)]

use loom_tests::model;
use pool_core::__loom::SeededBug;
use pool_core::Pool;

fn reduce_twice(pool: &Pool) {
    for job in 0..2 {
        // Participant idx gives idx * 10 + n; folded as a * 100 + b.
        let folded = pool.reduce(|idx, n| idx * 10 + n + job, |a, b| a * 100 + b);
        assert_eq!(folded, (2 + job) * 100 + 12 + job, "job {job}");
    }
}

#[test]
fn reduce_folds_every_value_in_order_and_reads_each_after_its_write() {
    model(|| reduce_twice(&Pool::with_spin(1, 0)));
}

#[test]
#[should_panic(expected = "Causality violation")]
fn a_relaxed_completion_lets_reduce_read_a_slot_too_early() {
    model(|| {
        let pool = Pool::builder()
            .workers(1)
            .spin(0)
            .seeded_bug(SeededBug::CompletionRelaxed)
            .build()
            .unwrap();
        reduce_twice(&pool);
    });
}
