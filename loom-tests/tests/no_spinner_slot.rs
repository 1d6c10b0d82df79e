//! The adaptive path when no spinner slot is free: the worker waits as a
//! yielder (or parks) and must still get every job, and leave the
//! yielders' count however its wait ends. Its own test binary, because the
//! spinner limit and the counts are process-wide.
#![cfg(loom)]

use loom_tests::{model, two_jobs_without_a_slot};

#[test]
fn a_worker_without_a_spinner_slot_parks_and_still_gets_every_job() {
    pool_core::__loom::set_spinner_limit(0);
    model(|| two_jobs_without_a_slot(None));
}
