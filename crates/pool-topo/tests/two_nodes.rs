//! Two-socket placement decisions (fixtures) and page placement on this host.

use std::path::PathBuf;

use pool_topo::{
    numa_nodes, plan_two_nodes, plan_two_nodes_on_cores, CpuTopology, NumaNode, NumaSetting,
    TwoNodeDecision,
};

fn fixture_nodes(host: &str) -> Vec<NumaNode> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(host)
        .join("devices/system/node");
    numa_nodes(&root).unwrap()
}

fn split(decision: TwoNodeDecision) -> pool_topo::TwoNodePlan {
    match decision {
        TwoNodeDecision::Split(plan) => plan,
        other => panic!("expected a split: {other}"),
    }
}

fn fixture_topology(host: &str) -> CpuTopology {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(host)
        .join("devices/system/cpu");
    CpuTopology::from_sysfs(&root, &(0..64).collect::<Vec<_>>()).unwrap()
}

#[test]
fn counted_by_physical_cores_a_side_never_needs_two_siblings_of_one_core() {
    // 2 x 16 cores, 2 threads each: node 0 is CPUs 0-15 and their
    // siblings 32-47.
    let nodes = fixture_nodes("numa-2socket");
    let topology = fixture_topology("numa-2socket");
    assert_eq!(topology.physical_cores(), 32);
    let all: Vec<usize> = (0..64).collect();
    // 30 workers: 15 far, the caller and 15 on home: a core each.
    let plan = split(plan_two_nodes_on_cores(
        &nodes,
        &topology,
        30,
        0,
        NumaSetting::Auto,
    ));
    assert_eq!((plan.home.id, plan.far.id), (0, 1));
    assert_eq!(
        plan,
        split(plan_two_nodes(&nodes, &all, 30, 0, NumaSetting::Auto))
    );
    // 40 workers fit the logical CPUs (21 + 20 of 32 each) but not the
    // cores: counted by logical CPUs it splits, by cores it says why not.
    assert!(matches!(
        plan_two_nodes(&nodes, &all, 40, 0, NumaSetting::Auto),
        TwoNodeDecision::Split(_)
    ));
    match plan_two_nodes_on_cores(&nodes, &topology, 40, 0, NumaSetting::Auto) {
        TwoNodeDecision::Stay { reason } => assert!(
            reason.contains("node 1 has 16 physical cores for 20 far workers"),
            "{reason}"
        ),
        other => panic!("expected no split: {other}"),
    }
}

#[test]
fn the_far_node_is_the_one_with_the_most_physical_cores_not_the_most_cpus() {
    // Three nodes over the fixture's cores (CPU i and i + 32 are one
    // core's siblings): home 0 has cores 0-3 with both siblings; node 1
    // cores 4-11 with both (16 CPUs, 8 cores); node 2 cores 12-23 with
    // one sibling allowed each (12 CPUs, 12 cores).
    let nodes = vec![
        NumaNode {
            id: 0,
            cpus: (0..4).chain(32..36).collect(),
        },
        NumaNode {
            id: 1,
            cpus: (4..12).chain(36..44).collect(),
        },
        NumaNode {
            id: 2,
            cpus: (12..24).collect(),
        },
    ];
    let allowed: Vec<usize> = nodes.iter().flat_map(|n| n.cpus.clone()).collect();
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/numa-2socket/devices/system/cpu");
    let topology = CpuTopology::from_sysfs(&root, &allowed).unwrap();
    assert_eq!(topology.physical_cores(), 24);
    let by_cpus = split(plan_two_nodes(&nodes, &allowed, 4, 0, NumaSetting::Auto));
    assert_eq!(by_cpus.far.id, 1, "most logical CPUs");
    let by_cores = split(plan_two_nodes_on_cores(
        &nodes,
        &topology,
        4,
        0,
        NumaSetting::Auto,
    ));
    assert_eq!(by_cores.far.id, 2, "most physical cores");
}

#[test]
fn a_two_socket_server_puts_odd_workers_on_the_far_node() {
    let nodes = fixture_nodes("numa-2socket");
    let all: Vec<usize> = (0..64).collect();
    let plan = split(plan_two_nodes(&nodes, &all, 7, 0, NumaSetting::Auto));
    assert_eq!((plan.home.id, plan.far.id), (0, 1));
    assert_eq!(plan.worker_cpus.len(), 7);
    assert!(plan.worker_cpus[1].contains(&16) && !plan.worker_cpus[1].contains(&0));
    assert!(plan.worker_cpus[0].contains(&0) && plan.worker_cpus[2].contains(&32));
    // The caller's CPU picks the home node.
    let plan = split(plan_two_nodes(&nodes, &all, 7, 20, NumaSetting::Auto));
    assert_eq!((plan.home.id, plan.far.id), (1, 0));
}

