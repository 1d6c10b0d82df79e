//! The peers suite's constructs under criterion, at 2 threads: this pool
//! beside rayon, OpenMP, the minimal spin pool and (with `--features
//! peers`) candle's BarrierPool, fork_union and chili. `pool bench --peers`
//! runs the full suite (2, 3 and 4 threads, overheads, goals).
//! candle's pool takes its width from `CANDLE_NUM_THREADS` (set to 2 here
//! before its first use).

// criterion_group! generates an undocumented function.
#![allow(missing_docs)]

use criterion::{criterion_group, criterion_main, Criterion};
use pool_benches::peers::{Construct, PeerKind, Work};

fn peers(c: &mut Criterion) {
    // Before any thread that could read the environment exists.
    std::env::set_var("CANDLE_NUM_THREADS", "2");
    let work = Work::new();
    for construct in Construct::ALL {
        let mut group = c.benchmark_group(format!("peers/{}", construct.name()));
        for kind in PeerKind::ALL {
            let Ok(mut peer) = kind.build(2) else {
                continue;
            };
            if !peer.supports(construct) {
                continue;
            }
            group.bench_function(kind.name(), |b| b.iter(|| work.once(&mut *peer, construct)));
        }
        group.finish();
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(20)
        .warm_up_time(std::time::Duration::from_millis(300))
        .measurement_time(std::time::Duration::from_secs(1));
    targets = peers
}
criterion_main!(benches);
