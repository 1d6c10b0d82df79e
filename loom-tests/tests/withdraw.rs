//! Withdrawable invitations (`tickets.rs`): a row-style job whose
//! participants pull grains from a cursor, where a worker that has not
//! started when the caller is done is withdrawn. Every grain runs once,
//! whoever pulls it; a withdrawn worker never touches the job; the next
//! jobs, withdrawable or not, still reach the worker.
#![cfg(loom)]

use loom::sync::atomic::{AtomicUsize, Ordering};
use loom_tests::model;
use pool_core::Pool;

/// Two grains pulled from a cursor by whoever runs.
fn grains(pool: &Pool) {
    let cursor = AtomicUsize::new(0);
    let done = [AtomicUsize::new(0), AtomicUsize::new(0)];
    pool.run_optional_workers(1, |_, _| loop {
        let grain = cursor.fetch_add(1, Ordering::Relaxed);
        if grain >= done.len() {
            break;
        }
        done[grain].fetch_add(1, Ordering::Relaxed);
    });
    for grain in &done {
        assert_eq!(
            grain.load(Ordering::Relaxed),
            1,
            "a grain ran other than once"
        );
    }
}

#[test]
fn an_invitation_nobody_took_is_withdrawn_and_every_grain_runs_once() {
    model(|| {
        let pool = Pool::with_spin(1, 0);
        grains(&pool);
        grains(&pool);
        // A plain job after withdrawals still reaches the worker.
        let entries = AtomicUsize::new(0);
        pool.run(|_, _| {
            entries.fetch_add(1, Ordering::Relaxed);
        });
        assert_eq!(entries.load(Ordering::Relaxed), 2);
    });
}
