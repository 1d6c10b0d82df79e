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
    /// With `--pools N`: the plans of N pools built in turn by one
    /// process, each around the CPUs the ones before it hold (the first
    /// is `plan`).
    pub(crate) pools: Vec<PlanReport>,
    /// The spin policy a pool built now would use (`CMF_POOL_SPIN`).
    pub(crate) spin_policy: String,
    /// Whether the host's width variables were applied (always on the
    /// host; with `--sysfs` only when `--env` asks).
    pub(crate) env_applied: bool,
    /// Things to look at: an oversubscribed plan, a plan over two NUMA
    /// nodes, a degraded topology.
    pub(crate) warnings: Vec<String>,
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
    /// The rule behind `threads`, in words.
    pub(crate) explanation: String,
}

#[derive(Serialize)]
pub(crate) struct PlanReport {
    workers: usize,
    worker_cpus: Vec<usize>,
    caller_cpu: Option<usize>,
    coordinator_cpu: Option<usize>,
    /// Why nothing is pinned, when other pools hold the CPUs.
    unpinned_because: Option<String>,
}

impl From<&pool_topo::CpuPoolPlan> for PlanReport {
    fn from(plan: &pool_topo::CpuPoolPlan) -> PlanReport {
        PlanReport {
            workers: plan.workers,
            worker_cpus: plan.worker_cpus.clone(),
            caller_cpu: plan.caller_cpu,
            coordinator_cpu: plan.coordinator_cpu,
            unpinned_because: plan.unpinned_because.clone(),
        }
    }
}

/// Builds the report for this host, or for a captured `/sys/devices/system`.
pub(crate) fn report(
    sysfs: Option<&Path>,
    coordinator: bool,
    apply_env: bool,
    pools: usize,
) -> Result<TopoReport, String> {
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
            let quota = captured_quota(dir)?;
            (
                format!("sysfs:{}", dir.display()),
                cpu_root,
                dir.join("node"),
                topology,
                cpus,
                quota,
            )
        }
    };
    let quota = cgroup_quota.as_ref().map(|q| q.whole_cpus());
    let logical_cpus = logical_cpus(&cpu_root).unwrap_or_else(|| affinity.clone());
    // A captured tree is another machine: this host's variables do not
    // belong to its plan unless asked.
    let env_applied = sysfs.is_none() || apply_env;
    let width = resolve_cpu_threads_with(
        None,
        |name| env_applied.then(|| std::env::var(name).ok()).flatten(),
        || default_cpu_threads(&topology, quota),
    );
    let explanation = explain_width(&width, &topology, &affinity, quota);
    let plan = plan_cpu_pool_in(&topology, width.threads, coordinator);
    let mut held = plan.cpus();
    let mut pool_plans = vec![PlanReport::from(&plan)];
    for _ in 1..pools.max(1) {
        let next =
            pool_topo::plan_cpu_pool_in_avoiding(&topology, width.threads, coordinator, &held);
        held.extend(next.cpus());
        pool_plans.push(PlanReport::from(&next));
    }
    let numa = numa_nodes(&node_root).unwrap_or_default();
    let mut warnings = Vec::new();
    let usable = quota.map_or(affinity.len(), |q| q.min(affinity.len()));
    let threads_on_cpus = plan.workers + 1 + usize::from(plan.coordinator_cpu.is_some());
    if threads_on_cpus > usable {
        warnings.push(format!(
            "oversubscribed: {threads_on_cpus} threads for {usable} usable CPUs; spinning waiters will share CPUs (the adaptive policy parks them)"
        ));
    }
    let plan_cpus: Vec<usize> = plan
        .worker_cpus
        .iter()
        .chain(&plan.caller_cpu)
        .copied()
        .collect();
    let nodes_used = numa
        .iter()
        .filter(|n| n.cpus.iter().any(|c| plan_cpus.contains(c)))
        .count();
    if nodes_used > 1 {
        warnings.push(format!(
            "the plan spans {nodes_used} NUMA nodes: bind it to the weights' node (Pool::bind_to_weights) or split it (bind_two_nodes); docs/embedding.md"
        ));
    }
    if let Some(reason) = topology.degraded_reason() {
        warnings.push(format!("degraded topology: {reason}"));
    }
    let spin_policy = describe_spin_policy();
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
            explanation,
        },
        plan: PlanReport::from(&plan),
        pools: pool_plans,
        spin_policy,
        env_applied,
        warnings,
    })
}

