//! The soak: random mixes of every kind of job for a bounded time, every
//! closure entry and row counted. Ignored by default; CI runs it with
//! `SOAK_SECS=60 cargo test --release -p pool-matvec --test soak -- --ignored --nocapture`.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use pool_core::Pool;
use pool_matvec::decode::XorShift;
use pool_matvec::{RowFn, RowParallel};
use testkit::watchdog;

fn new_pool(rng: &mut XorShift) -> Pool {
    let workers = (rng.next_u64() % 9) as usize;
    let spin = [0, 100, 4000, 1 << 20][(rng.next_u64() % 4) as usize];
    Pool::with_spin(workers, spin)
}

/// One random job on `pool`; returns how many jobs it ran.
fn random_job(pool: &Arc<Pool>, rng: &mut XorShift) -> usize {
    let n = pool.n_workers() + 1;
    match rng.next_u64() % 7 {
        0 => {
            let entries = AtomicUsize::new(0);
            pool.run(|_, _| {
                entries.fetch_add(1, Ordering::Relaxed);
            });
            assert_eq!(entries.into_inner(), n, "run: every participant once");
            1
        }
        1 => {
            let k = (rng.next_u64() % 10) as usize;
            let entries = AtomicUsize::new(0);
            pool.run_limited(k, |_, _| {
                entries.fetch_add(1, Ordering::Relaxed);
            });
            assert_eq!(entries.into_inner(), k.min(n - 1) + 1, "run_limited({k})");
            1
        }
        2 => {
            let rows = (rng.next_u64() % 5000) as usize;
            let covered = AtomicUsize::new(0);
            pool.run_rows(rows, &|s, e| {
                covered.fetch_add(e - s, Ordering::Relaxed);
            });
            assert_eq!(covered.into_inner(), rows, "run_rows({rows})");
            1
        }
        3 => {
            let sizes: Vec<usize> = (0..1 + rng.next_u64() % 4)
                .map(|_| (rng.next_u64() % 900) as usize)
                .collect();
            let counters: Vec<AtomicUsize> = sizes.iter().map(|_| AtomicUsize::new(0)).collect();
            let callbacks: Vec<Box<dyn Fn(usize, usize) + Sync + '_>> = counters
                .iter()
                .zip(&sizes)
                .map(|(c, &rows)| {
                    Box::new(move |s: usize, e: usize| {
                        assert!(s < e && e <= rows);
                        c.fetch_add(e - s, Ordering::Relaxed);
                    }) as Box<dyn Fn(usize, usize) + Sync + '_>
                })
                .collect();
            let parts: Vec<(usize, &RowFn<'_>)> = sizes
                .iter()
                .zip(&callbacks)
                .map(|(&r, f)| (r, &**f))
                .collect();
            pool.run_many(&parts);
            for (c, &rows) in counters.iter().zip(&sizes) {
                assert_eq!(
                    c.load(Ordering::Relaxed),
                    rows,
                    "run_many part of {rows} rows"
                );
            }
            1
        }
        4 => {
            let victim = (rng.next_u64() as usize) % n;
            let result = catch_unwind(AssertUnwindSafe(|| {
                pool.run(|idx, _| {
                    if idx == victim {
                        panic!("soak: participant {idx} fails");
                    }
                })
            }));
            assert!(result.is_err(), "the panic must be re-raised");
            1
        }
        5 => {
            let callers: Vec<_> = (0..2)
                .map(|_| {
                    let pool = pool.clone();
                    std::thread::spawn(move || {
                        for _ in 0..20 {
                            let entries = AtomicUsize::new(0);
                            pool.run(|_, _| {
                                entries.fetch_add(1, Ordering::Relaxed);
                            });
                            assert_eq!(entries.into_inner(), pool.n_workers() + 1);
                        }
                    })
                })
                .collect();
            for c in callers {
                c.join().expect("concurrent caller");
            }
            40
        }
        _ => {
            pool.set_spin_budget([0, 500, 4000][(rng.next_u64() % 3) as usize]);
            0
        }
    }
}

#[test]
#[ignore = "a bounded stress run for CI: SOAK_SECS (default 60)"]
fn soak_random_jobs_lose_nothing_and_never_hang() {
    let secs: u64 = std::env::var("SOAK_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(60);
    let jobs = watchdog("soak", Duration::from_secs(secs + 120), move |stage| {
        // Silence the expected panic messages of the panicking jobs.
        std::panic::set_hook(Box::new(|_| {}));
        let deadline = Instant::now() + Duration::from_secs(secs);
        let mut rng = XorShift(0x5eed_1234_abcd_0001);
        let mut jobs = 0usize;
        let mut pools = 0usize;
        while Instant::now() < deadline {
            let pool = Arc::new(new_pool(&mut rng));
            pools += 1;
            stage.set(format!(
                "pool {pools} ({} workers, spin {}), {jobs} jobs so far",
                pool.n_workers(),
                pool.spin_budget()
            ));
            for _ in 0..200 {
                jobs += random_job(&pool, &mut rng);
            }
        }
        let _ = std::panic::take_hook();
        (jobs, pools)
    });
    let secs = secs.max(1) as f64;
    println!(
        "soak: {} jobs on {} pools in {secs} s: {:.0} jobs/s",
        jobs.0,
        jobs.1,
        jobs.0 as f64 / secs
    );
}
