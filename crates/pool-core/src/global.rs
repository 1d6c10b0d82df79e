//! The process-wide pool, and every live worker's thread id.
//!
//! Engines do not pass a pool handle through every layer: they build one
//! process-wide pool early, with an explicit width and placement, and their
//! kernels find it wherever they run. [`init_global`] builds it from a
//! builder (safe to call from several binaries' start-up code, more than
//! once: a pool that exists is left alone); [`global`] returns it, building
//! it on first use as [`PoolBuilder::from_env`](crate::PoolBuilder::from_env)
//! would. The global pool is never dropped. After `fork()` it stays correct:
//! in the child it runs every job inline (`fork.rs`).

use std::cell::Cell;
use std::io;
use std::sync::atomic::{AtomicPtr, Ordering};

use crate::builder::PoolBuilder;
use crate::fork_safe::ForkSafeMutex;
use crate::pool::Pool;

/// The pool, leaked once installed (never dropped). An atomic pointer, not
/// a `OnceLock`: a fork while another thread installs must not leave the
/// child a slot stuck "being initialised" (`fork_safe.rs`).
static GLOBAL: AtomicPtr<Pool> = AtomicPtr::new(std::ptr::null_mut());
/// Serialises building: concurrent first calls build exactly one pool, and
/// a builder that fails leaves the slot empty for a later call.
static BUILDING: ForkSafeMutex<()> = ForkSafeMutex::new((), || ());

thread_local! {
    /// Set while this thread runs an `on_start` hook of the global pool
    /// being built: `global()` there would wait for the build that waits
    /// for this very hook.
    static IN_GLOBAL_START_HOOK: Cell<bool> = const { Cell::new(false) };
}

/// Runs a worker's `on_start` hook, marked as the global pool's if
/// `for_global` (`builder.rs`).
pub(crate) fn run_start_hook(for_global: bool, hook: impl FnOnce()) {
    if !for_global {
        return hook();
    }
    struct Unmark;
    impl Drop for Unmark {
        fn drop(&mut self) {
            let _ = IN_GLOBAL_START_HOOK.try_with(|mark| mark.set(false));
        }
    }
    let _ = IN_GLOBAL_START_HOOK.try_with(|mark| mark.set(true));
    let _unmark = Unmark;
    hook()
}

/// The installed pool, if any.
#[inline]
fn installed() -> Option<&'static Pool> {
    // Acquire: pairs with the Release store in `install`.
    let pool = GLOBAL.load(Ordering::Acquire);
    // SAFETY: a non-null pointer came from `Box::leak` in `install` and is
    // never freed or replaced.
    unsafe { pool.as_ref() }
}

/// Refuses, with a message, a call that would wait for itself: from an
/// `on_start` hook of the global pool while it is being built.
#[cold]
fn refuse_inside_global_start_hook(what: &str) {
    if IN_GLOBAL_START_HOOK.try_with(Cell::get).unwrap_or(false) {
        panic!(
            "pool_core::{what} called from an on_start hook of the global pool while that pool \
             is being built: the build waits for the hook, so the hook cannot wait for the \
             build. Do that work before init_global, or inside a job."
        );
    }
}

/// The process-wide pool, built on first use as `PoolBuilder::from_env()`
/// would (width from `FERROX_CPU_THREADS`, `RAYON_NUM_THREADS` or the
/// topology; workers pinned per the plan; width 1 is a caller-only pool).
/// If the workers cannot be pinned it is built unpinned, and if they cannot
/// be spawned at all it is a caller-only pool (both logged): `global` never
/// fails and never panics.
///
/// ```
/// # #[cfg(not(miri))] { // the global pool is never dropped: Miri calls it a leak
/// let pool = pool_core::global();
/// let entries = std::sync::atomic::AtomicUsize::new(0);
/// pool.run(|_, _| {
///     entries.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
/// });
/// assert!(entries.into_inner() >= 1);
/// # }
/// ```
///
/// # Panics
///
/// Only when called from an `on_start` hook of the global pool while that
/// pool is being built (it would wait for itself for ever): the panic says
/// so, and `init_global` returns it as an error.
pub fn global() -> &'static Pool {
    if let Some(pool) = installed() {
        return pool;
    }
    global_slow()
}

