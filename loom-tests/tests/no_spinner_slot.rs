//! The adaptive path when no spinner slot is free: the worker parks at once
//! and must still get every job. Its own test binary, because the spinner
//! limit is process-wide.
#![cfg(loom)]

use loom::sync::atomic::{AtomicUsize, Ordering};
use loom_tests::model;
use pool_core::{Pool, SpinPolicy};

#[test]
fn a_worker_without_a_spinner_slot_parks_and_still_gets_every_job() {
    pool_core::__loom::set_spinner_limit(0);
    model(|| {
        let pool = Pool::builder()
            .workers(1)
            .spin_policy(SpinPolicy::adaptive())
            .build()
            .unwrap();
        let entries = AtomicUsize::new(0);
        for _ in 0..2 {
            pool.run(&|_, _| {
                entries.fetch_add(1, Ordering::Relaxed);
            });
        }
        assert_eq!(entries.load(Ordering::Relaxed), 4);
        assert_eq!(pool_core::spinning_workers(), 0);
    });
}
