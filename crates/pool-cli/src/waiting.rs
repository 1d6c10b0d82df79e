//! The waiting section of `pool bench`: the adaptive spin policy against
//! fixed budgets, idle CPU burn, oversubscription and a competing process.

use std::process::{Child, Command};
use std::time::{Duration, Instant};

use pool_benches::{cpu_clock, RayonExecutor};
use pool_core::{Pool, SpinPolicy};
use pool_matvec::decode::{DecodeExecutor, DecodeModel};
use serde::Serialize;

use crate::measure::{tokens_per_s, Summary};

/// Fixed budgets compared with the adaptive policy.
pub(crate) const FIXED_BUDGETS: [usize; 5] = [0, 500, 4000, 20000, 200000];

#[derive(Serialize)]
pub(crate) struct PolicyPoint {
    policy: String,
    tokens_per_s: Summary,
}

#[derive(Serialize)]
pub(crate) struct IdleBurn {
    executor: String,
    cpu_ms: f64,
}

/// The JSON object `waiting` of `pool bench --json` (docs/cli.md).
#[derive(Serialize)]
pub(crate) struct Waiting {
    policies: Vec<PolicyPoint>,
    adaptive_vs_best_fixed: f64,
    idle_window_ms: f64,
    cpu_ms_after_last_token: Vec<IdleBurn>,
    oversubscribed_workers: usize,
    oversubscribed_tokens_per_s: Summary,
    oversubscribed_vs_fitting: f64,
    competing_process_cpu: usize,
    competing: Vec<PolicyPoint>,
    /// Beside the busy process: the adaptive policy over the best fixed
    /// budget (interleaved samples).
    competing_adaptive_vs_best_fixed: f64,
}

fn name(policy: SpinPolicy) -> String {
    match policy {
        SpinPolicy::Fixed(n) => format!("fixed {n}"),
        SpinPolicy::Adaptive { linger } => {
            format!("adaptive ({} ms linger)", linger.as_secs_f64() * 1e3)
        }
    }
}

fn pool_with(workers: usize, policy: SpinPolicy) -> Pool {
    Pool::builder()
        .workers(workers)
        .spin_policy(policy)
        .build()
        .expect("spawn the pool's workers")
}

/// CPU burned in `window` after the last token on `exec` by every thread
/// of the process but the caller (which sleeps): the executor's idle
/// threads, read on each thread's own CPU-time clock. Process-wide CPU
/// time (`getrusage`) lags a running thread by up to a scheduler tick and
/// would count the last token's rows into the window (see
/// `pool_benches::cpu_clock`).
fn burn_after_last_token(model: &DecodeModel, exec: &dyn DecodeExecutor, window: Duration) -> f64 {
    // The threads first: listing them takes longer than a short spin.
    let threads = cpu_clock::other_threads();
    model.decode(exec, 2);
    let before = cpu_clock::threads_cpu_ms(&threads);
    std::thread::sleep(window);
    cpu_clock::threads_cpu_ms(&threads) - before
}

/// A busy process pinned to `cpu`, for `seconds` at most.
fn competing_process(cpu: usize, seconds: u64) -> Option<Child> {
    let exe = std::env::current_exe().ok()?;
    Command::new(exe)
        .args([
            "burn",
            "--cpu",
            &cpu.to_string(),
            "--seconds",
            &seconds.to_string(),
        ])
        .spawn()
        .ok()
}

/// Spins on `cpu` for `seconds` (the hidden `pool burn` subcommand).
pub(crate) fn burn(cpu: usize, seconds: u64) {
    let _ = pool_topo::pin_current_thread(&[cpu]);
    let end = Instant::now() + Duration::from_secs(seconds);
    while Instant::now() < end {
        for _ in 0..1000 {
            std::hint::spin_loop();
        }
    }
}

