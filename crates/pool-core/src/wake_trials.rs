//! Whether waking a parked worker for a short job pays beside other
//! processes' load, learned by trial.
//!
//! When other processes leave no CPU for a worker, a short withdrawable
//! job invites only the workers still awake (`contention.rs`): a parked
//! one woken onto a busy CPU often lands beside its waker and takes the
//! caller's time. But where the scheduler gives the woken worker a share
//! of the busy process's CPU instead, waking pays, and a fixed budget,
//! which wakes the worker for every job, then beats the adaptive policy
//! (beside a busy process on one of 2 CPUs: 0.78-1.00x the best fixed
//! budget for stories110M Q4_0). Whether waking pays depends on the
//! scheduler, the job sizes and the neighbour, and neither `/proc/stat`
//! nor the caller's own waits say which in advance. So the caller tries
//! both and keeps what measures cheaper. Beside one busy process on the
//! AMD EPYC host, the epochs of stories110M measured waking at 0.60 of the
//! expected time against 0.67, and it woke; those of stories15M measured
//! it at 0.81-0.94 against 0.75, and it did not (docs/design.md, "Waking
//! by trial").
//!
//! Trials run in epochs of at least [`EPOCH_NS`] and [`EPOCH_JOBS`] such
//! jobs. An epoch uses one arm: invite awake workers only, or wake the
//! parked ones too. Its cost is the wall time from its first job to the
//! next epoch's first job over the jobs' expected one-thread time (the
//! caller's estimate, `Pool::run_optional_workers_for`): the serial code
//! between jobs counts too, since a woken worker that spins on the
//! caller's CPU slows that code as well. Each arm keeps a moving average
//! of its epochs' costs. Waking is preferred only when its cost is at
//! least [`MARGIN`] below the other's; the other arm gets one epoch in
//! [`EXPLORE_EVERY`], so a change in the load that makes waking pay is
//! seen within about a second (a change that makes it cost, within one
//! epoch). An epoch with a gap longer than [`GAP_NS`] between jobs
//! (the engine paused, or the load went away) is dropped, not scored.
//!
//! Only the caller that holds the lock scores; another caller of the same
//! pool meanwhile gets the default (awake workers only).

use crate::sync::process::{Mutex, TryLockError};

/// The shortest epoch, in ns: several of the scheduler's time slices
/// (3-4 ms on Linux beside a busy process), so one epoch sees both
/// threads' turns.
pub(crate) const EPOCH_NS: f64 = 12e6;
/// The fewest jobs in an epoch.
pub(crate) const EPOCH_JOBS: u32 = 32;
/// A longer gap between two jobs ends an epoch unscored.
pub(crate) const GAP_NS: f64 = 2e6;
/// How much cheaper waking must be to be preferred.
pub(crate) const MARGIN: f64 = 0.03;
/// One epoch in this many goes to the arm not preferred.
pub(crate) const EXPLORE_EVERY: u64 = 16;
/// Weight of the newest epoch in an arm's moving average.
const WEIGHT: f64 = 0.25;

/// The trials of one pool.
#[derive(Debug, Default)]
pub(crate) struct WakeTrials {
    state: Mutex<Trials>,
}

/// The two arms' scores and the running epoch.
#[derive(Debug, Default, Clone)]
pub(crate) struct Trials {
    /// This epoch wakes parked workers.
    waking: bool,
    /// `clock::ticks` of the epoch's first job (0: no epoch running).
    started: u64,
    /// `clock::ticks` of its latest job.
    latest: u64,
    /// The epoch's jobs and the sum of their expected times.
    jobs: u32,
    expected_ns: f64,
    /// Moving average of wall ns per expected ns: `[awake only, waking]`.
    cost: [Option<f64>; 2],
    /// Epochs scored.
    scored: u64,
    /// Epochs scored per arm: `[awake only, waking]`.
    epochs: [u64; 2],
    /// The test clock's next job.
    #[cfg(test)]
    next: u64,
}

