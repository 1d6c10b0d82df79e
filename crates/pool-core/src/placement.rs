//! Building a pool from the machine's topology (`pool-topo`).

use std::io;

use pool_topo::{plan_cpu_pool, resolve_cpu_threads, CpuPoolPlan};

use crate::builder::PoolBuilder;
use crate::pool::Pool;

impl Pool {
    /// The pool for this machine: the one way to get a pool sized and
    /// placed from the topology, whatever the machine. Width from
    /// `FERROX_CPU_THREADS`, `RAYON_NUM_THREADS`, else the physical
    /// performance cores (in participants, the caller included), workers
    /// pinned per the plan. Never fails and never panics: a refused pin is
    /// logged and the pool built unpinned; workers that cannot be spawned
    /// are logged and the pool runs every job on the caller; a width of 1
    /// is a caller-only pool. Every kernel takes it as `&pool`.
    ///
    /// ```
    /// let pool = pool_core::Pool::for_this_machine();
    /// pool.run(|idx, n| assert!(idx < n));
    /// ```
    ///
    /// The other ways are for what they say: [`Pool::from_env`] when one
    /// core should mean "no pool" (`None`), [`PoolBuilder::from_env`] to
    /// add settings or see the error, [`Pool::builder`] for an explicit
    /// width, `global()` for the process-wide one.
    pub fn for_this_machine() -> Pool {
        build_for_this_machine("", |builder| builder)
    }

    /// The decode pool for this machine: width from
    /// [`pool_topo::resolve_cpu_threads`] (`FERROX_CPU_THREADS`,
    /// `RAYON_NUM_THREADS`, else physical performance cores), workers pinned
    /// per [`pool_topo::plan_cpu_pool`]. `None` when the width is 1: run
    /// serially. A refused pin is logged and the pool built unpinned.
    ///
    /// Never panics: if the OS refuses to spawn the workers even unpinned,
    /// the error is logged and the answer is `None` (run serially). Use
    /// [`PoolBuilder::from_env`] to get that error instead.
    pub fn from_env() -> Option<Pool> {
        let builder = PoolBuilder::from_env();
        if builder.worker_count() == 0 {
            return None;
        }
        let pool = builder.build().or_else(|err| {
            tracing::warn!(%err, "pool-core: pinning refused; building the pool unpinned");
            PoolBuilder::from_env().unpinned().build()
        });
        match pool {
            Ok(pool) => Some(pool),
            Err(err) => {
                tracing::error!(%err, "pool-core: no workers could start; running serially");
                None
            }
        }
    }

    /// A pool laid out by `plan`: `plan.workers` workers, worker `i` pinned
    /// to `plan.worker_cpus[i]`.
    pub fn from_plan(plan: &CpuPoolPlan) -> io::Result<Pool> {
        PoolBuilder::from_plan(plan).build()
    }

    /// The CPU the plan kept for the thread that calls `run` (`None`: the
    /// pool was not built from a plan, or the plan kept none).
    pub fn caller_cpu(&self) -> Option<usize> {
        self.caller_cpu
    }

    /// Pins the calling thread to [`Pool::caller_cpu`], so the decode
    /// thread does not share a CPU with a pinned worker. An error if there
    /// is no such CPU or the OS refuses the pin (say, outside the
    /// process's CPU set); nothing changes then.
    ///
    /// ```no_run
    /// let pool = pool_core::PoolBuilder::from_env().build()?;
    /// pool.pin_caller()?; // on the engine's decode thread
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn pin_caller(&self) -> io::Result<()> {
        let cpu = self.caller_cpu.ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::NotFound,
                "this pool has no caller CPU: build it with from_env/from_plan (or PoolBuilder::caller_cpu)",
            )
        })?;
        pool_topo::pin_current_thread(&[cpu]).map_err(|err| {
            io::Error::new(err.kind(), format!("pin the caller to CPU {cpu}: {err}"))
        })
    }
}

/// [`Pool::for_this_machine`] with `adjust` applied to each builder tried:
/// pinned, then unpinned, then caller-only. `what` prefixes the log lines.
pub(crate) fn build_for_this_machine(
    what: &str,
    adjust: impl Fn(PoolBuilder) -> PoolBuilder,
) -> Pool {
    adjust(PoolBuilder::from_env())
        .build()
        .or_else(|err| {
            tracing::warn!(%err, "pool-core: {what}pinning refused; building the pool unpinned");
            adjust(PoolBuilder::from_env().unpinned()).build()
        })
        .unwrap_or_else(|err| {
            tracing::error!(%err, "pool-core: {what}no workers could start; running jobs on the caller");
            adjust(Pool::builder().workers(0))
                .build()
                .expect("a caller-only pool spawns nothing")
        })
}

impl PoolBuilder {
    /// A builder sized and placed for this machine: width from
    /// [`pool_topo::resolve_cpu_threads`], workers pinned per
    /// [`pool_topo::plan_cpu_pool`] (width 1: zero workers, a caller-only
    /// pool). Add a context, names or a policy, then `build`.
    pub fn from_env() -> PoolBuilder {
        let width = resolve_cpu_threads(None);
        let plan = plan_cpu_pool(width.threads, false);
        tracing::debug!(threads = width.threads, source = %width.source, ?plan, "pool-core: from_env");
        PoolBuilder::from_plan(&plan)
    }

    /// A builder laid out by `plan`: `plan.workers` workers, worker `i`
    /// pinned to `plan.worker_cpus[i]`.
    pub fn from_plan(plan: &CpuPoolPlan) -> PoolBuilder {
        let builder = PoolBuilder::new().workers(plan.workers);
        // A plan that pins nothing (other pools hold the CPUs) says why.
        let builder = if plan.worker_cpus.len() == plan.workers {
            builder.pin_workers(plan.worker_cpus.clone())
        } else {
            builder
        };
        match plan.caller_cpu {
            Some(cpu) => builder.caller_cpu(cpu),
            None => builder,
        }
    }
}
