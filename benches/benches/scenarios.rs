//! The deployment-settings matrix as a criterion group: the decode workload
//! (one token per iteration) on the default pool, a fixed-budget pool,
//! rayon (inside `install` and per matvec) and serial, inside each setting
//! of `pool_benches::scenarios::SETTINGS`. A setting that cannot be built
//! here (no cgroup without root) is skipped with its reason. The same
//! settings, with the pool's own counters, are `pool bench --scenarios`.

use std::time::Duration;

use criterion::{BenchmarkId, Criterion};
use pool_benches::scenarios::{neighbour_main_if_requested, Exec, Scenario, SETTINGS};
use pool_matvec::decode::{DecodeConfig, DecodeModel, WeightFormat};

fn scenarios(c: &mut Criterion) {
    let model = DecodeModel::random(DecodeConfig::default(), WeightFormat::F32, 7);
    let mut group = c.benchmark_group("scenarios");
    group
        .sample_size(10)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(2));
    for (number, name) in SETTINGS {
        let mut scenario = match Scenario::enter(number) {
            Ok(scenario) => scenario,
            Err(reason) => {
                eprintln!("scenarios: setting {number} ({name}) skipped: {reason}");
                continue;
            }
        };
        for &exec in Exec::of_setting(number) {
            group.bench_function(
                BenchmarkId::new(format!("s{number:02}"), exec.name()),
                |b| {
                    b.iter_custom(|iters| {
                        scenario.time_tokens(exec, &model, iters as usize) * iters as u32
                    })
                },
            );
        }
    }
    group.finish();
}

fn main() {
    neighbour_main_if_requested();
    let mut criterion = Criterion::default().configure_from_args();
    scenarios(&mut criterion);
    criterion.final_summary();
}
