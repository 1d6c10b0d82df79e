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

/// Three rows through the shared row cursor (`pool_matvec`'s
/// `pull_chunks`, which `Broadcast` executors and the phased decode pull
/// from) on `pool`: each row must run exactly once.
pub fn three_rows_through_the_cursor(pool: &pool_core::Pool) {
    use std::sync::atomic::{AtomicU8, Ordering};
    let rows: [AtomicU8; 3] = Default::default();
    pool_matvec::__loom::cursor_rows(pool, 3, &|start, end| {
        for row in &rows[start..end] {
            row.fetch_add(1, Ordering::Relaxed);
        }
    });
    for row in &rows {
        assert_eq!(row.load(Ordering::Relaxed), 1, "a row ran other than once");
    }
}

/// Runs the ignored model `name` of the calling test binary in a child
/// process and checks that loom reported a deadlock there. loom aborts the
/// process after reporting one (destructors touch the torn-down model
/// while unwinding), so a deadlocking model cannot run in the test's own
/// process.
pub fn assert_model_deadlocks(name: &str) {
    let output = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            name,
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .output()
        .expect("run this test binary again");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        !output.status.success(),
        "the seeded model {name} passed:\n{stderr}"
    );
    assert!(
        stderr.contains("deadlock; threads"),
        "the seeded model {name} failed for another reason:\n{stderr}"
    );
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
        pool.run(|_, _| {
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

/// An unbind from another thread while a job's caller share unbinds the
/// same pool (masks saved, nothing pinned): the inside one fails fast
/// (`WouldBlock`), the outside one completes, whatever the interleaving.
pub fn unbind_inside_and_outside(pool: &std::sync::Arc<pool_core::Pool>) {
    pool.__save_masks();
    let outside = {
        let pool = pool.clone();
        loom::thread::spawn(move || pool.__unbind_without_pinning())
    };
    pool.run(|idx, n| {
        if idx == n - 1 {
            let inside = pool.__unbind_without_pinning();
            assert!(
                inside.is_ok() || inside.unwrap_err().kind() == std::io::ErrorKind::WouldBlock,
                "an unbind inside a job fails fast or finds nothing to do"
            );
        }
    });
    outside.join().unwrap().unwrap();
}
