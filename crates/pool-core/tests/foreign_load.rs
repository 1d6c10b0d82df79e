//! Foreign load is measured from `/proc/stat` and `getrusage` (Linux).
//! Its own test binary: the measurement is process-wide.

/// The tests start busy processes of their own and need the load they
/// start, not their neighbours' too: one at a time.
#[cfg(target_os = "linux")]
fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
    ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(target_os = "linux")]
#[test]
#[cfg_attr(miri, ignore = "Miri does not run other processes")]
fn a_busy_process_shows_up_as_foreign_cpus() {
    use std::time::{Duration, Instant};

    let _one_at_a_time = one_at_a_time();
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

/// Other processes' load, as the pool's sample must see it for a test.
#[cfg(target_os = "linux")]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Load {
    /// One busy process more than CPUs: the caller itself is short of one,
    /// in every sample. (With as many as CPUs, the scheduler may leave
    /// the caller a CPU of its own for a sample or more: three CPU-bound
    /// threads on 2 CPUs pair two and leave one alone.)
    NoCpuForTheCaller,
    /// One busy process fewer: no CPU for a worker, the caller keeps its
    /// own (more load from outside the test skips it).
    NoCpuForAWorker,
}

/// With `load` seen by the load sample: a worker parked, then one row job
/// of `expected` length, from a thread at `nice`. Returns the job's width
/// (`n`), the grains it ran, and the pool's counters over it; `None` when
/// other processes' load overshot the setting (said on stderr).
#[cfg(target_os = "linux")]
fn one_row_job_beside_busy_cpus(
    name: &'static str,
    load: Load,
    expected: std::time::Duration,
    nice: i32,
) -> Option<(usize, usize, pool_core::PoolStats)> {
    row_jobs_beside_busy_cpus(name, load, expected, nice, 1, std::time::Duration::ZERO)
}

