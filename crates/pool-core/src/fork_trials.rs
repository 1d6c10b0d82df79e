//! Whether a short job's fork-join pays on CPUs that other processes
//! leave free, learned by trial.
//!
//! On free CPUs a withdrawable job invites every worker it may: a
//! fork-join costs a few cache-line transfers between the caller's CPU
//! and each worker's, about 0.1 µs each on a host whose CPUs share a
//! cache. But a hypervisor may place the two vCPUs of a guest where a
//! transfer costs four times that (on the AMD EPYC host of the
//! benchmarks, stretches of minutes where `hot_run_trace` reads 420-550
//! ns against 110-150), and then the short jobs of a small model cost
//! more forked than run by the caller alone: stories15M Q4_0 decoded at
//! 0.91-0.93x the serial loop in such stretches, rayon below it too
//! (docs/design.md, "Forking by trial"). Neither the pool nor the caller
//! can tell a stretch from its own counters in advance, so the caller
//! tries both and keeps what measures cheaper.
//!
//! Trials (`trials.rs`): epochs of at least 6 ms (half the wake trials':
//! on free CPUs no time slice has to fit in one, and an inline epoch
//! where forking pays costs half as much) and 32 withdrawable jobs on
//! free CPUs; the default arm dispatches as always, the other
//! runs the jobs shorter than [`crate::WORTH_A_WAKE`] on the caller alone
//! (longer ones repay a fork-join on any host: they dispatch in both
//! arms, and count in both). Inline must be 3 % cheaper to be preferred.
//! The arm not preferred gets one epoch in 16, or one in 64 while the
//! preferred one is cheaper by more than a quarter (where forking halves
//! a job, as on a host whose transfers are fast, an inline epoch costs
//! most, and it is tried least), and one at once when the preferred
//! arm's cost rose by 15 % since it was last tried: a stretch of slow
//! transfers shows in the dispatching arm's cost within an epoch or two.
//! Jobs without an estimate (a decoder's classifier and attention) are
//! dispatched in both arms and their time is left out of the epochs
//! (`trials.rs`, `Rules::skip_uncounted`). An epoch that a pause cuts
//! short is scored once it ran 1 ms and 32 jobs: where the decode pauses
//! every few tens of milliseconds, most inline tries were cut and
//! dropped, each costing an inline stretch and teaching nothing, and the
//! adaptive pool decoded at 0.94-0.98x a fixed budget on an idle machine
//! (docs/design.md, "Forking by trial").

use crate::trials::{ArmTrials, Rules};

const RULES: Rules = Rules {
    epoch_ns: 6e6,
    epoch_jobs: 32,
    gap_ns: 2e6,
    cut_epoch_ns: 1e6,
    margin: 0.03,
    weight: 0.25,
    explore_every: 16,
    explore_far_every: 64,
    far: 0.25,
    rise: 0.15,
    lead_in_jobs: 16,
    warm_up_epochs: 1,
    first_try_after: 8,
    skip_uncounted: true,
};

/// The fork trials of one pool.
#[derive(Debug)]
pub(crate) struct ForkTrials(ArmTrials);

impl Default for ForkTrials {
    fn default() -> Self {
        ForkTrials(ArmTrials::new(RULES))
    }
}

impl ForkTrials {
    /// For a withdrawable job that has a free CPU for every worker it
    /// invites, starting at `now` (`clock::ticks`) and expected to take
    /// one thread `expected_ns`: counts it in the running epoch and says
    /// whether the caller runs it alone. No estimate (0): no score, and
    /// the job is dispatched.
    #[inline]
    pub(crate) fn run_inline(&self, now: u64, expected_ns: u64, ns_per_tick: f64) -> bool {
        let inline_epoch = self.0.job(now, expected_ns, ns_per_tick, false);
        inline_epoch && expected_ns < crate::WORTH_A_WAKE.as_nanos() as u64
    }

