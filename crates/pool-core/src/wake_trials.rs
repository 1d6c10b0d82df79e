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
//! Trials (`trials.rs`): epochs of at least 12 ms and 32 such jobs; the
//! default arm invites awake workers only, the other wakes the parked
//! ones too; each arm's average weights its newest epoch 1/10, waking
//! must be 1 % cheaper to be preferred, and the arm not preferred gets
//! one epoch in 16. Beside a busy process one 12 ms epoch scatters by a
//! few percent, and waking gained about as much (the fixed budgets,
//! which always wake, led by 1-5 %): a 3 % margin over averages weighted
//! 1/4 chose waking in 29-84 % of stories15M's epochs from run to run,
//! and the adaptive pool read about 0.95x the best fixed budget there
//! (docs/design.md, "Waking by trial, on a small gain"). The price is speed of change: a change in
//! the load that makes waking pay by a sixth is seen within about 2.5 s
//! (thirteen explored epochs), one that makes it cost twice as much
//! within two epochs. An epoch with a gap longer than 2 ms between
//! jobs (the engine paused, or the load went away) is dropped, unless the
//! load leaves the caller itself short of a CPU and the caller spent the
//! gap waiting for one (`trials.rs`); there long jobs go by the trials
//! too, instead of always waking the parked workers (`contention.rs`).

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
pub(crate) struct WakeTrials(ArmTrials);

impl Default for WakeTrials {
    fn default() -> Self {
        WakeTrials(ArmTrials::new(RULES))
    }
}

impl WakeTrials {
    /// For a job that other processes' load leaves short of a CPU for a
    /// worker, starting at `now` (`clock::ticks`) and expected to take one
    /// thread `expected_ns`: counts it in the running epoch and says
    /// whether to wake the parked workers too (`contention.rs` asks for
    /// every such job, long or short, so an epoch's expected time covers
    /// all its jobs). `caller_short_of_a_cpu`: the load leaves the caller
    /// itself short of one (`load::caller_short_of_a_cpu`), and the
    /// epochs score the gaps it spends waiting for it (`trials.rs`). No
    /// estimate (0): no score, and no wake.
    #[inline]
    pub(crate) fn wake_parked(
        &self,
        now: u64,
        expected_ns: u64,
        ns_per_tick: f64,
        caller_short_of_a_cpu: bool,
    ) -> bool {
        self.0
            .job(now, expected_ns, ns_per_tick, caller_short_of_a_cpu)
    }

    /// Epochs scored so far: `[awake workers only, parked ones woken]`
    /// (`PoolStats::wake_trial_epochs`).
    pub(crate) fn epochs(&self) -> [u64; 2] {
        self.0.epochs()
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
}
