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
    /// This job's number, unique in the process (`PhaseOutput`'s claim).
    id: u64,
}

/// Numbers `run_phased` jobs; 0 is never a job's.
static NEXT_PHASED_JOB: process::AtomicU64 = process::AtomicU64::new(1);

/// The barrier a [`Pool::run_phased`] job's participants share. Every
/// participant must call [`wait`](JobBarrier::wait) the same number of
/// times; see `run_phased` for what happens when they do not.
pub struct JobBarrier<'a> {
    state: &'a PhaseState,
    idx: usize,
    n: usize,
    passed: usize,
    /// Inside a `PhaseOutput::write` of this participant: a second one
    /// could hand out the same part twice.
    writing: std::cell::Cell<bool>,
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

    /// The job this barrier belongs to, unique in the process (for
    /// `PhaseOutput`).
    fn job(&self) -> u64 {
        self.state.id
    }

    /// Marks a `PhaseOutput::write` in progress until the guard drops.
    fn start_write(&self) -> Writing<'_> {
        assert!(
            !self.writing.replace(true),
            "PhaseOutput::write inside another write of the same participant"
        );
        Writing(&self.writing)
    }
}

/// A phase's output in a [`Pool::run_phased`] job: each participant writes
/// its own part in one phase, and every participant reads all of it in the
/// next, with no `unsafe`, atomics or locks in the job's code.
///
/// Phases alternate for each output: the phase of its first use decides
/// (a first [`write`](PhaseOutput::write) makes that phase and every
/// second one after it a writing phase; a first
/// [`read`](PhaseOutput::read), a reading one), and a call in the other
/// kind of phase panics. In a writing phase participant `idx` of `n`
/// writes elements `len * idx / n .. len * (idx + 1) / n`; in a reading
/// phase everyone reads everything. A barrier completes only when every
/// participant reached it, so no read ever overlaps a write. Both calls
/// borrow the barrier, so no `wait` can happen inside them; one output can
/// be read while another is written (the phase's input and output).
///
/// An output serves one job: the first to use it. A job of another
/// `run_phased` call panics on it (it could run beside the first), until
/// [`values_mut`](PhaseOutput::values_mut), which needs the output to
/// itself and so no job running, hands it on: allocate once, reuse every
/// token.
///
/// ```
/// use pool_core::{PhaseOutput, Pool};
/// let pool = Pool::new(2);
/// let x: Vec<f32> = (0..100).map(|i| i as f32).collect();
/// let (h, y) = (PhaseOutput::new(vec![0.0; 100]), PhaseOutput::new(vec![0.0; 100]));
/// pool.run_phased(|_, _, barrier| {
///     h.write(barrier, |start, part| {
///         for (i, v) in part.iter_mut().enumerate() {
///             *v = 2.0 * x[start + i];
///         }
///     });
///     barrier.wait(); // every h is written
///     h.read(barrier, |h| {
///         y.write(barrier, |start, part| {
///             for (i, v) in part.iter_mut().enumerate() {
///                 *v = h[start + i] + h[(start + i + 1) % 100];
///             }
///         })
///     });
/// });
/// let mut y = y;
/// assert_eq!(y.values_mut()[99], 198.0);
/// // Free for the next job.
/// pool.run_phased(|_, _, barrier| y.write(barrier, |_, part| part.fill(0.0)));
/// ```
pub struct PhaseOutput<T> {
    values: Box<[UnsafeSliceCell<T>]>,
    /// The job using it (`JobBarrier::job`) times two, plus the parity of
    /// its writing phases; 0: free.
    claim: process::AtomicU64,
}

// SAFETY: in a job, each phase of an output is a writing or a reading one
// (the claim's parity, fixed by its first use, checked by every call);
// writers write disjoint parts (by their distinct indices) and a
// participant never holds two writes at once (`JobBarrier::writing`); a
// barrier completes only when every participant reached it, so no read
// overlaps a write. The claim's job number keeps other jobs out. Values
// move between threads (`T: Send`) and are shared when read (`T: Sync`).
unsafe impl<T: Send + Sync> Sync for PhaseOutput<T> {}

impl<T> PhaseOutput<T> {
    /// An output over `values` (its length fixed from here on).
    pub fn new(values: Vec<T>) -> PhaseOutput<T> {
        PhaseOutput {
            values: values.into_iter().map(UnsafeSliceCell::new).collect(),
            claim: process::AtomicU64::new(0),
        }
    }

