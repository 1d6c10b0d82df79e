//! The pool composed the way engines compose it: pools calling pools,
//! contexts that dispatch, payloads that panic when dropped.

use std::any::Any;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use pool_core::{Captured, JobContext, Pool, Previous};
use testkit::watched;

/// Participant entries a job on `pool` makes, counted into `count`.
fn count_into(pool: &Pool, count: &AtomicUsize) {
    pool.run(|_, _| {
        count.fetch_add(1, Ordering::Relaxed);
    });
}

#[test]
fn a_job_of_pool_a_calling_pool_b_whose_job_calls_a_completes_on_one_thread() {
    watched("a_b_a_same_thread", |_| {
        let a = Pool::with_spin(1, 1000);
        let b = Pool::with_spin(1, 1000);
        let inner = AtomicUsize::new(0);
        // Only the caller's share nests, so the whole chain is on one thread.
        a.run(|idx, n| {
            if idx == n - 1 {
                b.run(|idx, n| {
                    if idx == n - 1 {
                        count_into(&a, &inner);
                    }
                });
            }
        });
        assert_eq!(inner.load(Ordering::Relaxed), 1, "inline: one entry");
    });
}

#[test]
fn pools_calling_each_other_from_their_workers_never_deadlock() {
    watched("a_b_a_cross_thread", |stage| {
        let a = Pool::with_spin(1, 1000);
        let b = Pool::with_spin(1, 1000);
        let rounds = if cfg!(miri) { 2 } else { 200 };
        for round in 0..rounds {
            stage.set(format!("round {round}"));
            let innermost = AtomicUsize::new(0);
            // A's worker calls B; B's worker calls A while A's caller waits
            // for A's worker: every participant nests.
            a.run(|_, _| {
                b.run(|_, _| count_into(&a, &innermost));
            });
            // Every call either got workers or ran inline: 1 or 2 B
            // participants per A participant (at least one B call gets the
            // turn), each making 1 or 2 A entries.
            let entries = innermost.load(Ordering::Relaxed);
            assert!((3..=8).contains(&entries), "round {round}: {entries}");
        }
    });
}

#[test]
fn two_threads_each_nesting_through_two_pools_in_opposite_orders_complete() {
    watched("a_b_crossed", |stage| {
        let a = Arc::new(Pool::with_spin(1, 1000));
        let b = Arc::new(Pool::with_spin(1, 1000));
        let rounds = if cfg!(miri) { 2 } else { 200 };
        let total = Arc::new(AtomicUsize::new(0));
        let spawn = |outer: Arc<Pool>, inner: Arc<Pool>| {
            let total = total.clone();
            std::thread::spawn(move || {
                for _ in 0..rounds {
                    outer.run(|_, _| count_into(&inner, &total));
                }
            })
        };
        let one = spawn(a.clone(), b.clone());
        let two = spawn(b, a);
        stage.set("joining");
        one.join().unwrap();
        two.join().unwrap();
        assert!(total.load(Ordering::Relaxed) >= 2 * rounds * 2);
    });
}

/// The pool a [`Dispatching`] context dispatches on (cleared at the end of
/// the test: the pool holds the context, so this is a cycle).
type PoolSlot = Arc<std::sync::Mutex<Option<Arc<Pool>>>>;

/// A context whose `capture` and `enter` each dispatch on a pool.
struct Dispatching {
    pool: PoolSlot,
    calls: Arc<AtomicUsize>,
}

impl Dispatching {
    fn dispatch(&self) {
        let pool = self.pool.lock().unwrap().clone();
        if let Some(pool) = pool {
            count_into(&pool, &self.calls);
        }
    }
}

impl JobContext for Dispatching {
    fn capture(&self) -> Captured {
        self.dispatch();
        Box::new(())
    }

    fn enter(&self, _captured: &Captured) -> Previous {
        self.dispatch();
        Box::new(())
    }

    fn restore(&self, _previous: Previous) {}
}

