//! The adaptive spin policy: hot through a stream, parked within the
//! linger after it, quick to park on a sparse stream, aware of foreign load.

use std::time::{Duration, Instant};

use pool_core::{Pool, SpinPolicy};
use testkit::watched;

/// The spinner budget is process-wide and counts every active caller: tests
/// of this binary that expect spinning take turns, so a neighbour test's
/// caller does not take the slot their worker needs.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner())
}

fn adaptive(workers: usize, linger: Duration) -> Pool {
    Pool::builder()
        .workers(workers)
        .spin_policy(SpinPolicy::Adaptive { linger })
        .build()
        .unwrap()
}

/// Busy-waits `d` on the caller, like serial work between matvecs.
fn busy(d: Duration) {
    let start = Instant::now();
    while start.elapsed() < d {
        std::hint::spin_loop();
    }
}

#[cfg(target_os = "linux")]
fn thread_state(tid: i32) -> char {
    let stat = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")).unwrap_or_default();
    // The state follows the parenthesised name.
    stat.rsplit_once(") ")
        .and_then(|(_, rest)| rest.chars().next())
        .unwrap_or('?')
}

#[test]
#[cfg_attr(
    miri,
    ignore = "timing policy, no unsafe code of its own; Miri's clock is virtual"
)]
fn a_dense_stream_runs_every_job_and_counts_each_pickup_once() {
    // How hot the worker stays through a dense stream depends on whether
    // the machine gives it a CPU: that is measured by `pool bench`
    // (unparks per dispatch), and the policy's decision (spin twice the
    // recent gaps) by the unit tests in policy.rs. What holds on any
    // machine: every share runs once, and each is counted once, hot or
    // after a park.
    watched("dense", |_| {
        let _turn = one_at_a_time();
        let pool = adaptive(1, Duration::from_millis(2));
        pool.run(|_, _| {});
        let before = pool.stats();
        let mut handed = 0u64;
        for _ in 0..500 {
            let width = std::sync::atomic::AtomicUsize::new(0);
            pool.run(|idx, n| {
                if idx == n - 1 {
                    width.store(n, std::sync::atomic::Ordering::Relaxed);
                }
            });
            handed += width.into_inner() as u64 - 1;
            busy(Duration::from_micros(20));
        }
        let s = pool.stats().since(&before);
        assert_eq!(s.worker_jobs(), handed, "{s}");
        assert_eq!(s.jobs_hot + s.jobs_after_park, handed, "{s}");
        assert_eq!(
            s.dispatches(),
            handed,
            "one worker: a dispatch per share: {s}"
        );
    });
}

#[test]
#[cfg_attr(
    miri,
    ignore = "timing policy, no unsafe code of its own; Miri's clock is virtual"
)]
#[cfg(target_os = "linux")]
fn the_linger_parks_every_worker_once_the_stream_stops() {
    watched("linger", |stage| {
        let _turn = one_at_a_time();
        for workers in [1, 3] {
            stage.set(format!("{workers} workers"));
            let pool = adaptive(workers, Duration::from_millis(2));
            for _ in 0..300 {
                pool.run(|_, _| {});
            }
            std::thread::sleep(Duration::from_millis(100));
            let s = pool.stats();
            assert!(
                s.parks >= workers as u64,
                "every worker parked after the stream: {s}"
            );
            for tid in pool.worker_tids() {
                assert_eq!(
                    thread_state(tid),
                    'S',
                    "worker {tid} still running after 50 lingers"
                );
            }
        }
    });
}

