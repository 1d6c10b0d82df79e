//! The process-wide spinner budget. Its own test binary: the counters it
//! checks are process-wide.

use std::sync::Arc;
use std::time::Duration;

use pool_core::{spinning_workers, spinning_workers_high_water, Pool, SpinPolicy};
use testkit::watched;

#[test]
fn several_pools_never_spin_more_workers_than_the_process_has_cpus() {
    watched("spinner_budget", |_| {
        let cpus = pool_topo::usable_cpus();
        let pools: Vec<Arc<Pool>> = (0..3)
            .map(|_| {
                Arc::new(
                    Pool::builder()
                        .workers(2)
                        .spin_policy(SpinPolicy::Adaptive {
                            linger: Duration::from_millis(50),
                        })
                        .build()
                        .unwrap(),
                )
            })
            .collect();
        // One caller using three pools in turn (a prefill, a decode and an
        // intra-op pool): six workers compete for the CPUs the caller
        // leaves. (Several callers that fill the CPUs run their jobs
        // inline: `tests/settings.rs`.)
        let mut dispatched = 0;
        for round in 0..if cfg!(miri) { 150 } else { 1500 } {
            let pool = &pools[round % 3];
            let entries = std::sync::atomic::AtomicUsize::new(0);
            let participants = std::sync::atomic::AtomicUsize::new(0);
            pool.run(|_, n| {
                entries.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                participants.store(n, std::sync::atomic::Ordering::Relaxed);
            });
            let n = participants.into_inner();
            assert_eq!(entries.into_inner(), n, "every participant once");
            dispatched += usize::from(n > 1);
            assert!(spinning_workers() + pool_core::active_callers() <= cpus.max(2) + 1);
            assert!(spinning_workers() <= cpus);
        }
        assert!(dispatched > 0, "some jobs reached workers");
        assert!(spinning_workers_high_water() >= 1, "someone spun");
        assert!(spinning_workers_high_water() <= cpus, "budget exceeded");
        drop(pools);
        assert_eq!(
            spinning_workers(),
            0,
            "every slot is given back on park or exit"
        );
        assert_eq!(
            pool_core::yielding_workers(),
            0,
            "a worker leaves the yielders' count when its wait ends, with a job too"
        );
    });
}
