//! The process-wide pool. Its own test binary: the pool is process-wide,
//! so the steps run in one test, in order. Not under Miri: the global pool
//! is never dropped, by design, and Miri reports its threads as leaked.
#![cfg(not(miri))]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Barrier;

use pool_core::{all_worker_tids, global, init_global, Pool};
use testkit::watched;

#[test]
fn the_global_pool_is_built_exactly_once_and_left_alone_after() {
    watched("global", |stage| {
        stage.set("a failing builder leaves no pool");
        let refused = init_global(Pool::builder().workers(1).pin_workers(vec![1 << 20]));
        assert!(refused.is_err(), "a pin past the mask must be refused");

        stage.set("concurrent first calls");
        let threads = 8;
        let start = Barrier::new(threads);
        let built_now = AtomicUsize::new(0);
        let addresses: Vec<usize> = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..threads)
                .map(|i| {
                    let (start, built_now) = (&start, &built_now);
                    scope.spawn(move || {
                        start.wait();
                        if i % 2 == 0 && init_global(Pool::builder().workers(1)).unwrap() {
                            built_now.fetch_add(1, Ordering::Relaxed);
                        }
                        global() as *const Pool as usize
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert!(addresses.windows(2).all(|w| w[0] == w[1]), "one pool");
        assert!(built_now.load(Ordering::Relaxed) <= 1);

        stage.set("later calls change nothing");
        let workers = global().n_workers();
        assert!(!init_global(Pool::builder().workers(workers + 3)).unwrap());
        assert_eq!(global().n_workers(), workers);

        stage.set("the global pool runs jobs");
        let entries = AtomicUsize::new(0);
        global().run(|_, n| {
            assert!(n >= 1);
            entries.fetch_add(1, Ordering::Relaxed);
        });
        assert!(entries.load(Ordering::Relaxed) >= 1);

        stage.set("every live worker's tid, and no dropped pool's");
        let extra = Pool::new(2);
        let tids = all_worker_tids();
        if cfg!(target_os = "linux") {
            for tid in extra.worker_tids().iter().chain(&global().worker_tids()) {
                assert!(tids.contains(tid), "{tid} missing from {tids:?}");
            }
            let gone = extra.worker_tids();
            drop(extra);
            assert!(gone.iter().all(|tid| !all_worker_tids().contains(tid)));
        }
    });
}
