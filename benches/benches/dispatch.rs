//! Empty-job fork-join latency: the pool vs the minimal spin pool, a cache
//! line ping-pong, rayon (`broadcast` from inside and outside its pool,
//! `join`), and spawn-per-job; hot, after an idle gap, and oversubscribed;
//! plus two callers whose jobs run inline and the 20,000-job straggler
//! workload. Ratios are read off one run.

// criterion_group! generates an undocumented function.
#![allow(missing_docs)]

use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use pool_benches::{PingPong, SpinPool};
use pool_core::Pool;

fn hot_fork_join(c: &mut Criterion) {
    let mut group = c.benchmark_group("fork_join_hot_1_worker");
    group
        .measurement_time(Duration::from_secs(2))
        .warm_up_time(Duration::from_millis(500));
    let mut ping = PingPong::new();
    group.bench_function("ping_pong_round_trip", |b| b.iter(|| ping.round_trip()));
    drop(ping);
    let spin = SpinPool::new();
    group.bench_function("minimal_spin_pool", |b| b.iter(|| spin.run(|_, _| {})));
    drop(spin);
    let pool = Pool::with_spin(1, 1 << 20);
    group.bench_function("pool_run", |b| b.iter(|| pool.run(|_, _| {})));
    drop(pool);
    let rayon = rayon::ThreadPoolBuilder::new()
        .num_threads(2)
        .build()
        .unwrap();
    group.bench_function("rayon_broadcast_outside", |b| {
        b.iter(|| rayon.broadcast(|_| {}))
    });
    group.bench_function("rayon_broadcast_inside", |b| {
        rayon.install(|| b.iter(|| rayon::broadcast(|_| {})))
    });
    group.bench_function("rayon_join_inside", |b| {
        rayon.install(|| b.iter(|| rayon::join(|| {}, || {})))
    });
    drop(rayon);
    group.bench_function("thread_scope_spawn_per_job", |b| {
        b.iter(|| {
            std::thread::scope(|s| {
                s.spawn(|| {});
            })
        })
    });
    group.finish();
}

fn oversubscribed_fork_join(c: &mut Criterion) {
    let mut group = c.benchmark_group("fork_join_oversubscribed");
    group
        .measurement_time(Duration::from_secs(2))
        .warm_up_time(Duration::from_millis(500));
    let cpus = pool_topo::usable_cpus();
    for workers in [cpus, cpus * 4] {
        let pool = Pool::with_spin(workers, 4000);
        group.bench_with_input(BenchmarkId::new("pool_run", workers), &workers, |b, _| {
            b.iter(|| pool.run(|_, _| {}))
        });
        group.bench_with_input(
            BenchmarkId::new("pool_run_limited_1", workers),
            &workers,
            |b, _| b.iter(|| pool.run_limited(1, |_, _| {})),
        );
        drop(pool);
        let rayon = rayon::ThreadPoolBuilder::new()
            .num_threads(workers + 1)
            .build()
            .unwrap();
        group.bench_with_input(
            BenchmarkId::new("rayon_broadcast_inside", workers),
            &workers,
            |b, _| rayon.install(|| b.iter(|| rayon::broadcast(|_| {}))),
        );
    }
    group.finish();
}

fn after_idle_gap(c: &mut Criterion) {
    let mut group = c.benchmark_group("fork_join_after_idle_gap_2ms");
    group
        .sample_size(20)
        .measurement_time(Duration::from_secs(3));
    let gap = Duration::from_millis(2);
    let pool = Pool::with_spin(1, 4000);
    group.bench_function("pool_run", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                std::thread::sleep(gap);
                let start = Instant::now();
                pool.run(|_, _| {});
                total += start.elapsed();
            }
            total
        })
    });
    let rayon = rayon::ThreadPoolBuilder::new()
        .num_threads(2)
        .build()
        .unwrap();
    group.bench_function("rayon_broadcast_outside", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                std::thread::sleep(gap);
                let start = Instant::now();
                rayon.broadcast(|_| {});
                total += start.elapsed();
            }
            total
        })
    });
    group.finish();
}

