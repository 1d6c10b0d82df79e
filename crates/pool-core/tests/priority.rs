//! Worker priority: nice values and scheduling policies (Linux), QoS names.
#![cfg(all(target_os = "linux", not(miri)))]

use std::sync::Mutex;

use pool_core::{Pool, SchedPolicy};
use testkit::watched;

/// `f` on every worker of `pool` (not the caller), collected.
fn on_workers<T: Send>(pool: &Pool, f: impl Fn() -> T + Sync) -> Vec<T> {
    let seen = Mutex::new(Vec::new());
    pool.run(|idx, n| {
        if idx < n - 1 {
            seen.lock().unwrap().push(f());
        }
    });
    seen.into_inner().unwrap()
}

#[test]
fn workers_take_the_nice_value_the_builder_asks_for() {
    watched("nice", |_| {
        let pool = Pool::builder()
            .workers(2)
            .spin(1000)
            .nice(5)
            .build()
            .unwrap();
        let nice = on_workers(&pool, || {
            // SAFETY: getpriority on the calling thread; no pointers.
            let tid = unsafe { libc::syscall(libc::SYS_gettid) } as libc::id_t;
            // SAFETY: as above.
            unsafe { libc::getpriority(libc::PRIO_PROCESS, tid) }
        });
        assert_eq!(nice, vec![5, 5]);
    });
}

#[test]
fn workers_take_the_scheduling_policy_the_builder_asks_for() {
    watched("policy", |_| {
        let pool = Pool::builder()
            .workers(1)
            .spin(1000)
            .sched_policy(SchedPolicy::Batch)
            .build()
            .unwrap();
        // SAFETY: queries the calling thread's policy.
        let policies = on_workers(&pool, || unsafe { libc::sched_getscheduler(0) });
        assert_eq!(policies, vec![libc::SCHED_BATCH]);
    });
}

#[test]
fn a_refused_scheduling_policy_is_an_error_naming_the_call() {
    watched("refused_policy", |_| {
        let err = Pool::builder()
            .workers(1)
            .sched_policy(SchedPolicy::Fifo(1000))
            .build()
            .unwrap_err();
        assert!(err.to_string().contains("sched_setscheduler"), "{err}");
        assert!(err.to_string().contains("worker 0"), "{err}");
    });
}

#[test]
fn the_qos_name_says_there_are_no_classes_here() {
    assert!(pool_core::current_qos_name().starts_with("n/a"));
}
