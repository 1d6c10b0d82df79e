//! How long an idle worker spins: a fixed budget, or the adaptive policy.
//!
//! **Adaptive** (the default when `CMF_POOL_SPIN` is unset): each worker's
//! budget follows the gaps it observes between its jobs. It keeps the
//! largest gap seen over its last 128-256 jobs (two buckets of 128) and
//! spins for twice that, at least [`MIN_ADAPTIVE_SPIN`] and at most the
//! *linger* (default 2 ms). Time is the CPU's time-stamp counter (a few
//! cycles to read, calibrated to ns once per process), read once every 64
//! spins, not on every spin; the linger in spin iterations (calibrated) is a
//! second cap. A decode stream of
//! ~50 jobs a token keeps the gap between tokens in the window, so workers
//! stay hot across tokens; once the stream stops they park within the
//! linger; a sparse stream (gaps longer than the linger) teaches them to
//! park almost at once. On top of that:
//! - *foreign load*: when a caller's barrier wait is far longer than its
//!   own share (participants are not being scheduled), the pool is marked
//!   contended and spinners yield every iteration and park after
//!   [`MIN_ADAPTIVE_SPIN`], giving the CPU to the straggler;
//! - *process-wide spinner budget*: at most as many adaptive workers spin
//!   (or run) at once, over all pools, as this process has CPUs; a worker
//!   that cannot get a slot parks instead of spinning.
//!
//! **Fixed(n)** (`CMF_POOL_SPIN=n`, `Pool::with_spin`): spin `n` iterations,
//! then park; `0` parks at once. No spinner budget.

use std::time::Duration;

use crate::sync::process::{AtomicUsize as ProcessAtomicUsize, Ordering as ProcessOrdering};

/// The default linger of the adaptive policy.
pub const DEFAULT_LINGER: Duration = Duration::from_millis(2);

/// The adaptive budget's floor: enough to catch a job that follows within
/// a couple of microseconds.
pub const MIN_ADAPTIVE_SPIN: Duration = Duration::from_micros(2);

/// How an idle worker waits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpinPolicy {
    /// Spin this many iterations, then park (`0`: park at once).
    Fixed(usize),
    /// Spin as long as the observed gaps between jobs warrant, at most
    /// `linger`; back off under foreign load; respect the process-wide
    /// spinner budget.
    Adaptive {
        /// The longest a worker spins without work before it parks.
        linger: Duration,
    },
}

impl SpinPolicy {
    /// The adaptive policy with the default 2 ms linger.
    pub const fn adaptive() -> SpinPolicy {
        SpinPolicy::Adaptive {
            linger: DEFAULT_LINGER,
        }
    }
}

impl Default for SpinPolicy {
    fn default() -> Self {
        SpinPolicy::adaptive()
    }
}

/// Nanoseconds one spin iteration (`spin_loop` plus the ticket check)
/// takes on this machine, measured once per process.
pub fn spin_iteration_ns() -> f64 {
    #[cfg(not(loom))]
    {
        static NS: std::sync::OnceLock<f64> = std::sync::OnceLock::new();
        *NS.get_or_init(|| {
            let probe = ProcessAtomicUsize::new(0);
            let iterations = 20_000;
            let start = std::time::Instant::now();
            for _ in 0..iterations {
                std::hint::spin_loop();
                std::hint::black_box(probe.load(ProcessOrdering::Relaxed));
            }
            (start.elapsed().as_nanos() as f64 / iterations as f64).max(0.1)
        })
    }
    // Deterministic under loom: models must not depend on real time.
    #[cfg(loom)]
    {
        1000.0
    }
}

/// Clock ticks one spin iteration takes (calibrated once).
pub(crate) fn ticks_per_spin() -> f64 {
    #[cfg(not(loom))]
    {
        static RATE: std::sync::OnceLock<f64> = std::sync::OnceLock::new();
        *RATE.get_or_init(|| spin_iteration_ns() / crate::clock::ns_per_tick())
    }
    #[cfg(loom)]
    {
        0.0
    }
}

/// `linger` in spin iterations.
pub(crate) fn linger_spins(linger: Duration) -> usize {
    ((linger.as_nanos() as f64 / spin_iteration_ns()) as usize).max(1)
}

