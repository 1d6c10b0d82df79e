//! Medians of repeated runs, with spread.

use std::time::Instant;

/// Summary of repeated samples (any unit).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Stats {
    /// The median sample.
    pub median: f64,
    /// The smallest sample.
    pub min: f64,
    /// The largest sample.
    pub max: f64,
    /// How many samples.
    pub samples: usize,
}

impl Stats {
    /// Summarises `samples` (must not be empty).
    pub fn of(mut samples: Vec<f64>) -> Stats {
        assert!(!samples.is_empty(), "Stats::of needs at least one sample");
        samples.sort_by(f64::total_cmp);
        let n = samples.len();
        let median = if n % 2 == 1 {
            samples[n / 2]
        } else {
            (samples[n / 2 - 1] + samples[n / 2]) / 2.0
        };
        Stats {
            median,
            min: samples[0],
            max: samples[n - 1],
            samples: n,
        }
    }

    /// Spread as a fraction of the median: (max - min) / median.
    pub fn spread(&self) -> f64 {
        if self.median == 0.0 {
            0.0
        } else {
            (self.max - self.min) / self.median
        }
    }
}

/// Nanoseconds per call of `f`, one sample per batch of `iters` calls,
/// `samples` batches.
pub fn time_per_iter(samples: usize, iters: usize, mut f: impl FnMut()) -> Stats {
    let iters = iters.max(1);
    let runs = (0..samples.max(1))
        .map(|_| {
            let start = Instant::now();
            for _ in 0..iters {
                f();
            }
            start.elapsed().as_nanos() as f64 / iters as f64
        })
        .collect();
    Stats::of(runs)
}