#[test]
fn cmf_numa_forces_the_home_node_or_disables_the_split() {
    let nodes = fixture_nodes("numa-2socket");
    let all: Vec<usize> = (0..64).collect();
    let plan = split(plan_two_nodes(&nodes, &all, 4, 0, NumaSetting::Node(1)));
    assert_eq!(plan.home.id, 1);
    let off = plan_two_nodes(&nodes, &all, 4, 0, NumaSetting::Off);
    assert!(off.to_string().contains("disabled by CMF_NUMA"), "{off}");
    let bad = plan_two_nodes(&nodes, &all, 4, 0, NumaSetting::Node(5));
    assert!(bad.to_string().contains("node:5 names no node"), "{bad}");
}

#[test]
fn a_node_with_fewer_cpus_than_its_half_of_the_pool_is_not_split_onto() {
    let nodes = fixture_nodes("numa-2socket");
    // Allow all of node 0 but only two CPUs of node 1.
    let allowed: Vec<usize> = (0..16).chain(32..48).chain([16, 17]).collect();
    let decision = plan_two_nodes(&nodes, &allowed, 8, 0, NumaSetting::Auto);
    assert!(
        decision
            .to_string()
            .contains("node 1 has 2 CPUs for 4 far workers"),
        "{decision}"
    );
    // Two far workers fit.
    split(plan_two_nodes(&nodes, &allowed, 4, 0, NumaSetting::Auto));
}

#[test]
fn a_single_node_host_is_never_split_and_says_why() {
    let decision = plan_two_nodes(&fixture_nodes("vm-2cpu"), &[0, 1], 1, 0, NumaSetting::Auto);
    assert!(
        decision.to_string().contains("single-node host"),
        "{decision}"
    );
    // And this host, if it is one node.
    if let Ok(nodes) = numa_nodes(std::path::Path::new(pool_topo::SYSFS_NODE_ROOT)) {
        if nodes.len() == 1 {
            let allowed = pool_topo::process_affinity_cpus();
            let decision = plan_two_nodes(&nodes, &allowed, 1, allowed[0], NumaSetting::Auto);
            assert!(
                decision.to_string().contains("nothing to split"),
                "{decision}"
            );
        }
    }
}

#[cfg(target_os = "linux")]
mod pages {
    use std::io::Write;

    use pool_topo::{MappedFile, NumaNode};

    /// A fresh temp file of 1 MiB whose byte `i` is `i % 251` (so a wiped
    /// or shifted page shows), mapped by the crate.
    fn mapped(name: &str) -> MappedFile {
        let path = std::env::temp_dir().join(format!("pool-topo-{name}-{}", std::process::id()));
        let mut file = std::fs::File::create(&path).unwrap();
        let bytes: Vec<u8> = (0..1usize << 20).map(|i| (i % 251) as u8).collect();
        file.write_all(&bytes).unwrap();
        file.sync_all().unwrap();
        // SAFETY: this test's own file, unlinked at once: nobody else can
        // open it to truncate or write it.
        let mapped = unsafe { MappedFile::open(&path) }.unwrap();
        std::fs::remove_file(&path).unwrap();
        mapped
    }

    fn intact(mapped: &MappedFile) -> bool {
        mapped
            .as_bytes()
            .iter()
            .enumerate()
            .all(|(i, &b)| b == (i % 251) as u8)
    }

    #[test]
    fn pages_already_on_their_node_are_left_alone_and_a_second_call_moves_nothing() {
        let mapped = mapped("in-place");
        assert!(intact(&mapped));
        let node = NumaNode {
            id: 0,
            cpus: pool_topo::process_affinity_cpus(),
        };
        let first = mapped.place_span(0..mapped.len(), &node).unwrap();
        assert_eq!(first.bytes_moved, 0, "{first:?}");
        assert!(first.reason.unwrap().contains("already on node 0"));
        let second = mapped.place_span(0..mapped.len(), &node).unwrap();
        assert_eq!(second.bytes_moved, 0);
    }

