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
