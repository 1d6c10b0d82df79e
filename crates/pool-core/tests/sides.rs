//! Two-node binding and two-sided jobs (a fake two-node plan over this
//! host's CPUs, so the pins are real).

use std::sync::Mutex;

use pool_core::{Pool, Side};
use pool_topo::{process_affinity_cpus, thread_affinity_cpus, NumaNode, TwoNodePlan};
use testkit::watched;

fn covered_once(ranges: &[(usize, usize)], items: usize) -> bool {
    let mut seen = vec![0u8; items];
    for &(start, end) in ranges {
        seen[start..end].iter_mut().for_each(|n| *n += 1);
    }
    seen.iter().all(|&n| n == 1)
}

/// One side's ranges and the threads that ran them.
type SideLog = (Vec<(usize, usize)>, Vec<String>);

/// Runs a two-sided job and returns, per side, the ranges and the threads.
fn sides(pool: &Pool, near: usize, far: usize) -> [SideLog; 2] {
    let seen: Mutex<[SideLog; 2]> = Mutex::default();
    pool.run_sides(near, far, |side, start, end| {
        let name = std::thread::current().name().unwrap_or("caller").to_owned();
        let mut seen = seen.lock().unwrap();
        let entry = &mut seen[usize::from(side == Side::Far)];
        entry.0.push((start, end));
        entry.1.push(name);
    });
    seen.into_inner().unwrap()
}

#[test]
fn an_unbound_pool_runs_both_sides_on_every_participant() {
    watched("sides_unbound", |_| {
        let pool = Pool::with_spin(3, 1000);
        assert!(!(0..4).any(|idx| pool.far_worker(idx)));
        for (near, far) in [(0, 0), (1, 0), (0, 7), (1000, 333)] {
            let [n, f] = sides(&pool, near, far);
            assert!(
                covered_once(&n.0, near) && covered_once(&f.0, far),
                "{near}/{far}"
            );
        }
    });
}

#[test]
fn a_bound_pool_keeps_each_side_on_its_own_threads_and_unbinds() {
    watched("sides_bound", |_| {
        let plan = fake_plan();
        let home = plan.home.cpus[0];
        let pool = Pool::builder()
            .workers(3)
            .spin(1000)
            .thread_name_prefix("side")
            .build()
            .unwrap();
        let before = thread_affinity_cpus();
        pool.bind_two_nodes(&plan).unwrap();
        assert_eq!(thread_affinity_cpus(), vec![home], "the caller stays home");
        assert_eq!(
            (0..4).map(|i| pool.far_worker(i)).collect::<Vec<_>>(),
            [false, true, false, false]
        );
        let [near, far_side] = sides(&pool, 500, 300);
        assert!(covered_once(&near.0, 500) && covered_once(&far_side.0, 300));
        assert!(
            far_side.1.iter().all(|t| t == "side-1"),
            "only the odd worker: {:?}",
            far_side.1
        );
        assert!(near.1.iter().all(|t| t != "side-1"), "{:?}", near.1);
        pool.unbind_two_nodes().unwrap();
        assert_eq!(thread_affinity_cpus(), before, "the caller's mask is back");
        assert!(!(0..4).any(|idx| pool.far_worker(idx)));
        pool.unbind_two_nodes().unwrap();
    });
}

#[test]
fn a_plan_for_another_pool_size_is_refused() {
    let pool = Pool::with_spin(2, 0);
    let node = NumaNode {
        id: 0,
        cpus: vec![0],
    };
    let plan = TwoNodePlan {
        home: node.clone(),
        far: node,
        worker_cpus: vec![vec![0]],
    };
    let err = pool.bind_two_nodes(&plan).unwrap_err();
    assert!(
        err.to_string().contains("plan for 1 workers, pool has 2"),
        "{err}"
    );
}

/// A plan over this host's CPUs that puts worker 1 (of 3) on the "far"
/// node: the pins are real even on a one-node host.
fn fake_plan() -> TwoNodePlan {
    let cpus = process_affinity_cpus();
    let (home, far) = (cpus[0], *cpus.last().unwrap());
    TwoNodePlan {
        home: NumaNode {
            id: 0,
            cpus: vec![home],
        },
        far: NumaNode {
            id: 1,
            cpus: vec![far],
        },
        worker_cpus: vec![vec![home], vec![far], vec![home]],
    }
}

/// Each worker's own mask, read on the worker.
fn worker_masks(pool: &Pool) -> Vec<Vec<usize>> {
    let masks = Mutex::new(vec![Vec::new(); pool.n_workers()]);
    pool.run(|idx, n| {
        if idx < n - 1 {
            masks.lock().unwrap()[idx] = thread_affinity_cpus();
        }
    });
    masks.into_inner().unwrap()
}

