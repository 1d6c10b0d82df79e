//! A barrier inside a job: [`Pool::run_phased`].
//!
//! ggml runs a whole graph as one parallel region with a barrier between
//! operations; a fork-join per operation pays the publish half (tickets,
//! fence, wake check) every time. `run_phased` publishes once and lets the
//! participants meet at [`JobBarrier::wait`] as often as they need.
//!
//! # Misuse cannot hang
//!
//! A barrier that one participant never reaches would wait for ever. Here
//! every participant that leaves the job (its closure returned or
//! panicked) says so, and a participant waiting at a barrier that a
//! departed participant can no longer reach is released: its `wait`
//! unwinds. `run_phased` then re-raises the first real panic (the
//! caller's own first, as [`Pool::run`] does), or, when nobody panicked,
//! panics with a message saying the participants passed different counts
//! of barriers.
//!
//! # Memory ordering
//!
//! The barrier is one monotonic arrival count: barrier `k` (from 0) of a
//! job is complete when `arrivals` reaches `(k + 1) * n`. No reset, no
//! separate generation word: the waiters spin on the line the arrivals
//! write, so an episode costs one line transfer per arrival plus the
//! waiters' re-reads (a count and a generation on two lines cost one
//! transfer more, measured below in `docs/benchmarks.md`).
//!
//! - **arrive**: each participant's `arrivals.fetch_add(AcqRel)`. The
//!   arrivals form one release sequence, so whoever reads a count at or
//!   past its target (the last arriver through its own RMW, a waiter
//!   through its `Acquire` load) acquires every participant's writes
//!   before the barrier. (A `Relaxed` arrival is the seeded bug
//!   `BarrierArrivalRelaxed`: a participant past the barrier may then miss
//!   a write made before it.)
//! - A participant's episode is its own arrival's: nobody reaches barrier
//!   `k + 1` before all `n` arrivals of barrier `k`, so the tickets
//!   `k * n .. (k + 1) * n` all belong to barrier `k`, and a fast
//!   participant's next arrival only moves the count further past the
//!   target of those still leaving barrier `k`.
//! - **leave**: `left.fetch_add(Release)` after a participant's last
//!   barrier; a waiter that loads `left` with `Acquire` and then re-loads
//!   `arrivals` sees any arrival the leaver made before leaving, so a
//!   barrier that did complete is never taken for an abandoned one.
//! - `broken`: set `Release` by whoever finds the barrier abandoned, loaded
//!   `Acquire`; it only makes later waits unwind sooner.
//! - **sleep**: a waiter that has waited [`sleep::SLEEP_AFTER`] parks,
//!   announced by a sleeper count in the arrival word itself, so the last
//!   arrival's RMW sees it (no fence); a departure writes `left`, and
//!   pairs fences with the sleeper (`sleep.rs`).
//!
//! The count would overflow after 2^64 arrivals, which no job lives to see.

use std::any::Any;
use std::panic::{self, AssertUnwindSafe};

use crossbeam_utils::CachePadded;

use crate::clock;
use crate::dispatch::{drop_payload, OVERSUBSCRIBED_SPINS_BEFORE_YIELD};
use crate::pool::Pool;
use crate::seeded::SeededBug;
use crate::sleep::{self, Sleepers};
use crate::sync::process::{self, UnsafeSliceCell};
use crate::sync::{
    lock, spin_loop, thread, AtomicBool, AtomicU64, AtomicUsize, Mutex, Ordering, SPIN_SCALE_SHIFT,
};

/// Spins before a barrier waiter yields its CPU when every thread has one
/// (as the caller's join wait: a participant it waits for may be queued on
/// this very CPU).
const SPINS_BEFORE_YIELD: u32 = 512;

/// The unwind payload of a participant released from an abandoned barrier.
/// Never reaches the caller: `run_phased` raises the real cause instead.
struct Abandoned;