pub(crate) fn measure(model: &DecodeModel, workers: usize, tokens: usize, quick: bool) -> Waiting {
    let mut policies: Vec<SpinPolicy> = FIXED_BUDGETS
        .iter()
        .map(|&n| SpinPolicy::Fixed(n))
        .collect();
    policies.push(SpinPolicy::adaptive());
    let points: Vec<PolicyPoint> = policies
        .iter()
        .map(|&policy| {
            let pool = pool_with(workers, policy);
            PolicyPoint {
                policy: name(policy),
                tokens_per_s: tokens_per_s(model, &pool, tokens),
            }
        })
        .collect();
    let best_fixed = points[..FIXED_BUDGETS.len()]
        .iter()
        .map(|p| p.tokens_per_s.median)
        .fold(0.0, f64::max);
    let adaptive_vs_best_fixed = points[FIXED_BUDGETS.len()].tokens_per_s.median / best_fixed;

    let window = Duration::from_millis(if quick { 250 } else { 1000 });
    let mut cpu_ms_after_last_token = Vec::new();
    for policy in [
        SpinPolicy::adaptive(),
        SpinPolicy::Fixed(4000),
        SpinPolicy::Fixed(200_000),
    ] {
        let pool = pool_with(workers, policy);
        cpu_ms_after_last_token.push(IdleBurn {
            executor: format!("pool, {}", name(policy)),
            cpu_ms: burn_after_last_token(model, &pool, window),
        });
    }
    let rayon = RayonExecutor::new(workers + 1);
    cpu_ms_after_last_token.push(IdleBurn {
        executor: "rayon".into(),
        cpu_ms: burn_after_last_token(model, &rayon, window),
    });
    drop(rayon);

    let cpus = pool_topo::usable_cpus();
    let oversubscribed_workers = cpus * 4;
    let fitting = tokens_per_s(model, &pool_with(workers, SpinPolicy::adaptive()), tokens);
    let oversubscribed_tokens_per_s = tokens_per_s(
        model,
        &pool_with(oversubscribed_workers, SpinPolicy::adaptive()),
        tokens,
    );

    let competing_process_cpu = *pool_topo::process_affinity_cpus().last().unwrap_or(&0);
    let seconds = if quick { 5 } else { 20 };
    let mut child = competing_process(competing_process_cpu, seconds);
    std::thread::sleep(Duration::from_millis(100));
    // Interleaved: one sample of each policy in turn, with a pause longer
    // than any policy's spinning between them, so drift (and the busy
    // process's own phases) hit all alike and no pool's lingering workers
    // run during another's sample.
    let competing_policies = [
        SpinPolicy::adaptive(),
        SpinPolicy::Fixed(4000),
        SpinPolicy::Fixed(20_000),
        SpinPolicy::Fixed(200_000),
    ];
    let pools: Vec<Pool> = competing_policies
        .iter()
        .map(|&policy| pool_with(workers, policy))
        .collect();
    let samples = if quick { 7 } else { 15 };
    let mut per_policy: Vec<Vec<f64>> = vec![Vec::new(); pools.len()];
    for _ in 0..samples {
        for (pool, runs) in pools.iter().zip(&mut per_policy) {
            std::thread::sleep(Duration::from_millis(10));
            let start = Instant::now();
            std::hint::black_box(model.decode(pool, 2));
            runs.push(2.0 / start.elapsed().as_secs_f64());
        }
    }
    drop(pools);
    let competing: Vec<PolicyPoint> = competing_policies
        .iter()
        .zip(per_policy)
        .map(|(&policy, runs)| PolicyPoint {
            policy: name(policy),
            tokens_per_s: pool_benches::Stats::of(runs).into(),
        })
        .collect();
    let best_fixed_competing = competing[1..]
        .iter()
        .map(|p| p.tokens_per_s.median)
        .fold(0.0, f64::max);
    let competing_adaptive_vs_best_fixed = competing[0].tokens_per_s.median / best_fixed_competing;
    if let Some(child) = child.as_mut() {
        let _ = child.kill();
        let _ = child.wait();
    }
    Waiting {
        policies: points,
        adaptive_vs_best_fixed,
        idle_window_ms: window.as_secs_f64() * 1e3,
        cpu_ms_after_last_token,
        oversubscribed_workers,
        oversubscribed_vs_fitting: oversubscribed_tokens_per_s.median / fitting.median,
        oversubscribed_tokens_per_s,
        competing_process_cpu,
        competing,
        competing_adaptive_vs_best_fixed,
    }
}

pub(crate) fn print(w: &Waiting) {
    println!("waiting: spin policies on the decode workload (medians)");
    for p in &w.policies {
        println!(
            "  {:<34} {:>10.1} tokens/s",
            p.policy, p.tokens_per_s.median
        );
    }
    println!("  adaptive / best fixed: {:.3}", w.adaptive_vs_best_fixed);
    println!(
        "  CPU burned in the {} ms after the last token:",
        w.idle_window_ms
    );
    for b in &w.cpu_ms_after_last_token {
        println!("    {:<32} {:>8.2} ms", b.executor, b.cpu_ms);
    }
    println!(
        "  oversubscribed ({} workers): {:.1} tokens/s, {:.2}x the fitting pool",
        w.oversubscribed_workers, w.oversubscribed_tokens_per_s.median, w.oversubscribed_vs_fitting
    );
    println!(
        "  with a busy process on CPU {} (interleaved samples):",
        w.competing_process_cpu
    );
    for p in &w.competing {
        println!(
            "    {:<32} {:>8.1} tokens/s",
            p.policy, p.tokens_per_s.median
        );
    }
    println!(
        "    adaptive / best fixed: {:.3}",
        w.competing_adaptive_vs_best_fixed
    );
}
