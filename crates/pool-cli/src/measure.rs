//! What every measuring subcommand shares: a summary of repeated samples,
//! tokens/s of an executor, the printed line, and whether other processes
//! spoiled the run (a figure taken beside them is not a result).

use std::time::Instant;

use pool_benches::Stats;
use pool_matvec::decode::{DecodeExecutor, DecodeModel};
use serde::Serialize;

/// Median, extremes and count of repeated samples.
#[derive(Serialize, Clone, Copy)]
pub(crate) struct Summary {
    pub(crate) median: f64,
    min: f64,
    max: f64,
    samples: usize,
}

impl From<Stats> for Summary {
    fn from(s: Stats) -> Self {
        Summary {
            median: s.median,
            min: s.min,
            max: s.max,
            samples: s.samples,
        }
    }
}

pub(crate) fn tokens_per_s(
    model: &DecodeModel,
    exec: &dyn DecodeExecutor,
    tokens: usize,
) -> Summary {
    model.decode(exec, 1); // warm-up
    let runs = (0..tokens)
        .map(|_| {
            let start = Instant::now();
            std::hint::black_box(model.decode(exec, 1));
            1.0 / start.elapsed().as_secs_f64()
        })
        .collect();
    Stats::of(runs).into()
}

pub(crate) fn line(name: &str, s: &Summary, unit: &str) {
    println!(
        "  {name:<34} {:>10.1} {unit:<9} (min {:.1}, max {:.1}, n={})",
        s.median, s.min, s.max, s.samples
    );
}

/// How much CPU other processes used during a measurement (`/proc/stat`
/// less this process's own time), in every report that measures speed.
#[derive(Serialize, Clone, Copy, Debug)]
pub(crate) struct Contamination {
    /// CPUs other processes kept busy on average.
    pub(crate) foreign_cpus: f64,
    /// That as a share of the usable CPUs.
    pub(crate) share_of_cpus: f64,
    /// Above `pool_topo::CONTAMINATION_SHARE` (5 %): the figures are not
    /// results.
    pub(crate) contaminated: bool,
}

/// Runs `f` and measures the other processes' CPU use meanwhile (`None`
/// where it cannot be read).
pub(crate) fn watched_for_neighbours<T>(f: impl FnOnce() -> T) -> (T, Option<Contamination>) {
    let meter = pool_topo::CpuMeter::start();
    let value = f();
    let contamination = meter.and_then(|m| m.foreign()).map(|f| Contamination {
        foreign_cpus: f.cpus,
        share_of_cpus: f.share,
        contaminated: f.contaminated(),
    });
    (value, contamination)
}

/// The text warning for a contaminated run (stderr), if it was.
pub(crate) fn warn_if_contaminated(what: &str, c: Option<Contamination>) {
    if let Some(c) = c.filter(|c| c.contaminated) {
        eprintln!(
            "{what}: warning: other processes used {:.2} CPUs ({:.0} % of the usable ones) \
             during this run: these figures are not results; measure again on a quiet machine",
            c.foreign_cpus,
            100.0 * c.share_of_cpus
        );
    }
}

/// A share of a bound the machine cannot exceed: `Some(problem)` when
/// above 100 % (beyond a 2 % rounding margin), so that it is reported as
/// a measurement problem, never as a result.
pub(crate) fn impossible_share(what: &str, share: f64) -> Option<String> {
    (share > 1.02).then(|| {
        format!(
            "{what} reached {:.0} % of its bound: a measurement problem (the bound was measured \
             low, or the run was disturbed), not a result",
            100.0 * share
        )
    })
}
