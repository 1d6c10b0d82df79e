//! The seeded bug `YielderKeptThroughJob`: a worker without a spinner slot
//! that picks up a job stays in the process-wide yielders' count. Its own
//! test binary: the leaked count would outlive the model and fail the
//! correct one in `no_spinner_slot.rs`.
#![cfg(loom)]

use loom_tests::{model, two_jobs_without_a_slot};
use pool_core::__loom::SeededBug;

#[test]
#[should_panic(expected = "the worker left the yielders' count")]
fn a_yielder_that_keeps_its_count_through_a_job_leaks_it() {
    pool_core::__loom::set_spinner_limit(0);
    model(|| two_jobs_without_a_slot(Some(SeededBug::YielderKeptThroughJob)));
}
