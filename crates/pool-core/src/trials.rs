//! Two ways of running a pool's jobs, tried in turn and kept by what
//! they measure: the machinery behind the wake trials
//! (`wake_trials.rs`) and the fork trials (`fork_trials.rs`).
//!
//! Trials run in epochs of at least [`Rules::epoch_ns`] and
//! [`Rules::epoch_jobs`] jobs. An epoch uses one arm: the default, or the
//! other way. Its cost is the wall time from its first job to the next
//! epoch's first job over the jobs' expected one-thread time (the
//! caller's estimate, `Pool::run_optional_workers_for`): the serial code
//! between jobs counts too, since what one arm does to the CPUs (a worker
//! spinning, or parked) slows that code as well. Each arm keeps a moving
//! average of its epochs' costs (the newest weighted [`Rules::weight`]).
//! The other way is preferred only when its
//! cost is at least [`Rules::margin`] below the default's; the arm not
//! preferred gets one epoch in [`Rules::explore_every`] (one in
//! [`Rules::explore_far_every`] while the preferred one is cheaper by
//! more than [`Rules::far`]), and one at once when the preferred arm's
//! cost has risen by [`Rules::rise`] since the last such epoch: a change
//! in the machine that makes the preferred arm cost shows within an
//! epoch or two. An epoch with a gap longer than [`Rules::gap_ns`]
//! between jobs (the engine paused, or the jobs went elsewhere) is
//! dropped, not scored, unless it had run for [`Rules::cut_epoch_ns`]
//! and [`Rules::epoch_jobs`] jobs (the fork trials: then it is scored
//! over the jobs before its last, whose end is not seen); where other
//! processes leave the caller itself
//! short of a CPU (`load::caller_short_of_a_cpu`), unless the caller's
//! thread spent the gap waiting for one: it did not block outside the
//! pool's own waits since the epoch began, and its time off its CPU grew
//! by the gap's excess over [`Rules::gap_ns`]. Such a thread was not
//! paused, and what it waited is part of its arm's cost: beside three
//! busy processes on 2 CPUs the caller waits whole time slices, and
//! almost every epoch had such a gap, so the trials scored 0-6 epochs
//! per setting. One that blocked (an engine's pause) or ran other code
//! (a serial loop between the pool's jobs) was paused. Where the caller
//! has its CPU the rule is not used: beside one busy process on 2 CPUs,
//! scoring such gaps cost stories15M Q4_0 3-6 % (docs/design.md, "Waking
//! for long jobs beside three busy processes"). Where the caller stays
//! short sample after sample, as beside three busy processes, its jobs no
//! longer reach the trials (`contention.rs`); the rule serves a load that
//! comes and goes, such as another process's decoding pool.
//!
//! A job without an estimate (`Pool::run_optional_workers`) is not
//! counted. Where [`Rules::skip_uncounted`] (the fork trials), its time
//! and the code after it, up to the next counted job, are also left out
//! of the epoch, and more than [`Rules::gap_ns`] of it ends the epoch,
//! scored up to where it began: a decoder's classifier, run without an
//! estimate, took 1.9-3 ms of stories110M's token, on either side of the
//! gap, so a dispatching epoch counted it and an inline one was cut
//! before it, and inline read cheaper where forking doubled the decode
//! (docs/design.md, "Jobs without an estimate").
//!
//! Only the caller that holds the lock scores; another caller of the same
//! pool meanwhile gets the default.

use crate::sync::process::{Mutex, TryLockError};

