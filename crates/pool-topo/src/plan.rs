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
    let order = placement_order(topology);
    let workers = (threads.max(1) - 1).saturating_sub(usize::from(reserve_coordinator));
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
    }
}

/// [`plan_cpu_pool_in`] on this host's detected topology.
pub fn plan_cpu_pool(threads: usize, reserve_coordinator: bool) -> CpuPoolPlan {
    plan_cpu_pool_in(&CpuTopology::detect(), threads, reserve_coordinator)
}

/// Threads for a second, intra-op pool beside `plan`:
/// `physical_cores - workers - coordinator - 1` (the 1 is the calling
/// thread), clamped into `1..=configured` (`configured` 0 counts as 1).
///
/// ```
/// use pool_topo::{clamp_intra_op_threads, CpuPoolPlan};
/// let plan = CpuPoolPlan { workers: 5, worker_cpus: vec![1, 2, 3, 4, 5], coordinator_cpu: Some(6), caller_cpu: Some(0) };
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
