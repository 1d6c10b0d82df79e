//! Every fixture host pins down its physical cores, perf cores, default
//! width and plan. Trees are written by `fixtures/generate.py`.

use std::path::PathBuf;

use pool_topo::{
    clamp_intra_op_threads, cpu_quota_in, default_cpu_threads, numa_nodes, plan_cpu_pool_in,
    quota_cpus_in, CgroupVersion, ClassSource, CoreClass, CpuQuota, CpuTopology,
};

fn fixture(host: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(host)
}

fn cpu_root(host: &str) -> PathBuf {
    fixture(host).join("devices/system/cpu")
}

fn topology(host: &str, allowed: impl IntoIterator<Item = usize>) -> CpuTopology {
    let allowed: Vec<usize> = allowed.into_iter().collect();
    CpuTopology::from_sysfs(&cpu_root(host), &allowed).unwrap()
}

#[test]
fn a_two_cpu_vm_has_two_cores_and_plans_one_worker() {
    let t = topology("vm-2cpu", 0..2);
    assert_eq!(t.physical_cores(), 2);
    assert_eq!(t.physical_core_cpus(), vec![0, 1]);
    assert_eq!(t.perf_cores(), 2);
    assert_eq!(t.class_source(), ClassSource::Uniform);
    assert_eq!(t.degraded_reason(), None);
    assert_eq!(default_cpu_threads(&t, None), 2);
    let plan = plan_cpu_pool_in(&t, 2, false);
    assert_eq!(
        (plan.workers, plan.worker_cpus.clone(), plan.caller_cpu),
        (1, vec![1], Some(0))
    );
}

#[test]
fn smt_siblings_n_and_n_plus_16_count_as_one_core() {
    let t = topology("smt-16c32t", 0..32);
    assert_eq!(t.allowed_cpus().len(), 32);
    assert_eq!(t.physical_cores(), 16);
    assert_eq!(t.physical_core_cpus(), (0..16).collect::<Vec<_>>());
    assert_eq!(t.cores()[3].cpus(), &[3, 19]);
    assert_eq!(default_cpu_threads(&t, None), 16);
    // 16 participants: caller on core 0, workers on cores 1..15, no sibling.
    let plan = plan_cpu_pool_in(&t, 16, false);
    assert_eq!(plan.worker_cpus, (1..16).collect::<Vec<_>>());
    // 20 participants: cores run out, siblings follow in core order.
    let plan = plan_cpu_pool_in(&t, 20, false);
    assert_eq!(plan.worker_cpus[15..], [16, 17, 18, 19]);
    // A coordinator core comes right after the caller's, and takes one of
    // the 8 places: 6 workers.
    let plan = plan_cpu_pool_in(&t, 8, true);
    assert_eq!((plan.caller_cpu, plan.coordinator_cpu), (Some(0), Some(1)));
    assert_eq!(plan.worker_cpus, (2..8).collect::<Vec<_>>());
    assert_eq!(
        clamp_intra_op_threads(&plan, t.physical_cores(), 8),
        16 - 6 - 1 - 1
    );
    assert_eq!(clamp_intra_op_threads(&plan, t.physical_cores(), 4), 4);
}

#[test]
fn an_intel_hybrid_laptop_defaults_to_its_six_p_cores() {
    let t = topology("intel-hybrid", 0..20);
    assert_eq!(t.class_source(), ClassSource::IntelHybrid);
    assert_eq!(t.physical_cores(), 14);
    assert_eq!(t.perf_cores(), 6);
    assert_eq!(t.perf_core_cpus(), vec![0, 2, 4, 6, 8, 10]);
    assert_eq!(t.class_of(13), Some(CoreClass::Efficiency));
    assert_eq!(t.class_of(1), Some(CoreClass::Performance));
    assert_eq!(default_cpu_threads(&t, None), 6);
    // Past the P-cores: E-cores before any P-core sibling.
    let plan = plan_cpu_pool_in(&t, 8, false);
    assert_eq!(plan.worker_cpus, vec![2, 4, 6, 8, 10, 12, 13]);
}

