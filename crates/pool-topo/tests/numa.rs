//! NUMA decisions, fixture by fixture, and the one-node host we run on.

use std::collections::BTreeMap;

use pool_topo::{
    decide_numa_node, numa_maps_counts, parse_numa_setting, NumaDecision, NumaNode, NumaSetting,
    PagePlacement, PlacementMethod,
};

fn two_nodes() -> Vec<NumaNode> {
    vec![
        NumaNode {
            id: 0,
            cpus: vec![0, 1, 2, 3],
        },
        NumaNode {
            id: 1,
            cpus: vec![4, 5, 6, 7],
        },
    ]
}

fn placement(counts: &[(usize, usize)]) -> PagePlacement {
    PagePlacement {
        sampled: counts.iter().map(|c| c.1).sum(),
        cached: counts.iter().map(|c| c.1).sum(),
        per_node: counts.iter().copied().collect::<BTreeMap<_, _>>(),
        method: PlacementMethod::MovePages,
    }
}

#[test]
fn a_node_holding_ninety_percent_of_the_sample_is_bound_to() {
    let d = decide_numa_node(
        &two_nodes(),
        Some(&placement(&[(0, 5), (1, 95)])),
        NumaSetting::Auto,
    );
    assert!(
        matches!(d, NumaDecision::Bind { ref node, .. } if node.id == 1),
        "{d}"
    );
}

#[test]
fn a_split_sample_binds_nothing_and_says_so() {
    let d = decide_numa_node(
        &two_nodes(),
        Some(&placement(&[(0, 40), (1, 60)])),
        NumaSetting::Auto,
    );
    assert!(d.to_string().contains("only 60 %"), "{d}");
}

#[test]
fn a_single_node_host_binds_nothing() {
    let one = vec![NumaNode {
        id: 0,
        cpus: vec![0, 1],
    }];
    let d = decide_numa_node(&one, Some(&placement(&[(0, 100)])), NumaSetting::Auto);
    assert!(d.to_string().contains("single-node host"), "{d}");
}

#[test]
fn cmf_numa_forces_or_disables_binding() {
    assert_eq!(
        parse_numa_setting(Some("node:1")).unwrap(),
        NumaSetting::Node(1)
    );
    assert_eq!(parse_numa_setting(Some("off")).unwrap(), NumaSetting::Off);
    assert_eq!(parse_numa_setting(Some("0")).unwrap(), NumaSetting::Off);
    assert_eq!(parse_numa_setting(None).unwrap(), NumaSetting::Auto);
    assert!(parse_numa_setting(Some("node:x"))
        .unwrap_err()
        .to_string()
        .contains("CMF_NUMA"));
    let d = decide_numa_node(&two_nodes(), None, NumaSetting::Node(1));
    assert!(
        matches!(d, NumaDecision::Bind { ref node, .. } if node.id == 1),
        "{d}"
    );
    let d = decide_numa_node(&two_nodes(), None, NumaSetting::Node(7));
    assert!(d.to_string().contains("names no node"), "{d}");
    let d = decide_numa_node(
        &two_nodes(),
        Some(&placement(&[(1, 100)])),
        NumaSetting::Off,
    );
    assert!(d.to_string().contains("disabled"), "{d}");
}

#[test]
fn numa_maps_lines_are_summed_per_node_over_the_overlapping_mappings() {
    let buffer = vec![1u8; 3 * 4096];
    let start = buffer.as_ptr() as usize;
    let maps = format!(
        "{:x} default anon=2 N0=2 kernelpagesize_kB=4\n{:x} default anon=1 N1=1 N0=3\n{:x} default N1=50\n",
        start - 4096,
        start + 4096,
        start + 100 * 4096
    );
    let counts = numa_maps_counts(&maps, &[&buffer]);
    assert_eq!(counts, BTreeMap::from([(0, 5), (1, 1)]));
}

#[test]
#[cfg(target_os = "linux")]
fn on_this_host_touched_pages_are_found_resident_on_a_node() {
    let buffer = vec![7u8; 64 * 4096];
    let p = pool_topo::node_of_pages(&[&buffer]).unwrap();
    assert!(p.sampled > 0);
    assert!(p.resident() > 0, "{p:?}");
}

/// The engines' case: weights just mapped, their pages in the page cache
/// but not yet in this process's page tables. Both `move_pages` and
/// `numa_maps` see only mapped pages, so the sample must read each one.
#[test]
#[cfg(target_os = "linux")]
fn a_freshly_mapped_cached_file_reports_the_node_of_its_pages() {
    let path = std::env::temp_dir().join(format!("pool-topo-fresh-{}", std::process::id()));
    std::fs::write(&path, vec![3u8; 256 * 4096]).unwrap();
    // In the page cache (just written, and read once more to be sure).
    assert_eq!(std::fs::read(&path).unwrap().len(), 256 * 4096);
    // SAFETY: the file is this test's own; nothing changes it while mapped.
    let mapped = unsafe { pool_topo::MappedFile::open(&path) }.unwrap();
    let p = pool_topo::node_of_pages(&[mapped.as_bytes()]).unwrap();
    let _ = std::fs::remove_file(&path);
    assert!(p.sampled > 0 && !p.cold(), "{p:?}");
    assert_eq!(
        p.resident(),
        p.cached,
        "every cached page found on a node: {p:?}"
    );
    let nodes = pool_topo::numa_nodes(std::path::Path::new(pool_topo::SYSFS_NODE_ROOT));
    if let Ok(nodes) = nodes {
        for node in p.per_node.keys() {
            assert!(
                nodes.iter().any(|n| n.id == *node),
                "node {node} exists: {p:?}"
            );
        }
    }
}

#[test]
fn a_cold_file_is_not_bound_to_and_the_decision_says_why() {
    let nodes = two_nodes();
    let mut cold = placement(&[(1, 10)]);
    cold.sampled = 64; // 10 of 64 sampled pages in memory
    cold.cached = 10;
    match decide_numa_node(&nodes, Some(&cold), NumaSetting::Auto) {
        NumaDecision::Stay { reason } => assert!(reason.contains("cold file"), "{reason}"),
        other => panic!("bound a cold file: {other}"),
    }
    cold.cached = 40; // warm enough: the majority decides
    assert!(matches!(
        decide_numa_node(&nodes, Some(&cold), NumaSetting::Auto),
        NumaDecision::Bind { .. }
    ));
}