#[test]
#[cfg_attr(
    miri,
    ignore = "timing policy, no unsafe code of its own; Miri's clock is virtual"
)]
fn a_sparse_stream_teaches_workers_to_park_almost_at_once() {
    watched("sparse", |_| {
        let _turn = one_at_a_time();
        let linger = Duration::from_millis(20);
        let pool = adaptive(1, linger);
        let linger_spins = pool.spin_budget() as u64;
        // Gaps longer than the linger: idleness, not work.
        for _ in 0..4 {
            pool.run(|_, _| {});
            std::thread::sleep(Duration::from_millis(40));
        }
        let before = pool.stats();
        for _ in 0..4 {
            pool.run(|_, _| {});
            std::thread::sleep(Duration::from_millis(40));
        }
        let s = pool.stats().since(&before);
        assert!(
            s.worker_spins < linger_spins / 4,
            "{} spins over 4 idle gaps, a linger is {linger_spins}: {s}",
            s.worker_spins
        );
        // Each dispatched job's worker parked after it. A busy neighbour
        // makes the adaptive policy run these jobs inline (load.rs): then
        // none was dispatched and no worker spun at all.
        assert!(s.parks >= s.dispatches(), "{s}");
    });
}

#[test]
#[cfg_attr(
    miri,
    ignore = "timing policy, no unsafe code of its own; Miri's clock is virtual"
)]
fn a_barrier_wait_far_longer_than_the_callers_share_marks_foreign_load() {
    watched("contended", |_| {
        let _turn = one_at_a_time();
        let pool = adaptive(1, Duration::from_millis(2));
        // A loaded machine may deschedule the caller inside its empty share
        // for a while too: allow a few tries.
        // A busy neighbour makes the policy run jobs inline (load.rs):
        // there is no barrier to mark then, so try until a job had two
        // participants.
        let deadline = Instant::now() + Duration::from_secs(2);
        let (mut tries, mut marked) = (0, false);
        while tries < 5 && !marked {
            if Instant::now() > deadline {
                let foreign = pool_core::foreign_cpus();
                assert!(foreign > 0.5, "no job had two participants");
                eprintln!("a neighbour keeps {foreign:.2} CPUs busy: every job inline, skipping");
                return;
            }
            let width = std::sync::atomic::AtomicUsize::new(0);
            pool.run(|idx, n| {
                width.store(n, std::sync::atomic::Ordering::Relaxed);
                if idx == 0 {
                    std::thread::sleep(Duration::from_millis(5));
                }
            });
            if width.into_inner() == 2 {
                tries += 1;
                marked = pool.is_contended();
            }
        }
        assert!(marked, "a 5 ms straggler behind an empty share");
        // Jobs whose worker finishes first clear the mark: their join is
        // short (no clock read), as in a decode where the caller's share is
        // the longest. A loaded CI machine may deschedule a participant for
        // a while, and a busy neighbour makes jobs run inline (no join at
        // all): count only jobs with two participants.
        let deadline = Instant::now() + Duration::from_secs(2);
        let (mut balanced, mut cleared) = (0, false);
        while balanced < 20 && !cleared && Instant::now() < deadline {
            let width = std::sync::atomic::AtomicUsize::new(0);
            pool.run(|idx, n| {
                width.store(n, std::sync::atomic::Ordering::Relaxed);
                let caller = idx == n - 1;
                busy(Duration::from_millis(if caller { 3 } else { 1 }));
            });
            if width.into_inner() == 2 {
                balanced += 1;
                cleared = !pool.is_contended();
            }
        }
        assert!(
            cleared || balanced < 20,
            "20 jobs with a short join left the mark set"
        );
        if !cleared {
            eprintln!("only {balanced} jobs had two participants in 2 s: mark not checked");
        }
    });
}