#[test]
fn an_arm_big_little_phone_keeps_only_its_big_cores() {
    let t = topology("arm-big-little", 0..8);
    assert_eq!(t.class_source(), ClassSource::Capacity);
    assert_eq!(
        t.physical_cores(),
        8,
        "older kernel: thread_siblings_list is read"
    );
    assert_eq!(t.perf_core_cpus(), vec![4, 5, 6, 7]);
    assert_eq!(default_cpu_threads(&t, None), 4);
    let plan = plan_cpu_pool_in(&t, 4, false);
    assert_eq!(
        (plan.caller_cpu, plan.worker_cpus),
        (Some(4), vec![5, 6, 7])
    );
}

#[test]
fn two_clock_bins_of_one_core_type_are_all_performance_cores() {
    let t = topology("arm-clock-bins", 0..8);
    assert_eq!(t.class_source(), ClassSource::MaxFrequency);
    assert_eq!(t.perf_cores(), 8);
    assert_eq!(default_cpu_threads(&t, None), 8);
    let plan = plan_cpu_pool_in(&t, 8, false);
    assert_eq!(
        (plan.caller_cpu, plan.worker_cpus),
        (Some(0), (1..8).collect::<Vec<_>>())
    );
}

#[test]
fn capacities_are_compared_with_the_maximum_over_the_allowed_cpus_only() {
    // Only little cores allowed: they are the fastest this process has.
    let t = topology("arm-big-little", 0..4);
    assert_eq!(t.perf_cores(), 4);
}

#[test]
fn a_two_socket_server_lists_both_nodes_and_its_physical_cores() {
    let t = topology("numa-2socket", 0..64);
    assert_eq!(t.physical_cores(), 32);
    assert_eq!(t.perf_cores(), 32);
    assert_eq!(default_cpu_threads(&t, None), 32);
    // 32 participants: one per physical core, no SMT sibling used.
    let plan = plan_cpu_pool_in(&t, 32, false);
    assert_eq!(plan.worker_cpus, (1..32).collect::<Vec<_>>());
    let nodes = numa_nodes(&fixture("numa-2socket").join("devices/system/node")).unwrap();
    assert_eq!(nodes.len(), 2);
    assert_eq!(nodes[1].id, 1);
    assert_eq!(nodes[1].cpus.len(), 32);
    assert!(nodes[1].cpus.contains(&16) && nodes[1].cpus.contains(&63));
}

#[test]
fn an_affinity_mask_that_excludes_cpus_limits_the_cores() {
    // CPUs 0-3 and their siblings 16-19: four physical cores.
    let allowed: Vec<usize> = (0..4).chain(16..20).collect();
    let t = topology("smt-16c32t", allowed);
    assert_eq!(t.physical_cores(), 4);
    assert_eq!(t.physical_core_cpus(), vec![0, 1, 2, 3]);
    assert_eq!(default_cpu_threads(&t, None), 4);
    let plan = plan_cpu_pool_in(&t, 6, false);
    assert_eq!(
        plan.worker_cpus,
        vec![1, 2, 3, 16, 17],
        "siblings only after the cores"
    );
    // Only siblings 16-19 allowed: still four cores, pinned to those ids.
    let t = topology("smt-16c32t", 16..20);
    assert_eq!(t.physical_core_cpus(), vec![16, 17, 18, 19]);
    assert_eq!(t.cores()[0].cpus(), &[16]);
}

#[test]
fn a_cgroup_quota_of_three_cpus_bounds_the_default_width() {
    let root = fixture("cgroup-quota-3");
    let membership = std::fs::read_to_string(root.join("proc_self_cgroup")).unwrap();
    let quota = quota_cpus_in(&root.join("fs/cgroup"), &membership).unwrap();
    assert_eq!(quota, Some(3));
    let t = topology("cgroup-quota-3", 0..32);
    assert_eq!((t.physical_cores(), t.perf_cores()), (16, 16));
    assert_eq!(default_cpu_threads(&t, quota), 3);
    let plan = plan_cpu_pool_in(&t, 3, false);
    assert_eq!((plan.workers, plan.worker_cpus), (2, vec![1, 2]));
}

#[test]
fn no_cgroup_v2_entry_or_a_max_quota_means_no_limit() {
    let root = fixture("cgroup-quota-3").join("fs/cgroup");
    assert_eq!(quota_cpus_in(&root, "1:cpu:/\n").unwrap(), None);
    assert_eq!(quota_cpus_in(&root, "0::/kubepods\n").unwrap(), None);
    assert_eq!(quota_cpus_in(&root, "0::/not-there\n").unwrap(), None);
}