/// As [`one_row_job_beside_busy_cpus`] for `jobs` row jobs in a row, each
/// keeping its first participant busy for `busy_for`; the width is the
/// widest job's.
#[cfg(target_os = "linux")]
fn row_jobs_beside_busy_cpus(
    name: &'static str,
    load: Load,
    expected: std::time::Duration,
    nice: i32,
    jobs: usize,
    busy_for: std::time::Duration,
) -> Option<(usize, usize, pool_core::PoolStats)> {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::{Duration, Instant};

    use pool_core::{Pool, SpinPolicy};

    let _one_at_a_time = one_at_a_time();
    testkit::watched(name, move |stage| {
        if nice != 0 {
            // SAFETY: gettid takes no arguments; PRIO_PROCESS with a
            // thread id sets that thread's nice value (raising it needs no
            // privilege); no pointers.
            let rc = unsafe {
                let tid = libc::syscall(libc::SYS_gettid) as libc::id_t;
                libc::setpriority(libc::PRIO_PROCESS, tid, nice)
            };
            assert_eq!(rc, 0, "setpriority(nice {nice})");
        }
        let cpus = pool_topo::usable_cpus();
        if cpus < 2 {
            eprintln!("skipped: one usable CPU, no worker to invite");
            return None;
        }
        let busy = match load {
            Load::NoCpuForTheCaller => cpus + 1,
            Load::NoCpuForAWorker => cpus - 1,
        };
        stage.set(format!("starting {busy} busy processes"));
        let _busy = testkit::BusyProcesses::start(busy).expect("busy processes");
        let pool = Pool::builder()
            .workers(1)
            .spin_policy(SpinPolicy::Adaptive {
                linger: Duration::from_millis(2),
            })
            .build()
            .unwrap();
        stage.set("waiting for the sample to see them".to_string());
        // As `contention.rs` reads the sample: no CPU for a worker, and
        // the caller short of its own beyond a quarter CPU over the rest.
        let no_cpu_left = || {
            let foreign = pool_core::foreign_cpus();
            foreign > 0.5 && foreign.round() as usize + 1 >= cpus
        };
        let caller_short = || pool_core::foreign_cpus() > cpus as f64 - 0.75;
        let seen = || no_cpu_left() && caller_short() == (load == Load::NoCpuForTheCaller);
        // More load than the setting: the machine's own, not the test's.
        // `Some(why)` skips the test, saying so.
        let overrun = |after: &str| {
            (load == Load::NoCpuForAWorker && caller_short()).then(|| {
                format!(
                    "skipped: {busy} busy processes and the machine's own load measured as \
                     {:.2} foreign CPUs of {cpus} {after}: the caller has no CPU of its own",
                    pool_core::foreign_cpus()
                )
            })
        };
        let start = Instant::now();
        let deadline = start + Duration::from_secs(20);
        // Seen for four samples in a row (50 ms apart): the pool reads a
        // caller short of its CPU in each of the last three as steady load.
        let mut seen_since: Option<Instant> = None;
        let steady = Duration::from_millis(250);
        while seen_since.is_none_or(|since| since.elapsed() < steady) {
            if seen() {
                seen_since.get_or_insert_with(Instant::now);
                pool.run(|_, _| {});
                std::thread::sleep(Duration::from_millis(10));
                continue;
            }
            seen_since = None;
            // The sample settles within a second or two: 5 s of more load
            // than the setting is the machine's own, not a slow sample.
            if start.elapsed() >= Duration::from_secs(5) {
                if let Some(why) = overrun("for 5 s") {
                    eprintln!("{why}");
                    return None;
                }
            }
            assert!(
                Instant::now() < deadline,
                "{busy} busy processes measured as {:.2} foreign CPUs after 20 s",
                pool_core::foreign_cpus()
            );
            pool.run(|_, _| {});
            std::thread::sleep(Duration::from_millis(10));
        }
        // Up to 10 s of attempts: under TSan on the AMD EPYC host all of
        // 20 attempts of 50 ms missed the load or a parked worker once.
        let attempts_until = Instant::now() + Duration::from_secs(10);
        for attempt in 0.. {
            stage.set(format!("attempt {attempt}: letting the worker park"));
            // 25 lingers: parked, however the busy processes delay it.
            std::thread::sleep(Duration::from_millis(50));
            let before = pool.stats();
            if !seen() || before.parks == 0 {
                if Instant::now() < attempts_until {
                    // A dispatch takes a fresh sample, as in the wait above.
                    pool.run(|_, _| {});
                    continue;
                }
                if let Some(why) = overrun("at the end of 10 s of attempts") {
                    eprintln!("{why}");
                    return None;
                }
                let foreign = pool_core::foreign_cpus();
                panic!(
                    "in {attempt} attempts over 10 s the worker never parked ({} parks) with the \
                     load seen ({busy} busy processes read as {foreign:.2} foreign CPUs of {cpus})",
                    before.parks
                );
            }
            stage.set(format!("attempt {attempt}: {jobs} row jobs"));
            let (width, grains) = (AtomicUsize::new(0), AtomicUsize::new(0));
            for _ in 0..jobs {
                pool.run_optional_workers_for(1, expected, |i, n| {
                    width.fetch_max(n, Ordering::Relaxed);
                    grains.fetch_add(1, Ordering::Relaxed);
                    let began = Instant::now();
                    while i == 0 && began.elapsed() < busy_for {
                        std::hint::spin_loop();
                    }
                });
            }
            let stats = pool.stats().since(&before);
            return Some((width.into_inner(), grains.into_inner(), stats));
        }
        unreachable!("the attempts end in a return or a panic")
    })
}

/// One row job beside busy CPUs invited the parked worker: woken once,
/// and each participant that took its seat ran once.
#[cfg(target_os = "linux")]
fn assert_woke_the_parked_worker(width: usize, grains: usize, s: &pool_core::PoolStats) {
    assert_eq!(width, 2, "the parked worker was not invited: {s}");
    assert_eq!(s.unparks, 1, "{s}");
    assert_eq!(
        grains as u64,
        1 + s.worker_jobs(),
        "the caller and each worker that took its seat ran once: {s}"
    );
}

/// One row job beside busy CPUs ran on the caller alone: the parked
/// worker was neither invited nor woken.
#[cfg(target_os = "linux")]
fn assert_left_the_parked_worker_asleep(width: usize, grains: usize, s: &pool_core::PoolStats) {
    assert_eq!(grains, 1, "the caller ran it alone");
    assert_eq!(width, 1, "a parked worker was invited: {s}");
    assert_eq!(s.unparks, 0, "{s}");
}