#[test]
fn run_sides_from_inside_a_job_of_the_same_pool_runs_every_item_of_both_sides() {
    watched("sides_nested", |_| {
        let pool = Pool::with_spin(3, 1000);
        pool.bind_two_nodes(&fake_plan()).unwrap();
        let logs = Mutex::new(Vec::new());
        pool.run(|idx, n| {
            if idx == n - 1 {
                logs.lock().unwrap().push(sides(&pool, 100, 50));
            }
        });
        let [near, far] = logs.into_inner().unwrap().pop().unwrap();
        assert!(covered_once(&near.0, 100), "near items: {:?}", near.0);
        assert!(covered_once(&far.0, 50), "far items: {:?}", far.0);
        pool.unbind_two_nodes().unwrap();
    });
}

#[test]
fn binding_and_unbinding_from_another_thread_never_loses_an_item() {
    watched("sides_race", |stage| {
        let pool = Pool::with_spin(3, 1000);
        let stop = std::sync::atomic::AtomicBool::new(false);
        let jobs = if cfg!(miri) { 5 } else { 2000 };
        std::thread::scope(|scope| {
            scope.spawn(|| {
                let plan = fake_plan();
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    pool.bind_two_nodes(&plan).unwrap();
                    pool.unbind_two_nodes().unwrap();
                }
            });
            for job in 0..jobs {
                stage.set(format!("job {job}"));
                let [near, far] = sides(&pool, 64, 40);
                assert!(
                    covered_once(&near.0, 64) && covered_once(&far.0, 40),
                    "job {job} lost or doubled items: near {:?} far {:?}",
                    near.0,
                    far.0
                );
            }
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
        });
    });
}

#[test]
fn binding_from_inside_a_job_of_the_pool_is_an_error_and_pins_nobody() {
    watched("sides_bind_inside", |_| {
        let pool = Pool::with_spin(3, 1000);
        let before = worker_masks(&pool);
        let caller_before = thread_affinity_cpus();
        let result = Mutex::new(None);
        pool.run(|idx, n| {
            if idx == n - 1 {
                *result.lock().unwrap() = Some(pool.bind_two_nodes(&fake_plan()));
            }
        });
        let err = result.into_inner().unwrap().unwrap().unwrap_err();
        assert!(err.to_string().contains("inside a job"), "{err}");
        assert_eq!(worker_masks(&pool), before);
        assert_eq!(thread_affinity_cpus(), caller_before);
        assert!(!(0..4).any(|idx| pool.far_worker(idx)));
    });
}

#[test]
fn unbind_restores_each_threads_own_mask_from_before_the_first_bind() {
    watched("sides_masks", |_| {
        let cpus = process_affinity_cpus();
        if cpus.len() < 2 {
            eprintln!("needs two CPUs: skipping");
            return;
        }
        let (a, b) = (cpus[0], cpus[1]);
        let pool = Pool::builder()
            .workers(3)
            .spin(1000)
            .pin_workers(vec![b, a, b])
            .build()
            .unwrap();
        let own = vec![vec![b], vec![a], vec![b]];
        assert_eq!(worker_masks(&pool), own);
        let caller = thread_affinity_cpus();
        let plan = fake_plan();
        pool.bind_two_nodes(&plan).unwrap();
        pool.bind_two_nodes(&plan).unwrap();
        assert_eq!(worker_masks(&pool), plan.worker_cpus);
        pool.unbind_two_nodes().unwrap();
        assert_eq!(worker_masks(&pool), own, "each worker its own mask");
        assert_eq!(thread_affinity_cpus(), caller, "and the caller its own");
    });
}

#[test]
fn binding_to_the_weights_on_a_one_node_host_does_nothing_and_says_why() {
    watched("bind_to_weights", |_| {
        let nodes = pool_topo::numa_nodes(std::path::Path::new(pool_topo::SYSFS_NODE_ROOT));
        if nodes.as_ref().map_or(true, |n| n.len() != 1) || std::env::var_os("CMF_NUMA").is_some() {
            eprintln!("not a plain single-node host: skipping");
            return;
        }
        let pool = Pool::with_spin(1, 1000);
        let before = (worker_masks(&pool), thread_affinity_cpus());
        let weights = vec![1u8; 1 << 16];
        let decision = pool.bind_to_weights(&[&weights]).unwrap();
        assert!(
            decision.to_string().contains("single-node host"),
            "{decision}"
        );
        assert_eq!((worker_masks(&pool), thread_affinity_cpus()), before);
        assert!(!pool.two_nodes());
    });
}

