//! Caller context that rides with each job.

use std::cell::Cell;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use pool_core::{Captured, JobContext, Pool, Previous, ThreadLocalContext};
use testkit::watched;

thread_local! {
    /// Which device a dispatch belongs to (0: none).
    static DEVICE: Cell<u32> = const { Cell::new(0) };
    /// Whether activations stay in f32 for an exact pass.
    static EXACT: Cell<bool> = const { Cell::new(false) };
}

fn pool_with_contexts(workers: usize) -> Pool {
    Pool::builder()
        .workers(workers)
        .spin(1000)
        .context(ThreadLocalContext::new(&DEVICE))
        .context(ThreadLocalContext::new(&EXACT))
        .build()
        .unwrap()
}

/// The values every participant saw during one `run`.
fn seen_by_participants(pool: &Pool) -> Vec<(u32, bool)> {
    let seen = Mutex::new(Vec::new());
    pool.run(|_, _| {
        seen.lock()
            .unwrap()
            .push((DEVICE.with(Cell::get), EXACT.with(Cell::get)));
    });
    seen.into_inner().unwrap()
}

#[test]
fn a_value_set_on_the_caller_is_seen_by_every_participant_of_that_job() {
    watched("context_seen", |_| {
        let pool = pool_with_contexts(3);
        DEVICE.with(|d| d.set(1));
        EXACT.with(|e| e.set(true));
        assert_eq!(seen_by_participants(&pool), vec![(1, true); 4]);
        // The next job without it: the caller's new values, nothing stale.
        DEVICE.with(|d| d.set(0));
        EXACT.with(|e| e.set(false));
        assert_eq!(seen_by_participants(&pool), vec![(0, false); 4]);
    });
}

/// Carries DEVICE and records, on each worker, the value it holds right
/// after the context was restored.
struct Recording {
    inner: ThreadLocalContext<u32>,
    after_restore: Arc<Mutex<Vec<u32>>>,
}

impl JobContext for Recording {
    fn capture(&self) -> Captured {
        self.inner.capture()
    }
    fn enter(&self, captured: &Captured) -> Previous {
        self.inner.enter(captured)
    }
    fn restore(&self, previous: Previous) {
        self.inner.restore(previous);
        self.after_restore
            .lock()
            .unwrap()
            .push(DEVICE.with(Cell::get));
    }
}

fn recording_pool(workers: usize) -> (Pool, Arc<Mutex<Vec<u32>>>) {
    let after_restore = Arc::new(Mutex::new(Vec::new()));
    let pool = Pool::builder()
        .workers(workers)
        .spin(1000)
        .on_start(|idx| DEVICE.with(|d| d.set(100 + idx as u32)))
        .context(Recording {
            inner: ThreadLocalContext::new(&DEVICE),
            after_restore: after_restore.clone(),
        })
        .build()
        .unwrap();
    (pool, after_restore)
}

#[test]
fn workers_get_their_own_values_back_after_each_job() {
    watched("context_restore", |_| {
        let (pool, after_restore) = recording_pool(2);
        DEVICE.with(|d| d.set(7));
        pool.run(|_, _| assert_eq!(DEVICE.with(Cell::get), 7));
        let mut restored = after_restore.lock().unwrap().clone();
        restored.sort_unstable();
        assert_eq!(restored, vec![100, 101], "each worker's own value is back");
    });
}

#[test]
fn a_panicking_job_still_restores_the_workers_values() {
    watched("context_panic", |_| {
        let (pool, after_restore) = recording_pool(1);
        DEVICE.with(|d| d.set(5));
        let result = catch_unwind(AssertUnwindSafe(|| {
            pool.run(|idx, _| {
                if idx == 0 {
                    assert_eq!(DEVICE.with(Cell::get), 5);
                    panic!("job fails");
                }
            })
        }));
        assert!(result.is_err());
        assert_eq!(
            *after_restore.lock().unwrap(),
            vec![100],
            "restored despite the panic"
        );
        // And the next job carries the caller's new value.
        DEVICE.with(|d| d.set(9));
        let observed = AtomicUsize::new(0);
        pool.run(|idx, _| {
            if idx == 0 {
                observed.store(DEVICE.with(Cell::get) as usize, Ordering::Relaxed);
            }
        });
        assert_eq!(observed.load(Ordering::Relaxed), 9);
    });
}

#[test]
fn concurrent_and_nested_callers_carry_their_own_contexts() {
    watched("context_concurrent", |_| {
        let pool = Arc::new(pool_with_contexts(2));
        let callers: Vec<_> = (1..=4u32)
            .map(|device| {
                let pool = pool.clone();
                std::thread::spawn(move || {
                    DEVICE.with(|d| d.set(device));
                    for _ in 0..if cfg!(miri) { 20 } else { 200 } {
                        pool.run(|_, _| {
                            assert_eq!(DEVICE.with(Cell::get), device, "another caller's device");
                            // Nested: runs inline, same thread, same value.
                            pool.run(|_, _| assert_eq!(DEVICE.with(Cell::get), device));
                        });
                    }
                })
            })
            .collect();
        for caller in callers {
            caller.join().unwrap();
        }
    });
}

#[test]
fn worker_events_nest_under_the_callers_span_with_trace_spans() {
    use std::sync::atomic::AtomicBool;
    use tracing_subscriber::layer::SubscriberExt;

    /// Records whether every event saw a current span named "request".
    struct SpanCheck(Arc<AtomicBool>, Arc<AtomicUsize>);
    impl<S> tracing_subscriber::Layer<S> for SpanCheck
    where
        S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
    {
        fn on_event(
            &self,
            event: &tracing::Event<'_>,
            ctx: tracing_subscriber::layer::Context<'_, S>,
        ) {
            // Only this test's events (other tests build pools meanwhile).
            if event.metadata().target() != module_path!() {
                return;
            }
            self.1.fetch_add(1, Ordering::Relaxed);
            let in_request = ctx
                .lookup_current()
                .is_some_and(|span| span.name() == "request");
            if !in_request {
                self.0.store(false, Ordering::Relaxed);
            }
        }
    }

    let all_nested = Arc::new(AtomicBool::new(true));
    let events = Arc::new(AtomicUsize::new(0));
    let subscriber =
        tracing_subscriber::registry().with(SpanCheck(all_nested.clone(), events.clone()));
    let dispatch = tracing::Dispatch::new(subscriber);
    // Workers must see the same subscriber: set it globally for this
    // binary's test (the only one that installs one).
    tracing::dispatcher::set_global_default(dispatch.clone()).ok();
    tracing::dispatcher::with_default(&dispatch, || {
        let pool = Pool::builder()
            .workers(2)
            .spin(1000)
            .trace_spans()
            .build()
            .unwrap();
        let span = tracing::info_span!("request", id = 7);
        let _guard = span.enter();
        pool.run(|idx, _| tracing::info!(idx, "participant"));
    });
    assert_eq!(events.load(Ordering::Relaxed), 3);
    assert!(
        all_nested.load(Ordering::Relaxed),
        "a worker event outside the request span"
    );
}