/// The quota a cgroup-only fixture's process would see.
fn fixture_quota(name: &str) -> Option<CpuQuota> {
    let root = fixture(name);
    let membership = std::fs::read_to_string(root.join("proc_self_cgroup")).unwrap();
    cpu_quota_in(&root.join("fs/cgroup"), &membership).unwrap()
}

#[test]
fn a_cgroup_v1_quota_is_read_under_the_cpu_controllers_mount() {
    let quota = fixture_quota("cgroup-v1-docker").expect("a 1.5-CPU quota");
    assert_eq!(quota.version, CgroupVersion::V1);
    assert_eq!((quota.quota_us, quota.period_us), (150_000, 100_000));
    assert!((quota.cpus - 1.5).abs() < 1e-9);
    assert_eq!(quota.whole_cpus(), 2);
    assert!(quota.group.ends_with("cpu,cpuacct/docker/abc"), "{quota}");
}

#[test]
fn the_tightest_quota_up_the_path_wins_on_v1_and_v2() {
    let v1 = fixture_quota("cgroup-v1-nested").unwrap();
    assert_eq!((v1.version, v1.whole_cpus()), (CgroupVersion::V1, 2));
    assert!(v1.group.ends_with("cpu/batch"), "the parent's limit: {v1}");
    let v2 = fixture_quota("cgroup-v2-nested").unwrap();
    assert_eq!((v2.version, v2.whole_cpus()), (CgroupVersion::V2, 2));
    assert!(v2.group.ends_with("kubepods"), "the parent's limit: {v2}");
}

#[test]
fn on_a_hybrid_host_the_unified_hierarchys_quota_counts_too() {
    let quota = fixture_quota("cgroup-hybrid").unwrap();
    assert_eq!((quota.version, quota.whole_cpus()), (CgroupVersion::V2, 1));
}

#[test]
fn a_container_that_sees_only_its_own_subtree_reads_the_mount_root() {
    let quota = fixture_quota("cgroup-v1-own-subtree").unwrap();
    assert_eq!((quota.version, quota.whole_cpus()), (CgroupVersion::V1, 3));
}

