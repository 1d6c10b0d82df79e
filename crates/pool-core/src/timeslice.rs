//! Yield between jobs when the time slice is nearly used.
//!
//! A worker that shares its CPU with another process's CPU-bound thread
//! runs in turns of one time slice (on Linux with `HZ=250` beside one busy
//! thread: 4 ms on, 4 ms off). If its turn ends inside a grain of a row
//! job, the caller's join waits out the other thread's whole turn: the
//! grain's inputs live in the caller's frame, so nobody else can finish
//! it. A worker is inside some job most of the time it runs, so without
//! care almost every turn ends that way, and a two-thread decode beside a
//! busy process ran no faster than the serial loop.
//!
//! So a worker watches its turns: before it takes a seat in a
//! withdrawable job (`tickets.rs`), it looks at its own scheduling
//! (`getrusage(RUSAGE_THREAD)`: CPU time and involuntary context switches)
//! and, if its current turn has run three quarters of the turns it has
//! been given lately, it yields first. Its turn then ends between jobs,
//! where the caller withdraws the seat and goes on alone instead of
//! waiting. The rest of the turn is lost to the worker: Linux 6.18
//! charges a yield beside a CPU-bound thread as if the turn had run
//! (docs/design.md, "Where the worker's turns go beside a busy process"),
//! which is still far cheaper than a join that waits out a whole turn.
//!
//! Only under foreign load (`load.rs`), where turns are short and the
//! look (one system call, ~0.3 µs) pays; and only on Linux, whose
//! `RUSAGE_THREAD` gives a thread's own switch counts (the `libc` crate
//! has no such constant for Android). Elsewhere, and under
//! loom and Miri, the watch never yields, and a caller below normal
//! priority does not wake a parked worker under foreign load
//! (`contention.rs`), since that worker's preemptions would stall its
//! joins. Measured: docs/design.md, "Yielding at the end of a turn".

/// A turn this short is not a time slice worth planning around (a wake-up
/// preemption, or a machine whose slices are shorter than a row job).
const SHORTEST_TURN_NS: u64 = 500_000;

/// One look at the calling thread's scheduling.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Look {
    /// Monotonic wall time.
    pub(crate) wall_ns: u64,
    /// The thread's CPU time.
    pub(crate) cpu_ns: u64,
    /// The thread's involuntary context switches (preempted).
    pub(crate) involuntary: u64,
    /// The thread's voluntary ones (parked, yielded, blocked).
    pub(crate) voluntary: u64,
}

impl Look {
    /// The calling thread's look now, where the system gives one.
    pub(crate) fn now() -> Option<Look> {
        #[cfg(all(target_os = "linux", not(miri), not(loom)))]
        {
            // SAFETY: `rusage` and `timespec` are plain C structs; all-zero
            // is a valid value of each.
            let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
            // SAFETY: a valid out-pointer for the calling thread's usage.
            if unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut usage) } != 0 {
                return None;
            }
            // SAFETY: as above.
            let mut now: libc::timespec = unsafe { std::mem::zeroed() };
            // SAFETY: a valid out-pointer; CLOCK_MONOTONIC always exists.
            if unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now) } != 0 {
                return None;
            }
            let ns = |s: libc::time_t, sub_ns: i64| (s as u64) * 1_000_000_000 + sub_ns as u64;
            Some(Look {
                wall_ns: ns(now.tv_sec, now.tv_nsec as i64),
                cpu_ns: ns(usage.ru_utime.tv_sec, usage.ru_utime.tv_usec as i64 * 1000)
                    + ns(usage.ru_stime.tv_sec, usage.ru_stime.tv_usec as i64 * 1000),
                involuntary: usage.ru_nivcsw as u64,
                voluntary: usage.ru_nvcsw as u64,
            })
        }
        #[cfg(not(all(target_os = "linux", not(miri), not(loom))))]
        {
            None
        }
    }
}

/// Whether this build can watch its turns (see the module docs).
pub(crate) const WATCHES_TURNS: bool = cfg!(all(target_os = "linux", not(miri), not(loom)));

/// One worker's record of its turns on the CPU. Only that worker touches
/// it: no atomics, nothing for loom to see.
#[derive(Debug, Default)]
pub(crate) struct TurnWatch {
    last: Option<Look>,
    /// When the current turn began (estimated: the last look minus the
    /// CPU time used since it, where the look shows a switch).
    turn_began_ns: u64,
    /// The turns the scheduler has been giving lately (a running average
    /// of those that ended in a preemption; 0: none seen yet).
    typical_turn_ns: u64,
}

impl TurnWatch {
    /// Before a seat: a look under foreign load, and a yield if the turn
    /// is nearly used. Returns whether it yielded.
    #[inline]
    pub(crate) fn before_seat(&mut self) -> bool {
        if !WATCHES_TURNS || crate::load::foreign_cpus() <= 0.5 {
            return false;
        }
        self.look_and_yield(Look::now, std::thread::yield_now)
    }

    #[cold]
    fn look_and_yield(&mut self, look: impl Fn() -> Option<Look>, give_way: impl FnOnce()) -> bool {
        let Some(now) = look() else {
            return false;
        };
        if !self.nearly_used(now) {
            return false;
        }
        give_way();
        if let Some(after) = look() {
            self.fresh_turn(after);
        }
        true
    }

