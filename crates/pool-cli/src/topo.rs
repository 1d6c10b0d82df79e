//! `pool topo`.

use std::path::Path;

use pool_topo::{
    default_cpu_threads, format_cpu_list, numa_nodes, plan_cpu_pool_in, process_affinity_cpus,
    resolve_cpu_threads_with, CoreClass, CpuTopology, SYSFS_CPU_ROOT, SYSFS_NODE_ROOT,
};
use serde::Serialize;

/// The JSON object of `pool topo --json` (docs/cli.md).
#[derive(Serialize)]
pub(crate) struct TopoReport {
    pub(crate) source: String,
    pub(crate) logical_cpus: Vec<usize>,
    pub(crate) affinity: Vec<usize>,
    pub(crate) physical_cores: usize,
    pub(crate) perf_cores: usize,
    pub(crate) cores: Vec<CoreReport>,
    pub(crate) class_source: &'static str,
    pub(crate) degraded: Option<String>,
    /// The QoS class of the thread running `pool topo` (macOS; "n/a"
    /// elsewhere). Workers set their own (default user-interactive).
    pub(crate) qos: &'static str,
    pub(crate) cgroup_quota_cpus: Option<usize>,
    pub(crate) cgroup_quota: Option<QuotaReport>,
    pub(crate) numa_nodes: Vec<NodeReport>,
    pub(crate) width: WidthReport,
    pub(crate) plan: PlanReport,
}

#[derive(Serialize)]
pub(crate) struct QuotaReport {
    cpus: f64,
    quota_us: u64,
    period_us: u64,
    version: String,
    group: String,
}

#[derive(Serialize)]
pub(crate) struct CoreReport {
    cpus: Vec<usize>,
    class: &'static str,
}

#[derive(Serialize)]
pub(crate) struct NodeReport {
    id: usize,
    cpus: Vec<usize>,
}

#[derive(Serialize)]
pub(crate) struct WidthReport {
    pub(crate) threads: usize,
    pub(crate) source: &'static str,
}

#[derive(Serialize)]
pub(crate) struct PlanReport {
    workers: usize,
    worker_cpus: Vec<usize>,
    caller_cpu: Option<usize>,
    coordinator_cpu: Option<usize>,
}

/// Builds the report for this host, or for a captured `/sys/devices/system`.
pub(crate) fn report(sysfs: Option<&Path>, coordinator: bool) -> Result<TopoReport, String> {
    let (source, cpu_root, node_root, topology, affinity, cgroup_quota) = match sysfs {
        None => {
            let affinity = process_affinity_cpus();
            (
                "host".to_owned(),
                Path::new(SYSFS_CPU_ROOT).to_owned(),
                Path::new(SYSFS_NODE_ROOT).to_owned(),
                CpuTopology::detect(),
                affinity,
                pool_topo::cpu_quota(),
            )
        }
        Some(dir) => {
            let cpu_root = dir.join("cpu");
            let cpus = captured_cpus(&cpu_root)?;
            let topology = CpuTopology::from_sysfs(&cpu_root, &cpus)
                .map_err(|err| format!("--sysfs {}: {err}", dir.display()))?;
            (
                format!("sysfs:{}", dir.display()),
                cpu_root,
                dir.join("node"),
                topology,
                cpus,
                None,
            )
        }
    };
    let quota = cgroup_quota.as_ref().map(|q| q.whole_cpus());
    let logical_cpus = logical_cpus(&cpu_root).unwrap_or_else(|| affinity.clone());
    let width = resolve_cpu_threads_with(
        None,
        |name| std::env::var(name).ok(),
        || default_cpu_threads(&topology, quota),
    );
    let plan = plan_cpu_pool_in(&topology, width.threads, coordinator);
    let numa = numa_nodes(&node_root).unwrap_or_default();
    Ok(TopoReport {
        source,
        logical_cpus,
        affinity,
        physical_cores: topology.physical_cores(),
        perf_cores: topology.perf_cores(),
        cores: topology
            .cores()
            .iter()
            .map(|core| CoreReport {
                cpus: core.cpus().to_vec(),
                class: match core.class() {
                    CoreClass::Performance => "performance",
                    CoreClass::Efficiency => "efficiency",
                },
            })
            .collect(),
        class_source: topology.class_source().as_str(),
        degraded: topology.degraded_reason().map(str::to_owned),
        qos: pool_core::current_qos_name(),
        cgroup_quota_cpus: quota,
        cgroup_quota: cgroup_quota.map(|q| QuotaReport {
            cpus: q.cpus,
            quota_us: q.quota_us,
            period_us: q.period_us,
            version: q.version.to_string(),
            group: q.group.display().to_string(),
        }),
        numa_nodes: numa
            .into_iter()
            .map(|n| NodeReport {
                id: n.id,
                cpus: n.cpus,
            })
            .collect(),
        width: WidthReport {
            threads: width.threads,
            source: width.source.as_str(),
        },
        plan: PlanReport {
            workers: plan.workers,
            worker_cpus: plan.worker_cpus,
            caller_cpu: plan.caller_cpu,
            coordinator_cpu: plan.coordinator_cpu,
        },
    })
}

