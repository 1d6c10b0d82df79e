//! Size and place a decode thread pool from the machine's real topology.
//!
//! - how wide: [`resolve_cpu_threads`] (explicit value, `FERROX_CPU_THREADS`,
//!   `RAYON_NUM_THREADS`, then physical performance cores inside the
//!   affinity mask and cgroup quota, capped at 32);
//! - where: [`plan_cpu_pool`] pins workers to distinct physical cores first,
//!   siblings only when cores run out, optionally reserving a coordinator
//!   core; [`bind_to_node`] keeps the pool on the NUMA node holding the
//!   weights.
//!
//! Every reader takes a root path, so tests run against fixture trees of
//! hosts we do not have. Unreadable files degrade to a documented fallback,
//! logged with `tracing`; they never fail detection.
//!
//! ```
//! let topology = pool_topo::CpuTopology::detect();
//! let width = pool_topo::resolve_cpu_threads(None);
//! let plan = pool_topo::plan_cpu_pool_in(&topology, width.threads, false);
//! assert_eq!(plan.workers + 1, width.threads);
//! ```

#![cfg_attr(docsrs, feature(doc_cfg))]
mod affinity;
mod cgroup;
mod cpu_meter;
mod cpulist;
mod env_warnings;
mod error;
mod hetero;
#[cfg(any(target_os = "linux", target_os = "android"))]
mod huge_pages;
mod ledger;
#[cfg(any(target_os = "linux", target_os = "android"))]
mod mapped_file;
mod memory;
mod numa;
mod plan;
#[cfg(any(target_os = "linux", target_os = "android"))]
mod quota_group;
mod topology;
mod two_nodes;
mod width;

#[cfg(any(target_os = "linux", target_os = "android"))]
pub use affinity::pin_thread;
pub use affinity::{pin_current_thread, process_affinity_cpus, thread_affinity_cpus, usable_cpus};
pub use cgroup::{
    cpu_quota, cpu_quota_in, parse_cpu_max, quota_cpus, quota_cpus_in, CgroupVersion, CpuQuota,
    CGROUP_ROOT,
};
pub use cpu_meter::{parse_busy_ticks, CpuMeter, ForeignCpu, CONTAMINATION_SHARE};
pub use cpulist::{format_cpu_list, parse_cpu_list};
pub use env_warnings::{env_warnings, warn_env, EnvWarning};
pub use error::TopoError;
pub use hetero::{ClassSource, CoreClass};
#[cfg(any(target_os = "linux", target_os = "android"))]
#[cfg_attr(docsrs, doc(cfg(any(target_os = "linux", target_os = "android"))))]
pub use huge_pages::HugePageCopy;
pub use ledger::{held_cpus, hold_cpus, CpuHold};
#[cfg(any(target_os = "linux", target_os = "android"))]
#[cfg_attr(docsrs, doc(cfg(any(target_os = "linux", target_os = "android"))))]
pub use mapped_file::MappedFile;
pub use memory::{available_memory_bytes, parse_mem_available};
pub use numa::{
    bind_to_node, decide_node_for, decide_numa_node, node_of_pages, numa_maps_counts, numa_nodes,
    numa_setting_from_env, numa_trace, numa_trace_enabled, parse_numa_setting, plan_node_binding,
    NodeBinding, NumaDecision, NumaNode, NumaSetting, PagePlacement, PlacementMethod,
    BIND_THRESHOLD_PERCENT, MAX_SAMPLE_PAGES, NUMA_ENV, NUMA_TRACE_ENV, SYSFS_NODE_ROOT,
};
pub use plan::{
    clamp_intra_op_threads, placement_order, plan_cpu_pool, plan_cpu_pool_in,
    plan_cpu_pool_in_avoiding, CpuPoolPlan,
};
#[cfg(any(target_os = "linux", target_os = "android"))]
#[cfg_attr(docsrs, doc(cfg(any(target_os = "linux", target_os = "android"))))]
pub use quota_group::CpuQuotaGroup;
pub use topology::{
    perf_core_count, physical_core_count, CpuTopology, PhysicalCore, SYSFS_CPU_ROOT,
};
pub use two_nodes::{
    plan_two_nodes, plan_two_nodes_on_cores, PendingSpan, Placement, SpanMove, SpanPlacement,
    TwoNodeDecision, TwoNodePlan,
};
pub use width::{
    default_cpu_threads, resolve_cpu_threads, resolve_cpu_threads_with, ResolvedWidth, WidthSource,
    FERROX_THREADS_ENV, MAX_DEFAULT_THREADS, RAYON_THREADS_ENV,
};