/// One worker's view of its recent gaps (adaptive mode).
pub(crate) struct GapWindow {
    /// Largest gap of the current and the previous bucket, in spins.
    bucket_max: [usize; 2],
    bucket_jobs: u32,
}

/// Jobs per bucket of the gap window.
const BUCKET_JOBS: u32 = 128;

impl GapWindow {
    pub(crate) fn new() -> Self {
        GapWindow {
            bucket_max: [usize::MAX; 2],
            bucket_jobs: 0,
        }
    }

    /// Records a gap (gaps longer than the linger are idleness, not work,
    /// and count as 0). Any unit, the same as `linger`'s.
    pub(crate) fn record(&mut self, gap: u64, linger: u64) {
        let gap = if gap > linger { 0 } else { gap as usize };
        if self.bucket_max[0] == usize::MAX {
            // The first job: forget the "no data yet" marker.
            self.bucket_max = [0, 0];
        }
        self.bucket_max[0] = self.bucket_max[0].max(gap);
        self.bucket_jobs += 1;
        if self.bucket_jobs == BUCKET_JOBS {
            self.bucket_max = [0, self.bucket_max[0]];
            self.bucket_jobs = 0;
        }
    }

    /// The budget: twice the largest recent gap, within `[floor, linger]`;
    /// the whole linger before any data.
    pub(crate) fn budget(&self, linger: u64, floor: u64) -> u64 {
        let largest = self.bucket_max[0].max(self.bucket_max[1]);
        if largest == usize::MAX {
            return linger;
        }
        (largest as u64)
            .saturating_mul(2)
            .clamp(floor.min(linger), linger)
    }
}

/// Adaptive workers spinning or running now, over every pool.
static SPINNERS: ProcessAtomicUsize = ProcessAtomicUsize::new(0);
/// The most ever observed at once (for tests and `pool bench`).
static SPINNERS_HIGH_WATER: ProcessAtomicUsize = ProcessAtomicUsize::new(0);

/// The process-wide limit: the CPUs this process may use.
fn spinner_limit() -> usize {
    #[cfg(not(loom))]
    {
        static LIMIT: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
        *LIMIT.get_or_init(pool_topo::usable_cpus)
    }
    #[cfg(loom)]
    {
        LOOM_SPINNER_LIMIT.load(ProcessOrdering::Relaxed)
    }
}

/// The spinner limit under loom: no limit unless a model sets one (models
/// that do live in a test binary of their own, so no other model sees it).
#[cfg(loom)]
pub(crate) static LOOM_SPINNER_LIMIT: ProcessAtomicUsize = ProcessAtomicUsize::new(usize::MAX);

/// Takes a spinner slot if one is free. A compare-exchange loop, so the
/// count never exceeds the limit even transiently; it runs only when a
/// worker starts spinning after a park, never per job.
pub(crate) fn try_acquire_spinner() -> bool {
    let limit = spinner_limit();
    let mut current = SPINNERS.load(ProcessOrdering::Relaxed);
    loop {
        if current >= limit {
            return false;
        }
        match SPINNERS.compare_exchange_weak(
            current,
            current + 1,
            ProcessOrdering::Relaxed,
            ProcessOrdering::Relaxed,
        ) {
            Ok(_) => {
                SPINNERS_HIGH_WATER.fetch_max(current + 1, ProcessOrdering::Relaxed);
                return true;
            }
            Err(now) => current = now,
        }
    }
}

/// In a forked child: the parent's spinners do not exist there.
#[cfg_attr(any(loom, miri, not(unix)), allow(dead_code))]
pub(crate) fn reset_spinners_after_fork() {
    SPINNERS.store(0, ProcessOrdering::Relaxed);
}

/// Gives a spinner slot back.
pub(crate) fn release_spinner() {
    SPINNERS.fetch_sub(1, ProcessOrdering::Relaxed);
}

/// Adaptive workers holding a spinner slot now, over all pools.
pub fn spinning_workers() -> usize {
    SPINNERS.load(ProcessOrdering::Relaxed)
}

/// The most adaptive workers that ever held spinner slots at once; never
/// more than the process's usable CPUs.
pub fn spinning_workers_high_water() -> usize {
    SPINNERS_HIGH_WATER.load(ProcessOrdering::Relaxed)
}
