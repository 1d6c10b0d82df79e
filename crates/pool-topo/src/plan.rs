//! Where each thread of the pool sits: the pinned plan.

use crate::hetero::CoreClass;
use crate::topology::CpuTopology;

/// A pool layout: how many workers, which logical CPU each pins to, and an
/// optional core reserved for a coordinator thread (one that polls a device
/// and drives the pool).
///
/// The calling thread is a participant: `threads` participants mean
/// `threads - 1` workers. It is not pinned by the plan, but its core
/// (`caller_cpu`) is kept free of workers while cores last.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CpuPoolPlan {
    /// Worker threads (participants minus the caller).
    pub workers: usize,
    /// `worker_cpus[i]`: the logical CPU worker `i` pins to.
    pub worker_cpus: Vec<usize>,
    /// The CPU reserved for a coordinator thread, if one was asked for.
    pub coordinator_cpu: Option<usize>,
    /// The CPU the caller is expected to run on (not pinned by the plan).
    pub caller_cpu: Option<usize>,
    /// Why the workers are not pinned, when they are not: every CPU, or
    /// too many of them, held by other pools of this process
    /// ([`plan_cpu_pool_in_avoiding`]). `worker_cpus` is empty then.
    pub unpinned_because: Option<String>,
}

impl CpuPoolPlan {
    /// The CPUs this plan takes: its workers', its caller's and its
    /// coordinator's (what a pool built from it holds in the process's
    /// record, [`crate::hold_cpus`]).
    pub fn cpus(&self) -> Vec<usize> {
        let mut cpus: Vec<usize> = self
            .worker_cpus
            .iter()
            .copied()
            .chain(self.caller_cpu)
            .chain(self.coordinator_cpu)
            .collect();
        cpus.sort_unstable();
        cpus.dedup();
        cpus
    }
}

/// The order in which CPUs are handed out: one CPU of each performance
/// core, then one of each efficiency core, then the remaining SMT siblings
/// in the same core order. Distinct physical cores first; siblings only
/// when cores run out.
pub fn placement_order(topology: &CpuTopology) -> Vec<usize> {
    let by_class = |class: CoreClass| {
        topology
            .cores()
            .iter()
            .filter(move |core| core.class() == class)
    };
    let firsts = by_class(CoreClass::Performance)
        .chain(by_class(CoreClass::Efficiency))
        .map(|core| core.first_cpu());
    let siblings = by_class(CoreClass::Performance)
        .chain(by_class(CoreClass::Efficiency))
        .flat_map(|core| core.cpus()[1..].iter().copied());
    firsts.chain(siblings).collect()
}

/// Plans `threads` participants (the caller included; 0 counts as 1) on
/// `topology`. The caller takes the first CPU of [`placement_order`], the
/// coordinator (if `reserve_coordinator`) the next, workers the rest. A
/// coordinator takes one of the `threads` places: the workers shrink by
/// one to make room for it (the width was sized to the cores, so a
/// coordinator on top would put a worker on an efficiency core or on the
/// caller's CPU). With more threads than CPUs the assignment wraps around
/// (the pool will be oversubscribed).
pub fn plan_cpu_pool_in(
    topology: &CpuTopology,
    threads: usize,
    reserve_coordinator: bool,
) -> CpuPoolPlan {
    plan_cpu_pool_in_avoiding(topology, threads, reserve_coordinator, &[])
}

