//! The seeded bug `YielderCountLeaked`: a worker without a spinner slot
//! never leaves the process-wide yielders' count after a job. Its own
//! test binary: the leaked count would outlive the model and fail the
//! correct one in `no_spinner_slot.rs`.
#![cfg(loom)]

use loom_tests::{model, two_jobs_without_a_slot};
use pool_core::__loom::SeededBug;

#[test]
#[should_panic(expected = "the worker left the yielders' count")]
fn a_yielder_that_keeps_its_count_after_a_job_leaks_it() {
    pool_core::__loom::set_spinner_limit(0);
    model(|| two_jobs_without_a_slot(Some(SeededBug::YielderCountLeaked)));
}
