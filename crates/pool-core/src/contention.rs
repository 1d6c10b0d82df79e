//! The adaptive policy's view of the machine, for the dispatcher: how many
//! workers a job invites given the CPUs other processes and this
//! process's own callers keep busy, whether a wait looked like foreign
//! load, and stepping off a CPU shared with an invited worker. Kept out of
//! `dispatch.rs` so that the publish/join protocol reads on its own.

use crate::dispatch::Shared;
use crate::load;
use crate::spinners;
use crate::sync::process;

impl Shared {
    /// The adaptive policy's share of the CPUs: the workers a job may
    /// invite when other processes keep CPUs busy (`load.rs`), and none
    /// when this process's own callers (two or more threads that dispatched
    /// within the linger) already fill its CPUs: each then runs its jobs
    /// itself, as a
    /// serial loop would, instead of handing work to workers that could
    /// only take CPU time from another caller. Measured with two callers on
    /// 2 CPUs: 0.77-0.83x serial before.
    #[inline]
    pub(crate) fn fit_to_free_cpus(
        &self,
        invited: usize,
        now: u64,
        inside_any_pool: bool,
    ) -> usize {
        if invited == 0 {
            return 0;
        }
        let invited = invited.min(self.invite_cap());
        let invited = load::fit_to_free_cpus(invited, self.settings.usable_cpus);
        self.fit_to_own_callers(invited, now, inside_any_pool)
    }

    /// The adaptive policy's share for a withdrawable job: the invite cap
    /// and this process's own callers; when other processes leave a CPU
    /// for every worker, all of them, or none for a short job while the
    /// fork trials find the caller alone cheaper (`fork_trials.rs`); and
    /// when other processes leave no CPU for a worker (`load.rs`), only
    /// the workers still awake, unless the job is long
    /// ([`crate::WORTH_A_WAKE`]), the load leaves the caller its own CPU
    /// (`load::caller_short_of_a_cpu`), and either workers end their time
    /// slices between jobs (`timeslice.rs`, Linux) or the caller is not
    /// below normal priority; or unless the wake trials wake them
    /// (`wake_trials.rs`): by default where the load leaves the caller its
    /// own CPU, else where waking measured cheaper. A worker that has not
    /// started is withdrawn, not waited for, so an awake one costs nothing
    /// if it gets no CPU; but waking a parked one then puts it on a busy
    /// CPU, most often the caller's own (with no idle CPU the scheduler
    /// places a wakee beside its waker), where it takes the caller's time
    /// and few grains: for the short jobs of a short token that costs more
    /// than it brings, unless the scheduler gives the worker a share of the
    /// busy process's CPU instead, which the trials find out. A long job repays
    /// the wake: the worker gets a share of a busy CPU for the rest of the
    /// job. A niced caller's worker gets too small a share (nice 10: about
    /// a tenth of a CPU) to repay the joins it delays, unless it delays
    /// none: a worker that ends its turns between jobs only adds its share.
    /// Where the caller itself waits for its CPU, long jobs go by the
    /// trials too: beside three busy processes on 2 CPUs, waking for
    /// every long job cost 5-12 % of the decode. Where it has waited for
    /// one in every sample of the last 150 ms (`load::steadily_short_of_a_cpu`:
    /// processes that never block hold every CPU), the caller runs the job
    /// alone, as a serial loop would: the trials' 12 ms epochs vary there
    /// by more than their margin, and the workers they invited cost
    /// stories110M Q4_0 2-7 % against the serial loop. The measurements
    /// behind each rule: docs/design.md, "Withdrawable invitations",
    /// "Yielding at the end of a turn", "Waking by trial", "Waking for long
    /// jobs beside three busy processes", "The caller alone beside steady
    /// load" and "Forking by trial".
    #[inline]
    pub(crate) fn fit_optional(
        &self,
        invited: usize,
        now: u64,
        inside_any_pool: bool,
        expected_ns: u64,
    ) -> usize {
        let invited = self.fit_to_own_callers(invited, now, inside_any_pool);
        let free = load::fit_to_free_cpus(invited, self.settings.usable_cpus);
        if free >= invited {
            // A CPU for every worker: the fork trials say whether a short
            // job's fork-join pays on this host now.
            if invited > 0
                && self
                    .fork_trials
                    .run_inline(now, expected_ns, self.ns_per_tick)
            {
                return 0;
            }
            return invited;
        }
        let foreign = load::foreign_cpus();
        if load::steadily_short_of_a_cpu(foreign, self.settings.usable_cpus) {
            // Other processes hold every CPU, the caller's too, and keep
            // them: a worker only adds a thread for the scheduler to share
            // them with, and a join waits whenever it is preempted inside
            // a grain. The caller alone is a serial loop.
            return 0;
        }
        // Every job beside foreign load counts in the trials, long or short,
        // worker parked or not: an epoch's cost covers all its time.
        let caller_short = load::caller_short_of_a_cpu(foreign, self.settings.usable_cpus);
        let wake = self
            .wake_trials
            .wake_parked(now, expected_ns, self.ns_per_tick, caller_short);
        let long = expected_ns >= crate::WORTH_A_WAKE.as_nanos() as u64;
        if wake
            || (long
                && !caller_short
                && (crate::timeslice::WATCHES_TURNS || !crate::priority::below_normal_priority()))
        {
            return invited;
        }
        // Relaxed: a hint; a worker parking just now is withdrawn anyway.
        let awake = self.slots[free..invited]
            .iter()
            .take_while(|slot| !slot.parked.load(crate::sync::Ordering::Relaxed))
            .count();
        free + awake
    }