    /// Epochs scored so far: `[dispatched, short jobs inline]`
    /// (`PoolStats::fork_trial_epochs`).
    pub(crate) fn epochs(&self) -> [u64; 2] {
        self.0.epochs()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trials::{tests::run, Trials};

    #[test]
    fn where_forking_halves_a_job_one_epoch_in_64_runs_inline() {
        let mut trials = Trials::default();
        let inline = run(
            &mut trials,
            &RULES,
            200,
            |inline| if inline { 1.0 } else { 0.55 },
        );
        // The warm-up and eight epochs dispatch, the tenth tries inline;
        // then one in 64.
        assert!(
            (3..=5).contains(&inline),
            "inline in {inline} of 200 epochs"
        );
    }

    #[test]
    fn a_stretch_of_slow_transfers_turns_the_short_jobs_inline_within_two_epochs() {
        let mut trials = Trials::default();
        run(
            &mut trials,
            &RULES,
            100,
            |inline| if inline { 1.0 } else { 0.55 },
        );
        // Forking now costs more than it saves.
        let mut first_inline = None;
        for epoch in 0..20 {
            if run(
                &mut trials,
                &RULES,
                1,
                |inline| if inline { 1.0 } else { 1.1 },
            ) == 1
            {
                first_inline.get_or_insert(epoch);
            }
        }
        let first = first_inline.expect("never tried inline in 20 slow epochs");
        assert!(first <= 2, "first tried inline in slow epoch {first}");
        let inline = run(
            &mut trials,
            &RULES,
            32,
            |inline| if inline { 1.0 } else { 1.1 },
        );
        assert!(inline >= 29, "inline in only {inline} of 32 slow epochs");
    }

    #[test]
    fn when_the_stretch_ends_the_jobs_fork_again_within_sixteen_epochs() {
        let mut trials = Trials::default();
        run(
            &mut trials,
            &RULES,
            60,
            |inline| if inline { 1.0 } else { 1.1 },
        );
        run(
            &mut trials,
            &RULES,
            18,
            |inline| if inline { 1.0 } else { 0.55 },
        );
        let inline = run(
            &mut trials,
            &RULES,
            32,
            |inline| if inline { 1.0 } else { 0.55 },
        );
        assert!(inline <= 1, "inline in {inline} of 32 fast epochs");
    }

    #[test]
    fn a_long_job_forks_even_in_an_inline_epoch() {
        let trials = ForkTrials::default();
        let long = crate::WORTH_A_WAKE.as_nanos() as u64;
        // 1 tick = 1 ns. The warm-up and eight scored epochs dispatch; the
        // next runs inline, from its lead-in on.
        let mut now = 1_000;
        let mut short_jobs = 0;
        while !trials.run_inline(now, 50_000, 1.0) {
            short_jobs += 1;
            assert!(short_jobs < 1000, "no inline epoch after {short_jobs} jobs");
            now += 400_000;
        }
        assert!(!trials.run_inline(now + 1, long, 1.0));
        assert!(trials.run_inline(now + 2, 50_000, 1.0));
        assert_eq!(trials.epochs(), [RULES.first_try_after, 0]);
    }

    #[test]
    fn a_slow_start_does_not_turn_the_jobs_inline() {
        let mut trials = Trials::default();
        // A pool's first epochs cost three times the rest (threads placed,
        // caches filled): forking still pays.
        run(&mut trials, &RULES, 2, |_| 2.6);
        let inline = run(
            &mut trials,
            &RULES,
            60,
            |inline| if inline { 1.3 } else { 0.88 },
        );
        assert!(inline <= 1, "inline in {inline} of 60 epochs");
    }

    #[test]
    fn where_pauses_cut_every_epoch_short_the_first_inline_try_is_not_repeated_at_once() {
        let mut trials = Trials::default();
        run(&mut trials, &RULES, 9, |_| 0.55);
        // From here on each epoch ends in a pause before it is scored.
        let mut now = trials.next;
        let mut inline_epochs = 0;
        for _ in 0..64 {
            inline_epochs += usize::from(trials.job(&RULES, now, 50e3, 1.0, || None));
            for _ in 0..RULES.lead_in_jobs + 8 {
                now += 50_000;
                trials.job(&RULES, now, 50e3, 1.0, || None);
            }
            now += 3 * RULES.gap_ns as u64;
        }
        assert_eq!(trials.epochs[1], 0);
        assert!(inline_epochs <= 8, "inline in {inline_epochs} of 64 epochs");
    }

    /// Nine epochs where forking pays, then the tenth's first job, which
    /// tries inline: the trials and that job's time (1 tick = 1 ns).
    fn at_the_first_inline_try() -> (Trials, u64) {
        let mut trials = Trials::default();
        run(&mut trials, &RULES, 9, |_| 0.55);
        let now = trials.next;
        assert!(
            trials.job(&RULES, now, 50e3, 1.0, || None),
            "the tenth epoch tries inline"
        );
        (trials, now)
    }

    /// Runs the first inline try for `jobs` jobs of 50 µs after its
    /// lead-in, then pauses, and returns the trials.
    fn first_try_cut_after(jobs: u32) -> Trials {
        let (mut trials, mut now) = at_the_first_inline_try();
        // Each job and the code after it take 50 µs.
        for _ in 0..RULES.lead_in_jobs + jobs {
            now += 50_000;
            trials.job(&RULES, now, 50e3, 1.0, || None);
        }
        now += 3 * RULES.gap_ns as u64;
        trials.job(&RULES, now, 50e3, 1.0, || None);
        trials
    }

    #[test]
    fn a_try_that_a_pause_cuts_short_after_enough_jobs_is_scored() {
        // 40 jobs, 2 ms: past `cut_epoch_ns` (1 ms), short of an epoch.
        let trials = first_try_cut_after(40);
        assert_eq!(trials.epochs[1], 1, "the inline try was not scored");
        let inline = trials.cost[1].unwrap();
        assert!(
            (inline - 1.0).abs() < 0.01,
            "the inline try cost {inline:.2}"
        );
    }

    #[test]
    fn a_try_that_a_pause_cuts_short_at_once_is_not_scored() {
        // 18 jobs, 0.9 ms: too few to tell.
        let trials = first_try_cut_after(18);
        assert_eq!(trials.epochs[1], 0);
        assert_eq!(trials.cost[1], None);
    }

    #[test]
    fn the_jobs_that_change_arms_are_not_timed() {
        // The tenth epoch runs inline; its first 16 jobs take 1.5 ms each
        // (caches refilled on the caller's CPU), then 50 µs.
        let (mut trials, mut now) = at_the_first_inline_try();
        for _ in 0..16 {
            now += 1_500_000;
            assert!(trials.job(&RULES, now, 50e3, 1.0, || None));
        }
        while trials.epochs[1] == 0 {
            now += 50_000;
            trials.job(&RULES, now, 50e3, 1.0, || None);
        }
        let inline = trials.cost[1].unwrap();
        assert!(
            (inline - 1.0).abs() < 0.01,
            "the inline epoch cost {inline:.2}"
        );
    }

    /// Runs `tokens` tokens, each 61 jobs expected to take 50 µs that take
    /// `job_cost(inline)` times that, then a job without an estimate (a
    /// classifier) that takes `uncounted_ns(inline)`: returns how many of
    /// the counted jobs ran inline.
    fn run_tokens(
        trials: &mut Trials,
        rules: &Rules,
        tokens: usize,
        job_cost: impl Fn(bool) -> f64,
        uncounted_ns: impl Fn(bool) -> u64,
    ) -> usize {
        let mut now = trials.next.max(1);
        let mut inline_jobs = 0;
        for _ in 0..tokens {
            let mut inline = false;
            for _ in 0..61 {
                inline = trials.job(rules, now, 50e3, 1.0, || None);
                inline_jobs += usize::from(inline);
                now += (50e3 * job_cost(inline)) as u64;
            }
            trials.uncounted(rules, now);
            now += uncounted_ns(inline);
        }
        trials.next = now;
        inline_jobs
    }

    /// Forking halves the counted jobs; the job without an estimate after
    /// them takes 1.9 ms after a dispatching epoch's jobs and 2.1 ms after
    /// an inline one's (on either side of the 2 ms gap): how many of 200
    /// tokens' counted jobs ran inline under `rules`.
    fn inline_share_beside_a_classifier(rules: &Rules) -> f64 {
        let mut trials = Trials::default();
        let inline = run_tokens(
            &mut trials,
            rules,
            200,
            |inline| if inline { 1.0 } else { 0.5 },
            |inline| if inline { 2_100_000 } else { 1_900_000 },
        );
        inline as f64 / (200.0 * 61.0)
    }

    #[test]
    fn a_job_without_an_estimate_weighs_on_neither_way() {
        // Counted in the epoch, the 1.9 ms made each dispatching epoch
        // cost more than an inline one, whose 2.1 ms gap cut it before
        // them: the decode ran inline at the serial loop's speed where
        // forking doubled it (stories110M Q4_0 on the AMD EPYC host, 0.69x
        // rayon). Left out, only the explored epochs run inline.
        let share = inline_share_beside_a_classifier(&RULES);
        assert!(share < 0.1, "{:.0} % of the jobs inline", share * 100.0);
    }

    #[test]
    fn counted_in_the_epoch_a_job_without_an_estimate_turns_the_jobs_inline() {
        // The seeded form of the test above: the old rule fails it.
        let old = Rules {
            skip_uncounted: false,
            ..RULES
        };
        let share = inline_share_beside_a_classifier(&old);
        assert!(share > 0.5, "{:.0} % of the jobs inline", share * 100.0);
    }
}