/// State shared by one `run_phased` job's participants; lives on the
/// caller's stack for the job.
struct PhaseState {
    /// Arrivals at all of the job's barriers so far (module docs), in the
    /// low bits ([`sleep::ARRIVALS`]); participants asleep at a barrier
    /// in the top ones ([`sleep::SLEEPER`] each).
    arrivals: CachePadded<AtomicU64>,
    /// Participants whose closure has returned or unwound.
    left: AtomicUsize,
    broken: AtomicBool,
    /// The fewest and most barriers a departed participant passed.
    passed: Mutex<(usize, usize)>,
    /// The first real panic of the caller (idx `n - 1`) and of a worker.
    caller_panic: Mutex<Option<Box<dyn Any + Send>>>,
    worker_panic: Mutex<Option<Box<dyn Any + Send>>>,
    yield_after: u32,
    /// Participants that waited long enough to park (`sleep.rs`).
    sleepers: Sleepers,
    /// Converts `clock::ticks` to ns for the sleep check.
    ns_per_tick: f64,
    /// The seeded bug `BarrierArrivalRelaxed`.
    arrive_relaxed: bool,
    /// The seeded bug `MissingDepartureFence`.
    departure_fence_dropped: bool,
}

/// The barrier a [`Pool::run_phased`] job's participants share. Every
/// participant must call [`wait`](JobBarrier::wait) the same number of
/// times; see `run_phased` for what happens when they do not.
pub struct JobBarrier<'a> {
    state: &'a PhaseState,
    idx: usize,
    n: usize,
    passed: usize,
}

impl JobBarrier<'_> {
    /// Waits until every participant of the job has called `wait` as many
    /// times as this one. Everything a participant wrote before its call
    /// is visible to every participant after theirs. With one participant
    /// (an inline or nested run) it returns at once.
    ///
    /// # Panics
    ///
    /// Unwinds (with a payload that `run_phased` replaces by the real
    /// cause) when a participant left the job without reaching this
    /// barrier: it panicked, or it called `wait` fewer times.
    #[inline]
    pub fn wait(&mut self) {
        self.passed += 1;
        if self.n > 1 {
            self.state.wait(self.n);
        }
    }

    /// The barriers this participant has passed so far.
    pub fn passed(&self) -> usize {
        self.passed
    }

    /// This participant's index and the job's participant count.
    pub fn participant(&self) -> (usize, usize) {
        (self.idx, self.n)
    }

    /// The job this barrier belongs to, as an address (for `PhaseOutput`).
    fn job(&self) -> usize {
        self.state as *const PhaseState as usize
    }
}

/// A phase's output in a [`Pool::run_phased`] job: each participant writes
/// its own part in one phase, and every participant reads all of it in the
/// next, with no `unsafe`, atomics or locks in the job's code.
///
/// Phases alternate: with an even number of barriers passed
/// ([`JobBarrier::passed`]) a participant may [`write`](PhaseOutput::write)
/// its part (elements `len * idx / n .. len * (idx + 1) / n`); with an
/// odd number, [`read`](PhaseOutput::read) the whole. A barrier completes
/// only when every participant reached it, so no read ever overlaps a
/// write: a call in the wrong parity panics, as does using one output in
/// two jobs at once. Both calls borrow the barrier mutably, so no
/// `wait` can happen inside them.
///
/// ```
/// use pool_core::{PhaseOutput, Pool};
/// let pool = Pool::new(2);
/// let squares = PhaseOutput::new(vec![0u64; 100]);
/// let sums = PhaseOutput::new(vec![0u64; 3]);
/// pool.run_phased(|_, _, barrier| {
///     squares.write(barrier, |start, part| {
///         for (i, v) in part.iter_mut().enumerate() {
///             *v = ((start + i) * (start + i)) as u64;
///         }
///     });
///     barrier.wait(); // every square is written
///     let total: u64 = squares.read(barrier, |all| all.iter().sum());
///     barrier.wait(); // sums are written in an even phase
///     sums.write(barrier, |_, part| part.fill(total));
/// });
/// assert_eq!(squares.into_vec()[99], 99 * 99);
/// assert!(sums.into_vec().iter().all(|&s| s == 328_350));
/// ```
pub struct PhaseOutput<T> {
    values: Box<[UnsafeSliceCell<T>]>,
    /// The job using it (`JobBarrier::job`), 0 before the first use.
    job: process::AtomicUsize,
}