    /// Checks `barrier` belongs to the job this output serves (the first
    /// job that uses it) and that this phase allows `writing`, claiming
    /// the output for the job on its first use.
    fn check(&self, barrier: &JobBarrier<'_>, writing: bool) {
        let phase = barrier.passed as u64 & 1;
        let writes_when = if writing { phase } else { phase ^ 1 };
        let wanted = barrier.job() << 1 | writes_when;
        // Relaxed: the claim is only compared; the values are published by
        // the barrier itself. Participants of one phase race for the first
        // claim, and a barrier orders every later phase's checks after it.
        let claim = match self.claim.compare_exchange(
            0,
            wanted,
            process::Ordering::Relaxed,
            process::Ordering::Relaxed,
        ) {
            Ok(_) => wanted,
            Err(claim) => claim,
        };
        assert_eq!(
            claim >> 1,
            barrier.job(),
            "a PhaseOutput used by two jobs: values_mut between them hands it on"
        );
        assert_eq!(
            claim,
            wanted,
            "PhaseOutput::{}: after {} barriers this output is {}",
            if writing { "write" } else { "read" },
            barrier.passed,
            if writing { "read" } else { "written" }
        );
    }

    /// Calls `f(start, part)` with this participant's part of the output
    /// (`part` holds elements `start..start + part.len()`).
    ///
    /// # Panics
    ///
    /// In a reading phase of this output, inside another `write` of this
    /// participant, or for a barrier of another job.
    pub fn write<R>(&self, barrier: &JobBarrier<'_>, f: impl FnOnce(usize, &mut [T]) -> R) -> R {
        self.check(barrier, true);
        let _writing = barrier.start_write();
        let (idx, n) = barrier.participant();
        let len = self.values.len();
        let (start, end) = (len * idx / n, len * (idx + 1) / n);
        let cells = &self.values[start..end];
        // SAFETY: the type's invariants: participant `idx` alone touches
        // `start..end` in this writing phase, and nobody reads until the
        // next barrier completes, which needs this participant. `f` cannot
        // wait meanwhile (the barrier is borrowed) nor write again
        // (`start_write`), nor keep the slice (its lifetime is the call's).
        // The cells are contiguous `UnsafeSliceCell<T>`, laid out as `T`.
        let part = unsafe {
            std::slice::from_raw_parts_mut(UnsafeSliceCell::raw_get(cells.as_ptr()), cells.len())
        };
        f(start, part)
    }

    /// Calls `f(all)` with the whole output.
    ///
    /// # Panics
    ///
    /// In a writing phase of this output, or for a barrier of another job.
    pub fn read<R>(&self, barrier: &JobBarrier<'_>, f: impl FnOnce(&[T]) -> R) -> R {
        self.check(barrier, false);
        // SAFETY: a reading phase: nobody writes this output until the
        // next barrier completes, which needs this participant
        // (invariants); `f` cannot wait meanwhile (the barrier is
        // borrowed) nor keep the slice (its lifetime is the call's).
        let all = unsafe {
            std::slice::from_raw_parts(
                UnsafeSliceCell::raw_get(self.values.as_ptr()),
                self.values.len(),
            )
        };
        f(all)
    }

    /// The values between jobs, to read or refill; frees the output for
    /// the next job (no job can be using it: this needs `&mut self`).
    pub fn values_mut(&mut self) -> &mut [T] {
        *self.claim.get_mut() = 0;
        // SAFETY: `&mut self`: no job holds the output; the cells are
        // contiguous `UnsafeSliceCell<T>`, laid out as `T`.
        unsafe {
            std::slice::from_raw_parts_mut(
                UnsafeSliceCell::raw_get(self.values.as_ptr()),
                self.values.len(),
            )
        }
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

/// Clears `JobBarrier::writing` when a write ends, even by a panic.
struct Writing<'a>(&'a std::cell::Cell<bool>);

impl Drop for Writing<'_> {
    fn drop(&mut self) {
        self.0.set(false);
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
            // Relaxed: a unique number is all that is needed.
            id: NEXT_PHASED_JOB.fetch_add(1, process::Ordering::Relaxed),
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
            sleep::park_in_pool();
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
                writing: std::cell::Cell::new(false),
            };
            let outcome = panic::catch_unwind(AssertUnwindSafe(|| f(idx, n, &mut barrier)));
            state.leave(idx + 1 == n, barrier.passed, outcome);
        });
        state.finish();
    }
}
