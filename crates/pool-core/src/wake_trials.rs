//! Whether waking a parked worker for a short job pays beside other
//! processes' load, learned by trial.
//!
//! When other processes leave no CPU for a worker, a short withdrawable
//! job may invite only the workers still awake (`contention.rs`): a
//! parked one woken onto a busy CPU can land beside its waker and take
//! the caller's time. But where the scheduler gives the woken worker a
//! share of the busy process's CPU instead, waking pays, and a fixed
//! budget, which wakes the worker for every job, then beats the adaptive
//! policy. Whether waking pays depends on the scheduler, the job sizes
//! and the neighbour, and neither `/proc/stat` nor the caller's own waits
//! say which in advance. So the caller tries both and keeps what measures
//! cheaper. Beside one busy process on the AMD EPYC host, the epochs of
//! stories110M measured waking at 0.60 of the expected time against 0.67;
//! those of stories15M measured it at 0.81-0.94 against 0.75. On the
//! Intel host, stories110M's two ways read alike (0.36 both) and
//! stories15M's waking 8 % cheaper (1.08 against 1.17) (docs/design.md,
//! "Waking by trial").
//!
//! Two sets of trials, one per load: which way is the default (the one
//! kept on a tie, and the one a pool starts with) differs.
//! - Where the sample leaves the caller a CPU of its own
//!   (`load::caller_short_of_a_cpu` false: beside one busy process on 2
//!   CPUs), the default wakes, as a fixed budget does; awake workers only
//!   is the other way. Beside one busy process on the Intel host the two
//!   ways often read within a percent of each other, and the default is
//!   what the noise of 12 ms epochs then leaves running: with awake only
//!   as the default, the adaptive pool read 0.981x and 0.975x the best
//!   fixed budget (stories110M, stories15M; eleven alternated runs each)
//!   and missed the 0.97 goal in 5 of 22 runs; with waking as the
//!   default, 0.981x and 0.983x, 1 of 22 (docs/design.md, "Waking by
//!   default where the caller has a CPU").
//! - Where the caller is short of a CPU too (beside three busy processes,
//!   or another decoding pool, on 2 CPUs), a woken worker takes the
//!   caller's CPU as often as the neighbour's: the default invites awake
//!   workers only, and the trials score the gaps the caller spends
//!   waiting for its CPU (`trials.rs`); there long jobs go by the trials
//!   too, instead of always waking the parked workers (`contention.rs`).
//!
//! Trials (`trials.rs`): epochs of at least 12 ms and 32 such jobs; each
//! arm's average weights its newest epoch 1/10, the other way must be 1 %
//! cheaper to be preferred, and the arm not preferred gets one epoch in
//! 16. Beside a busy process one 12 ms epoch scatters by a few percent,
//! and waking gained about as much (the fixed budgets, which always wake,
//! led by 1-5 %): a 3 % margin over averages weighted 1/4 chose waking in
//! 29-84 % of stories15M's epochs from run to run (docs/design.md, "Waking
//! by trial, on a small gain"). The price is speed of change: a change in
//! the load that makes the other way pay by a sixth is seen within about
//! 2.5 s (thirteen explored epochs), one that makes the preferred way
//! cost twice as much within two epochs. An epoch with a gap longer than
//! 2 ms between jobs (the engine paused, or the load went away) is
//! dropped, unless the load leaves the caller itself short of a CPU and
//! the caller spent the gap waiting for one (`trials.rs`).

use crate::trials::{ArmTrials, Rules};

/// The wake trials' rules: epochs of several of the scheduler's time
/// slices (3-4 ms on Linux beside a busy process), so one epoch sees both
/// threads' turns; a fixed share of explored epochs.
pub(crate) const RULES: Rules = Rules {
    epoch_ns: 12e6,
    epoch_jobs: 32,
    gap_ns: 2e6,
    cut_epoch_ns: f64::INFINITY,
    margin: 0.01,
    weight: 0.1,
    explore_every: 16,
    explore_far_every: 16,
    far: 0.0,
    rise: f64::INFINITY,
    lead_in_jobs: 0,
    warm_up_epochs: 0,
    first_try_after: 1,
    skip_uncounted: false,
};

/// The wake trials of one pool.
#[derive(Debug)]
pub(crate) struct WakeTrials {
    /// Where the caller has a CPU of its own: the default wakes the
    /// parked workers, the other way invites awake ones only.
    caller_has_a_cpu: ArmTrials,
    /// Where the caller is short of one too: the default invites awake
    /// workers only, the other way wakes the parked ones.
    caller_short: ArmTrials,
}

impl Default for WakeTrials {
    fn default() -> Self {
        WakeTrials {
            caller_has_a_cpu: ArmTrials::new(RULES),
            caller_short: ArmTrials::new(RULES),
        }
    }
}

