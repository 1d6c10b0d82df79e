//! An `on_start` hook of the global pool that asks for the global pool
//! while it is being built would wait for itself. It gets a panic that
//! says so, which `init_global` returns as an error; nothing hangs. Its
//! own test binary: the global pool is process-wide.
#![cfg(not(miri))]

use pool_core::{global, init_global, Pool};
use testkit::watched;

#[test]
fn a_start_hook_asking_for_the_global_pool_being_built_is_an_error_not_a_deadlock() {
    watched("global_start_hook", |stage| {
        stage.set("init_global with a hook calling global()");
        let result = init_global(Pool::builder().workers(1).on_start(|_| {
            let _ = global();
        }));
        let err = result.expect_err("the hook's call is refused");
        let text = err.to_string();
        assert!(
            text.contains("on_start hook") && text.contains("global()"),
            "{text}"
        );
        stage.set("a hook calling init_global");
        let err = init_global(Pool::builder().workers(1).on_start(|_| {
            let _ = init_global(Pool::builder());
        }))
        .expect_err("refused too");
        assert!(err.to_string().contains("init_global()"), "{err}");
        stage.set("the global pool builds afterwards");
        let pool = global();
        let entries = std::sync::atomic::AtomicUsize::new(0);
        pool.run(|_, _| {
            entries.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        });
        assert!(entries.into_inner() >= 1);
        stage.set("a hook of another pool may use the global pool");
        let other = Pool::builder()
            .workers(1)
            .on_start(|_| global().run(|_, _| {}))
            .build();
        assert!(other.is_ok(), "{:?}", other.err());
    });
}
