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
//! - *process-wide spinner budget* (`spinners.rs`): adaptive workers that
//!   spin (or run) plus active caller threads, over all pools, never exceed
//!   the CPUs this process may use; a worker that cannot get a slot, or
//!   finds the budget overdrawn by a new caller, parks instead of spinning.
//!
//! **Fixed(n)** (`CMF_POOL_SPIN=n`, `Pool::with_spin`): spin `n` iterations,
//! then park; `0` parks at once. No spinner budget.

use std::time::Duration;

use crate::clock;
use crate::dispatch::Shared;
use crate::seeded::SeededBug;
use crate::spinners;
use crate::stats::WorkerCounters;
use crate::sync::{process, Ordering, SPIN_SCALE_SHIFT};

/// The default linger of the adaptive policy.
pub const DEFAULT_LINGER: Duration = Duration::from_millis(2);

/// The adaptive budget's floor: enough to catch a job that follows within
/// a couple of microseconds.
pub const MIN_ADAPTIVE_SPIN: Duration = Duration::from_micros(2);

/// The least work (one thread's time) for which a withdrawable job wakes a
/// parked worker when other processes seem to leave it no CPU
/// ([`Pool::run_optional_workers_for`](crate::Pool::run_optional_workers_for)).
/// A measured figure, not a derived one: on 2 vCPUs beside a CPU-bound
/// process, waking the worker for every row job of a short token
/// (stories15M, 10-40 µs each) cost 5-20 % against running them inline,
/// while waking it for stories110M's layer matrices (1-3.4 MB, 100-300 µs
/// each) gained 4-20 % (docs/design.md, "Withdrawable invitations").
pub const WORTH_A_WAKE: Duration = Duration::from_micros(100);

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
        static NS: crate::fork_safe::OnceU64 = crate::fork_safe::OnceU64::new();
        NS.get_or_init_f64(|| {
            let probe = std::sync::atomic::AtomicUsize::new(0);
            // Under Miri 20,000 iterations took 5.5 s of every test
            // binary that builds a pool (each doctest one); 200 measure
            // its interpreter well enough.
            let iterations = if cfg!(miri) { 200 } else { 20_000 };
            let start = std::time::Instant::now();
            for _ in 0..iterations {
                std::hint::spin_loop();
                std::hint::black_box(probe.load(std::sync::atomic::Ordering::Relaxed));
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
        static RATE: crate::fork_safe::OnceU64 = crate::fork_safe::OnceU64::new();
        RATE.get_or_init_f64(|| spin_iteration_ns() / crate::clock::ns_per_tick())
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

/// A worker with a CPU of its own still yields this often (~45 µs of
/// spinning on the CI VM): one cheap syscall that bounds how long it can
/// hold a CPU the scheduler made it share with its caller (wake affinity).
const SPINS_BETWEEN_YIELDS: usize = 4096;

/// How often (in spins) the adaptive plan reads the clock and the spinner
/// budget.
const CHECK_EVERY: usize = 64;

/// What a waiting worker does next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Step {
    /// One `spin_loop` hint, then check again.
    Spin,
    /// Give the CPU away once (`sched_yield`), then check again.
    Yield,
    /// Give back the spinner slot and park.
    Park,
}

/// What a worker's wait that ended with a job leaves to record once the
/// job is done.
pub(crate) struct Pickup {
    adaptive: bool,
    parked: bool,
    spun: u64,
    /// Ticks from the wait's start to the ticket (adaptive waits only).
    gap: u64,
    /// In the yielders' count (a slot-less worker) until `record`.
    yielder: bool,
}

impl Pickup {
    /// After the work, before the decrement: leave the yielders' count if
    /// in it (a worker that kept it leaked one count per job, and then
    /// every slot-holding worker handed its CPU over at every checkpoint
    /// for good: `tests/spinner_budget.rs`), telemetry, and the gap for
    /// the window. `ran` is false for a seat the caller withdrew first:
    /// the wait counts, but no job (counted as one, `worker_jobs` ran
    /// ahead of the shares workers ran).
    #[inline]
    pub(crate) fn record(
        &self,
        shared: &Shared,
        state: &mut WaitState,
        counters: &WorkerCounters,
        ran: bool,
    ) {
        if self.yielder && !shared.has_bug(SeededBug::YielderCountLeaked) {
            spinners::yielding(false);
        }
        counters.spins.add(self.spun);
        if ran {
            let jobs = if self.parked {
                &counters.jobs_after_park
            } else {
                &counters.jobs_hot
            };
            jobs.add(1);
        }
        if self.adaptive && !state.first_wait {
            let linger = shared
                .settings
                .linger_ticks
                .load(process::Ordering::Relaxed);
            state.gaps.record(self.gap, linger);
        }
        state.first_wait = false;
    }
}

/// A worker's waiting state across jobs.
pub(crate) struct WaitState {
    gaps: GapWindow,
    /// Holds one of the process-wide spinner slots (`spinners.rs`).
    has_spinner_slot: bool,
    /// The first wait spans the thread's start-up, not a gap between jobs.
    first_wait: bool,
}

impl WaitState {
    pub(crate) fn new() -> Self {
        WaitState {
            gaps: GapWindow::new(),
            has_spinner_slot: false,
            first_wait: true,
        }
    }

    /// Gives back the spinner slot, if held (when parking or exiting).
    pub(crate) fn release_slot(&mut self) {
        if self.has_spinner_slot {
            self.has_spinner_slot = false;
            spinners::release();
        }
    }
}

/// One wait's policy: the budget, fixed at the wait's start, and the
/// spins so far.
///
/// - **Fixed(n):** spin `n` times, then park.
/// - **Adaptive:** spin for the gap window's budget (a deadline in clock
///   ticks, read every 64 spins, capped by the linger in spins) while
///   holding a spinner slot. Without one (none free, or the budget
///   overdrawn by a new caller), yield on every spin instead: the thread
///   stays awake for its next job without holding a CPU anyone else wants;
///   under a cgroup quota, where every spin spends quota, park at once.
///   Under foreign load, yield every spin and stop at the floor.
/// - **Not oversubscribed:** a changed `epoch` (a limited job this worker
///   was not invited to) re-arms the budget: the pool is busy and the next
///   job is microseconds away. Yields once every 4096 spins.
/// - **Oversubscribed:** yields every 64 spins and re-arms only on its own
///   tickets (by returning), so idle spinners do not hold the CPUs invited
///   workers need.
pub(crate) struct WaitPlan {
    adaptive: bool,
    yield_every_spin: bool,
    /// Spins allowed before parking (shifted for loom).
    budget: usize,
    /// Adaptive: ticks allowed since `spin_started` (`u64::MAX`: none).
    deadline_ticks: u64,
    started: u64,
    spin_started: u64,
    /// Spins since the budget was last re-armed.
    spins: usize,
    /// Spins in this whole wait (telemetry, gap estimate).
    spun: u64,
    epoch: usize,
    parked: bool,
    /// Counted in `spinners`' slot-less yielders.
    yielder: bool,
}

impl WaitPlan {
    /// Fixes the budget for one wait.
    #[inline]
    pub(crate) fn begin(shared: &Shared, state: &mut WaitState) -> WaitPlan {
        let settings = &*shared.settings;
        let started = clock::ticks();
        let adaptive = settings.linger_ns.load(process::Ordering::Relaxed) != 0;
        let mut yield_every_spin = false;
        let mut yielder = false;
        let (budget, deadline_ticks) = if adaptive {
            let linger = settings.linger_ticks.load(process::Ordering::Relaxed);
            let floor = settings.floor_ticks.load(process::Ordering::Relaxed);
            // The deadline keeps 1/16 of the linger in hand: the clock's
            // calibration (measured once, over 2 ms), the spins between
            // deadline reads and the park itself all spend CPU past it,
            // and the linger bounds them all (`pool bench --scenarios`
            // measured 2.01 ms after the last token against 2 ms).
            let mut ticks = state.gaps.budget(linger, floor).min(linger - linger / 16);
            if settings.contended.load(process::Ordering::Relaxed) {
                ticks = ticks.min(floor);
                yield_every_spin = true;
            }
            if state.has_spinner_slot && spinners::overdrawn() {
                state.release_slot();
            }
            if !state.has_spinner_slot {
                state.has_spinner_slot = spinners::try_acquire();
            }
            let spins = settings.linger_spins.load(process::Ordering::Relaxed);
            if state.has_spinner_slot {
                (spins, ticks)
            } else if settings.quota_bounded {
                // Under a CPU quota every spin spends quota: park.
                (0, 0)
            } else {
                // No CPU of its own: stay awake, but give the CPU to anyone
                // who wants it on every iteration.
                yield_every_spin = true;
                yielder = true;
                (spins, ticks)
            }
        } else {
            (settings.spin_budget.load(Ordering::Relaxed), u64::MAX)
        };
        WaitPlan {
            adaptive,
            yield_every_spin,
            budget: budget >> SPIN_SCALE_SHIFT,
            deadline_ticks,
            started,
            spin_started: started,
            spins: 0,
            spun: 0,
            epoch: shared.epoch.load(Ordering::Relaxed),
            parked: false,
            yielder: yielder && {
                spinners::yielding(true);
                true
            },
        }
    }

    /// Leaves the slot-less yielders' count, if in it.
    #[inline]
    fn stop_yielding(&mut self) {
        if self.yielder {
            self.yielder = false;
            spinners::yielding(false);
        }
    }

    /// The next step of the wait.
    #[inline]
    pub(crate) fn next(&mut self, shared: &Shared, state: &mut WaitState) -> Step {
        let checkpoint = self.spins.is_multiple_of(CHECK_EVERY) || self.yield_every_spin;
        let mut hand_over = false;
        if checkpoint && self.adaptive {
            if clock::ticks().wrapping_sub(self.spin_started) >= self.deadline_ticks {
                self.stop_yielding();
                return Step::Park;
            }
            if state.has_spinner_slot {
                if spinners::overdrawn() {
                    // A caller became active after this worker took its
                    // slot: give it back, and yield every spin (or park
                    // under a quota).
                    state.release_slot();
                    if shared.settings.quota_bounded {
                        return Step::Park;
                    }
                    self.yield_every_spin = true;
                    self.yielder = true;
                    spinners::yielding(true);
                } else {
                    hand_over = spinners::others_yielding();
                }
            }
        }
        if self.spins >= self.budget {
            self.stop_yielding();
            return Step::Park;
        }
        self.spins += 1;
        self.spun += 1;
        if self.yield_every_spin {
            return Step::Yield;
        }
        if shared.jobs_oversubscribed() {
            return if self.spins.is_multiple_of(CHECK_EVERY) {
                Step::Yield
            } else {
                Step::Spin
            };
        }
        // Relaxed: a hint; a stale value only delays a re-arm.
        let now = shared.epoch.load(Ordering::Relaxed);
        if now != self.epoch {
            self.epoch = now;
            self.spins = 0;
            self.spin_started = clock::ticks();
        }
        if hand_over || (self.spun as usize).is_multiple_of(SPINS_BETWEEN_YIELDS) {
            Step::Yield
        } else {
            Step::Spin
        }
    }

    /// The worker parked and woke (the budget is spent; the next `next`
    /// parks again unless a ticket arrived).
    #[inline]
    pub(crate) fn parked(&mut self) {
        self.parked = true;
    }

    /// The wait ended with a ticket: note what the telemetry, the gap
    /// window and the yielders' count need, to be settled after the work
    /// and before the job's decrement ([`Pickup::record`]): the work
    /// should not wait for bookkeeping, and `stats()` read after `run`
    /// must count the job.
    #[inline]
    pub(crate) fn got_job(&mut self, state: &WaitState) -> Pickup {
        // A hot pickup reads no clock (it would delay the job): the gap
        // is its spins at the calibrated ticks per spin.
        let gap = if !self.adaptive {
            0
        } else if self.parked {
            clock::ticks().wrapping_sub(self.started)
        } else {
            (self.spun as f64 * ticks_per_spin()) as u64
        };
        // A slot-less worker is in the yielders' count through its job: it
        // needs a CPU that the slot holders hand over at their checkpoints
        // (`others_yielding`). One that parked left the count, and joins
        // it again here. The pickup leaves the count after the job.
        // (Measured: two pools used in turn by one thread, 2 CPUs, the
        // other pool's worker spinning on its slot while this one and the
        // caller shared the other CPU: 24-34 tokens/s, the serial speed,
        // against 39-41 with the slot holder handing over.)
        let yielder = if std::mem::replace(&mut self.yielder, false) {
            true
        } else if self.adaptive && !state.has_spinner_slot {
            spinners::yielding(true);
            true
        } else {
            false
        };
        Pickup {
            adaptive: self.adaptive,
            parked: self.parked,
            spun: self.spun,
            gap,
            yielder,
        }
    }

    /// The wait ended with shutdown.
    #[inline]
    pub(crate) fn stopped(&mut self, counters: &WorkerCounters) {
        self.stop_yielding();
        counters.spins.add(self.spun);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Linger and floor in any unit (ns here): 2 ms and 2 µs.
    const LINGER: u64 = 2_000_000;
    const FLOOR: u64 = 2_000;

    #[test]
    fn before_any_gap_a_worker_spins_for_the_whole_linger() {
        assert_eq!(GapWindow::new().budget(LINGER, FLOOR), LINGER);
    }

    #[test]
    fn a_dense_stream_keeps_the_worker_spinning_through_its_gaps() {
        // 20 µs of serial work between jobs: the worker spins twice that,
        // so it is hot when the next job comes, and parks soon after the
        // stream stops (far below the linger).
        let mut window = GapWindow::new();
        for _ in 0..500 {
            window.record(20_000, LINGER);
        }
        assert_eq!(window.budget(LINGER, FLOOR), 40_000);
    }

    #[test]
    fn gaps_longer_than_the_linger_are_idleness_and_leave_the_floor() {
        let mut window = GapWindow::new();
        for _ in 0..4 {
            window.record(40_000_000, LINGER);
        }
        assert_eq!(window.budget(LINGER, FLOOR), FLOOR);
    }

    #[test]
    fn one_long_gap_is_forgotten_after_two_buckets_of_jobs() {
        let mut window = GapWindow::new();
        window.record(1_500_000, LINGER);
        for _ in 0..BUCKET_JOBS - 1 {
            window.record(10_000, LINGER);
        }
        assert_eq!(window.budget(LINGER, FLOOR), LINGER, "capped at the linger");
        for _ in 0..BUCKET_JOBS {
            window.record(10_000, LINGER);
        }
        assert_eq!(window.budget(LINGER, FLOOR), 20_000);
    }
}