// SAFETY: participants write disjoint parts (by their distinct indices) in
// even phases and read in odd phases; a barrier completes only when every
// participant reached it, so no read overlaps a write and no two writes
// overlap (the parity and job checks in `write`/`read`). Values move
// between threads (`T: Send`) and are shared when read (`T: Sync`).
unsafe impl<T: Send + Sync> Sync for PhaseOutput<T> {}

impl<T> PhaseOutput<T> {
    /// An output over `values` (its length fixed from here on).
    pub fn new(values: Vec<T>) -> PhaseOutput<T> {
        PhaseOutput {
            values: values.into_iter().map(UnsafeSliceCell::new).collect(),
            job: process::AtomicUsize::new(0),
        }
    }

    /// Checks `barrier` belongs to the job this output serves (the first
    /// job that uses it), and that the phase's parity allows `access`.
    fn check(&self, barrier: &JobBarrier<'_>, writing: bool) {
        let job = barrier.job();
        // Relaxed: only an identity check; the data is published by the
        // barrier itself.
        if let Err(other) = self.job.compare_exchange(
            0,
            job,
            process::Ordering::Relaxed,
            process::Ordering::Relaxed,
        ) {
            assert_eq!(other, job, "a PhaseOutput used by two jobs at once");
        }
        let even = barrier.passed.is_multiple_of(2);
        assert_eq!(
            even,
            writing,
            "PhaseOutput::{}: after {} barriers this phase {}",
            if writing { "write" } else { "read" },
            barrier.passed,
            if even { "writes" } else { "reads" }
        );
    }

    /// Calls `f(start, part)` with this participant's part of the output
    /// (`part` holds elements `start..start + part.len()`).
    ///
    /// # Panics
    ///
    /// After an odd number of barriers, or for a barrier of another job.
    pub fn write<R>(
        &self,
        barrier: &mut JobBarrier<'_>,
        f: impl FnOnce(usize, &mut [T]) -> R,
    ) -> R {
        self.check(barrier, true);
        let (idx, n) = barrier.participant();
        let len = self.values.len();
        let (start, end) = (len * idx / n, len * (idx + 1) / n);
        let cells = &self.values[start..end];
        // SAFETY: the type's invariants: participant `idx` alone touches
        // `start..end` in this even phase, and nobody reads until the next
        // barrier completes, which needs this participant. `barrier` is
        // borrowed mutably, so `f` cannot wait meanwhile, and this
        // participant cannot write twice at once (a second `write` inside
        // `f` would need the barrier). The cells are contiguous
        // `UnsafeSliceCell<T>`, laid out as `T`.
        let part = unsafe {
            std::slice::from_raw_parts_mut(UnsafeSliceCell::raw_get(cells.as_ptr()), cells.len())
        };
        f(start, part)
    }

    /// Calls `f(all)` with the whole output.
    ///
    /// # Panics
    ///
    /// After an even number of barriers, or for a barrier of another job.
    pub fn read<R>(&self, barrier: &mut JobBarrier<'_>, f: impl FnOnce(&[T]) -> R) -> R {
        self.check(barrier, false);
        // SAFETY: an odd phase: no participant writes until the next
        // barrier completes, which needs this one (invariants); `f` cannot
        // wait meanwhile (the barrier is borrowed) nor keep the slice (its
        // lifetime is the call's).
        let all = unsafe {
            std::slice::from_raw_parts(
                UnsafeSliceCell::raw_get(self.values.as_ptr()),
                self.values.len(),
            )
        };
        f(all)
    }

    /// The values, once the job is over.
    pub fn into_vec(self) -> Vec<T> {
        self.values
            .into_vec()
            .into_iter()
            .map(UnsafeSliceCell::into_inner)
            .collect()
    }
}

