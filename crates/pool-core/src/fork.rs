//! `fork()`: the child has the pool's memory but none of its threads.
//!
//! A `pthread_atfork` child handler, registered when the first pool is
//! built, bumps a process-wide fork generation and returns every spinner
//! slot (the parent's spinning workers do not exist in the child). A pool
//! remembers the generation it was built in; when the generation differs,
//! `run` executes the whole job on the calling thread as `f(0, 1)` (no
//! worker is waited for, no turn is taken: the turn may have been held by a
//! parent thread that the child does not have), and dropping the pool
//! leaks its thread handles instead of joining threads that do not exist.
//! A pool built in the child is a normal pool with workers of its own.
//!
//! Starting and ending a thread takes a lock inside the Rust standard
//! library (the stack-overflow handler's registry of guard pages): a child
//! forked while a parent thread held it could never start a thread. The
//! pool's own thread starts and exits are therefore held back across a
//! fork ([`ThreadTransition`]): the `prepare` handler waits until no pool
//! thread is inside one, and new ones wait until the fork is over.

use crate::sync::process::{AtomicUsize, Ordering};

/// Forks survived by this process's memory image (0 in the original).
static GENERATION: AtomicUsize = AtomicUsize::new(0);

/// The current fork generation. Relaxed: the child handler runs on the
/// only thread of the child before `fork` returns there, so that thread
/// (and every thread it starts later) sees the new value.
#[inline]
pub(crate) fn generation() -> usize {
    GENERATION.load(Ordering::Relaxed)
}

/// Pool threads inside a start or an exit (in the low bits), and
/// [`FORKING`] while a thread of this process is forking.
static IN_TRANSITION: AtomicUsize = AtomicUsize::new(0);

/// Set by the `prepare` handler: no new transition may begin.
const FORKING: usize = 1 << (usize::BITS - 1);

/// How long a fork waits for pool threads to finish starting or exiting
/// before it goes ahead anyway (a thread can only be that slow if
/// something else is wrong; a fork must not hang on it).
#[cfg(all(unix, not(loom), not(miri)))]
const PREPARE_LIMIT: std::time::Duration = std::time::Duration::from_secs(2);

/// A pool thread starting or exiting: held from before `spawn` until the
/// new thread runs its first line, or from before a shutdown until `join`
/// returns. A fork waits for none to be held.
pub(crate) struct ThreadTransition {
    generation: usize,
}

impl ThreadTransition {
    /// Waits while a fork is in progress (microseconds), then counts one
    /// more transition.
    pub(crate) fn begin() -> Self {
        let mut now = IN_TRANSITION.load(Ordering::Relaxed);
        loop {
            if now & FORKING != 0 {
                crate::sync::process::yield_now();
                now = IN_TRANSITION.load(Ordering::Relaxed);
                continue;
            }
            // Relaxed: a compare-exchange on the one counter is ordered
            // with the `prepare` handler's `fetch_or` by the counter's
            // modification order: either this comes first (and the fork
            // waits for it) or it fails on the FORKING bit.
            match IN_TRANSITION.compare_exchange_weak(
                now,
                now + 1,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => break,
                Err(actual) => now = actual,
            }
        }
        ThreadTransition {
            generation: generation(),
        }
    }
}

impl Drop for ThreadTransition {
    fn drop(&mut self) {
        // A transition begun before a fork is not counted in the child
        // (the child handler zeroes the count).
        if generation() == self.generation {
            // Release: pairs with the `prepare` handler's Acquire load, so
            // the fork sees the standard library's lock released.
            IN_TRANSITION.fetch_sub(1, Ordering::Release);
        }
    }
}

/// Registers the child handler once per process (idempotent, cheap after
/// the first call).
pub(crate) fn register_handler() {
    #[cfg(all(unix, not(loom), not(miri)))]
    {
        // An atomic, not a `Once`: a `Once` another thread is running when
        // this process forks stays "running" in the child for ever.
        static REGISTERED: crate::sync::process::AtomicBool =
            crate::sync::process::AtomicBool::new(false);
        if REGISTERED.load(Ordering::Relaxed) || REGISTERED.swap(true, Ordering::Relaxed) {
            return;
        }
        {
            extern "C" fn prepare() {
                IN_TRANSITION.fetch_or(FORKING, Ordering::Relaxed);
                let start = std::time::Instant::now();
                // Acquire: pairs with a finished transition's Release.
                while IN_TRANSITION.load(Ordering::Acquire) & !FORKING != 0
                    && start.elapsed() < PREPARE_LIMIT
                {
                    std::thread::sleep(std::time::Duration::from_micros(50));
                }
            }
            extern "C" fn in_parent() {
                IN_TRANSITION.fetch_and(!FORKING, Ordering::Relaxed);
            }
            extern "C" fn in_child() {
                GENERATION.fetch_add(1, Ordering::Relaxed);
                // The parent's threads in transition do not exist here.
                IN_TRANSITION.store(0, Ordering::Relaxed);
                crate::spinners::reset_after_fork();
            }
            // SAFETY: the handlers are plain functions that cannot unwind;
            // `in_child` only touches atomics (async-signal-safe, as a
            // fork child handler must be); `prepare` runs in the parent
            // before the fork, where sleeping is allowed.
            let rc =
                unsafe { libc::pthread_atfork(Some(prepare), Some(in_parent), Some(in_child)) };
            if rc != 0 {
                tracing::warn!(
                    rc,
                    "pool-core: pthread_atfork failed; a forked child must not use pools of its parent"
                );
            }
        }
    }
}

#[cfg(all(test, unix, not(loom), not(miri)))]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    /// Forks, `_exit`s the child at once, reaps it; returns how long
    /// `fork` took in the parent.
    fn time_a_fork() -> Duration {
        let start = Instant::now();
        // SAFETY: the child calls only `_exit`.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            // SAFETY: ends the child without running the harness.
            unsafe { libc::_exit(0) };
        }
        let took = start.elapsed();
        assert!(pid > 0, "fork failed");
        let mut status = 0;
        // SAFETY: `pid` is our child; `status` is a valid out-pointer.
        assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
        took
    }

    #[test]
    fn a_fork_waits_for_a_pool_thread_to_finish_starting() {
        register_handler();
        let started = Instant::now();
        let starting = ThreadTransition::begin();
        let finisher = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(100));
            drop(starting);
        });
        time_a_fork();
        // The fork cannot return before the transition ended, however
        // loaded the machine: a lower bound, not a timing guess.
        assert!(
            started.elapsed() >= Duration::from_millis(100),
            "the fork went ahead while a pool thread was starting"
        );
        finisher.join().unwrap();
        // With nothing in transition a fork does not wait.
        assert!(time_a_fork() < PREPARE_LIMIT);
    }
}
