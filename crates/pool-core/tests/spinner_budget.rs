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
        let callers: Vec<_> = pools
            .iter()
            .map(|pool| {
                let pool = pool.clone();
                std::thread::spawn(move || {
                    for _ in 0..500 {
                        let entries = std::sync::atomic::AtomicUsize::new(0);
                        pool.run(&|_, _| {
                            entries.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        });
                        assert_eq!(entries.into_inner(), 3);
                        assert!(spinning_workers() <= cpus);
                    }
                })
            })
            .collect();
        for caller in callers {
            caller.join().unwrap();
        }
        assert!(spinning_workers_high_water() >= 1, "someone spun");
        assert!(spinning_workers_high_water() <= cpus, "budget exceeded");
        drop(pools);
        assert_eq!(
            spinning_workers(),
            0,
            "every slot is given back on park or exit"
        );
    });
}
