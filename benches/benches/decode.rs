//! Tokens per second of the synthetic decode step (dim 768, hidden 2048,
//! 12 layers, vocab 32000): serial vs rayon vs the pool, f32, Q8_0 and Q4_0.

// criterion_group! generates an undocumented function.
#![allow(missing_docs)]

use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use pool_benches::RayonExecutor;
use pool_core::{Pool, SpinPolicy};
use pool_matvec::decode::{DecodeConfig, DecodeModel, Serial, WeightFormat};

fn decode(c: &mut Criterion) {
    let cpus = pool_topo::usable_cpus();
    let pool = Pool::with_spin(cpus.saturating_sub(1).max(1), 20_000);
    let rayon = RayonExecutor::new(cpus);
    for format in WeightFormat::ALL {
        let model = DecodeModel::random(DecodeConfig::default(), format, 42);
        let mut group = c.benchmark_group(format!("decode_token_{format:?}"));
        group
            .sample_size(10)
            .measurement_time(Duration::from_secs(4));
        group.throughput(Throughput::Elements(1));
        group.bench_function("serial", |b| b.iter(|| model.decode(&Serial, 1)));
        group.bench_function("rayon", |b| b.iter(|| model.decode(&rayon, 1)));
        group.bench_function("pool", |b| b.iter(|| model.decode(&pool, 1)));
        group.finish();
    }
}

/// The decode workload under each spin policy: the adaptive policy should
/// be within a few percent of the best fixed budget.
fn spin_policies(c: &mut Criterion) {
    let workers = pool_topo::usable_cpus().saturating_sub(1).max(1);
    let model = DecodeModel::random(DecodeConfig::default(), WeightFormat::F32, 42);
    let mut group = c.benchmark_group("decode_token_spin_policy");
    group
        .sample_size(10)
        .measurement_time(Duration::from_secs(3));
    let policies = [0usize, 500, 4000, 20000, 200000]
        .map(SpinPolicy::Fixed)
        .into_iter()
        .chain([SpinPolicy::adaptive()]);
    for policy in policies {
        let pool = Pool::builder()
            .workers(workers)
            .spin_policy(policy)
            .build()
            .unwrap();
        let name = match policy {
            SpinPolicy::Fixed(n) => format!("fixed_{n}"),
            SpinPolicy::Adaptive { .. } => "adaptive".to_owned(),
        };
        group.bench_function(name, |b| b.iter(|| model.decode(&pool, 1)));
    }
    group.finish();
}

criterion_group!(benches, decode, spin_policies);
criterion_main!(benches);
