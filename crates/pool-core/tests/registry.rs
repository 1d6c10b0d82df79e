//! `all_worker_tids()` lists live pools only, however many pools come and
//! go at once. Its own test binary: it checks the list is empty at the
//! end, which no other test's pools may disturb.
#![cfg(not(miri))]

use std::collections::HashSet;

use pool_core::{all_worker_tids, Pool};
use testkit::watched;

#[test]
fn dropped_pools_leave_no_tids_behind_however_many_come_and_go_at_once() {
    watched("registry", |_| {
        let done = std::sync::atomic::AtomicBool::new(false);
        let dropped: Vec<i32> = std::thread::scope(|scope| {
            // Readers holding the list's lock as often as they can.
            for _ in 0..2 {
                scope.spawn(|| {
                    while !done.load(std::sync::atomic::Ordering::Relaxed) {
                        std::hint::black_box(all_worker_tids());
                    }
                });
            }
            let builders: Vec<_> = (0..4)
                .map(|_| {
                    scope.spawn(|| {
                        let mut tids = Vec::new();
                        for _ in 0..60 {
                            let pool = Pool::with_spin(2, 0);
                            pool.run(|_, _| {});
                            // Readers contend for the list as well.
                            let _ = all_worker_tids();
                            tids.extend(pool.worker_tids());
                        }
                        tids
                    })
                })
                .collect();
            let tids = builders
                .into_iter()
                .flat_map(|b| b.join().unwrap())
                .collect();
            done.store(true, std::sync::atomic::Ordering::Relaxed);
            tids
        });
        assert_eq!(dropped.len(), 4 * 60 * 2);
        let live: HashSet<i32> = all_worker_tids().into_iter().collect();
        assert!(
            live.is_empty(),
            "{} tids of dropped pools still listed: {:?}",
            live.len(),
            live.iter().take(8).collect::<Vec<_>>()
        );
        // And a live pool is listed.
        let pool = Pool::new(1);
        if cfg!(any(target_os = "linux", target_os = "android")) {
            assert_eq!(all_worker_tids(), pool.worker_tids());
        }
    });
}
