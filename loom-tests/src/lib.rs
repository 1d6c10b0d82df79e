//! loom models of pool-core's dispatch protocol live in `tests/`; this
//! library holds what they share. They compile pool-core itself with
//! `--cfg loom`, so the models check the shipped protocol through its
//! `sync` facade, not a copy.
#![cfg(loom)]

/// Checks `f` over every interleaving within the preemption bound
/// (`LOOM_MAX_PREEMPTIONS`, default 2).
pub fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut builder = loom::model::Builder::new();
    if builder.preemption_bound.is_none() {
        builder.preemption_bound = Some(2);
    }
    builder.check(f);
}

/// Like [`model`], with a small branch limit: for seeded bugs whose failure
/// is a caller spinning for ever, which loom reports as too many branches.
pub fn model_of_a_hang(f: impl Fn() + Sync + Send + 'static) {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(2);
    builder.max_branches = 10_000;
    builder.check(f);
}

/// Two jobs on an adaptive pool whose one worker has no spinner slot (the
/// binary sets the limit to 0), optionally with a seeded bug; afterwards
/// no slot is held and, once the pool is gone, nobody counts as a yielder.
pub fn two_jobs_without_a_slot(bug: Option<pool_core::__loom::SeededBug>) {
    use loom::sync::atomic::{AtomicUsize, Ordering};
    let mut builder = pool_core::Pool::builder()
        .workers(1)
        .spin_policy(pool_core::SpinPolicy::adaptive());
    if let Some(bug) = bug {
        builder = builder.seeded_bug(bug);
    }
    let pool = builder.build().unwrap();
    let entries = AtomicUsize::new(0);
    for _ in 0..2 {
        pool.run(&|_, _| {
            entries.fetch_add(1, Ordering::Relaxed);
        });
    }
    assert_eq!(entries.load(Ordering::Relaxed), 4);
    assert_eq!(pool_core::spinning_workers(), 0);
    drop(pool);
    assert_eq!(
        pool_core::yielding_workers(),
        0,
        "the worker left the yielders' count"
    );
}
