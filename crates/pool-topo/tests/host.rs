//! The real host: detection agrees with lscpu, and never fails.

use pool_topo::{physical_core_count, process_affinity_cpus, CpuTopology};

#[test]
fn detect_agrees_with_lscpus_core_count() {
    let Ok(out) = std::process::Command::new("lscpu")
        .arg("-p=CORE,SOCKET,ONLINE")
        .output()
    else {
        eprintln!("lscpu not installed: skipping the comparison");
        return;
    };
    let text = String::from_utf8_lossy(&out.stdout);
    let allowed = process_affinity_cpus();
    let mut cores: Vec<(String, String)> = text
        .lines()
        .filter(|line| !line.starts_with('#'))
        .enumerate()
        .filter(|(cpu, line)| allowed.contains(cpu) && !line.ends_with(",N"))
        .map(|(_, line)| {
            let mut fields = line.split(',');
            (
                fields.next().unwrap_or("").to_owned(),
                fields.next().unwrap_or("").to_owned(),
            )
        })
        .collect();
    cores.sort();
    cores.dedup();
    assert_eq!(physical_core_count(), cores.len(), "lscpu -p says {text}");
}

#[test]
fn detect_covers_exactly_the_affinity_mask() {
    let t = CpuTopology::detect();
    assert_eq!(t.allowed_cpus(), process_affinity_cpus().as_slice());
    assert!(t.physical_cores() >= 1 && t.physical_cores() <= t.allowed_cpus().len());
    assert!(t.perf_cores() <= t.physical_cores());
}

#[test]
#[cfg(any(target_os = "linux", windows))]
fn pinning_the_current_thread_to_an_allowed_cpu_works_and_bad_cpus_are_refused() {
    let cpu = *process_affinity_cpus().last().unwrap();
    std::thread::spawn(move || {
        pool_topo::pin_current_thread(&[cpu]).unwrap();
        assert_eq!(pool_topo::thread_affinity_cpus(), vec![cpu]);
        assert!(pool_topo::pin_current_thread(&[]).is_err());
        assert!(pool_topo::pin_current_thread(&[1 << 20]).is_err());
    })
    .join()
    .unwrap();
}

#[test]
#[cfg(target_os = "linux")]
fn pinning_another_thread_by_its_id_moves_that_thread_only() {
    let cpu = *process_affinity_cpus().last().unwrap();
    let before = pool_topo::thread_affinity_cpus();
    let (tid_tx, tid_rx) = std::sync::mpsc::channel();
    let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
    let other = std::thread::spawn(move || {
        // SAFETY: gettid has no preconditions.
        tid_tx.send(unsafe { libc::gettid() } as u32).unwrap();
        go_rx.recv().unwrap();
        pool_topo::thread_affinity_cpus()
    });
    let tid = tid_rx.recv().unwrap();
    pool_topo::pin_thread(tid, &[cpu]).unwrap();
    go_tx.send(()).unwrap();
    assert_eq!(other.join().unwrap(), vec![cpu], "the pinned thread's CPUs");
    assert_eq!(
        pool_topo::thread_affinity_cpus(),
        before,
        "the caller's own"
    );
    assert!(pool_topo::pin_thread(0, &[cpu]).is_err(), "thread id 0");
    assert!(pool_topo::pin_thread(tid, &[]).is_err(), "no CPUs");
    assert!(
        pool_topo::pin_thread(tid, &[1 << 20]).is_err(),
        "a CPU past the mask"
    );
    // Past the kernel's largest pid_max (2^22): no such thread.
    let e = pool_topo::pin_thread(i32::MAX as u32, &[cpu]).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::ESRCH), "{e}");
}

#[test]
#[cfg(target_os = "linux")]
fn binding_on_a_single_node_host_does_nothing_and_says_why() {
    let nodes = pool_topo::numa_nodes(std::path::Path::new(pool_topo::SYSFS_NODE_ROOT));
    if nodes.as_ref().map_or(true, |n| n.len() != 1) || std::env::var_os("CMF_NUMA").is_some() {
        eprintln!("not a plain single-node host: skipping");
        return;
    }
    let buffer = vec![1u8; 1 << 16];
    let decision = pool_topo::bind_to_node(&[&buffer]).unwrap();
    assert!(
        decision.to_string().contains("single-node host"),
        "{decision}"
    );
}

#[test]
#[cfg(target_os = "linux")]
fn a_pinned_thread_does_not_shrink_the_processs_cpus() {
    let before = process_affinity_cpus();
    let usable = pool_topo::usable_cpus();
    let cpu = before[0];
    std::thread::spawn(move || {
        pool_topo::pin_current_thread(&[cpu]).unwrap();
        assert_eq!(pool_topo::thread_affinity_cpus(), vec![cpu]);
        assert_eq!(
            process_affinity_cpus(),
            before,
            "asked from a pinned thread"
        );
        assert_eq!(pool_topo::usable_cpus(), usable);
    })
    .join()
    .unwrap();
}
