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

use std::io;

use crate::builder::PoolBuilder;
use crate::pool::Pool;
use crate::sync::process::{Mutex, OnceLock};

static GLOBAL: OnceLock<Pool> = OnceLock::new();
/// Serialises building: concurrent first calls build exactly one pool, and
/// a builder that fails leaves the slot empty for a later call.
static BUILDING: Mutex<()> = Mutex::new(());

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
/// pool.run(&|_, _| {
///     entries.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
/// });
/// assert!(entries.into_inner() >= 1);
/// # }
/// ```
pub fn global() -> &'static Pool {
    if let Some(pool) = GLOBAL.get() {
        return pool;
    }
    let _building = BUILDING.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(pool) = GLOBAL.get() {
        return pool;
    }
    let pool = PoolBuilder::from_env()
        .build()
        .or_else(|err| {
            tracing::warn!(%err, "pool-core: global pool: pinning refused; building it unpinned");
            PoolBuilder::from_env().unpinned().build()
        })
        .unwrap_or_else(|err| {
            tracing::error!(%err, "pool-core: global pool: no workers could start; running jobs on the caller");
            Pool::builder()
                .workers(0)
                .build()
                .expect("a caller-only pool spawns nothing")
        });
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
pub fn init_global(builder: PoolBuilder) -> io::Result<bool> {
    let _building = BUILDING.lock().unwrap_or_else(|e| e.into_inner());
    if GLOBAL.get().is_some() {
        return Ok(false);
    }
    install(builder.build()?);
    Ok(true)
}

/// Stores the pool; only under `BUILDING`, with the slot empty.
fn install(pool: Pool) -> &'static Pool {
    let mut pool = Some(pool);
    let installed = GLOBAL.get_or_init(|| pool.take().expect("installed once"));
    debug_assert!(pool.is_none(), "BUILDING guarantees one installer");
    installed
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
    use crate::sync::process::Mutex;

    /// (pool id, fork generation it was built in, worker tids).
    static POOLS: Mutex<Vec<(usize, usize, Vec<i32>)>> = Mutex::new(Vec::new());

    pub(crate) fn add(pool: usize, tids: &[i32]) {
        if tids.is_empty() || tids.contains(&-1) {
            return;
        }
        let mut pools = POOLS.lock().unwrap_or_else(|e| e.into_inner());
        pools.push((pool, fork::generation(), tids.to_vec()));
    }

    pub(crate) fn remove(pool: usize) {
        // `try_lock`: a pool dropped in a forked child whose parent held
        // this lock at the fork must not block; its stale entry is then
        // filtered out by generation below.
        if let Ok(mut pools) = POOLS.try_lock() {
            pools.retain(|(id, _, _)| *id != pool);
        }
    }

    pub(crate) fn all() -> Vec<i32> {
        let generation = fork::generation();
        let pools = POOLS.lock().unwrap_or_else(|e| e.into_inner());
        pools
            .iter()
            .filter(|(_, built_in, _)| *built_in == generation)
            .flat_map(|(_, _, tids)| tids.iter().copied())
            .collect()
    }
}