/// A captured tree's cgroup: `DIR/../../fs/cgroup` with the process's
/// membership in `DIR/../../proc_self_cgroup` (a copy of `/sys` and of
/// `/proc/self/cgroup` side by side); none when the capture has no cgroup.
fn captured_quota(dir: &Path) -> Result<Option<pool_topo::CpuQuota>, String> {
    let capture = dir.join("../..");
    let (root, membership) = (capture.join("fs/cgroup"), capture.join("proc_self_cgroup"));
    if !root.is_dir() || !membership.is_file() {
        return Ok(None);
    }
    let membership = std::fs::read_to_string(&membership)
        .map_err(|err| format!("--sysfs: {}: {err}", membership.display()))?;
    pool_topo::cpu_quota_in(&root, &membership)
        .map_err(|err| format!("--sysfs: the captured cgroup: {err}"))
}

/// The width rule, in words.
fn explain_width(
    width: &pool_topo::ResolvedWidth,
    topology: &CpuTopology,
    affinity: &[usize],
    quota: Option<usize>,
) -> String {
    match width.source {
        pool_topo::WidthSource::Topology => {
            let logical = topology.allowed_cpus().len();
            let mut why = format!(
                "{} performance cores of {} physical in the CPU set {} ({} logical CPUs; SMT siblings not counted)",
                topology.perf_cores(),
                topology.physical_cores(),
                format_cpu_list(affinity),
                logical
            );
            if let Some(q) = quota.filter(|&q| q < topology.perf_cores()) {
                why += &format!(", bounded by the cgroup quota of {q} CPUs");
            }
            if topology.perf_cores() > pool_topo::MAX_DEFAULT_THREADS {
                why += &format!(", capped at {}", pool_topo::MAX_DEFAULT_THREADS);
            }
            why
        }
        source => format!("{} set it (it wins over the topology)", source.as_str()),
    }
}

/// The spin policy a pool built now would use, and why.
fn describe_spin_policy() -> String {
    let value = std::env::var(pool_core::SPIN_ENV).ok();
    match pool_core::parse_spin_policy(value.as_deref()) {
        Ok(pool_core::SpinPolicy::Adaptive { linger }) => format!(
            "adaptive: spins while jobs keep coming, parks within {} ms of idleness ({} unset)",
            linger.as_millis(),
            pool_core::SPIN_ENV
        ),
        Ok(pool_core::SpinPolicy::Fixed(spins)) => format!(
            "fixed: {spins} spins, then park ({}={})",
            pool_core::SPIN_ENV,
            value.unwrap_or_default()
        ),
        Err(err) => format!("adaptive ({err}: ignored)"),
    }
}

fn cpu_or_none(cpu: Option<usize>) -> String {
    cpu.map_or_else(|| "none".to_owned(), |c| c.to_string())
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

pub(crate) fn run(
    sysfs: Option<&Path>,
    coordinator: bool,
    apply_env: bool,
    pools: usize,
    json: bool,
) -> Result<(), String> {
    let r = report(sysfs, coordinator, apply_env, pools)?;
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
        "  width            {} participants (from {}): {}",
        r.width.threads, r.width.source, r.width.explanation
    );
    if !r.env_applied {
        println!("  (this host's FERROX_CPU_THREADS / RAYON_NUM_THREADS not applied to a captured tree; --env applies them)");
    }
    println!(
        "  workers          {} pinned to {}",
        r.plan.workers,
        if r.plan.worker_cpus.is_empty() {
            "nothing".to_owned()
        } else {
            format_cpu_list(&r.plan.worker_cpus)
        }
    );
    println!(
        "  caller CPU       {} (Pool::pin_caller pins the decode thread there)",
        cpu_or_none(r.plan.caller_cpu)
    );
    if let Some(cpu) = r.plan.coordinator_cpu {
        println!("  coordinator CPU  {cpu} (kept free of workers)");
    }
    for (i, plan) in r.pools.iter().enumerate().skip(1) {
        let pinned = if plan.worker_cpus.is_empty() {
            "unpinned".to_owned()
        } else {
            format!("pinned to {}", format_cpu_list(&plan.worker_cpus))
        };
        println!(
            "  {:<17}{} {pinned}, caller CPU {}",
            format!("pool {} of {}", i + 1, r.pools.len()),
            if plan.workers == 1 {
                "1 worker".to_owned()
            } else {
                format!("{} workers", plan.workers)
            },
            cpu_or_none(plan.caller_cpu)
        );
        if let Some(reason) = &plan.unpinned_because {
            println!("  {:<17}{reason}", "");
        }
    }
    println!("  spin policy      {}", r.spin_policy);
    for warning in &r.warnings {
        println!("warning: {warning}");
    }
    Ok(())
}