#[test]
fn an_unparsable_v1_quota_is_an_error_naming_the_file() {
    let dir = std::env::temp_dir().join(format!("pool-topo-bad-v1-{}", std::process::id()));
    let group = dir.join("cpu");
    std::fs::create_dir_all(&group).unwrap();
    std::fs::write(group.join("cpu.cfs_quota_us"), "lots\n").unwrap();
    let err = cpu_quota_in(&dir, "3:cpu:/\n").unwrap_err();
    assert!(err.to_string().contains("cpu.cfs_quota_us"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn broken_sibling_files_degrade_to_one_core_per_cpu_and_say_why() {
    for (host, needle) in [
        ("broken-missing", "cpu2/topology"),
        ("broken-garbage", "zero-one"),
        ("broken-empty", "empty sibling list"),
    ] {
        let (t, warnings) = testkit::capture_warnings(|| topology(host, 0..4));
        assert_eq!(t.physical_cores(), 4, "{host}");
        let reason = t
            .degraded_reason()
            .unwrap_or_else(|| panic!("{host} must degrade"));
        assert!(reason.contains(needle), "{host}: {reason}");
        assert!(
            warnings.contains("one physical core per logical CPU"),
            "{host}: {warnings}"
        );
    }
}

#[test]
fn a_missing_sysfs_root_or_an_empty_cpu_set_is_an_error() {
    let err = CpuTopology::from_sysfs(&fixture("no-such-host"), &[0]).unwrap_err();
    assert!(err.to_string().contains("no-such-host"), "{err}");
    assert!(err.is_not_found());
    assert!(CpuTopology::from_sysfs(&cpu_root("vm-2cpu"), &[]).is_err());
}

#[test]
fn a_pool_bound_to_one_node_takes_its_physical_cores_first_and_refuses_a_node_too_small() {
    let t = topology("numa-2socket", 0..64);
    let nodes = numa_nodes(&fixture("numa-2socket").join("devices/system/node")).unwrap();
    let far = &nodes[1];
    let binding = pool_topo::plan_node_binding(&t, far, 4).unwrap();
    assert_eq!(binding.node, 1);
    assert_eq!(
        binding.worker_cpus,
        vec![17, 18, 19, 20],
        "one CPU per core"
    );
    assert_eq!(binding.caller_cpus.len(), 32, "the caller adopts the node");
    assert_eq!(binding.caller_cpus[0], 16);
    // 16 cores + 16 siblings: siblings only after every core.
    let wide = pool_topo::plan_node_binding(&t, far, 20).unwrap();
    assert_eq!(&wide.worker_cpus[14..], &[31, 48, 49, 50, 51, 52]);
    let err = pool_topo::plan_node_binding(&t, far, 32).unwrap_err();
    assert!(
        err.contains("node 1 has 32 usable CPUs; the pool has 33 threads"),
        "{err}"
    );
}

#[test]
fn a_coordinator_makes_room_instead_of_sharing_a_cpu_or_taking_an_efficiency_core() {
    // 2 CPUs, width 2: the caller and the coordinator; no worker on either.
    let t = topology("vm-2cpu", 0..2);
    let plan = plan_cpu_pool_in(&t, default_cpu_threads(&t, None), true);
    assert_eq!((plan.caller_cpu, plan.coordinator_cpu), (Some(0), Some(1)));
    assert_eq!(plan.workers, 0);
    assert!(plan.worker_cpus.is_empty());
    // big.LITTLE: 4 big cores; caller and coordinator take two, the two
    // workers the other two, and no little core is used.
    let t = topology("arm-big-little", 0..8);
    let width = default_cpu_threads(&t, None);
    let plan = plan_cpu_pool_in(&t, width, true);
    let big: Vec<usize> = t
        .cores()
        .iter()
        .filter(|c| c.class() == CoreClass::Performance)
        .flat_map(|c| c.cpus().to_vec())
        .collect();
    assert_eq!(plan.workers, width - 2);
    for cpu in plan
        .worker_cpus
        .iter()
        .chain(&plan.caller_cpu)
        .chain(&plan.coordinator_cpu)
    {
        assert!(big.contains(cpu), "{cpu} is a little core: {plan:?}");
    }
    let mut all: Vec<usize> = plan.worker_cpus.clone();
    all.extend(plan.caller_cpu);
    all.extend(plan.coordinator_cpu);
    all.sort();
    all.dedup();
    assert_eq!(all.len(), width, "no two threads on one CPU: {plan:?}");
}

/// Two pools of one process planned one after the other on a 16-core SMT
/// server: the second gets the cores the first left, never its CPUs; a
/// plan made when every CPU is held pins nothing and says why.
#[test]
fn plans_for_pools_built_in_turn_take_disjoint_cpus_and_pin_nothing_once_all_are_held() {
    let t = topology("smt-16c32t", 0..32);
    let first = pool_topo::plan_cpu_pool_in_avoiding(&t, 8, false, &[]);
    let second = pool_topo::plan_cpu_pool_in_avoiding(&t, 8, false, &first.cpus());
    assert_eq!(first.cpus(), (0..8).collect::<Vec<_>>());
    assert_eq!(
        second.cpus(),
        (8..16).collect::<Vec<_>>(),
        "the next 8 physical cores"
    );
    assert_eq!(second.workers, 7);
    assert!(second.unpinned_because.is_none());
    // Cores gone: SMT siblings next, still disjoint.
    let held: Vec<usize> = first.cpus().into_iter().chain(second.cpus()).collect();
    let third = pool_topo::plan_cpu_pool_in_avoiding(&t, 8, false, &held);
    assert_eq!(third.cpus(), (16..24).collect::<Vec<_>>());
    // Everything held: nothing pinned, and the reason names the held CPUs.
    let all: Vec<usize> = (0..32).collect();
    let none = pool_topo::plan_cpu_pool_in_avoiding(&t, 8, false, &all);
    assert!(
        none.worker_cpus.is_empty() && none.caller_cpu.is_none(),
        "{none:?}"
    );
    assert_eq!(none.workers, 7, "the workers still exist, unpinned");
    let reason = none.unpinned_because.expect("a reason");
    assert!(
        reason.contains("0-31") && reason.contains("not pinned"),
        "{reason}"
    );
    // Fewer free than threads: also unpinned, never half on a held CPU.
    let most: Vec<usize> = (0..28).collect();
    let short = pool_topo::plan_cpu_pool_in_avoiding(&t, 8, false, &most);
    assert!(short.worker_cpus.is_empty() && short.unpinned_because.is_some());
}
