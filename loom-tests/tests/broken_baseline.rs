//! Proof that the models catch the bug they exist for. Built only with
//! `--cfg pool_broken_baseline`, which makes pool-core's worker read its
//! last-seen ticket live instead of starting from 0: a ticket issued before
//! the worker thread first runs is then taken as already seen, and the
//! caller waits forever. loom must find that interleaving and fail.
#![cfg(all(loom, pool_broken_baseline))]

use pool_core::Pool;

#[test]
#[should_panic]
fn a_live_ticket_baseline_loses_a_job() {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(2);
    builder.max_branches = 10_000;
    builder.check(|| {
        let pool = Pool::with_spin(1, 0);
        pool.run(&|_, _| {});
    });
}