    /// Takes `now` into the record; true if the current turn has run
    /// three quarters of the typical one.
    pub(crate) fn nearly_used(&mut self, now: Look) -> bool {
        let Some(last) = self.last.replace(now) else {
            self.turn_began_ns = now.wall_ns;
            return false;
        };
        // The current turn began at most this CPU time ago, if a switch
        // came between the two looks.
        let began = now
            .wall_ns
            .saturating_sub(now.cpu_ns.saturating_sub(last.cpu_ns));
        if now.involuntary != last.involuntary {
            // Preempted: the turn before ended after the last look.
            let turn = last.wall_ns.saturating_sub(self.turn_began_ns);
            self.typical_turn_ns = if self.typical_turn_ns == 0 {
                turn
            } else {
                (self.typical_turn_ns * 3 + turn) / 4
            };
            self.turn_began_ns = began;
        } else if now.voluntary != last.voluntary {
            // Parked or yielded: a new turn, but nothing learned of the
            // scheduler's slices.
            self.turn_began_ns = began;
        }
        self.typical_turn_ns >= SHORTEST_TURN_NS
            && now.wall_ns.saturating_sub(self.turn_began_ns) >= self.typical_turn_ns / 4 * 3
    }

    /// After a yield: a new turn starts at `now`.
    pub(crate) fn fresh_turn(&mut self, now: Look) {
        self.last = Some(now);
        self.turn_began_ns = now.wall_ns;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    fn look(wall_ms: f64, cpu_ms: f64, involuntary: u64, voluntary: u64) -> Look {
        Look {
            wall_ns: (wall_ms * MS as f64) as u64,
            cpu_ns: (cpu_ms * MS as f64) as u64,
            involuntary,
            voluntary,
        }
    }

    /// Four turns of 4 ms on, 4 ms off, looked at every 0.1 ms while on.
    fn taught_4ms_turns(watch: &mut TurnWatch) -> (f64, f64, u64) {
        let (mut wall, mut cpu, mut preempted) = (0.0, 0.0, 0);
        for _ in 0..4 {
            for _ in 0..40 {
                watch.nearly_used(look(wall, cpu, preempted, 0));
                wall += 0.1;
                cpu += 0.1;
            }
            wall += 4.0;
            preempted += 1;
        }
        (wall, cpu, preempted)
    }

    #[test]
    fn a_worker_given_4ms_turns_yields_after_3ms_of_a_turn_and_not_before() {
        let mut watch = TurnWatch::default();
        let (mut wall, mut cpu, preempted) = taught_4ms_turns(&mut watch);
        assert!(
            (3_800_000..=4_000_000).contains(&watch.typical_turn_ns),
            "learned {} ns",
            watch.typical_turn_ns
        );
        let mut yielded_at = None;
        for step in 0..40 {
            if watch.nearly_used(look(wall, cpu, preempted, 0)) {
                yielded_at = Some(step);
                break;
            }
            wall += 0.1;
            cpu += 0.1;
        }
        let step = yielded_at.expect("never yielded in a 4 ms turn");
        assert!((28..=31).contains(&step), "yielded after {step} x 0.1 ms");
    }

    #[test]
    fn a_yield_starts_a_fresh_turn() {
        let mut watch = TurnWatch::default();
        let (wall, cpu, preempted) = taught_4ms_turns(&mut watch);
        let mut yields = 0;
        let taken = watch.look_and_yield(
            || Some(look(wall + 3.5, cpu + 3.5, preempted, 0)),
            || yields += 1,
        );
        assert!(taken && yields == 1);
        assert!(!watch.nearly_used(look(wall + 3.6, cpu + 3.6, preempted, 0)));
    }

    #[test]
    fn a_worker_never_preempted_never_yields() {
        let mut watch = TurnWatch::default();
        for i in 0..10_000 {
            let t = i as f64 * 0.1;
            assert!(!watch.nearly_used(look(t, t, 0, 0)));
        }
    }

    #[test]
    fn parking_starts_a_turn_without_teaching_a_slice() {
        let mut watch = TurnWatch::default();
        // Runs of 5 ms ended by parking (voluntary), 20 ms asleep.
        let (mut wall, mut cpu) = (0.0, 0.0);
        for parked in 0..5 {
            for _ in 0..50 {
                assert!(!watch.nearly_used(look(wall, cpu, 0, parked)));
                wall += 0.1;
                cpu += 0.1;
            }
            wall += 20.0;
        }
        assert_eq!(watch.typical_turn_ns, 0);
    }

    #[test]
    fn turns_shorter_than_half_a_millisecond_are_not_planned_around() {
        let mut watch = TurnWatch::default();
        let (mut wall, mut cpu) = (0.0, 0.0);
        for preempted in 0..20 {
            for _ in 0..3 {
                assert!(!watch.nearly_used(look(wall, cpu, preempted, 0)));
                wall += 0.1;
                cpu += 0.1;
            }
            wall += 0.3;
        }
        assert!(watch.typical_turn_ns < SHORTEST_TURN_NS);
    }

    #[test]
    fn this_thread_can_be_looked_at_where_the_watch_runs() {
        let look = Look::now();
        assert_eq!(look.is_some(), WATCHES_TURNS);
        if let (Some(a), Some(b)) = (look, Look::now()) {
            assert!(b.wall_ns >= a.wall_ns && b.cpu_ns >= a.cpu_ns);
        }
    }
}