/// [`plan_cpu_pool_in`] beside pools that already hold `held` CPUs (their
/// pinned workers, callers and coordinators): the plan takes only CPUs not
/// held, in [`placement_order`]. When fewer are free than it has threads
/// to place, it pins nothing (no worker on top of another pool's) and
/// says why in [`CpuPoolPlan::unpinned_because`]; the scheduler then
/// places its workers. With nothing held it is [`plan_cpu_pool_in`]
/// (which wraps around when the width exceeds the CPUs).
///
/// ```
/// # let topology = pool_topo::CpuTopology::detect();
/// let first = pool_topo::plan_cpu_pool_in(&topology, 2, false);
/// let second = pool_topo::plan_cpu_pool_in_avoiding(&topology, 2, false, &first.cpus());
/// // Disjoint CPUs, or none pinned and a reason.
/// assert!(second.cpus().iter().all(|cpu| !first.cpus().contains(cpu))
///     || second.unpinned_because.is_some());
/// ```
pub fn plan_cpu_pool_in_avoiding(
    topology: &CpuTopology,
    threads: usize,
    reserve_coordinator: bool,
    held: &[usize],
) -> CpuPoolPlan {
    let workers = (threads.max(1) - 1).saturating_sub(usize::from(reserve_coordinator));
    if !held.is_empty() {
        let free: Vec<usize> = placement_order(topology)
            .into_iter()
            .filter(|cpu| !held.contains(cpu))
            .collect();
        let places = workers + 1 + usize::from(reserve_coordinator);
        if free.len() < places {
            return CpuPoolPlan {
                workers,
                worker_cpus: Vec::new(),
                coordinator_cpu: None,
                caller_cpu: None,
                unpinned_because: Some(format!(
                    "{} of {} CPUs are held by this process's other pools ({}); {} free for \
                     {places} threads: the workers are not pinned on top of another pool's",
                    held.len(),
                    topology.allowed_cpus().len(),
                    crate::format_cpu_list(held),
                    free.len()
                )),
            };
        }
        let mut next = free.into_iter();
        let caller_cpu = next.next();
        let coordinator_cpu = if reserve_coordinator {
            next.next()
        } else {
            None
        };
        return CpuPoolPlan {
            workers,
            worker_cpus: next.take(workers).collect(),
            coordinator_cpu,
            caller_cpu,
            unpinned_because: None,
        };
    }
    let order = placement_order(topology);
    let mut next = order.iter().copied().cycle();
    let caller_cpu = next.next();
    let coordinator_cpu = if reserve_coordinator {
        next.next()
    } else {
        None
    };
    let worker_cpus = next.take(workers).collect();
    CpuPoolPlan {
        workers,
        worker_cpus,
        coordinator_cpu,
        caller_cpu,
        unpinned_because: None,
    }
}

/// The plan for a new pool on this host: [`plan_cpu_pool_in_avoiding`] the
/// detected topology and the CPUs this process's live pools hold
/// ([`crate::held_cpus`]). A plan that pins nothing says why, also as a
/// `tracing` event.
pub fn plan_cpu_pool(threads: usize, reserve_coordinator: bool) -> CpuPoolPlan {
    let plan = plan_cpu_pool_in_avoiding(
        &CpuTopology::detect(),
        threads,
        reserve_coordinator,
        &crate::held_cpus(),
    );
    if let Some(reason) = &plan.unpinned_because {
        tracing::info!(%reason, "pool-topo: plan");
    }
    plan
}

/// Threads for a second, intra-op pool beside `plan`:
/// `physical_cores - workers - coordinator - 1` (the 1 is the calling
/// thread), clamped into `1..=configured` (`configured` 0 counts as 1).
///
/// ```
/// use pool_topo::{clamp_intra_op_threads, CpuPoolPlan};
/// let plan = CpuPoolPlan { workers: 5, worker_cpus: vec![1, 2, 3, 4, 5], coordinator_cpu: Some(6), caller_cpu: Some(0), unpinned_because: None };
/// assert_eq!(clamp_intra_op_threads(&plan, 16, 4), 4);  // 16 - 5 - 1 - 1 = 9, clamped to 4
/// assert_eq!(clamp_intra_op_threads(&plan, 8, 4), 1);   // 8 - 7 = 1
/// assert_eq!(clamp_intra_op_threads(&plan, 4, 4), 1);   // nothing left: still 1
/// ```
pub fn clamp_intra_op_threads(
    plan: &CpuPoolPlan,
    physical_cores: usize,
    configured: usize,
) -> usize {
    let used = plan.workers + usize::from(plan.coordinator_cpu.is_some()) + 1;
    physical_cores
        .saturating_sub(used)
        .clamp(1, configured.max(1))
}
