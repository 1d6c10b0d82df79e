//! `fork()` after the pool exists: the child must never hang. Its own test
//! binary, so no other test's threads are copied into the child.
#![cfg(all(unix, not(miri)))]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use pool_core::Pool;
use testkit::watched;

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
        let mut parent_pool = Some(Pool::with_spin(2, 1000));
        // The process-wide pool too, used before the fork.
        pool_core::global().run(&|_, _| {});
        let pool = parent_pool.as_ref().unwrap();
        // The parent uses the pool first, so its workers exist and spin.
        for _ in 0..100 {
            pool.run(&|_, _| {});
        }
        let code = in_forked_child(Duration::from_secs(30), || {
            let pool = parent_pool.take().unwrap();
            let entries = AtomicUsize::new(0);
            let shape = std::sync::Mutex::new((usize::MAX, usize::MAX));
            for _ in 0..10 {
                pool.run(&|idx, n| {
                    entries.fetch_add(1, Ordering::Relaxed);
                    *shape.lock().unwrap() = (idx, n);
                });
            }
            // Documented: the child runs each job inline, as f(0, 1); a
            // reduction folds that one value.
            let folded = pool.reduce(&|idx, n| vec![(idx, n)], |mut a, b| {
                a.extend(b);
                a
            });
            let ok = entries.load(Ordering::Relaxed) == 10
                && *shape.lock().unwrap() == (0, 1)
                && folded == [(0, 1)];
            drop(pool);
            // The global pool (the parent's) runs inline here too.
            let global_entries = AtomicUsize::new(0);
            pool_core::global().run(&|_, n| {
                global_entries.fetch_add(n, Ordering::Relaxed);
            });
            let ok = ok && global_entries.load(Ordering::Relaxed) == 1;
            // A pool built in the child is a real pool with its own workers.
            let fresh = Pool::with_spin(1, 1000);
            let fresh_entries = AtomicUsize::new(0);
            fresh.run(&|_, _| {
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
        pool.run(&|_, _| {
            entries.fetch_add(1, Ordering::Relaxed);
        });
        assert_eq!(entries.load(Ordering::Relaxed), 3);
    });
}
