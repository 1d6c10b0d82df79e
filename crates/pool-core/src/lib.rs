//! A persistent spin-then-park fork-join pool for decode-path work.
//!
//! Workers are spawned once and live as long as the [`Pool`]. A job is one
//! closure `f(idx, n)` run once by every participant; the calling thread is
//! always the last participant. Handing out a job costs one cache-line
//! transfer per invited worker plus one fence, and a worker that is still
//! spinning costs no syscall to wake. See `docs/design.md` for the protocol
//! and its proof sketch.
//!
//! ```
//! let pool = pool_core::Pool::new(1);
//! let mut out = [0u64; 2];
//! let cells: Vec<_> = out.iter_mut().map(std::sync::Mutex::new).collect();
//! pool.run(|idx, _n| **cells[idx].lock().unwrap() = idx as u64 + 10);
//! drop(cells);
//! assert_eq!(out, [10, 11]);
//! ```
//!
//! [`Pool::run_phased`] publishes a job once and lets its participants meet
//! at a barrier ([`JobBarrier::wait`]) between phases; [`Pool::reduce`]
//! folds one value per participant in participant order.
//!
//! Environment: `CMF_POOL_SPIN` (a fixed spin budget; 0 parks at once;
//! unset: the adaptive policy, see [`SpinPolicy`]).
//! Width and placement come from `pool-topo` through [`Pool::from_env`].

#![cfg_attr(docsrs, feature(doc_cfg))]
mod builder;
mod clock;
mod colocation;
mod contention;
mod context;
mod dispatch;
mod env;
mod fork;
mod fork_safe;
mod fork_trials;
mod global;
mod idle;
mod job;
mod load;
mod phased;
mod placement;
mod policy;
mod pool;
mod priority;
mod reduce;
mod seeded;
mod sides;
mod sleep;
mod spinners;
mod stats;
mod sync;
mod tickets;
mod timeslice;
mod trials;
mod wake_trials;
mod worker;

pub use builder::PoolBuilder;
pub use context::{Captured, JobContext, Previous, ThreadLocalContext, TracingSpanContext};
pub use dispatch::dispatch_count;
pub use env::{
    parse_spin_policy, spin_policy_from_env, InvalidSpinBudget, DEFAULT_SPIN_BUDGET, SPIN_ENV,
};
pub use global::{all_worker_tids, global, init_global};
pub use load::{cpu_set_refreshes, foreign_cpus};
pub use phased::{JobBarrier, PhaseOutput};
pub use policy::{spin_iteration_ns, SpinPolicy, DEFAULT_LINGER, MIN_ADAPTIVE_SPIN, WORTH_A_WAKE};
pub use pool::Pool;
pub use pool_topo::{env_warnings, EnvWarning};
pub use priority::{current_qos_name, QosClass, SchedPolicy};
pub use reduce::STACK_SLOTS;
pub use sides::Side;
pub use spinners::{
    active_callers, spinner_limit, spinning_workers, spinning_workers_high_water, yielding_workers,
};
pub use stats::{PoolStats, WAIT_BUCKET_BOUNDS_NS};

/// Hooks for the loom models in `loom-tests/`; exists only under
/// `--cfg loom`.
#[cfg(loom)]
#[doc(hidden)]
pub mod __loom {
    pub use crate::seeded::SeededBug;

    /// Sets the process-wide spinner limit a model runs under (default: no
    /// limit). Only from a test binary whose models all want that limit.
    pub fn set_spinner_limit(limit: usize) {
        crate::spinners::LOOM_LIMIT.store(limit, std::sync::atomic::Ordering::Relaxed);
    }
}