/// How a pool's trials run.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Rules {
    /// The shortest epoch, in ns.
    pub(crate) epoch_ns: f64,
    /// The fewest jobs in an epoch.
    pub(crate) epoch_jobs: u32,
    /// A longer gap between two jobs, in ns, ends an epoch unscored
    /// (but see [`ArmTrials::job`] and [`Rules::cut_epoch_ns`]).
    pub(crate) gap_ns: f64,
    /// An epoch a gap cuts short is still scored, over the jobs before its
    /// last, once they span this long (ns) and [`Rules::epoch_jobs`];
    /// `INFINITY`: never.
    pub(crate) cut_epoch_ns: f64,
    /// How much cheaper the other way must be to be preferred.
    pub(crate) margin: f64,
    /// Weight of the newest epoch in an arm's moving average: lower
    /// follows the noise of single epochs less, and a change in the
    /// machine more slowly.
    pub(crate) weight: f64,
    /// One epoch in this many goes to the arm not preferred...
    pub(crate) explore_every: u64,
    /// ...or one in this many while the preferred arm is cheaper than the
    /// other by more than [`Rules::far`].
    pub(crate) explore_far_every: u64,
    /// See [`Rules::explore_far_every`].
    pub(crate) far: f64,
    /// The arm not preferred gets the next epoch when the preferred arm's
    /// average rose by this much since it last did.
    pub(crate) rise: f64,
    /// Jobs run on an epoch's arm before its clock starts, when the last
    /// epoch ran the other arm or ended in a gap: they pay the change
    /// (a parked worker's wake-up, caches refilled), not the arm.
    pub(crate) lead_in_jobs: u32,
    /// A pool's first epochs, not scored: they pay its start (threads
    /// placed, caches filled) on whichever arm they run.
    pub(crate) warm_up_epochs: u64,
    /// Epochs the default arm scores before the other way's first.
    pub(crate) first_try_after: u64,
    /// Time in jobs without an estimate, and in the code after them up to
    /// the next counted job, is left out of an epoch; more than
    /// [`Rules::gap_ns`] of it ends the epoch, scored up to where they
    /// began if it ran [`Rules::cut_epoch_ns`] and
    /// [`Rules::epoch_jobs`] jobs. Else such time counts in the epoch, and
    /// a gap it makes drops the epoch as a pause does.
    pub(crate) skip_uncounted: bool,
}

/// The calling thread's time off its CPU, as the gap rule reads it. Both
/// counts wrap: only their changes are read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct OffCpu {
    /// The times it blocked (`timeslice::Look::voluntary`) less its parks
    /// in the pool's own waits (`sleep::park_in_pool`): what grows when
    /// the engine pauses, and not when other threads preempt it.
    pub(crate) blocks: u64,
    /// Wall time less its CPU time, in ns: what grows when it waits for a
    /// CPU (or blocks), and not when it runs other code.
    pub(crate) off_cpu_ns: u64,
}

impl OffCpu {
    /// The calling thread's, where the system counts them (Linux).
    pub(crate) fn now() -> Option<OffCpu> {
        let look = crate::timeslice::Look::now()?;
        Some(OffCpu {
            blocks: look.voluntary.wrapping_sub(crate::sleep::parks_in_pool()),
            off_cpu_ns: look.wall_ns.wrapping_sub(look.cpu_ns),
        })
    }
}

/// The trials of one pool, behind a lock that is only tried.
#[derive(Debug)]
pub(crate) struct ArmTrials {
    rules: Rules,
    state: Mutex<Trials>,
}

/// The two arms' scores and the running epoch.
#[derive(Debug, Default, Clone)]
pub(crate) struct Trials {
    /// This epoch runs the other way.
    other: bool,
    /// `clock::ticks` of the epoch's first job (0: no epoch running).
    started: u64,
    /// `clock::ticks` of its latest job.
    latest: u64,
    /// [`OffCpu`] when the epoch began (its time off the CPU: at its last
    /// gap scored), where read.
    off_cpu_at_start: Option<OffCpu>,
    /// The epoch's jobs and the sum of their expected times.
    jobs: u32,
    expected_ns: f64,
    /// The latest job's expected time.
    latest_expected_ns: f64,
    /// `clock::ticks` of the first job without an estimate since the
    /// latest counted one (0: none; `Rules::skip_uncounted`).
    uncounted_at: u64,
    /// Time left out of the running epoch, in ns: jobs without an
    /// estimate and the code after them.
    skipped_ns: f64,
    /// Moving average of wall ns per expected ns: `[default, other]`.
    pub(crate) cost: [Option<f64>; 2],
    /// Epochs scored per arm: `[default, other]`.
    pub(crate) epochs: [u64; 2],
    /// Warm-up epochs ended unscored.
    warmed_up: u64,
    /// Epochs since the arm not preferred last had one.
    since_explored: u64,
    /// The preferred arm's average when the other last had an epoch.
    preferred_then: Option<f64>,
    /// The next epoch's arm is chosen (`other`), its lead-in running.
    armed: bool,
    /// Lead-in jobs left before the epoch's clock starts.
    pub(crate) lead_in: u32,
    /// The arm of the last epoch (`None`: none yet, or it ended in a gap).
    last_arm: Option<bool>,
    /// The test clock's next job.
    #[cfg(test)]
    pub(crate) next: u64,
}

