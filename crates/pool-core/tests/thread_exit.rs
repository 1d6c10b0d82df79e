//! A pool used from a thread-local destructor, late in a thread's exit:
//! after the pool's own thread-locals on that thread were destroyed. It
//! must run the job (inline), never abort the process with "cannot access
//! a Thread Local Storage value during or after destruction".

use std::cell::RefCell;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use pool_core::Pool;
use testkit::watched;

/// Runs a job on its pool when dropped.
struct RunsOnDrop {
    pool: Arc<Pool>,
    entries: Arc<AtomicUsize>,
}

impl Drop for RunsOnDrop {
    fn drop(&mut self) {
        let entries = &self.entries;
        // Once per job, however many participants it had (inline here on
        // Linux, where the pool's thread-locals are gone; maybe not on
        // other systems, whose destructors run in another order).
        self.pool.run(|idx, _| {
            if idx == 0 {
                entries.fetch_add(1, Ordering::Relaxed);
            }
        });
        self.pool.run_phased(|_, _, barrier| barrier.wait());
        let folded = self.pool.reduce(|_, _| 1usize, |a, b| a + b);
        entries.fetch_add(usize::from(folded >= 1), Ordering::Relaxed);
    }
}

thread_local! {
    static LATE: RefCell<Option<RunsOnDrop>> = const { RefCell::new(None) };
}

#[test]
fn a_job_run_from_a_thread_local_destructor_after_the_pools_own_runs() {
    watched("tls_destructor", |_| {
        for spin in [Some(1000), None] {
            let pool = Arc::new(match spin {
                Some(spin) => Pool::with_spin(1, spin),
                None => Pool::new(1),
            });
            let entries = Arc::new(AtomicUsize::new(0));
            let (pool2, entries2) = (pool.clone(), entries.clone());
            std::thread::spawn(move || {
                // Registered first, so destroyed last: after the
                // thread-locals the pool creates on this thread below.
                LATE.with(|late| {
                    *late.borrow_mut() = Some(RunsOnDrop {
                        pool: pool2.clone(),
                        entries: entries2,
                    })
                });
                pool2.run(|_, _| {});
                pool2.run_phased(|_, _, barrier| barrier.wait());
            })
            .join()
            .expect("the thread exits cleanly");
            assert_eq!(entries.load(Ordering::Relaxed), 2, "both jobs ran at exit");
        }
    });
}