/// The CPUs of a captured tree: its `online` list, else its `cpuN` dirs.
fn captured_cpus(cpu_root: &Path) -> Result<Vec<usize>, String> {
    if let Some(cpus) = logical_cpus(cpu_root) {
        return Ok(cpus);
    }
    let entries = std::fs::read_dir(cpu_root)
        .map_err(|err| format!("--sysfs: cannot read {}: {err}", cpu_root.display()))?;
    let mut cpus: Vec<usize> = entries
        .filter_map(|e| {
            e.ok()?
                .file_name()
                .to_str()?
                .strip_prefix("cpu")?
                .parse()
                .ok()
        })
        .collect();
    cpus.sort_unstable();
    if cpus.is_empty() {
        return Err(format!(
            "--sysfs: no cpuN directories under {}",
            cpu_root.display()
        ));
    }
    Ok(cpus)
}

fn logical_cpus(cpu_root: &Path) -> Option<Vec<usize>> {
    let text = std::fs::read_to_string(cpu_root.join("online")).ok()?;
    pool_topo::parse_cpu_list(&text)
        .ok()
        .filter(|cpus| !cpus.is_empty())
}

pub(crate) fn run(sysfs: Option<&Path>, coordinator: bool, json: bool) -> Result<(), String> {
    let r = report(sysfs, coordinator)?;
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&r).map_err(|e| e.to_string())?
        );
        return Ok(());
    }
    println!("topology ({})", r.source);
    println!(
        "  logical CPUs     {} ({})",
        r.logical_cpus.len(),
        format_cpu_list(&r.logical_cpus)
    );
    println!(
        "  affinity mask    {} ({})",
        r.affinity.len(),
        format_cpu_list(&r.affinity)
    );
    println!(
        "  physical cores   {} ({} performance, classes from {})",
        r.physical_cores, r.perf_cores, r.class_source
    );
    for (i, core) in r.cores.iter().enumerate() {
        println!(
            "    core {i:>3}: cpus {:<12} {}",
            format_cpu_list(&core.cpus),
            core.class
        );
    }
    if let Some(reason) = &r.degraded {
        println!("  degraded         {reason}");
    }
    match &r.cgroup_quota {
        Some(q) => println!(
            "  cgroup quota     {:.2} CPUs ({} us per {} us, cgroup {} at {}): {} usable",
            q.cpus,
            q.quota_us,
            q.period_us,
            q.version,
            q.group,
            r.cgroup_quota_cpus.unwrap_or(1)
        ),
        None => println!("  cgroup quota     none (cgroup v1 and v2 read)"),
    }
    println!("  QoS (this thread) {}", r.qos);
    for node in &r.numa_nodes {
        println!(
            "  NUMA node {:<6} cpus {}",
            node.id,
            format_cpu_list(&node.cpus)
        );
    }
    println!("plan");
    println!(
        "  width            {} participants (from {})",
        r.width.threads, r.width.source
    );
    println!(
        "  workers          {} pinned to {:?}",
        r.plan.workers, r.plan.worker_cpus
    );
    println!("  caller CPU       {:?}", r.plan.caller_cpu);
    if let Some(cpu) = r.plan.coordinator_cpu {
        println!("  coordinator CPU  {cpu}");
    }
    Ok(())
}