    /// The invite cap and this process's own callers, not other
    /// processes' load.
    #[inline]
    pub(crate) fn fit_to_own_callers(
        &self,
        invited: usize,
        now: u64,
        inside_any_pool: bool,
    ) -> usize {
        let invited = invited.min(self.invite_cap());
        if invited == 0 || inside_any_pool {
            return invited;
        }
        let window = self.settings.linger_ticks.load(process::Ordering::Relaxed);
        let callers = spinners::recent_callers(now, window);
        if callers >= 2 && callers >= spinners::spinner_limit() {
            0
        } else {
            invited
        }
    }

    /// The most workers a job invites: all of them under a fixed budget;
    /// under the adaptive policy never more than the CPUs besides the
    /// caller's, so a job on an oversubscribed pool does not wait for
    /// workers that have no CPU to run on (measured on 2 CPUs with 3-4
    /// participants: an empty fork-join 3.4-4.2 µs before, 0.6-0.7 µs
    /// after; the tiny decode token's overhead halved).
    #[inline]
    pub(crate) fn invite_cap(&self) -> usize {
        if self.settings.linger_ns.load(process::Ordering::Relaxed) == 0 {
            self.slots.len()
        } else {
            self.slots
                .len()
                .min(self.settings.usable_cpus.saturating_sub(1))
        }
    }

    /// Whether a job's participants can outnumber the CPUs: an
    /// oversubscribed pool under a fixed budget (which invites every
    /// worker). Under the adaptive policy the invite cap keeps every job
    /// within the CPUs, so its threads wait as a fitting pool's do.
    #[inline]
    pub(crate) fn jobs_oversubscribed(&self) -> bool {
        self.settings.oversubscribed
            && self.settings.linger_ns.load(process::Ordering::Relaxed) == 0
    }

    /// After a wait that had to yield: if an invited worker last noted
    /// this caller's CPU as its own, the two share a CPU the balancer will
    /// not split (`colocation.rs`): the worker moves off it, or, pinned
    /// there, the caller does.
    #[cold]
    pub(crate) fn step_off_shared_cpu(&self, invited: usize) {
        if self.jobs_oversubscribed() {
            // More threads than CPUs: sharing is the plan, not an accident.
            return;
        }
        let Some(cpu) = crate::colocation::current_cpu() else {
            return;
        };
        let Some(slot) = self.slots[..invited]
            .iter()
            .find(|slot| slot.counters.cpu.get() == cpu)
        else {
            return;
        };
        // A worker that cannot move (pinned there) leaves the caller to
        // step off, unless another caller of this process is busy: its CPU
        // is then the one the caller would land on, and two callers on one
        // CPU stay there (both cache-hot) while the pinned worker's CPU
        // goes idle once its job ends. Two caller threads with two pools
        // pinned by the user to the same CPU, on 2 CPUs (three-token
        // bursts, stories15M Q4_0): 0.84-0.93x two serial loops before,
        // 0.95-1.13x after.
        if slot.counters.cpu.move_off(cpu)
            || (!self.another_caller_recent() && crate::colocation::step_off(cpu))
        {
            self.caller_counters.moves.add(1);
        }
    }

