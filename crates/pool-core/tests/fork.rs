//! `fork()` after the pool exists: the child must never hang. Its own test
//! binary, so no other test's threads are copied into the child.
#![cfg(all(unix, not(miri)))]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use pool_core::Pool;
use testkit::watched;

/// The tests fork beside threads of their own (builders, plain spawners):
/// they take turns, so that one test's threads are not in another's
/// children (a plain spawner's held start-up lock would fail a child's
/// build that the other test expects to succeed).
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner())
}

/// Runs `child` in a forked child process and returns its exit code; a
/// child that has not exited within `limit` is killed and reported.
fn in_forked_child(limit: Duration, child: impl FnOnce() -> i32) -> i32 {
    // SAFETY: fork has no preconditions; the child only runs `child` and
    // exits with `_exit`, never returning into the test harness.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed: {}", std::io::Error::last_os_error());
    if pid == 0 {
        let code = std::panic::catch_unwind(std::panic::AssertUnwindSafe(child)).unwrap_or(101);
        // SAFETY: `_exit` ends the child without running the parent's atexit
        // handlers or unwinding into the copied harness.
        unsafe { libc::_exit(code) };
    }
    let deadline = Instant::now() + limit;
    loop {
        let mut status = 0;
        // SAFETY: `pid` is our child; `status` is a valid out-pointer.
        let rc = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
        if rc == pid {
            assert!(libc::WIFEXITED(status), "the child died: status {status}");
            return libc::WEXITSTATUS(status);
        }
        if Instant::now() > deadline {
            // SAFETY: killing our own child.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            panic!("the forked child hung for {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn a_forked_child_runs_jobs_on_the_calling_thread_and_drops_the_pool_cleanly() {
    watched("fork_child", |_| {
        let _turn = one_at_a_time();
        let mut parent_pool = Some(Pool::with_spin(2, 1000));
        // The process-wide pool too, used before the fork.
        pool_core::global().run(|_, _| {});
        let pool = parent_pool.as_ref().unwrap();
        // The parent uses the pool first, so its workers exist and spin.
        for _ in 0..100 {
            pool.run(|_, _| {});
        }
        let code = in_forked_child(Duration::from_secs(30), || {
            let pool = parent_pool.take().unwrap();
            let entries = AtomicUsize::new(0);
            let shape = std::sync::Mutex::new((usize::MAX, usize::MAX));
            for _ in 0..10 {
                pool.run(|idx, n| {
                    entries.fetch_add(1, Ordering::Relaxed);
                    *shape.lock().unwrap() = (idx, n);
                });
            }
            // Documented: the child runs each job inline, as f(0, 1); a
            // reduction folds that one value.
            let folded = pool.reduce(
                |idx, n| vec![(idx, n)],
                |mut a, b| {
                    a.extend(b);
                    a
                },
            );
            let ok = entries.load(Ordering::Relaxed) == 10
                && *shape.lock().unwrap() == (0, 1)
                && folded == [(0, 1)];
            drop(pool);
            // The global pool (the parent's) runs inline here too.
            let global_entries = AtomicUsize::new(0);
            pool_core::global().run(|_, n| {
                global_entries.fetch_add(n, Ordering::Relaxed);
            });
            let ok = ok && global_entries.load(Ordering::Relaxed) == 1;
            // A pool built in the child is a real pool with its own workers.
            let fresh = Pool::with_spin(1, 1000);
            let fresh_entries = AtomicUsize::new(0);
            fresh.run(|_, _| {
                fresh_entries.fetch_add(1, Ordering::Relaxed);
            });
            let fresh_ok = fresh_entries.load(Ordering::Relaxed) == 2;
            drop(fresh);
            match (ok, fresh_ok) {
                (true, true) => 0,
                (false, _) => 1,
                (_, false) => 2,
            }
        });
        assert_eq!(code, 0, "1: the old pool misbehaved, 2: a fresh pool did");
        // The parent's pool is untouched.
        let pool = parent_pool.as_ref().unwrap();
        let entries = AtomicUsize::new(0);
        pool.run(|_, _| {
            entries.fetch_add(1, Ordering::Relaxed);
        });
        assert_eq!(entries.load(Ordering::Relaxed), 3);
    });
}

/// How a forked child ended.
#[derive(Debug, PartialEq, Eq)]
enum Ended {
    Exited(i32),
    Signalled(i32),
}

/// Waits for `pid` up to `limit`; kills it and panics if it hangs.
fn wait_for(pid: libc::pid_t, limit: Duration, what: &str) -> Ended {
    let deadline = Instant::now() + limit;
    loop {
        let mut status = 0;
        // SAFETY: `pid` is our child; `status` is a valid out-pointer.
        let rc = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
        if rc == pid {
            return if libc::WIFEXITED(status) {
                Ended::Exited(libc::WEXITSTATUS(status))
            } else {
                Ended::Signalled(libc::WTERMSIG(status))
            };
        }
        if Instant::now() > deadline {
            // SAFETY: killing our own child.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            panic!("{what}: the forked child hung for {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

#[test]
fn children_forked_while_other_threads_build_and_drop_pools_never_hang() {
    watched("fork_beside_builders", |stage| {
        let _turn = one_at_a_time();
        let stop = std::sync::atomic::AtomicBool::new(false);
        std::thread::scope(|scope| {
            // Threads that keep taking the process-wide locks: the tid
            // registry (build, drop, list), the global pool's build lock,
            // the foreign-load sampler.
            for _ in 0..2 {
                scope.spawn(|| {
                    while !stop.load(Ordering::Relaxed) {
                        let pool = Pool::new(3);
                        pool.run(|_, _| {});
                        let _ = pool_core::all_worker_tids();
                        let _ = pool_core::init_global(Pool::builder().workers(0));
                        drop(pool);
                    }
                });
            }
            for round in 0..300 {
                stage.set(format!("fork {round}"));
                let code = in_forked_child(Duration::from_secs(20), || {
                    let pool = Pool::new(1);
                    let entries = AtomicUsize::new(0);
                    pool.run(|_, n| {
                        entries.fetch_add(n, Ordering::Relaxed);
                    });
                    let listed = pool_core::all_worker_tids();
                    drop(pool);
                    let _ = pool_core::init_global(Pool::builder().workers(0));
                    pool_core::global().run(|_, _| {});
                    i32::from(entries.load(Ordering::Relaxed) == 0 || listed.len() > 1)
                });
                assert_eq!(code, 0, "round {round}: the child's pools misbehaved");
                std::thread::sleep(Duration::from_micros(300));
            }
            stop.store(true, Ordering::Relaxed);
        });
    });
}

#[test]
fn a_child_forked_while_other_threads_start_threads_fails_to_build_instead_of_hanging() {
    // Threads the pool does not know: their starts and exits take the
    // standard library's thread-start lock ungated, so a child forked at
    // that moment can never start a thread. Its pool build must fail,
    // saying why, within the start limit: never hang.
    watched("fork_beside_plain_threads", |stage| {
        let _turn = one_at_a_time();
        let stop = std::sync::atomic::AtomicBool::new(false);
        let (mut built, mut refused, mut other) = (0, 0, None);
        std::thread::scope(|scope| {
            for _ in 0..2 {
                scope.spawn(|| {
                    while !stop.load(Ordering::Relaxed) {
                        std::thread::spawn(|| {}).join().unwrap();
                    }
                });
            }
            let deadline = Instant::now() + Duration::from_secs(40);
            let mut round = 0;
            while refused == 0 && round < 2000 && Instant::now() < deadline {
                stage.set(format!("fork {round}"));
                let code = in_forked_child(Duration::from_secs(30), || {
                    match Pool::builder().workers(1).build() {
                        Ok(pool) => {
                            pool.run(|_, _| {});
                            0
                        }
                        Err(err)
                            if err.kind() == std::io::ErrorKind::TimedOut
                                && err.to_string().contains("forked from a multi-threaded") =>
                        {
                            3
                        }
                        Err(err) => {
                            eprintln!("the child's build failed: {err}");
                            1
                        }
                    }
                });
                match code {
                    0 => built += 1,
                    3 => refused += 1,
                    _ => {
                        other = Some(round);
                        break;
                    }
                }
                round += 1;
            }
            stop.store(true, Ordering::Relaxed);
        });
        assert_eq!(other, None, "a child's build failed for another reason");
        if refused == 0 {
            eprintln!("no child of {built} caught the lock held: the refusal was not exercised");
        }
    });
}

#[test]
fn fork_inside_the_callers_share_panics_in_the_child_instead_of_hanging() {
    watched("fork_in_caller_share", |_| {
        let _turn = one_at_a_time();
        // A fixed budget: the worker is invited whatever the load.
        let pool = Pool::with_spin(1, 1000);
        let child = AtomicUsize::new(0);
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            pool.run(|idx, n| {
                if idx < n - 1 {
                    // Still running when the caller forks: in the child it
                    // never finishes.
                    std::thread::sleep(Duration::from_millis(200));
                } else {
                    // SAFETY: the child only returns from this closure and
                    // then `_exit`s below.
                    let pid = unsafe { libc::fork() };
                    assert!(pid >= 0);
                    child.store(
                        if pid == 0 { usize::MAX } else { pid as usize },
                        Ordering::Relaxed,
                    );
                }
            });
        }));
        if child.load(Ordering::Relaxed) == usize::MAX {
            // The child: `run` must have panicked, saying why.
            let code = match outcome.map_err(testkit::panic_message) {
                Err(message) if message.contains("fork()") => 0,
                Err(_) => 2,
                Ok(()) => 1,
            };
            // SAFETY: ends the child without unwinding into the harness.
            unsafe { libc::_exit(code) };
        }
        assert!(outcome.is_ok(), "the parent's job is unaffected");
        let pid = child.load(Ordering::Relaxed) as libc::pid_t;
        let ended = wait_for(pid, Duration::from_secs(20), "fork in the caller's share");
        assert_eq!(
            ended,
            Ended::Exited(0),
            "0: panicked with the message; 1: returned; 2: another panic"
        );
    });
}

#[test]
fn fork_inside_a_workers_share_ends_the_child_instead_of_leaving_it_waiting() {
    watched("fork_in_worker_share", |_| {
        let _turn = one_at_a_time();
        let pool = Pool::with_spin(1, 1000);
        let child = std::sync::atomic::AtomicI32::new(0);
        pool.run(|idx, n| {
            if idx < n - 1 {
                // SAFETY: in the child this thread returns from the closure
                // to the worker loop, which must end the child.
                let pid = unsafe { libc::fork() };
                if pid != 0 {
                    child.store(pid, Ordering::Relaxed);
                }
            }
        });
        let pid = child.load(Ordering::Relaxed);
        assert!(pid > 0, "fork failed");
        let ended = wait_for(pid, Duration::from_secs(20), "fork in a worker's share");
        assert_eq!(
            ended,
            Ended::Signalled(libc::SIGABRT),
            "the child aborts, saying why"
        );
        // The parent's pool goes on.
        pool.run(|_, _| {});
    });
}

#[test]
fn a_child_forked_during_another_threads_inline_job_uses_its_own_pools_workers() {
    watched("fork_during_inline_job", |_| {
        let _turn = one_at_a_time();
        // As many callers inside long inline jobs as the process has CPUs:
        // with their busy stamps left in the child, the child's adaptive
        // pools would count them as callers filling the CPUs and run every
        // job inline.
        let callers = pool_core::spinner_limit().min(8);
        let inside = std::sync::Barrier::new(callers + 1);
        let release = std::sync::atomic::AtomicBool::new(false);
        std::thread::scope(|scope| {
            for _ in 0..callers {
                scope.spawn(|| {
                    // A CPU count no foreign load shrinks to zero, so this
                    // dispatch claims the thread's recent-caller slot.
                    let pool = Pool::builder().workers(1).assume_cpus(64).build().unwrap();
                    pool.run(|_, _| {});
                    pool.run_limited(0, |_, _| {
                        inside.wait();
                        while !release.load(Ordering::Relaxed) {
                            std::thread::sleep(Duration::from_millis(1));
                        }
                    });
                });
            }
            inside.wait();
            let code = in_forked_child(Duration::from_secs(20), || {
                let pool = Pool::builder().workers(1).assume_cpus(64).build().unwrap();
                let widths = std::sync::Mutex::new(Vec::new());
                for _ in 0..50 {
                    pool.run(|idx, n| {
                        if idx == n - 1 {
                            widths.lock().unwrap().push(n);
                        }
                    });
                }
                let widths = widths.into_inner().unwrap();
                i32::from(widths.iter().any(|&n| n != 2))
            });
            release.store(true, Ordering::Relaxed);
            assert_eq!(code, 0, "the child's fresh pool ran jobs inline");
        });
    });
}
