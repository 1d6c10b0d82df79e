//! Telemetry adds up exactly.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::Duration;

use pool_core::{Pool, WAIT_BUCKET_BOUNDS_NS};
use testkit::watched;

#[test]
fn dispatch_and_pickup_counters_add_up_exactly() {
    watched("stats_exact", |_| {
        let pool = Pool::with_spin(3, 1000);
        for _ in 0..100 {
            pool.run(|_, _| {});
        }
        for k in [0, 1, 2, 5] {
            for _ in 0..10 {
                pool.run_limited(k, |_, _| {});
            }
        }
        let s = pool.stats();
        assert_eq!(
            s.dispatches_full,
            100 + 10,
            "k >= n_workers invites everyone: {s}"
        );
        assert_eq!(
            s.dispatches_limited,
            10 + 10,
            "k = 0 runs inline and is not a dispatch: {s}"
        );
        assert_eq!(s.worker_jobs(), 100 * 3 + 10 * (1 + 2 + 3), "{s}");
        assert!(
            s.unparks <= s.worker_jobs(),
            "never more unparks than invited workers: {s}"
        );
        assert!(
            s.parks <= s.unparks + 3,
            "every park but the last per worker was ended by an unpark: {s}"
        );
        let waits: u64 = s.caller_wait_histogram.iter().sum();
        assert_eq!(waits, s.dispatches(), "one barrier wait per dispatch: {s}");
        assert_eq!(s.panics, 0);
        assert_eq!(
            WAIT_BUCKET_BOUNDS_NS.len() + 1,
            s.caller_wait_histogram.len()
        );
    });
}

/// Each worker settles its telemetry before its completion signal, so
/// counters read the moment `run` returns already count that job (recorded
/// after the signal, the last job went missing now and then: Miri saw it).
#[test]
fn stats_read_right_after_run_count_every_job() {
    watched("stats_right_after", |stage| {
        let pool = Pool::with_spin(1, usize::MAX);
        let rounds = if cfg!(miri) { 50 } else { 20_000 };
        for round in 1..=rounds {
            stage.set(format!("job {round} of {rounds}"));
            pool.run(|_, _| {});
            assert_eq!(pool.stats().worker_jobs(), round, "after job {round}");
        }
    });
}

#[test]
fn a_spinning_pool_issues_no_unpark_in_steady_work() {
    watched("stats_hot", |_| {
        // One worker on a 2-CPU machine is not oversubscribed; with a budget
        // it never exhausts, it never parks after its first job.
        let pool = Pool::with_spin(1, usize::MAX);
        pool.run(|_, _| {});
        let before = pool.stats();
        let jobs = if cfg!(miri) { 100 } else { 1000 };
        for _ in 0..jobs {
            pool.run(|_, _| {});
        }
        let s = pool.stats().since(&before);
        assert_eq!(s.dispatches(), jobs);
        assert_eq!(s.unparks, 0, "{s}");
        assert_eq!(s.parks, 0, "{s}");
        assert_eq!(s.jobs_hot, jobs, "{s}");
        assert_eq!(s.unparks_per_dispatch(), 0.0);
    });
}

#[test]
fn a_parking_pool_counts_its_parks_and_unparks() {
    watched("stats_park", |_| {
        let pool = Pool::with_spin(2, 0);
        for _ in 0..20 {
            pool.run(|_, _| {});
            std::thread::sleep(Duration::from_millis(2));
        }
        let s = pool.stats();
        assert_eq!(s.worker_jobs(), 40);
        assert!(s.parks >= 20, "spin 0 parks between jobs: {s}");
        assert!(s.jobs_after_park >= 20, "{s}");
        assert!(s.unparks >= 20 && s.unparks <= 40, "{s}");
        assert!(s.caller_wait_ns > 0, "{s}");
    });
}

#[test]
fn panics_are_counted_once_per_panicking_participant() {
    watched("stats_panics", |_| {
        let pool = Pool::with_spin(2, 1000);
        for _ in 0..3 {
            let _ = catch_unwind(AssertUnwindSafe(|| {
                pool.run(|idx, _| {
                    if idx == 0 {
                        panic!("worker 0 fails");
                    }
                })
            }));
        }
        let _ = catch_unwind(AssertUnwindSafe(|| pool.run(|_, _| panic!("all fail"))));
        assert_eq!(pool.stats().panics, 3 + 3);
    });
}