impl PhaseState {
    fn new(
        yield_after: u32,
        ns_per_tick: f64,
        arrive_relaxed: bool,
        departure_fence_dropped: bool,
    ) -> PhaseState {
        PhaseState {
            arrivals: CachePadded::new(AtomicU64::new(0)),
            left: AtomicUsize::new(0),
            broken: AtomicBool::new(false),
            passed: Mutex::new((usize::MAX, 0)),
            caller_panic: Mutex::new(None),
            worker_panic: Mutex::new(None),
            yield_after,
            sleepers: Sleepers::new(),
            ns_per_tick,
            arrive_relaxed,
            departure_fence_dropped,
        }
    }

    fn wait(&self, n: usize) {
        if self.broken.load(Ordering::Acquire) {
            panic::resume_unwind(Box::new(Abandoned));
        }
        let order = if self.arrive_relaxed {
            Ordering::Relaxed
        } else {
            Ordering::AcqRel
        };
        let word = self.arrivals.fetch_add(1, order);
        let ticket = word & sleep::ARRIVALS;
        // This barrier completes at the next multiple of `n` (module docs).
        let n = n as u64;
        let target = (ticket / n + 1) * n;
        if ticket + 1 == target {
            // The last arrival: our RMW read every earlier one, and every
            // sleeper's announcement (sleep.rs). Wake those.
            if word >= sleep::SLEEPER {
                self.sleepers.wake_all();
            }
            return;
        }
        let arrived = || self.arrivals.load(Ordering::Acquire) & sleep::ARRIVALS >= target;
        let mut spins: u32 = 0;
        let mut yields: u64 = 0;
        let mut since = 0;
        while !arrived() {
            if self.left.load(Ordering::Acquire) > 0 && !arrived() {
                // A participant left without arriving here: it never will.
                self.broken.store(true, Ordering::Release);
                panic::resume_unwind(Box::new(Abandoned));
            }
            if self.broken.load(Ordering::Acquire) {
                panic::resume_unwind(Box::new(Abandoned));
            }
            if spins < self.yield_after {
                spins += 1;
                spin_loop();
                if spins == self.yield_after {
                    since = clock::ticks();
                }
            } else {
                yields += 1;
                if sleep::time_to_sleep(yields, since, self.ns_per_tick) {
                    // Woken by the last arrival or by a departure; the
                    // loop above re-checks which.
                    self.sleep_until_arrived(target);
                } else {
                    thread::yield_now();
                }
            }
        }
    }

    /// Parks until barrier `target` completes or a participant leaves
    /// (sleep.rs): announced in the arrival word by a compare-exchange
    /// that fails if the barrier completed meanwhile; departures write
    /// another word, so a fence pair covers those.
    #[cold]
    fn sleep_until_arrived(&self, target: u64) {
        let id = self.sleepers.register();
        let mut announced = false;
        loop {
            let word = self.arrivals.load(Ordering::Acquire);
            if word & sleep::ARRIVALS >= target
                || self.left.load(Ordering::Acquire) > 0
                || self.broken.load(Ordering::Acquire)
            {
                break;
            }
            if !announced {
                // Release: the registration is visible to the last
                // arrival, whose RMW (Acquire) sees the sleeper.
                announced = self
                    .arrivals
                    .compare_exchange(
                        word,
                        word + sleep::SLEEPER,
                        Ordering::AcqRel,
                        Ordering::Acquire,
                    )
                    .is_ok();
                if !announced {
                    continue;
                }
                // Pairs with a departure's fence (`leave`): it sees this
                // sleeper, or the check above next time round sees it left.
                sleep::announce_fence();
                continue;
            }
            thread::park();
        }
        if announced {
            self.arrivals.fetch_sub(sleep::SLEEPER, Ordering::Relaxed);
        }
        self.sleepers.unregister(id);
    }