#[test]
fn a_context_whose_capture_and_enter_dispatch_on_the_same_pool_runs_them_inline() {
    watched("context_dispatches", |_| {
        let slot: PoolSlot = Arc::default();
        let calls = Arc::new(AtomicUsize::new(0));
        let pool = Arc::new(
            Pool::builder()
                .workers(2)
                .spin(1000)
                .context(Dispatching {
                    pool: slot.clone(),
                    calls: calls.clone(),
                })
                .build()
                .unwrap(),
        );
        *slot.lock().unwrap() = Some(pool.clone());
        let ran = AtomicUsize::new(0);
        count_into(&pool, &ran);
        assert_eq!(ran.load(Ordering::Relaxed), 3);
        // One capture on the caller, one enter on each of 2 workers: each
        // dispatch ran inline with one participant.
        assert_eq!(calls.load(Ordering::Relaxed), 3);
        // Break the pool -> context -> pool cycle so the pool is dropped.
        slot.lock().unwrap().take();
    });
}

/// A context whose captured value records its own drop.
struct DropFlag(Arc<AtomicBool>);

impl JobContext for DropFlag {
    fn capture(&self) -> Captured {
        struct Marker(Arc<AtomicBool>);
        impl Drop for Marker {
            fn drop(&mut self) {
                self.0.store(true, Ordering::SeqCst);
            }
        }
        Box::new(Marker(self.0.clone()))
    }

    fn enter(&self, _captured: &Captured) -> Previous {
        Box::new(())
    }

    fn restore(&self, _previous: Previous) {}
}

#[test]
fn a_captured_context_is_dropped_before_run_returns() {
    watched("context_dropped", |_| {
        let dropped = Arc::new(AtomicBool::new(false));
        let pool = Pool::builder()
            .workers(1)
            .spin(1000)
            .context(DropFlag(dropped.clone()))
            .build()
            .unwrap();
        pool.run(|_, _| {});
        assert!(
            dropped.load(Ordering::SeqCst),
            "the captured value outlived its job"
        );
    });
}

/// Counts entries not yet restored.
struct Balance(Arc<AtomicUsize>);

impl JobContext for Balance {
    fn capture(&self) -> Captured {
        Box::new(())
    }

    fn enter(&self, _captured: &Captured) -> Previous {
        self.0.fetch_add(1, Ordering::SeqCst);
        Box::new(())
    }

    fn restore(&self, _previous: Previous) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A context whose `enter` always panics.
struct PanicsOnEnter;

impl JobContext for PanicsOnEnter {
    fn capture(&self) -> Captured {
        Box::new(())
    }

    fn enter(&self, _captured: &Captured) -> Previous {
        panic!("enter refuses");
    }

    fn restore(&self, _previous: Previous) {}
}

#[test]
fn when_the_kth_enter_panics_the_contexts_already_entered_are_restored() {
    watched("context_kth_enter", |_| {
        let open = Arc::new(AtomicUsize::new(0));
        let pool = Pool::builder()
            .workers(2)
            .spin(1000)
            .context(Balance(open.clone()))
            .context(PanicsOnEnter)
            .build()
            .unwrap();
        let result = catch_unwind(AssertUnwindSafe(|| pool.run(|_, _| {})));
        assert!(result.is_err(), "the enter panic reaches the caller");
        assert_eq!(
            open.load(Ordering::SeqCst),
            0,
            "an entered context was never restored"
        );
        assert_eq!(pool.stats().panics, 2, "both workers' panics were counted");
    });
}

/// A panic payload whose own `Drop` panics.
struct ExplodingPayload;

impl Drop for ExplodingPayload {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            panic!("the payload's drop panics");
        }
    }
}

#[test]
#[cfg_attr(
    miri,
    ignore = "leaks the payloads whose Drop panics, by design; Miri reports every leak"
)]
fn a_panic_payload_that_panics_when_dropped_never_hangs_the_pool() {
    watched("exploding_payload", |stage| {
        let pool = Pool::with_spin(3, 1000);
        for round in 0..if cfg!(miri) { 2 } else { 20 } {
            stage.set(format!("round {round}"));
            // Every participant panics with an exploding payload: all but
            // one are surplus and dropped by the pool.
            let result = catch_unwind(AssertUnwindSafe(|| {
                pool.run(|_, _| std::panic::panic_any(ExplodingPayload));
            }));
            let payload: Box<dyn Any + Send> = result.unwrap_err();
            assert!(payload.is::<ExplodingPayload>());
            // Dropping the one we got is the test's business: leak it.
            std::mem::forget(payload);
        }
        let ran = AtomicUsize::new(0);
        count_into(&pool, &ran);
        assert_eq!(ran.load(Ordering::Relaxed), 4, "the pool still works");
    });
}