    #[test]
    fn a_span_off_its_node_is_dropped_and_read_again_and_every_byte_around_it_survives() {
        // This host has one node; asking for "node 1" (CPUs of node 0)
        // exercises the drop-and-reread path. An unaligned span in the
        // middle: its first and last pages hold neighbouring bytes.
        let mapped = mapped("moved");
        assert!(intact(&mapped));
        let elsewhere = NumaNode {
            id: 1,
            cpus: pool_topo::process_affinity_cpus(),
        };
        let span = 4096 * 3 + 100..4096 * 200 + 7;
        let moved = mapped.place_span(span.clone(), &elsewhere).unwrap();
        assert_eq!(moved.bytes_moved, span.len(), "{moved:?}");
        assert_eq!(moved.share_before, 0);
        assert_eq!(
            moved.shares_after.get(&0),
            Some(&100),
            "re-read on this host's only node: {moved:?}"
        );
        assert!(
            intact(&mapped),
            "every byte, in and around the span, survives"
        );
    }

    /// A file written and then evicted from the page cache
    /// (`POSIX_FADV_DONTNEED` on a clean, unmapped file), mapped: `None`
    /// where the file system keeps it resident anyway (tmpfs).
    fn cold_mapped(name: &str) -> Option<MappedFile> {
        use std::os::fd::AsRawFd;
        let path = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("pool-topo-{name}-{}", std::process::id()));
        let mut file = std::fs::File::create(&path).unwrap();
        let bytes: Vec<u8> = (0..1usize << 20).map(|i| (i % 251) as u8).collect();
        file.write_all(&bytes).unwrap();
        file.sync_all().unwrap();
        drop(file);
        let file = std::fs::File::open(&path).unwrap();
        // SAFETY: a plain syscall on an open descriptor.
        let rc = unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
        assert_eq!(rc, 0);
        // SAFETY: as in `mapped`.
        let mapped = unsafe { MappedFile::from_file(file) }.unwrap();
        std::fs::remove_file(&path).unwrap();
        let sample = pool_topo::node_of_pages(&[mapped.as_bytes()]).unwrap();
        if !sample.cold() {
            eprintln!(
                "skipped: this file system kept the evicted file in memory ({} of {} sampled pages)",
                sample.cached, sample.sampled
            );
            return None;
        }
        Some(mapped)
    }

    #[test]
    fn a_cold_span_is_filled_from_its_node_after_saying_so_and_nothing_is_dropped() {
        let Some(mapped) = cold_mapped("cold") else {
            return;
        };
        let node = NumaNode {
            id: 0,
            cpus: pool_topo::process_affinity_cpus(),
        };
        let mut moves = Vec::new();
        let filled = mapped
            .place_span_with(0..mapped.len(), &node, |m| moves.push(m.clone()))
            .unwrap();
        assert_eq!(moves.len(), 1, "said before reading: {moves:?}");
        assert!(moves[0].fill && moves[0].bytes == mapped.len() && moves[0].node == 0);
        assert!(filled.filled, "{filled:?}");
        assert_eq!(filled.bytes_moved, mapped.len());
        assert_eq!(filled.share_after, 100, "{filled:?}");
        assert!(intact(&mapped));
        let again = mapped
            .place_span_with(0..mapped.len(), &node, |m| panic!("moved again: {m:?}"))
            .unwrap();
        assert_eq!((again.bytes_moved, again.filled), (0, false), "{again:?}");
    }

    #[test]
    fn a_resident_span_elsewhere_says_it_moves_before_reading() {
        let mapped = mapped("say-move");
        let elsewhere = NumaNode {
            id: 1,
            cpus: pool_topo::process_affinity_cpus(),
        };
        let mut moves = Vec::new();
        let moved = mapped
            .place_span_with(0..mapped.len(), &elsewhere, |m| moves.push(m.clone()))
            .unwrap();
        assert_eq!(moves.len(), 1);
        assert!(!moves[0].fill && moves[0].node == 1 && moves[0].share_before == 0);
        assert!(!moved.filled && moved.bytes_moved == mapped.len());
        assert!(intact(&mapped));
    }

    #[test]
    fn a_span_outside_the_file_is_refused() {
        let mapped = mapped("outside");
        let node = NumaNode {
            id: 0,
            cpus: pool_topo::process_affinity_cpus(),
        };
        let err = mapped.place_span(10..(2 << 20), &node).unwrap_err();
        assert!(
            err.to_string().contains("not inside the 1048576-byte file"),
            "{err}"
        );
    }

    #[test]
    fn an_empty_file_maps_to_no_bytes() {
        let path = std::env::temp_dir().join(format!("pool-topo-empty-{}", std::process::id()));
        std::fs::File::create(&path).unwrap();
        // SAFETY: as in `mapped`.
        let mapped = unsafe { MappedFile::open(&path) }.unwrap();
        std::fs::remove_file(&path).unwrap();
        assert!(mapped.is_empty() && mapped.as_bytes().is_empty());
    }
}
