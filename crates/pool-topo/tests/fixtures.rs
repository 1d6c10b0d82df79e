//! Every fixture host pins down its physical cores, perf cores, default
//! width and plan. Trees are written by `fixtures/generate.py`.

use std::path::PathBuf;

use pool_topo::{
    clamp_intra_op_threads, default_cpu_threads, numa_nodes, plan_cpu_pool_in, quota_cpus_in,
    ClassSource, CoreClass, CpuTopology,
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
    // A coordinator core comes right after the caller's.
    let plan = plan_cpu_pool_in(&t, 8, true);
    assert_eq!((plan.caller_cpu, plan.coordinator_cpu), (Some(0), Some(1)));
    assert_eq!(plan.worker_cpus, (2..9).collect::<Vec<_>>());
    assert_eq!(
        clamp_intra_op_threads(&plan, t.physical_cores(), 8),
        16 - 7 - 1 - 1
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