impl WakeTrials {
    /// For a job that other processes' load leaves short of a CPU for a
    /// worker, starting at `now` (`clock::ticks`) and expected to take one
    /// thread `expected_ns`: counts it in the running epoch and says
    /// whether to wake the parked workers too (`contention.rs` asks for
    /// every such job, long or short, so an epoch's expected time covers
    /// all its jobs).
    #[inline]
    pub(crate) fn wake_parked(&self, now: u64, expected_ns: u64, ns_per_tick: f64) -> bool {
        if expected_ns == 0 {
            // No estimate, no score: the default.
            return false;
        }
        let mut trials = match self.state.try_lock() {
            Ok(guard) => guard,
            Err(TryLockError::Poisoned(poisoned)) => poisoned.into_inner(),
            Err(TryLockError::WouldBlock) => return false,
        };
        trials.job(now, expected_ns as f64, ns_per_tick)
    }

    fn trials(&self) -> Trials {
        match self.state.lock() {
            Ok(guard) => guard.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// Epochs scored so far: `[awake workers only, parked ones woken]`
    /// (`PoolStats::wake_trial_epochs`).
    pub(crate) fn epochs(&self) -> [u64; 2] {
        self.trials().epochs
    }

    /// The arms' scores: `[awake only, waking]`.
    #[cfg(test)]
    pub(crate) fn costs(&self) -> [Option<f64>; 2] {
        self.trials().cost
    }
}

impl Trials {
    /// Counts a job starting at `now`; returns whether it wakes.
    pub(crate) fn job(&mut self, now: u64, expected_ns: f64, ns_per_tick: f64) -> bool {
        if self.started != 0 {
            let since_latest = now.wrapping_sub(self.latest) as f64 * ns_per_tick;
            let elapsed = now.wrapping_sub(self.started) as f64 * ns_per_tick;
            if since_latest > GAP_NS {
                self.started = 0;
            } else if elapsed >= EPOCH_NS && self.jobs >= EPOCH_JOBS {
                self.score(elapsed / self.expected_ns);
                self.started = 0;
            }
        }
        if self.started == 0 {
            self.started = now.max(1);
            self.jobs = 0;
            self.expected_ns = 0.0;
            self.waking = self.next_arm();
        }
        self.latest = now;
        self.jobs += 1;
        self.expected_ns += expected_ns;
        self.waking
    }

    fn score(&mut self, cost: f64) {
        let arm = &mut self.cost[usize::from(self.waking)];
        *arm = Some(match *arm {
            None => cost,
            Some(average) => average + WEIGHT * (cost - average),
        });
        self.scored += 1;
        self.epochs[usize::from(self.waking)] += 1;
    }

    /// The next epoch's arm: an arm not yet scored, else the preferred one
    /// but for every [`EXPLORE_EVERY`]th epoch.
    fn next_arm(&self) -> bool {
        match self.cost {
            [None, _] => false,
            [_, None] => true,
            [Some(awake), Some(waking)] => {
                let prefer_waking = waking < awake * (1.0 - MARGIN);
                let explore = self.scored % EXPLORE_EVERY == EXPLORE_EVERY - 1;
                prefer_waking != explore
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs `epochs` epochs of jobs, each expected to take 50 µs, that
    /// take `cost(waking)` times that: returns how many epochs woke.
    fn run(trials: &mut Trials, epochs: usize, cost: impl Fn(bool) -> f64) -> usize {
        // 1 tick = 1 ns; each run goes on where the last one stopped.
        let mut now = trials.next;
        let mut waking_epochs = 0;
        for _ in 0..epochs {
            let waking = trials.job(now, 50e3, 1.0);
            waking_epochs += usize::from(waking);
            // The epoch's wall time scales with its arm's cost.
            let step = (50e3 * cost(waking)) as u64;
            let jobs = (EPOCH_NS as u64).div_ceil(step).max(EPOCH_JOBS as u64);
            now += step;
            for _ in 1..jobs {
                assert_eq!(trials.job(now, 50e3, 1.0), waking, "one arm per epoch");
                now += step;
            }
        }
        trials.next = now;
        waking_epochs
    }

    #[test]
    fn waking_is_chosen_where_it_pays_and_the_other_arm_is_still_tried() {
        let mut trials = Trials::default();
        let woke = run(&mut trials, 80, |waking| if waking { 1.5 } else { 1.8 });
        let [awake, waking] = trials.cost;
        assert!(waking.unwrap() < awake.unwrap());
        // Every epoch but the last (still running) is scored on its arm.
        let [awake_epochs, waking_epochs] = trials.epochs;
        assert_eq!(awake_epochs + waking_epochs, 79);
        assert!((woke as u64 - 1..=woke as u64).contains(&waking_epochs));
        // All but the explored epochs and the first, which tries awake.
        let explored = 80 / EXPLORE_EVERY as usize;
        assert!(
            (80 - explored - 2..=80 - explored).contains(&woke),
            "woke in {woke} of 80 epochs"
        );
    }

    /// Asserts that over 80 epochs where waking costs `waking_cost`
    /// (against 1.8 awake only) the trials woke only in the explored
    /// epochs and the second, which tries waking.
    fn assert_default_kept(waking_cost: f64) {
        let mut trials = Trials::default();
        let woke = run(
            &mut trials,
            80,
            |waking| if waking { waking_cost } else { 1.8 },
        );
        let explored = 80 / EXPLORE_EVERY as usize;
        assert!(
            (explored..=explored + 2).contains(&woke),
            "woke in {woke} of 80 epochs"
        );
    }

    #[test]
    fn waking_is_left_alone_where_it_costs() {
        assert_default_kept(2.5);
    }

    #[test]
    fn a_gain_within_the_margin_keeps_the_default() {
        assert_default_kept(1.79);
    }

    #[test]
    fn waking_that_stops_paying_is_dropped_after_one_epoch() {
        let mut trials = Trials::default();
        run(&mut trials, 40, |waking| if waking { 1.5 } else { 1.8 });
        run(&mut trials, 2, |waking| if waking { 3.0 } else { 1.8 });
        let woke = run(&mut trials, 8, |waking| if waking { 3.0 } else { 1.8 });
        assert!(woke <= 1, "still woke in {woke} of 8 epochs");
    }

    #[test]
    fn waking_that_starts_paying_is_found_by_the_explored_epochs() {
        let mut trials = Trials::default();
        run(&mut trials, 40, |waking| if waking { 2.5 } else { 1.8 });
        // Six explorations move the waking arm's average below the other's.
        run(&mut trials, 6 * EXPLORE_EVERY as usize, |waking| {
            if waking {
                1.5
            } else {
                1.8
            }
        });
        let woke = run(&mut trials, 16, |waking| if waking { 1.5 } else { 1.8 });
        assert!(woke >= 14, "woke in only {woke} of 16 epochs");
    }

    #[test]
    fn an_epoch_with_a_pause_is_dropped_unscored() {
        let mut trials = Trials::default();
        let mut now = 1_000u64;
        for _ in 0..EPOCH_JOBS {
            trials.job(now, 50e3, 1.0);
            now += 100_000;
        }
        // A pause longer than the gap, then the epoch would have ended.
        now += (GAP_NS as u64) * 2 + EPOCH_NS as u64;
        trials.job(now, 50e3, 1.0);
        assert_eq!(trials.scored, 0);
        assert_eq!(trials.cost, [None, None]);
    }

    #[test]
    fn a_job_without_an_estimate_never_wakes_and_is_not_counted() {
        let trials = WakeTrials::default();
        assert!(!trials.wake_parked(1_000, 0, 1.0));
        assert_eq!(trials.costs(), [None, None]);
        assert_eq!(trials.trials().jobs, 0);
    }
}