#[cfg(target_os = "linux")]
#[test]
#[cfg_attr(miri, ignore = "Miri does not run other processes")]
fn with_no_cpu_left_by_other_processes_a_short_row_job_does_not_wake_a_parked_worker() {
    // Woken onto a busy CPU, a worker lands beside its caller and takes
    // the caller's time: a short job runs inline instead, and the worker
    // stays asleep.
    let Some((width, grains, s)) = one_row_job_beside_busy_cpus(
        "short_job_no_cpu_left",
        Load::NoCpuForTheCaller,
        std::time::Duration::ZERO,
        0,
    ) else {
        return;
    };
    assert_left_the_parked_worker_asleep(width, grains, &s);
}

#[cfg(target_os = "linux")]
#[test]
#[cfg_attr(miri, ignore = "Miri does not run other processes")]
fn with_no_cpu_left_for_a_worker_a_long_row_job_still_wakes_a_parked_worker() {
    // A job of a millisecond repays the wake: the worker gets a share of a
    // busy CPU for the rest of it (or is withdrawn if it gets none).
    let Some((width, grains, s)) = one_row_job_beside_busy_cpus(
        "long_job_no_cpu_for_a_worker",
        Load::NoCpuForAWorker,
        pool_core::WORTH_A_WAKE * 10,
        0,
    ) else {
        return;
    };
    assert_woke_the_parked_worker(width, grains, &s);
}

#[cfg(target_os = "linux")]
#[test]
#[cfg_attr(miri, ignore = "Miri does not run other processes")]
fn with_the_caller_itself_steadily_short_of_a_cpu_a_long_row_job_runs_on_the_caller_alone() {
    // Busy processes on every CPU, the caller's too, sample after sample:
    // a worker would only be one more thread to share them with. Waking
    // one for every long job cost the decode 5-12 % there.
    let Some((width, grains, s)) = one_row_job_beside_busy_cpus(
        "long_job_no_cpu_for_the_caller",
        Load::NoCpuForTheCaller,
        pool_core::WORTH_A_WAKE * 10,
        0,
    ) else {
        return;
    };
    assert_left_the_parked_worker_asleep(width, grains, &s);
}

#[cfg(target_os = "linux")]
#[test]
#[cfg_attr(miri, ignore = "Miri does not run other processes")]
fn with_the_caller_itself_steadily_short_of_a_cpu_no_row_job_invites_a_worker_however_long_it_runs()
{
    // 120 jobs of 300 µs on the caller: long enough for the wake trials
    // to score an epoch and try waking in the next, which the rule for a
    // steadily short caller must pre-empt. Where it did not, these jobs
    // dispatched from the trials' second epoch on, in every attempt. Up
    // to three attempts: under TSan on a loaded CI machine the 50 ms load
    // sample once dipped below "steadily short" during the jobs, and 6 of
    // 120 dispatched.
    let mut dipped = Vec::new();
    let (width, grains, s) = loop {
        let Some((width, grains, s)) = row_jobs_beside_busy_cpus(
            "row_jobs_no_cpu_for_the_caller",
            Load::NoCpuForTheCaller,
            pool_core::WORTH_A_WAKE * 10,
            0,
            120,
            std::time::Duration::from_micros(300),
        ) else {
            return;
        };
        if s.dispatches() == 0 || dipped.len() == 2 {
            break (width, grains, s);
        }
        dipped.push(s.to_string());
    };
    assert_eq!(
        grains, 120,
        "each job ran once, on the caller: {s} (earlier attempts: {dipped:?})"
    );
    assert_eq!(width, 1, "a worker was invited: {s}");
    assert_eq!(s.dispatches(), 0, "{s}");
    assert_eq!(s.jobs_inline, 120, "{s}");
    assert_eq!(s.unparks, 0, "{s}");
}

#[cfg(target_os = "linux")]
#[test]
#[cfg_attr(miri, ignore = "Miri does not run other processes")]
fn with_no_cpu_left_for_a_worker_a_niced_callers_long_row_job_still_wakes_a_parked_worker() {
    // At nice 10 beside normal-priority processes the worker gets a small
    // share of its CPU, but on Linux it ends its turns between jobs and
    // delays no join: its share is all gain (docs/design.md, "Yielding at
    // the end of a turn"). Elsewhere a niced caller's job runs inline.
    let Some((width, grains, s)) = one_row_job_beside_busy_cpus(
        "niced_long_job_no_cpu_for_a_worker",
        Load::NoCpuForAWorker,
        pool_core::WORTH_A_WAKE * 10,
        10,
    ) else {
        return;
    };
    assert_woke_the_parked_worker(width, grains, &s);
}