fn straggler_workload(c: &mut Criterion) {
    let mut group = c.benchmark_group("straggler_20000_jobs");
    group
        .sample_size(10)
        .measurement_time(Duration::from_secs(10));
    let workers = (pool_topo::usable_cpus() * 4).clamp(8, 64);
    let pool = Pool::with_spin(workers, 4000);
    group.bench_function(
        BenchmarkId::new("alternating_limited_and_full", workers),
        |b| {
            b.iter(|| {
                for job in 0..20_000 {
                    if job % 2 == 0 {
                        pool.run_limited(1, |_, _| {});
                    } else {
                        pool.run(|_, _| {});
                    }
                }
            })
        },
    );
    group.finish();
}

thread_local!(static DEVICE: std::cell::Cell<u32> = const { std::cell::Cell::new(0) });

/// Dispatch latency with no registered context (must equal plain
/// `pool_run`: zero cost when unused) and with one thread-local context.
fn job_context(c: &mut Criterion) {
    let mut group = c.benchmark_group("fork_join_context");
    group
        .measurement_time(Duration::from_secs(2))
        .warm_up_time(Duration::from_millis(500));
    let plain = Pool::with_spin(1, 1 << 20);
    group.bench_function("no_context", |b| b.iter(|| plain.run(|_, _| {})));
    drop(plain);
    let with = Pool::builder()
        .workers(1)
        .spin(1 << 20)
        .context(pool_core::ThreadLocalContext::new(&DEVICE))
        .build()
        .unwrap();
    group.bench_function("one_thread_local_context", |b| {
        b.iter(|| with.run(|_, _| {}))
    });
    group.finish();
}

/// Two threads, each running empty withdrawable jobs back to back, on one
/// shared pool and on a pool each: with two callers on 2 CPUs every job
/// runs inline, so this is the pool's own path around an inline job (the
/// two-caller decode settings). Per job, as each thread sees it; the
/// shared pool's inline count once cost 125 ns of the 36 here (one line
/// both callers wrote, `stats.rs`).
fn two_callers_inline(c: &mut Criterion) {
    let mut group = c.benchmark_group("two_callers_inline_empty_job");
    group
        .sample_size(20)
        .measurement_time(Duration::from_secs(3));
    let expected = Duration::from_micros(20);
    let shared = Pool::builder().workers(1).build().unwrap();
    let own = [
        Pool::builder().workers(1).build().unwrap(),
        Pool::builder().workers(1).build().unwrap(),
    ];
    let jobs = |pools: [&Pool; 2], iters: u64| {
        let start = std::sync::Barrier::new(2);
        let per_thread = std::thread::scope(|scope| {
            let threads = pools.map(|pool| {
                let start = &start;
                scope.spawn(move || {
                    // Both callers registered before the clock starts.
                    for _ in 0..1000 {
                        pool.run_optional_workers_for(1, expected, |_, _| {});
                    }
                    start.wait();
                    let clock = Instant::now();
                    for _ in 0..iters {
                        pool.run_optional_workers_for(1, expected, |_, _| {});
                    }
                    clock.elapsed()
                })
            });
            threads.map(|t| t.join().expect("a caller thread panicked"))
        });
        per_thread[0].max(per_thread[1])
    };
    group.bench_function("one_shared_pool", |b| {
        b.iter_custom(|iters| jobs([&shared, &shared], iters))
    });
    group.bench_function("a_pool_each", |b| {
        b.iter_custom(|iters| jobs([&own[0], &own[1]], iters))
    });
    group.finish();
}

criterion_group!(
    benches,
    hot_fork_join,
    job_context,
    oversubscribed_fork_join,
    after_idle_gap,
    two_callers_inline,
    straggler_workload
);
criterion_main!(benches);
