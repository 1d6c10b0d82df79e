//! Long waits sleep: a caller at its join, and participants at a
//! `JobBarrier`, park after a bounded time instead of yielding for as long
//! as the wait lasts. Each test gives one participant a long share and
//! measures the CPU time the waiting thread spent (its own thread clock),
//! which does not depend on how busy the machine is: a yield loop burns
//! CPU whenever it is scheduled, a parked thread none.
#![cfg(all(unix, not(miri)))]

use std::time::Duration;

use pool_core::Pool;
use testkit::watched;

/// CPU time the calling thread has used.
fn thread_cpu_time() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid out-pointer; CLOCK_THREAD_CPUTIME_ID always exists.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime");
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// The share a worker sleeps through while the caller waits.
const LONG_SHARE: Duration = Duration::from_millis(400);

/// Far below what yielding through `LONG_SHARE` costs (about 300 ms of the
/// 500 ms measured before), far above the 1 ms of waiting before a park
/// plus the caller's bookkeeping.
const CPU_BOUND: Duration = Duration::from_millis(60);

#[test]
fn a_caller_waiting_for_a_long_share_sleeps_instead_of_burning_its_cpu() {
    watched("join_sleeps", |_| {
        // A fixed budget invites the worker whatever the machine's load.
        let pool = Pool::with_spin(1, 1000);
        for _ in 0..3 {
            let before = thread_cpu_time();
            pool.run(|idx, n| {
                if idx < n - 1 {
                    std::thread::sleep(LONG_SHARE);
                }
            });
            let spent = thread_cpu_time() - before;
            assert!(
                spent < CPU_BOUND,
                "the caller spent {spent:?} of CPU waiting {LONG_SHARE:?} for a worker"
            );
        }
        // Short jobs right after still run (the sleeper left nothing behind).
        for _ in 0..1000 {
            pool.run(|_, _| {});
        }
    });
}

#[test]
fn participants_waiting_at_a_barrier_for_a_long_share_sleep() {
    watched("barrier_sleeps", |_| {
        let pool = Pool::with_spin(1, 1000);
        for _ in 0..3 {
            let before = thread_cpu_time();
            pool.run_phased(|idx, n, barrier| {
                if idx < n - 1 {
                    std::thread::sleep(LONG_SHARE);
                }
                barrier.wait();
                barrier.wait();
            });
            let spent = thread_cpu_time() - before;
            assert!(
                spent < CPU_BOUND,
                "the caller spent {spent:?} of CPU at a barrier waiting {LONG_SHARE:?}"
            );
        }
    });
}

#[test]
fn a_sleeping_barrier_waiter_is_released_when_a_participant_leaves_early() {
    watched("barrier_sleeper_released", |_| {
        let pool = Pool::with_spin(1, 1000);
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            pool.run_phased(|idx, n, barrier| {
                if idx < n - 1 {
                    // Leaves after the caller has gone to sleep, without
                    // reaching the barrier the caller waits at.
                    std::thread::sleep(Duration::from_millis(100));
                    return;
                }
                barrier.wait();
            });
        }));
        let message = testkit::panic_message(outcome.expect_err("a skipped barrier is reported"));
        assert!(
            message.contains("different numbers of barriers"),
            "{message}"
        );
    });
}