#[test]
#[cfg_attr(
    miri,
    ignore = "timing policy, no unsafe code of its own; Miri's clock is virtual"
)]
fn fixed_budgets_and_the_adaptive_policy_switch_at_run_time() {
    watched("switch", |_| {
        let _turn = one_at_a_time();
        let pool = adaptive(2, Duration::from_millis(2));
        assert_eq!(
            pool.spin_policy(),
            SpinPolicy::Adaptive {
                linger: Duration::from_millis(2)
            }
        );
        pool.set_spin_budget(0);
        assert_eq!(pool.spin_policy(), SpinPolicy::Fixed(0));
        for _ in 0..20 {
            pool.run(|_, _| {});
        }
        assert_eq!(pool.stats().worker_jobs(), 40, "fixed budgets invite all");
        pool.set_spin_policy(SpinPolicy::adaptive());
        // The adaptive policy may shrink a job under foreign load: the
        // workers ran exactly the shares the jobs handed them.
        let mut handed = 0;
        for _ in 0..20 {
            let width = std::sync::atomic::AtomicUsize::new(0);
            pool.run(|_, n| width.store(n, std::sync::atomic::Ordering::Relaxed));
            handed += width.into_inner() - 1;
        }
        assert_eq!(pool.stats().worker_jobs(), 40 + handed as u64);
    });
}

/// CPU time the threads `tids` have run, read on each thread's own CPU-time
/// clock (exact for a thread running elsewhere, unlike `getrusage`, which
/// lags it by up to a scheduler tick).
#[cfg(target_os = "linux")]
fn threads_cpu_time(tids: &[i32]) -> Duration {
    tids.iter()
        .map(|&tid| {
            // Linux's MAKE_THREAD_CPUCLOCK(tid, CPUCLOCK_SCHED).
            let clock = ((!tid) << 3) | 6;
            let mut ts = libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            };
            // SAFETY: a valid out-pointer; the workers are alive while the
            // pool is, so the clock id is valid.
            let rc = unsafe { libc::clock_gettime(clock, &mut ts) };
            assert_eq!(rc, 0, "clock_gettime on worker {tid}");
            Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
        })
        .sum()
}

/// The CPU `pool`'s workers burn in the 100 ms after a stream of jobs
/// 900 µs apart (a stream that teaches the adaptive policy to spin about
/// twice that) stops.
#[cfg(target_os = "linux")]
fn burn_after_the_last_job(pool: &Pool) -> Duration {
    for _ in 0..50 {
        pool.run(|_, _| {});
        busy(Duration::from_micros(900));
    }
    pool.run(|_, _| {});
    let tids = pool.worker_tids();
    let before = threads_cpu_time(&tids);
    std::thread::sleep(Duration::from_millis(100));
    threads_cpu_time(&tids) - before
}

#[test]
#[cfg_attr(
    miri,
    ignore = "timing policy, no unsafe code of its own; Miri's clock is virtual"
)]
#[cfg(target_os = "linux")]
fn the_cpu_burned_after_the_last_job_stays_within_the_linger_per_worker() {
    watched("idle burn", |stage| {
        let _turn = one_at_a_time();
        let linger = Duration::from_millis(2);
        // Parking and the last job's tail cost a little beyond the spin.
        let slack = Duration::from_millis(1);
        for workers in [1, 3] {
            stage.set(format!("adaptive, {workers} workers"));
            let pool = adaptive(workers, linger);
            let bound = linger * workers as u32 + slack;
            // A deadline is wall-clock time, so a loaded machine only
            // lowers the CPU a spin takes: three runs out of three.
            for run in 0..3 {
                let burned = burn_after_the_last_job(&pool);
                assert!(
                    burned <= bound,
                    "run {run}: {burned:?} burned after the last job, bound {bound:?}"
                );
            }
        }
        // Seeded: a fixed budget of thirty lingers' worth of spins must
        // break the same bound, or the measurement proves nothing. One
        // worker: the process-wide spinner budget lets only as many
        // threads spin as there are CPUs left free, so extra workers of
        // the seeded pool park at once on a small or loaded machine.
        stage.set("seeded: a fixed budget of 30 lingers".to_string());
        let pool = adaptive(1, linger);
        pool.set_spin_budget(pool.spin_budget() * 30);
        let bound = linger + slack;
        let burned = burn_after_the_last_job(&pool);
        assert!(
            burned > bound,
            "a budget of 30 lingers burned only {burned:?} (bound {bound:?})"
        );
    });
}