impl ArmTrials {
    pub(crate) fn new(rules: Rules) -> Self {
        ArmTrials {
            rules,
            state: Mutex::new(Trials::default()),
        }
    }

    /// Counts a job starting at `now` (`clock::ticks`) and expected to take
    /// one thread `expected_ns` in the running epoch; says whether it runs
    /// the other way. A job without an estimate (0) is not counted and
    /// runs the default way, as does every job while another caller
    /// holds the lock. `caller_short_of_a_cpu`: other processes leave the
    /// caller itself short of a CPU, and a gap it spent waiting for one
    /// is scored (module docs).
    #[inline]
    pub(crate) fn job(
        &self,
        now: u64,
        expected_ns: u64,
        ns_per_tick: f64,
        caller_short_of_a_cpu: bool,
    ) -> bool {
        if expected_ns == 0 {
            if self.rules.skip_uncounted {
                if let Ok(mut trials) = self.state.try_lock() {
                    trials.uncounted(&self.rules, now);
                }
            }
            return false;
        }
        let mut trials = match self.state.try_lock() {
            Ok(guard) => guard,
            Err(TryLockError::Poisoned(poisoned)) => poisoned.into_inner(),
            Err(TryLockError::WouldBlock) => return false,
        };
        let off_cpu = || {
            if caller_short_of_a_cpu {
                OffCpu::now()
            } else {
                None
            }
        };
        trials.job(&self.rules, now, expected_ns as f64, ns_per_tick, off_cpu)
    }

