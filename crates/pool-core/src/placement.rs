//! Building a pool from the machine's topology (`pool-topo`).

use std::io;

use pool_topo::{plan_cpu_pool, resolve_cpu_threads, CpuPoolPlan};

use crate::pool::Pool;

impl Pool {
    /// The decode pool for this machine: width from
    /// [`pool_topo::resolve_cpu_threads`] (`FERROX_CPU_THREADS`,
    /// `RAYON_NUM_THREADS`, else physical performance cores), workers pinned
    /// per [`pool_topo::plan_cpu_pool`]. `None` when the width is 1: run
    /// serially. A refused pin is logged and the pool built unpinned.
    pub fn from_env() -> Option<Pool> {
        let width = resolve_cpu_threads(None);
        let plan = plan_cpu_pool(width.threads, false);
        tracing::debug!(threads = width.threads, source = %width.source, ?plan, "pool-core: from_env");
        if plan.workers == 0 {
            return None;
        }
        match Pool::from_plan(&plan) {
            Ok(pool) => Some(pool),
            Err(err) => {
                tracing::warn!(%err, "pool-core: pinning refused; building the pool unpinned");
                Some(Pool::new(plan.workers))
            }
        }
    }

    /// A pool laid out by `plan`: `plan.workers` workers, worker `i` pinned
    /// to `plan.worker_cpus[i]`.
    pub fn from_plan(plan: &CpuPoolPlan) -> io::Result<Pool> {
        Pool::builder()
            .workers(plan.workers)
            .pin_workers(plan.worker_cpus.clone())
            .build()
    }
}