#[test]
fn a_live_pool_binds_every_thread_to_the_nodes_cpu_set_and_unbinds_back() {
    watched("bind_node", |_| {
        let cpus = process_affinity_cpus();
        // Workers pinned to one CPU first: the bind must widen them.
        let pool = Pool::builder()
            .workers(2)
            .spin(1000)
            .pin_workers(vec![cpus[0], cpus[0]])
            .build()
            .unwrap();
        let before = (worker_masks(&pool), thread_affinity_cpus());
        // This host's only node, as a NumaNode: the binding is real.
        let node = NumaNode {
            id: 0,
            cpus: cpus.clone(),
        };
        pool.bind_node(&node).unwrap();
        for (w, mask) in worker_masks(&pool).iter().enumerate() {
            assert_eq!(mask, &cpus, "worker {w} gets the node's whole CPU set");
        }
        assert_eq!(thread_affinity_cpus(), cpus, "the caller adopts the node");
        pool.unbind_node().unwrap();
        assert_eq!((worker_masks(&pool), thread_affinity_cpus()), before);
        // A node with no CPU of this process cannot be bound to.
        let elsewhere = NumaNode {
            id: 7,
            cpus: vec![100_000],
        };
        let err = Pool::with_spin(3, 0).bind_node(&elsewhere).unwrap_err();
        assert!(
            err.to_string()
                .contains("node 7 has no CPU in this process"),
            "{err}"
        );
        assert!(!pool.two_nodes());
        let split = Pool::builder().workers(3).spin(1000).build().unwrap();
        split.bind_two_nodes(&fake_plan()).unwrap();
        assert!(split.two_nodes());
        split.unbind_two_nodes().unwrap();
        assert!(!split.two_nodes());
    });
}

/// A two-node plan over this host's CPUs for `workers` workers: even
/// workers home, odd ones "far".
fn fake_plan_for(workers: usize) -> TwoNodePlan {
    let mut plan = fake_plan();
    plan.worker_cpus = (0..workers)
        .map(|w| {
            if TwoNodePlan::is_far(w) {
                plan.far.cpus.clone()
            } else {
                plan.home.cpus.clone()
            }
        })
        .collect();
    plan
}

#[test]
fn binding_an_adaptive_pool_from_outside_any_job_reaches_every_worker() {
    watched("bind_adaptive", |stage| {
        // Under the adaptive policy a job invites at most one worker per
        // CPU besides the caller's, and fewer under foreign load: with as
        // many workers as CPUs the bind's job used to reach too few
        // workers and fail with a false "called from inside a job".
        let workers = pool_topo::usable_cpus().max(2);
        let pool = Pool::new(workers);
        for round in 0..if cfg!(miri) { 3 } else { 10 } {
            stage.set(format!("round {round}"));
            pool.bind_two_nodes(&fake_plan_for(workers))
                .unwrap_or_else(|err| panic!("bind, round {round}: {err}"));
            pool.unbind_two_nodes()
                .unwrap_or_else(|err| panic!("unbind, round {round}: {err}"));
        }
    });
}

#[test]
fn an_unbind_inside_a_job_beside_one_from_outside_never_hangs() {
    watched("unbind_inside_and_outside", |stage| {
        let pool = Pool::with_spin(1, 1000);
        for round in 0..5 {
            stage.set(format!("round {round}"));
            pool.bind_two_nodes(&fake_plan_for(1)).unwrap();
            let inside = std::sync::Barrier::new(2);
            let (from_outside, from_inside) = std::thread::scope(|scope| {
                let outside = scope.spawn(|| {
                    inside.wait();
                    // Arrives while the job below runs: waits for its turn.
                    pool.unbind_two_nodes()
                });
                let from_inside = Mutex::new(None);
                pool.run(|idx, n| {
                    if idx == n - 1 {
                        inside.wait();
                        // Long enough for the other thread to be waiting.
                        std::thread::sleep(std::time::Duration::from_millis(30));
                        *from_inside.lock().unwrap() = Some(pool.unbind_two_nodes());
                    }
                });
                let from_inside = from_inside.into_inner().unwrap().unwrap();
                (outside.join().unwrap(), from_inside)
            });
            let err = from_inside.expect_err("inside a job of this pool, unbind fails fast");
            assert_eq!(err.kind(), std::io::ErrorKind::WouldBlock, "{err}");
            from_outside.unwrap_or_else(|err| panic!("from outside: {err}"));
            assert!(!pool.two_nodes(), "unbound by the outside call");
        }
    });
}

