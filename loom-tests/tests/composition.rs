//! Models of the pool composed the way engines compose it: a registered
//! job context, the oversubscribed wait path, two-sided jobs, and nesting
//! through two pools. Run with:
//! `RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=2 cargo test -p loom-tests --release`
#![cfg(loom)]

use loom::sync::atomic::{AtomicUsize, Ordering};
use loom::sync::Arc;
use loom_tests::model;
use pool_core::{Captured, JobContext, Pool, Previous, Side};

/// Counts entries not yet restored, and checks each participant gets the
/// caller's captured value.
struct Balance {
    open: Arc<AtomicUsize>,
    entered_value: Arc<AtomicUsize>,
}

impl JobContext for Balance {
    fn capture(&self) -> Captured {
        Box::new(42usize)
    }

    fn enter(&self, captured: &Captured) -> Previous {
        self.open.fetch_add(1, Ordering::Relaxed);
        let value = *captured.downcast_ref::<usize>().unwrap();
        self.entered_value.store(value, Ordering::Relaxed);
        Box::new(())
    }

    fn restore(&self, _previous: Previous) {
        self.open.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The captured-context cell is written by the turn holder and read by
/// ticket holders only (loom's `UnsafeCell` flags any overlap); the worker
/// sees the captured value and restores before its decrement.
#[test]
fn a_registered_context_is_entered_on_the_worker_and_restored_before_run_returns() {
    model(|| {
        let open = Arc::new(AtomicUsize::new(0));
        let entered_value = Arc::new(AtomicUsize::new(0));
        let pool = Pool::builder()
            .workers(1)
            .spin(0)
            .context(Balance {
                open: open.clone(),
                entered_value: entered_value.clone(),
            })
            .build()
            .unwrap();
        for _ in 0..2 {
            pool.run(|_, _| {});
            assert_eq!(entered_value.load(Ordering::Relaxed), 42);
            assert_eq!(open.load(Ordering::Relaxed), 0, "entered, never restored");
        }
    });
}

/// More threads than CPUs: the caller yields after 64 spins and the worker
/// yields while it spins; no job is lost.
#[test]
fn the_oversubscribed_wait_path_loses_no_job() {
    model(|| {
        let pool = Pool::builder()
            .workers(1)
            .spin(2048)
            .assume_cpus(1)
            .build()
            .unwrap();
        assert!(pool.is_oversubscribed());
        let entries = AtomicUsize::new(0);
        for _ in 0..2 {
            pool.run(|_, _| {
                entries.fetch_add(1, Ordering::Relaxed);
            });
        }
        assert_eq!(entries.load(Ordering::Relaxed), 4);
    });
}

/// Runs a two-sided job of 2 + 2 items and returns how often each item ran.
fn run_sides_counts(pool: &Pool) -> [[usize; 2]; 2] {
    let counts: [[AtomicUsize; 2]; 2] = Default::default();
    pool.run_sides(2, 2, |side, start, end| {
        for count in &counts[usize::from(side == Side::Far)][start..end] {
            count.fetch_add(1, Ordering::Relaxed);
        }
    });
    counts.map(|side| side.map(|count| count.load(Ordering::Relaxed)))
}

/// A pool with its worker marked far: from outside, each side runs on its
/// own thread; from inside a job (inline, one participant), the caller
/// runs both. Every item exactly once either way.
#[test]
fn run_sides_runs_every_item_once_from_outside_and_from_inside_a_job() {
    model(|| {
        let pool = Pool::with_spin(1, 0);
        pool.__mark_far(|worker| worker == 0).unwrap();
        assert_eq!(run_sides_counts(&pool), [[1, 1], [1, 1]], "from outside");
        let nested = loom::sync::Mutex::new(None);
        pool.run(|idx, n| {
            if idx == n - 1 {
                *nested.lock().unwrap() = Some(run_sides_counts(&pool));
            }
        });
        let nested = nested.lock().unwrap().take().unwrap();
        assert_eq!(nested, [[1, 1], [1, 1]], "from inside a job: lost items");
    });
}

/// A -> B -> A on one thread (the callers' shares): the inner A job runs
/// inline because this thread is already inside A (the seeded variant that
/// sees only the innermost pool deadlocks: `seeded_bugs.rs`).
///
/// The cross-thread cycle (A's worker calls B, B's worker calls A while A's
/// caller waits) is not modelled: two barrier waits spinning at once make
/// every execution tens of thousands of branches long, and one model did
/// not finish in 10 minutes at one preemption. The threaded test
/// `pools_calling_each_other_from_their_workers_never_deadlocks`
/// (pool-core/tests/composition.rs) runs it 200 times under the watchdog.
#[test]
fn nesting_through_two_pools_on_one_thread_runs_inline() {
    model(|| {
        let a = Pool::with_spin(1, 0);
        let b = Pool::with_spin(1, 0);
        let innermost = AtomicUsize::new(0);
        a.run(|idx, n| {
            if idx == n - 1 {
                b.run(|idx, n| {
                    if idx == n - 1 {
                        a.run(|_, n| {
                            innermost.fetch_add(n, Ordering::Relaxed);
                        });
                    }
                });
            }
        });
        assert_eq!(innermost.load(Ordering::Relaxed), 1);
    });
}