    pub(crate) fn trials(&self) -> Trials {
        match self.state.lock() {
            Ok(guard) => guard.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// Epochs scored so far: `[default, other way]`.
    pub(crate) fn epochs(&self) -> [u64; 2] {
        self.trials().epochs
    }
}

impl Trials {
    /// Counts a job starting at `now`; returns whether it runs the other
    /// way. `off_cpu`: [`OffCpu::now`] where a gap the caller spent
    /// waiting for a CPU is scored, read when an epoch begins and at a
    /// gap; `None` drops every epoch with a gap.
    pub(crate) fn job(
        &mut self,
        rules: &Rules,
        now: u64,
        expected_ns: f64,
        ns_per_tick: f64,
        off_cpu: impl Fn() -> Option<OffCpu>,
    ) -> bool {
        if self.started != 0 {
            let ticks_ns = |ticks: u64| ticks as f64 * ns_per_tick;
            // Jobs without an estimate since the latest counted one
            // (`Rules::skip_uncounted`): from the first one's start to now
            // is left out of the epoch.
            let uncounted_at = std::mem::take(&mut self.uncounted_at);
            let uncounted_ns = if uncounted_at == 0 {
                0.0
            } else {
                ticks_ns(now.wrapping_sub(uncounted_at))
            };
            let since_latest = ticks_ns(now.wrapping_sub(self.latest)) - uncounted_ns;
            if uncounted_ns > rules.gap_ns {
                // A pause after them, or jobs as long as one: the epoch
                // ends where the first of them began, and every counted job
                // had ended by then.
                let span_ns = ticks_ns(uncounted_at.wrapping_sub(self.started)) - self.skipped_ns;
                self.end_at_gap(rules, span_ns, self.jobs, self.expected_ns);
            } else if since_latest > rules.gap_ns && !self.preempted(rules, since_latest, &off_cpu)
            {
                // The jobs before the latest, and the code between them,
                // ran from `started` to `latest`: the latest one's end is
                // not known (nor is what came after it left out).
                let cut_ns = ticks_ns(self.latest.wrapping_sub(self.started)) - self.skipped_ns;
                let expected_ns = self.expected_ns - self.latest_expected_ns;
                self.end_at_gap(rules, cut_ns, self.jobs - 1, expected_ns);
            } else {
                self.skipped_ns += uncounted_ns;
                let elapsed = ticks_ns(now.wrapping_sub(self.started)) - self.skipped_ns;
                if elapsed >= rules.epoch_ns && self.jobs >= rules.epoch_jobs {
                    self.score(rules, elapsed / self.expected_ns);
                    self.started = 0;
                }
            }
        }
        if self.started == 0 {
            if !self.armed {
                self.other = self.next_arm(rules);
                self.armed = true;
                if self.last_arm != Some(self.other) {
                    self.last_arm = Some(self.other);
                    self.lead_in = rules.lead_in_jobs;
                }
            }
            if self.lead_in > 0 {
                self.lead_in -= 1;
                return self.other;
            }
            self.armed = false;
            self.started = now.max(1);
            self.off_cpu_at_start = off_cpu();
            self.jobs = 0;
            self.expected_ns = 0.0;
            self.skipped_ns = 0.0;
            self.uncounted_at = 0;
        }
        self.latest = now;
        self.jobs += 1;
        self.expected_ns += expected_ns;
        self.latest_expected_ns = expected_ns;
        self.other
    }

    /// A job without an estimate starts at `now`: with
    /// [`Rules::skip_uncounted`], the running epoch leaves out the time
    /// from here to its next counted job.
    pub(crate) fn uncounted(&mut self, rules: &Rules, now: u64) {
        if rules.skip_uncounted && self.started != 0 && self.uncounted_at == 0 {
            self.uncounted_at = now.max(1);
        }
    }

    /// At a gap of `gap_ns`: whether the caller's thread spent it waiting
    /// for a CPU, where that is read. The time off its CPU counts from the
    /// epoch's start or its last such gap, so a preemption counts for one
    /// gap only.
    fn preempted(
        &mut self,
        rules: &Rules,
        gap_ns: f64,
        off_cpu: impl Fn() -> Option<OffCpu>,
    ) -> bool {
        let (Some(then), Some(now)) = (self.off_cpu_at_start, off_cpu()) else {
            return false;
        };
        let waited_ns = now.off_cpu_ns.wrapping_sub(then.off_cpu_ns) as f64;
        let preempted = now.blocks == then.blocks && waited_ns >= gap_ns - rules.gap_ns;
        if preempted {
            self.off_cpu_at_start = Some(now);
        }
        preempted
    }

    /// Ends the running epoch at a gap: scored if its `jobs` before the
    /// gap, expected to take `expected_ns`, ran for `span_ns` of at least
    /// [`Rules::cut_epoch_ns`]. The next epoch has a lead-in again.
    fn end_at_gap(&mut self, rules: &Rules, span_ns: f64, jobs: u32, expected_ns: f64) {
        if span_ns >= rules.cut_epoch_ns && jobs >= rules.epoch_jobs {
            self.score(rules, span_ns / expected_ns);
        }
        self.started = 0;
        self.last_arm = None;
    }

    fn score(&mut self, rules: &Rules, cost: f64) {
        if self.warmed_up < rules.warm_up_epochs {
            self.warmed_up += 1;
            return;
        }
        // A plain mean until the moving average's weight takes over: the
        // first epoch alone does not set an arm's score for long.
        let arm = usize::from(self.other);
        let weight = rules.weight.max(1.0 / (self.epochs[arm] + 1) as f64);
        let average = &mut self.cost[arm];
        *average = Some(match *average {
            None => cost,
            Some(average) => average + weight * (cost - average),
        });
        self.epochs[arm] += 1;
    }

    /// The next epoch's arm: an arm not yet scored, else the preferred one
    /// but for the explored epochs.
    fn next_arm(&mut self, rules: &Rules) -> bool {
        let [Some(default), Some(other)] = self.cost else {
            // Not yet tried: after `first_try_after` scored epochs of the
            // default, and again that many epochs later if the try ended
            // in a pause unscored (where pauses are frequent, a try at
            // every epoch would run the other way most of the time).
            self.since_explored += 1;
            let tries = self.epochs[0] >= rules.first_try_after
                && self.since_explored >= rules.first_try_after;
            if tries {
                self.since_explored = 0;
            }
            return tries;
        };
        // The other way must be cheaper by the margin.
        let prefer_other = other < default * (1.0 - rules.margin);
        let (preferred, unpreferred) = if prefer_other {
            (other, default)
        } else {
            (default, other)
        };
        let every = if preferred * (1.0 + rules.far) < unpreferred {
            rules.explore_far_every
        } else {
            rules.explore_every
        };
        let risen = self
            .preferred_then
            .is_some_and(|then| preferred > then * (1.0 + rules.rise));
        self.since_explored += 1;
        let explore = risen || self.since_explored >= every;
        if explore {
            self.since_explored = 0;
            self.preferred_then = Some(preferred);
        } else if self.preferred_then.is_none() {
            self.preferred_then = Some(preferred);
        }
        prefer_other != explore
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    // The wake trials' rules: one epoch in 16 explores, always.
    use crate::wake_trials::RULES as FIXED;

    /// Runs `epochs` epochs of jobs, each expected to take 50 µs, that
    /// take `cost(other)` times that: returns how many epochs ran the
    /// other way.
    pub(crate) fn run(
        trials: &mut Trials,
        rules: &Rules,
        epochs: usize,
        cost: impl Fn(bool) -> f64,
    ) -> usize {
        // 1 tick = 1 ns; each run goes on where the last one stopped (0
        // is the clock value that means "no epoch").
        let mut now = trials.next.max(1);
        let mut other_epochs = 0;
        for _ in 0..epochs {
            let other = trials.job(rules, now, 50e3, 1.0, || None);
            other_epochs += usize::from(other);
            // The epoch's wall time scales with its arm's cost.
            let step = (50e3 * cost(other)) as u64;
            let jobs = (rules.epoch_ns as u64)
                .div_ceil(step)
                .max(rules.epoch_jobs as u64);
            // A lead-in first, if this job began one: its jobs, then the
            // epoch's.
            let rest = if trials.started == 0 {
                trials.lead_in + jobs as u32
            } else {
                jobs as u32 - 1
            };
            now += step;
            for _ in 0..rest {
                assert_eq!(
                    trials.job(rules, now, 50e3, 1.0, || None),
                    other,
                    "one arm per epoch"
                );
                now += step;
            }
        }
        trials.next = now;
        other_epochs
    }

    #[test]
    fn the_other_way_is_chosen_where_it_pays_and_the_default_is_still_tried() {
        let mut trials = Trials::default();
        let other = run(
            &mut trials,
            &FIXED,
            80,
            |other| if other { 1.5 } else { 1.8 },
        );
        let [default, other_cost] = trials.cost;
        assert!(other_cost.unwrap() < default.unwrap());
        // Every epoch but the last (still running) is scored on its arm.
        let [default_epochs, other_epochs] = trials.epochs;
        assert_eq!(default_epochs + other_epochs, 79);
        assert!((other as u64 - 1..=other as u64).contains(&other_epochs));
        // All but the explored epochs and the first, which tries the default.
        let explored = 80 / FIXED.explore_every as usize;
        assert!(
            (80 - explored - 2..=80 - explored).contains(&other),
            "the other way in {other} of 80 epochs"
        );
    }

    /// Asserts that over 80 epochs where the other way costs `other_cost`
    /// (against 1.8 by default) the trials took it only in the explored
    /// epochs and the second, which tries it.
    fn assert_default_kept(other_cost: f64) {
        let mut trials = Trials::default();
        let other = run(&mut trials, &FIXED, 80, |other| {
            if other {
                other_cost
            } else {
                1.8
            }
        });
        let explored = 80 / FIXED.explore_every as usize;
        assert!(
            (explored..=explored + 2).contains(&other),
            "the other way in {other} of 80 epochs"
        );
    }

    #[test]
    fn the_other_way_is_left_alone_where_it_costs() {
        assert_default_kept(2.5);
    }

    #[test]
    fn a_gain_within_the_margin_keeps_the_default() {
        assert_default_kept(1.79);
    }

    /// Runs 400 epochs whose costs scatter by up to 4 % either way
    /// (uniformly, a fixed seed) around 1.8 by default and `other_cost`
    /// the other way, as 12 ms epochs beside a busy process do: returns
    /// the share that ran the other way.
    fn share_the_other_way_beneath_noise(other_cost: f64) -> f64 {
        let seed = std::cell::Cell::new(0x9e37_79b9_7f4a_7c15_u64);
        let noise = || {
            // xorshift64: a uniform draw in [-1, 1).
            let mut x = seed.get();
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            seed.set(x);
            (x >> 11) as f64 / (1u64 << 52) as f64 - 1.0
        };
        let mut trials = Trials::default();
        let epochs = 400;
        let other = run(&mut trials, &FIXED, epochs, |other| {
            let cost = if other { other_cost } else { 1.8 };
            cost * (1.0 + 0.04 * noise())
        });
        other as f64 / epochs as f64
    }

    #[test]
    fn a_steady_gain_of_two_percent_beneath_noisy_epochs_is_taken_in_most_epochs() {
        // A 3 % margin over averages weighted 1/4 took it in about one
        // epoch in five: the gain a fixed budget kept beside a busy
        // process.
        let share = share_the_other_way_beneath_noise(1.8 * 0.98);
        assert!(
            share >= 0.7,
            "the other way in only {share:.2} of the epochs"
        );
    }

    #[test]
    fn a_steady_loss_of_two_percent_beneath_noisy_epochs_is_left_to_the_explored_epochs() {
        let share = share_the_other_way_beneath_noise(1.8 * 1.02);
        assert!(share <= 0.15, "the other way in {share:.2} of the epochs");
    }

    #[test]
    fn the_other_way_that_stops_paying_is_dropped_within_two_epochs() {
        let mut trials = Trials::default();
        run(
            &mut trials,
            &FIXED,
            40,
            |other| if other { 1.5 } else { 1.8 },
        );
        run(
            &mut trials,
            &FIXED,
            2,
            |other| if other { 3.0 } else { 1.8 },
        );
        let other = run(
            &mut trials,
            &FIXED,
            8,
            |other| if other { 3.0 } else { 1.8 },
        );
        assert!(other <= 1, "still the other way in {other} of 8 epochs");
    }

    #[test]
    fn the_other_way_that_starts_paying_is_found_by_the_explored_epochs() {
        let mut trials = Trials::default();
        run(
            &mut trials,
            &FIXED,
            40,
            |other| if other { 2.5 } else { 1.8 },
        );
        // Thirteen explorations, each weighted 1/10, move the other arm's
        // average (2.5, now 1.5) below the default's (1.8) by the margin.
        run(
            &mut trials,
            &FIXED,
            14 * FIXED.explore_every as usize,
            |other| {
                if other {
                    1.5
                } else {
                    1.8
                }
            },
        );
        let other = run(
            &mut trials,
            &FIXED,
            16,
            |other| if other { 1.5 } else { 1.8 },
        );
        assert!(other >= 14, "the other way in only {other} of 16 epochs");
    }

    #[test]
    fn an_epoch_with_a_pause_is_dropped_unscored() {
        let mut trials = Trials::default();
        let mut now = 1_000u64;
        for _ in 0..FIXED.epoch_jobs {
            trials.job(&FIXED, now, 50e3, 1.0, || None);
            now += 100_000;
        }
        // A pause longer than the gap, then the epoch would have ended.
        now += (FIXED.gap_ns as u64) * 2 + FIXED.epoch_ns as u64;
        trials.job(&FIXED, now, 50e3, 1.0, || None);
        assert_eq!(trials.epochs, [0, 0]);
        assert_eq!(trials.cost, [None, None]);
    }

    /// Runs an epoch's jobs with a gap of twice [`Rules::gap_ns`] after the
    /// first, the caller's thread read as `(blocks, ms off its CPU)` from
    /// `reads` (the first when the epoch begins, the second at the gap):
    /// returns the epochs scored, one if the epoch counted the gap (the
    /// jobs after it alone are too few for an epoch).
    fn epoch_with_a_gap(reads: &[Option<(u64, u64)>]) -> [u64; 2] {
        let read = std::cell::Cell::new(0);
        let off_cpu = || {
            let next = reads[read.get().min(reads.len() - 1)];
            read.set(read.get() + 1);
            next.map(|(blocks, ms)| OffCpu {
                blocks,
                off_cpu_ns: ms * 1_000_000,
            })
        };
        let mut trials = Trials::default();
        let mut now = 1_000u64;
        trials.job(&FIXED, now, 50e3, 1.0, off_cpu);
        now += (FIXED.gap_ns as u64) * 2;
        // Long enough an epoch counting the gap, too short one after it.
        let step = (FIXED.epoch_ns as u64 - FIXED.gap_ns as u64) / u64::from(FIXED.epoch_jobs);
        for _ in 0..=FIXED.epoch_jobs {
            trials.job(&FIXED, now, 50e3, 1.0, off_cpu);
            now += step;
        }
        trials.epochs
    }

    #[test]
    fn an_epoch_with_a_gap_the_caller_waited_for_a_cpu_through_is_scored() {
        // A 4 ms gap, 2 ms over the rule's: the thread waited 3 ms.
        assert_eq!(epoch_with_a_gap(&[Some((7, 10)), Some((7, 13))]), [1, 0]);
    }

    #[test]
    fn an_epoch_with_a_gap_the_caller_blocked_in_is_dropped() {
        assert_eq!(epoch_with_a_gap(&[Some((7, 10)), Some((8, 13))]), [0, 0]);
    }

    #[test]
    fn an_epoch_with_a_gap_the_caller_spent_running_other_code_is_dropped() {
        assert_eq!(epoch_with_a_gap(&[Some((7, 10)), Some((7, 11))]), [0, 0]);
    }

    #[test]
    fn where_the_system_does_not_say_a_gap_drops_the_epoch() {
        assert_eq!(epoch_with_a_gap(&[None]), [0, 0]);
    }

    /// The count the gap rule reads, in the settings it tells apart: a
    /// caller asleep (an engine's pause) blocked; one that a busy
    /// process on its CPU preempted, or that slept at a pool's join, did
    /// not.
    #[cfg(target_os = "linux")]
    #[test]
    #[cfg_attr(miri, ignore = "Miri does not run other processes")]
    fn a_caller_that_sleeps_blocks_outside_the_pool_and_one_preempted_or_parked_at_a_join_does_not()
    {
        use std::time::{Duration, Instant};

        let blocks = || {
            OffCpu::now()
                .expect("Linux counts a thread's blocks")
                .blocks
        };
        testkit::watched("blocks outside the pool", move |stage| {
            stage.set("sleeping 1 ms");
            let before = blocks();
            std::thread::sleep(Duration::from_millis(1));
            assert_ne!(blocks(), before, "a sleep is a block");

            stage.set("a job whose worker keeps the caller waiting 20 ms");
            // A fixed budget: the worker takes its share whatever the
            // load and the other tests' callers.
            let pool = crate::Pool::builder()
                .workers(1)
                .spin_policy(crate::SpinPolicy::Fixed(0))
                .build()
                .unwrap();
            pool.run(|_, _| {});
            // On a loaded machine each of the caller's yields before it
            // parks may wait a time slice: longer waits until it parks.
            let mut wait = Duration::from_millis(20);
            loop {
                let before = blocks();
                let parks = crate::sleep::parks_in_pool();
                pool.run(|participant, participants| {
                    // The caller is the last participant.
                    if participant + 1 < participants {
                        std::thread::sleep(wait);
                    }
                });
                if crate::sleep::parks_in_pool() > parks {
                    assert_eq!(blocks(), before, "a park at a join is the pool's");
                    break;
                }
                assert!(
                    wait < Duration::from_secs(2),
                    "the caller never slept at its join, up to a {wait:?} wait"
                );
                wait *= 2;
            }

            stage.set("spinning beside a busy process pinned to this CPU");
            let cpu = pool_topo::process_affinity_cpus()[0];
            let busy = testkit::BusyProcesses::start(1).expect("a busy process");
            pool_topo::pin_thread(busy.pids()[0], &[cpu]).expect("pin the busy process");
            pool_topo::pin_current_thread(&[cpu]).expect("pin the test thread");
            let start = crate::timeslice::Look::now().unwrap();
            let before = OffCpu::now().unwrap();
            // Three preemptions and 1 ms off the CPU: three are not always
            // 1 ms, since the threads of other tests preempt this one for
            // microseconds each (3 preemptions, 0.47 ms off the CPU, under
            // ThreadSanitizer on a 2-vCPU AMD EPYC host), but the busy
            // process's turns add up.
            let deadline = Instant::now() + Duration::from_secs(20);
            let after = loop {
                let now = OffCpu::now().unwrap();
                let preempted = crate::timeslice::Look::now().unwrap().involuntary;
                if preempted >= start.involuntary + 3
                    && now.off_cpu_ns - before.off_cpu_ns >= 1_000_000
                {
                    break now;
                }
                assert!(
                    Instant::now() < deadline,
                    "preempted {} times in 20 s beside a busy process on CPU {cpu}, \
                     off the CPU for only {:?}",
                    preempted - start.involuntary,
                    Duration::from_nanos(now.off_cpu_ns - before.off_cpu_ns)
                );
                std::hint::spin_loop();
            };
            assert_eq!(after.blocks, before.blocks, "a preemption is not a block");
        });
    }

    #[test]
    fn an_epoch_cut_at_a_pause_before_a_job_without_an_estimate_counts_up_to_its_latest_job() {
        // Jobs expected to take 50 µs, one every 100 µs: a cost of 2. The
        // job without an estimate comes after the pause, so none of the
        // epoch's time is its own (once, its 1 ms was taken off the epoch
        // too: a cost of 1.49).
        let rules = Rules {
            skip_uncounted: true,
            cut_epoch_ns: 1e6,
            ..FIXED
        };
        let mut trials = Trials::default();
        let mut now = 1_000u64;
        for _ in 0..40 {
            trials.job(&rules, now, 50e3, 1.0, || None);
            now += 100_000;
        }
        now += 3_000_000;
        trials.uncounted(&rules, now);
        now += 1_000_000;
        trials.job(&rules, now, 50e3, 1.0, || None);
        assert_eq!(trials.epochs, [1, 0]);
        let cost = trials.cost[0].unwrap();
        assert!((cost - 2.0).abs() < 0.01, "the epoch cost {cost:.3}");
    }

    #[test]
    fn a_job_without_an_estimate_runs_the_default_way_and_is_not_counted() {
        let trials = ArmTrials::new(FIXED);
        assert!(!trials.job(1_000, 0, 1.0, false));
        assert_eq!(trials.trials().cost, [None, None]);
        assert_eq!(trials.trials().jobs, 0);
    }
}