/// Every thread that calls into a bound pool takes the node's mask at its
/// next dispatch, not only the thread that bound; after unbind it gets its
/// own mask back at its next dispatch.
#[test]
#[cfg(target_os = "linux")]
fn every_calling_thread_adopts_the_bound_mask_and_gets_its_own_back() {
    watched("caller_adopts", |_| {
        let cpus = process_affinity_cpus();
        if cpus.len() < 2 {
            eprintln!("one CPU: a node mask cannot differ from the thread's: skipping");
            return;
        }
        let pool = std::sync::Arc::new(Pool::with_spin(1, 1000));
        // A "node" of one CPU, so the adopted mask is visible.
        let node = NumaNode {
            id: 0,
            cpus: vec![cpus[0]],
        };
        let (to_caller, from_main) = std::sync::mpsc::channel::<&'static str>();
        let (to_main, from_caller) = std::sync::mpsc::channel::<Vec<usize>>();
        let caller_pool = pool.clone();
        let caller = std::thread::spawn(move || {
            for step in from_main {
                if step == "run" {
                    caller_pool.run(|_, _| {});
                }
                to_main.send(thread_affinity_cpus()).unwrap();
            }
        });
        let ask = |step| {
            to_caller.send(step).unwrap();
            from_caller.recv().unwrap()
        };
        assert_eq!(ask("look"), cpus, "the other thread starts on every CPU");
        pool.bind_node(&node).unwrap();
        assert_eq!(ask("look"), cpus, "nothing changes before it calls in");
        assert_eq!(
            ask("run"),
            vec![cpus[0]],
            "its next dispatch adopts the node"
        );
        pool.unbind_node().unwrap();
        assert_eq!(
            ask("run"),
            cpus,
            "its next dispatch after unbind restores its own"
        );
        drop(to_caller);
        caller.join().unwrap();
    });
}

#[test]
fn a_refused_pin_rolls_every_thread_back_to_its_own_mask() {
    watched("bind_rollback", |stage| {
        let pool = Pool::with_spin(3, 1000);
        let own = worker_masks(&pool);
        let caller_own = thread_affinity_cpus();
        let mut plan = fake_plan_for(3);
        // No such CPU: the far worker's pin is refused by the kernel,
        // after the home threads were pinned.
        plan.far.cpus = vec![4095];
        plan.worker_cpus[1] = vec![4095];
        stage.set("bind");
        let err = pool.bind_two_nodes(&plan).unwrap_err().to_string();
        assert!(err.contains("worker 1"), "{err}");
        assert!(err.contains("every thread got its mask back"), "{err}");
        assert!(!pool.two_nodes(), "the sides stay unsplit");
        assert_eq!(worker_masks(&pool), own, "every worker rolled back");
        assert_eq!(thread_affinity_cpus(), caller_own, "the caller too");
    });
}

// Miri has no file-backed mappings.
#[cfg(all(target_os = "linux", not(miri)))]
mod place_sides {
    use std::io::Write;

    use super::*;

    /// A 1 MiB file, cached, mapped.
    fn mapped(name: &str) -> pool_topo::MappedFile {
        let path = std::env::temp_dir().join(format!("pool-core-{name}-{}", std::process::id()));
        let mut file = std::fs::File::create(&path).unwrap();
        let bytes: Vec<u8> = (0..1usize << 20).map(|i| (i % 251) as u8).collect();
        file.write_all(&bytes).unwrap();
        file.sync_all().unwrap();
        // SAFETY: this test's own file, unlinked at once: nobody else can
        // open it to truncate or write it.
        let mapped = unsafe { pool_topo::MappedFile::open(&path) }.unwrap();
        std::fs::remove_file(&path).unwrap();
        mapped
    }

    #[test]
    fn each_side_reads_its_own_span_with_its_own_threads_after_saying_so() {
        watched("place_sides", |stage| {
            let pool = Pool::with_spin(3, 1000);
            let plan = fake_plan_for(3);
            let file = mapped("sides");
            let half = file.len() / 2;
            stage.set("unbound");
            let err = pool
                .place_sides(&plan, &file, 0..half, half..file.len(), |_, _| {})
                .unwrap_err();
            assert!(err.to_string().contains("bind_two_nodes first"), "{err}");
            stage.set("bound");
            pool.bind_two_nodes(&plan).unwrap();
            // Home is node 0, where this one-node host holds every page:
            // in place. The "far" node has id 1 here, so its span is
            // dropped and read again by the far worker.
            let mut said = Vec::new();
            let (near, far) = pool
                .place_sides(&plan, &file, 0..half, half..file.len(), |side, m| {
                    said.push((side, m.clone()))
                })
                .unwrap();
            assert_eq!(near.bytes_moved, 0, "{near:?}");
            assert_eq!(far.bytes_moved, file.len() - half, "{far:?}");
            assert_eq!(said.len(), 1, "{said:?}");
            assert_eq!(said[0].0, Side::Far);
            assert_eq!(said[0].1.bytes, file.len() - half);
            assert_eq!(far.shares_after.get(&0), Some(&100), "{far:?}");
            assert!(file
                .as_bytes()
                .iter()
                .enumerate()
                .all(|(i, &b)| b == (i % 251) as u8));
            pool.unbind_two_nodes().unwrap();
        });
    }
}
