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
            extern "C" fn in_child() {
                GENERATION.fetch_add(1, Ordering::Relaxed);
                crate::spinners::reset_after_fork();
            }
            // SAFETY: `in_child` is a plain function that only touches
            // atomics (async-signal-safe, as a fork child handler must be).
            let rc = unsafe { libc::pthread_atfork(None, None, Some(in_child)) };
            if rc != 0 {
                tracing::warn!(
                    rc,
                    "pool-core: pthread_atfork failed; a forked child must not use pools of its parent"
                );
            }
        }
    }
}
