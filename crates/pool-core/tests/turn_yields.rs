//! A worker beside a busy process on its CPU ends its turns between jobs
//! (`timeslice.rs`). Its own test binary: it dispatches without pause,
//! and another test's caller in the same process would see this one as a
//! caller filling the CPUs and run its jobs inline.

#[cfg(target_os = "linux")]
#[test]
#[cfg_attr(miri, ignore = "Miri does not run other processes")]
fn a_worker_that_shares_its_cpu_with_a_busy_process_yields_between_jobs_near_the_end_of_its_turns()
{
    use std::time::{Duration, Instant};

    use pool_core::{Pool, SpinPolicy};

    testkit::watched("turn_yields", |stage| {
        let cpus = pool_topo::process_affinity_cpus();
        if cpus.len() < 2 {
            eprintln!("skipped: one usable CPU, no CPU for the worker to share");
            return;
        }
        // The worker on the second CPU with three busy processes, the caller
        // on the first: the worker gets turns, and loses them to the
        // scheduler's preemption.
        let worker_cpu = cpus[1];
        stage.set(format!("starting three busy processes on CPU {worker_cpu}"));
        let busy = testkit::BusyProcesses::start(3).expect("busy processes");
        for pid in busy.pids() {
            pool_topo::pin_thread(pid, &[worker_cpu]).expect("pin a busy process");
        }
        pool_topo::pin_current_thread(&[cpus[0]]).expect("pin the caller");
        let pool = Pool::builder()
            .workers(1)
            .pin_workers(vec![worker_cpu])
            .spin_policy(SpinPolicy::adaptive())
            .build()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
        let before = pool.stats();
        let mut jobs = 0u64;
        loop {
            stage.set(format!(
                "row jobs: {jobs}, foreign CPUs {:.2}, {}",
                pool_core::foreign_cpus(),
                pool.stats().since(&before)
            ));
            // Each participant computes for about 50 µs; said to be long,
            // so the parked worker is woken for it beside busy CPUs.
            pool.run_optional_workers_for(1, pool_core::WORTH_A_WAKE * 10, |_, _| {
                let start = Instant::now();
                while start.elapsed() < Duration::from_micros(50) {
                    std::hint::spin_loop();
                }
            });
            jobs += 1;
            let s = pool.stats().since(&before);
            if s.turn_yields > 0 {
                return;
            }
            if Instant::now() >= deadline && s.jobs_hot < 1000 {
                // More load than the setting (a CI stage's own busy loops
                // beside the three): the worker was parked before nearly
                // every job, so it never had a turn to end between two.
                // Not this setting: say so instead of failing.
                eprintln!(
                    "skipped: the worker stayed awake for only {} of {} jobs in 20 s \
                     (foreign CPUs {:.2}): no turn to end between jobs",
                    s.jobs_hot,
                    s.worker_jobs(),
                    pool_core::foreign_cpus()
                );
                return;
            }
            assert!(
                Instant::now() < deadline,
                "no turn yield in 20 s of row jobs beside three busy processes on the \
                 worker's CPU (foreign CPUs {:.2}): {s:?}",
                pool_core::foreign_cpus()
            );
        }
    });
}