    /// A participant's closure returned (`Ok`) or unwound (`Err`) after
    /// passing `passed` barriers.
    fn leave(&self, is_caller: bool, passed: usize, outcome: Result<(), Box<dyn Any + Send>>) {
        if let Err(payload) = outcome {
            if payload.is::<Abandoned>() {
                drop_payload(payload);
            } else {
                let slot = if is_caller {
                    &self.caller_panic
                } else {
                    &self.worker_panic
                };
                let mut slot = lock(slot);
                if slot.is_none() {
                    *slot = Some(payload);
                } else {
                    drop(slot);
                    drop_payload(payload);
                }
            }
        }
        {
            let mut range = lock(&self.passed);
            range.0 = range.0.min(passed);
            range.1 = range.1.max(passed);
        }
        // Release: pairs with the Acquire load in `wait` (module docs).
        self.left.fetch_add(1, Ordering::Release);
        // A sleeping waiter must see the departure: if the barrier it waits
        // at can no longer complete, it has to unwind (sleep.rs).
        self.sleepers.wake_fenced(
            || self.arrivals.load(Ordering::Relaxed) >= sleep::SLEEPER,
            self.departure_fence_dropped,
        );
    }

    /// After the job: re-raises the first real panic, the caller's first;
    /// else reports participants that passed different counts of barriers.
    fn finish(self) {
        let caller = lock(&self.caller_panic).take();
        let worker = lock(&self.worker_panic).take();
        match (caller, worker) {
            (Some(payload), surplus) => {
                if let Some(surplus) = surplus {
                    drop_payload(surplus);
                }
                panic::resume_unwind(payload)
            }
            (None, Some(payload)) => panic::resume_unwind(payload),
            (None, None) => {}
        }
        let (fewest, most) = *lock(&self.passed);
        if fewest != most || self.broken.load(Ordering::Relaxed) {
            panic!(
                "run_phased: the participants passed different numbers of barriers \
                 (fewest {fewest}, most {most}); every participant must call \
                 JobBarrier::wait equally often"
            );
        }
    }
}

impl Pool {
    /// Runs `f(idx, n, barrier)` for every participant, as [`Pool::run`]
    /// does, with a barrier the participants share: a job of several
    /// phases (a decode layer: QKV, attention, output, FFN) is published
    /// once, and the phases are separated by `barrier.wait()` instead of a
    /// fork-join each.
    ///
    /// ```
    /// use std::sync::atomic::{AtomicU64, Ordering};
    /// let pool = pool_core::Pool::new(1);
    /// let parts = [AtomicU64::new(0), AtomicU64::new(0)];
    /// let total = AtomicU64::new(0);
    /// pool.run_phased(|idx, n, barrier| {
    ///     parts[idx].store(idx as u64 + 1, Ordering::Relaxed);
    ///     barrier.wait(); // every part is written
    ///     if idx == n - 1 {
    ///         let sum = parts[..n].iter().map(|p| p.load(Ordering::Relaxed)).sum();
    ///         total.store(sum, Ordering::Relaxed);
    ///     }
    /// });
    /// let n = pool.n_workers() as u64 + 1; // unless the job ran inline
    /// assert!([1, n * (n + 1) / 2].contains(&total.load(Ordering::Relaxed)));
    /// ```
    ///
    /// Every participant must call `wait` the same number of times. When
    /// one leaves the job without reaching a barrier the others wait at
    /// (it panicked, or called `wait` fewer times), those others are
    /// released instead of hanging, and `run_phased` panics: with the
    /// participant's own panic (the caller's first, as `run`), or with a
    /// message naming the fewest and most barriers passed. Inline and
    /// nested runs have one participant, whose `wait` returns at once.
    pub fn run_phased(&self, f: impl Fn(usize, usize, &mut JobBarrier<'_>) + Sync) {
        let shared = &self.shared;
        let yield_after = if shared.jobs_oversubscribed() || shared.crowded() {
            OVERSUBSCRIBED_SPINS_BEFORE_YIELD
        } else {
            SPINS_BEFORE_YIELD
        };
        let state = PhaseState::new(
            yield_after >> SPIN_SCALE_SHIFT,
            shared.ns_per_tick,
            shared.has_bug(SeededBug::BarrierArrivalRelaxed),
            shared.has_bug(SeededBug::MissingDepartureFence),
        );
        self.run(|idx, n| {
            let mut barrier = JobBarrier {
                state: &state,
                idx,
                n,
                passed: 0,
            };
            let outcome = panic::catch_unwind(AssertUnwindSafe(|| f(idx, n, &mut barrier)));
            state.leave(idx + 1 == n, barrier.passed, outcome);
        });
        state.finish();
    }
}