impl WakeTrials {
    /// For a job that other processes' load leaves short of a CPU for a
    /// worker, starting at `now` (`clock::ticks`) and expected to take one
    /// thread `expected_ns`: counts it in the running epoch of the trials
    /// for this load and says whether to wake the parked workers too
    /// (`contention.rs` asks for every such job, long or short, so an
    /// epoch's expected time covers all its jobs). `caller_short_of_a_cpu`:
    /// the load leaves the caller itself short of one
    /// (`load::caller_short_of_a_cpu`), and the epochs score the gaps it
    /// spends waiting for it (`trials.rs`). No estimate (0): no score, and
    /// no wake.
    #[inline]
    pub(crate) fn wake_parked(
        &self,
        now: u64,
        expected_ns: u64,
        ns_per_tick: f64,
        caller_short_of_a_cpu: bool,
    ) -> bool {
        if caller_short_of_a_cpu {
            self.caller_short.job(now, expected_ns, ns_per_tick, true)
        } else {
            expected_ns != 0
                && !self
                    .caller_has_a_cpu
                    .job(now, expected_ns, ns_per_tick, false)
        }
    }

    /// Epochs scored so far, over both loads: `[awake workers only,
    /// parked ones woken]` (`PoolStats::wake_trial_epochs`).
    pub(crate) fn epochs(&self) -> [u64; 2] {
        let [awake_short, woken_short] = self.caller_short.epochs();
        let [woken_has_cpu, awake_has_cpu] = self.caller_has_a_cpu.epochs();
        [awake_short + awake_has_cpu, woken_short + woken_has_cpu]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wake_trials_explore_one_epoch_in_sixteen_whatever_the_gap() {
        let mut trials = crate::trials::Trials::default();
        let woke =
            crate::trials::tests::run(
                &mut trials,
                &RULES,
                80,
                |waking| {
                    if waking {
                        5.0
                    } else {
                        1.0
                    }
                },
            );
        // The second epoch tries waking; then one in 16.
        assert!((5..=6).contains(&woke), "woke in {woke} of 80 epochs");
    }

    /// Runs `jobs` jobs on a simulated clock, each expected to take 50 µs
    /// and taking `cost(woke)` times that; returns the jobs that ran each
    /// way, `[awake workers only, parked ones woken]`, and checks that the
    /// epochs scored (`PoolStats::wake_trial_epochs`) lean the same way.
    fn simulate(caller_short: bool, jobs: usize, cost: impl Fn(bool) -> f64) -> [usize; 2] {
        let trials = WakeTrials::default();
        let mut ran = [0; 2];
        let mut now = 1u64;
        for _ in 0..jobs {
            let woke = trials.wake_parked(now, 50_000, 1.0, caller_short);
            ran[usize::from(woke)] += 1;
            now += (50_000.0 * cost(woke)) as u64;
        }
        let [awake, woken] = trials.epochs();
        assert_eq!(
            ran[1] > ran[0],
            woken > awake,
            "jobs {ran:?}, epochs [{awake}, {woken}]"
        );
        ran
    }

    #[test]
    #[cfg_attr(miri, ignore = "safe arithmetic over 12,000 jobs: 45 s under Miri")]
    fn a_caller_with_a_cpu_of_its_own_wakes_where_the_two_ways_cost_alike() {
        let [awake, woken] = simulate(false, 12_000, |_| 1.0);
        // All but the explored epochs wake: one in 16, and the first try.
        assert!(awake * 8 < woken, "jobs awake only {awake}, woken {woken}");
        assert!(awake > 0, "awake only never tried");
    }

    #[test]
    #[cfg_attr(miri, ignore = "safe arithmetic over 12,000 jobs: 45 s under Miri")]
    fn a_caller_with_a_cpu_of_its_own_stops_waking_where_waking_costs() {
        // Waking 20 % dearer, as stories15M measured on the AMD EPYC host.
        let [awake, woken] = simulate(false, 12_000, |woke| if woke { 1.2 } else { 1.0 });
        assert!(woken * 8 < awake, "jobs awake only {awake}, woken {woken}");
    }

    #[test]
    #[cfg_attr(miri, ignore = "safe arithmetic over 12,000 jobs: 45 s under Miri")]
    fn a_caller_short_of_a_cpu_too_wakes_only_where_waking_pays() {
        let [awake, woken] = simulate(true, 12_000, |_| 1.0);
        assert!(woken * 8 < awake, "jobs awake only {awake}, woken {woken}");
        let [awake, woken] = simulate(true, 12_000, |woke| if woke { 0.8 } else { 1.0 });
        assert!(awake * 8 < woken, "jobs awake only {awake}, woken {woken}");
    }

    #[test]
    fn a_job_without_an_estimate_never_wakes() {
        let trials = WakeTrials::default();
        for caller_short in [false, true] {
            assert!(!trials.wake_parked(1, 0, 1.0, caller_short));
        }
    }
}