#[cold]
fn global_slow() -> &'static Pool {
    refuse_inside_global_start_hook("global()");
    let _building = BUILDING.lock();
    if let Some(pool) = installed() {
        return pool;
    }
    let pool = crate::placement::build_for_this_machine("global pool: ", PoolBuilder::for_global);
    install(pool)
}

/// Builds the process-wide pool from `builder`: `Ok(true)` if it was built
/// now, `Ok(false)` if one existed (it is left alone and `builder` is not
/// used). A builder that fails (a pin refused, a thread that could not be
/// spawned) returns the error and leaves no pool, so a later call may try
/// again.
///
/// ```
/// # #[cfg(not(miri))] { // the global pool is never dropped: Miri calls it a leak
/// let first = pool_core::init_global(pool_core::Pool::builder().workers(1));
/// // Any later call, here or in another part of the program, changes nothing.
/// assert_eq!(pool_core::init_global(pool_core::Pool::builder().workers(3)).unwrap(), false);
/// assert!(first.is_ok());
/// # }
/// ```
///
/// # Panics
///
/// When called from an `on_start` hook of the global pool while it is
/// being built (as [`global`]).
#[must_use = "the builder was not used if a global pool already existed (Ok(false))"]
pub fn init_global(builder: PoolBuilder) -> io::Result<bool> {
    refuse_inside_global_start_hook("init_global()");
    let _building = BUILDING.lock();
    if let Some(existing) = installed() {
        tracing::warn!(
            existing = ?existing,
            refused = ?builder,
            "pool-core: init_global: a global pool already exists; this builder is not used"
        );
        return Ok(false);
    }
    install(builder.for_global().build()?);
    Ok(true)
}

/// Stores the pool; only under `BUILDING`, with the slot empty.
fn install(pool: Pool) -> &'static Pool {
    let pool: &'static Pool = Box::leak(Box::new(pool));
    debug_assert!(installed().is_none(), "BUILDING guarantees one installer");
    // Release: pairs with the Acquire load in `installed`.
    GLOBAL.store(pool as *const Pool as *mut Pool, Ordering::Release);
    pool
}

/// Every live worker of every pool of this process, by kernel thread id
/// (Linux, Android; empty elsewhere), for OS performance hints (the Android
/// performance-hint API, `sched_setattr` utilisation clamps, ...).
///
/// ```
/// let pool = pool_core::Pool::new(1);
/// let tids = pool_core::all_worker_tids();
/// assert!(pool.worker_tids().iter().all(|tid| tids.contains(tid)));
/// ```
pub fn all_worker_tids() -> Vec<i32> {
    registry::all()
}

/// The process-wide list of live pools' worker tids. Pools register after
/// their workers are up (never from inside worker start-up, which once
/// deadlocked concurrent constructors) and unregister when dropped.
pub(crate) mod registry {
    use crate::fork;
    use crate::fork_safe::ForkSafeMutex;

    /// (pool id, fork generation it was built in, worker tids). A child
    /// that finds it locked by a parent thread starts from an empty list:
    /// none of the parent's workers exist there.
    static POOLS: ForkSafeMutex<Vec<(usize, usize, Vec<i32>)>> =
        ForkSafeMutex::new(Vec::new(), Vec::new);

    pub(crate) fn add(pool: usize, tids: &[i32]) {
        if tids.is_empty() || tids.contains(&-1) {
            return;
        }
        POOLS.lock().push((pool, fork::generation(), tids.to_vec()));
    }

    pub(crate) fn remove(pool: usize) {
        POOLS.lock().retain(|(id, _, _)| *id != pool);
    }

    pub(crate) fn all() -> Vec<i32> {
        let generation = fork::generation();
        let pools = POOLS.lock();
        pools
            .iter()
            .filter(|(_, built_in, _)| *built_in == generation)
            .flat_map(|(_, _, tids)| tids.iter().copied())
            .collect()
    }
}
