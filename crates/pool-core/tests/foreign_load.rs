//! Foreign load is measured from `/proc/stat` and `getrusage` (Linux).
//! Its own test binary: the measurement is process-wide.

#[cfg(target_os = "linux")]
#[test]
#[cfg_attr(miri, ignore = "Miri does not run other processes")]
fn a_busy_process_shows_up_as_foreign_cpus() {
    use std::time::{Duration, Instant};

    testkit::watched("foreign_load", |stage| {
        stage.set("starting a busy process");
        let mut busy = std::process::Command::new("sh")
            .args([
                "-c",
                "end=$(( $(date +%s) + 5 )); while [ $(date +%s) -lt $end ]; do :; done",
            ])
            .spawn()
            .expect("spawn sh");
        let pool = pool_core::Pool::with_spin(1, 0);
        stage.set("dispatching while it runs");
        let start = Instant::now();
        let mut seen: f64 = 0.0;
        while start.elapsed() < Duration::from_millis(1500) {
            pool.run(|_, _| {});
            std::thread::sleep(Duration::from_millis(10));
            seen = seen.max(pool_core::foreign_cpus());
        }
        let _ = busy.kill();
        let _ = busy.wait();
        assert!(
            seen > 0.3,
            "a shell busy-looping on a CPU measured as {seen:.2} foreign CPUs"
        );
    });
}

#[cfg(target_os = "linux")]
#[test]
#[cfg_attr(miri, ignore = "Miri does not run other processes")]
fn with_no_cpu_left_by_other_processes_a_row_job_does_not_wake_a_parked_worker() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::{Duration, Instant};

    use pool_core::{Pool, SpinPolicy};

    // Woken onto a busy CPU, a worker lands beside its caller and takes
    // the caller's time: the job runs inline instead, and the worker
    // stays asleep.
    testkit::watched("no_cpu_left", |stage| {
        let cpus = pool_topo::usable_cpus();
        stage.set(format!("starting {cpus} busy processes"));
        let _busy = testkit::BusyProcesses::start(cpus).expect("busy processes");
        let pool = Pool::builder()
            .workers(1)
            .spin_policy(SpinPolicy::Adaptive {
                linger: Duration::from_millis(2),
            })
            .build()
            .unwrap();
        stage.set("waiting for the sample to see them".to_string());
        let no_cpu_left = || {
            let foreign = pool_core::foreign_cpus();
            foreign > 0.5 && foreign.round() as usize + 1 >= cpus
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        while !no_cpu_left() {
            assert!(
                Instant::now() < deadline,
                "{cpus} busy processes measured as {:.2} foreign CPUs after 20 s",
                pool_core::foreign_cpus()
            );
            pool.run(|_, _| {});
            std::thread::sleep(Duration::from_millis(10));
        }
        for attempt in 0..20 {
            stage.set(format!("attempt {attempt}: letting the worker park"));
            // 25 lingers: parked, however the busy processes delay it.
            std::thread::sleep(Duration::from_millis(50));
            let before = pool.stats();
            if !no_cpu_left() || before.parks == 0 {
                continue;
            }
            stage.set(format!("attempt {attempt}: a row job"));
            let (width, grains) = (AtomicUsize::new(0), AtomicUsize::new(0));
            pool.run_optional_workers(1, |_, n| {
                width.fetch_max(n, Ordering::Relaxed);
                grains.fetch_add(1, Ordering::Relaxed);
            });
            let s = pool.stats().since(&before);
            assert_eq!(grains.into_inner(), 1, "the caller ran it alone");
            assert_eq!(width.into_inner(), 1, "a parked worker was invited: {s}");
            assert_eq!(s.unparks, 0, "{s}");
            return;
        }
        panic!("the worker never parked, or the load went away, in 20 attempts");
    });
}