    /// Whether another thread of this process dispatched within the
    /// linger (the default one under a fixed budget) or is inside a job
    /// now: then the CPU a caller would step off to is most likely that
    /// caller's.
    fn another_caller_recent(&self) -> bool {
        let default = crate::DEFAULT_LINGER.as_nanos() as f64 / self.ns_per_tick;
        let window = self
            .settings
            .linger_ticks
            .load(process::Ordering::Relaxed)
            .max(default as u64);
        spinners::recent_callers(crate::clock::ticks(), window) >= 2
    }

    /// After a withdrawn invitation: a worker that did not take its seat
    /// because it is queued behind this caller on the caller's own CPU
    /// moves off it, as after a yielded wait. Between tokens with idle
    /// gaps the two take turns on one CPU (the worker parks where the
    /// caller ran, and its wake-up is placed beside its waker) while the
    /// other CPU stands idle, and a caller that withdraws never waits, so
    /// the yielded-wait check never saw it: on 2 CPUs with 20 ms between
    /// tokens, the worker ran only while the caller slept and the caller
    /// did every token alone, 0.74-0.89x the serial loop (its own CPU time
    /// 12-30 % above the loop's), against 1.05-1.22x with the two pinned
    /// apart.
    ///
    /// Beside foreign load the other CPU is a busy process's, and there
    /// the worker gets half of it. Before workers ended their time slices
    /// between jobs (`timeslice.rs`) the move measured worse: preempted
    /// inside a grain, the worker held the join for the busy process's
    /// whole turn. Where they do (Linux), a worker left on the caller's
    /// CPU only takes the caller's time: beside a busy process on one of
    /// 2 CPUs the scheduler left it there for whole 120 ms samples, the
    /// caller preempted 20-36 times a sample and the decode at 0.8-0.95x
    /// the serial loop, against 1.1-1.25x in the samples where it sat on
    /// the busy process's CPU (docs/design.md, "Caller and worker on one
    /// CPU").
    #[cold]
    pub(crate) fn step_off_after_withdrawal(&self, invited: usize) {
        if !crate::timeslice::WATCHES_TURNS && load::foreign_cpus() > 0.5 {
            return;
        }
        self.step_off_shared_cpu(invited);
    }

    /// Foreign-load detection: a barrier wait far longer than the caller's
    /// own share (and than a wake-up) means participants are not being
    /// scheduled; spinners then back off.
    #[inline]
    pub(crate) fn note_contention(&self, waited_ticks: u64, waited_ns: u64, share_ticks: u64) {
        /// Longer than a futex wake-up: below this a wait is never foreign load.
        const CONTENDED_WAIT_NS: u64 = 200_000;
        self.set_contended(
            waited_ns > CONTENDED_WAIT_NS && waited_ticks > share_ticks.saturating_mul(8),
        );
    }

    /// A wait too short to read a clock is never foreign load: it clears
    /// the mark a long wait left (else balanced jobs, whose joins are all
    /// short, would keep spinners backing off forever).
    #[inline]
    pub(crate) fn note_short_wait(&self) {
        self.set_contended(false);
    }

    /// The foreign-load mark, written only on a change (a load otherwise:
    /// the line stays shared with the spinners that read it).
    #[inline]
    fn set_contended(&self, contended: bool) {
        let flag = &self.settings.contended;
        if flag.load(process::Ordering::Relaxed) != contended {
            flag.store(contended, process::Ordering::Relaxed);
        }
    }

    /// Whether other processes keep so many CPUs busy that this pool's
    /// threads do not each have one: then a spinning caller may be holding
    /// the very CPU a worker needs, as when oversubscribed.
    #[inline]
    pub(crate) fn crowded(&self) -> bool {
        load::crowded(
            load::foreign_cpus(),
            self.slots.len() + 1,
            self.settings.usable_cpus,
        )
    }

    /// Whether the last barrier wait looked like foreign load.
    pub(crate) fn is_contended(&self) -> bool {
        self.settings.contended.load(process::Ordering::Relaxed)
    }
}
