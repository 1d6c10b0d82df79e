//! Telemetry: per-pool counters, always on, off the hot path's critical
//! cost. Each worker's counters sit on a line only that worker writes (not
//! the `parked` line the caller reads on dispatch); the callers' counters sit
//! on a line written only by the turn holder. Those are single-writer
//! (load + store, no locked instruction) and summed when read. The one
//! count callers keep outside the turn, jobs they ran inline, has a line
//! per caller ([`StripedCounter`]). They are statistics, not protocol:
//! plain `std` atomics even under loom.

use std::cell::Cell;
use std::fmt;

use crossbeam_utils::CachePadded;

use crate::sync::process::{AtomicU64, AtomicUsize, Ordering};

/// An event counter with one writer at a time (callers outside the turn
/// lock write a [`StripedCounter`]).
#[derive(Default)]
pub(crate) struct Counter(AtomicU64);

impl Counter {
    /// Adds `n`. Only one thread writes a given counter at a time (a
    /// worker its own; callers under the turn lock), so no RMW is needed.
    #[inline]
    pub(crate) fn add(&self, n: u64) {
        let value = self.0.load(Ordering::Relaxed);
        self.0.store(value.wrapping_add(n), Ordering::Relaxed);
    }

    fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// Stripes of a [`StripedCounter`]: callers beyond this many share them.
const STRIPES: usize = 4;

/// Stripes handed out so far (a thread's stripe is this modulo [`STRIPES`]).
static NEXT_STRIPE: AtomicUsize = AtomicUsize::new(0);

crate::sync::process::thread_local! {
    /// This thread's stripe, `usize::MAX` until its first add.
    static STRIPE: Cell<usize> = const { Cell::new(usize::MAX) };
}

/// An event counter that several threads add to at once, outside any lock:
/// each adds to its own stripe, a line of its own, and a read sums them.
/// With one line, two callers running jobs inline on one pool passed it
/// between their cores at every job (a read-modify-write that misses).
#[derive(Default)]
pub(crate) struct StripedCounter([CachePadded<AtomicU64>; STRIPES]);

impl StripedCounter {
    /// Adds `n` to the calling thread's stripe (a read-modify-write: more
    /// than [`STRIPES`] threads share stripes).
    #[inline]
    pub(crate) fn add(&self, n: u64) {
        // `try_with`: from a thread-local destructor, stripe 0.
        let stripe = STRIPE
            .try_with(|stripe| {
                if stripe.get() == usize::MAX {
                    stripe.set(NEXT_STRIPE.fetch_add(1, Ordering::Relaxed) % STRIPES);
                }
                stripe.get()
            })
            .unwrap_or(0);
        self.0[stripe].fetch_add(n, Ordering::Relaxed);
    }

    fn get(&self) -> u64 {
        self.0.iter().fold(0, |sum, stripe| {
            sum.wrapping_add(stripe.load(Ordering::Relaxed))
        })
    }
}

/// Upper bounds (exclusive) of the caller-wait histogram's buckets, in
/// nanoseconds; the last bucket is everything longer.
pub const WAIT_BUCKET_BOUNDS_NS: [u64; 5] = [1_000, 10_000, 100_000, 1_000_000, 10_000_000];

/// One worker's counters.
#[derive(Default)]
pub(crate) struct WorkerCounters {
    pub(crate) jobs_hot: Counter,
    pub(crate) jobs_after_park: Counter,
    pub(crate) parks: Counter,
    pub(crate) spins: Counter,
    pub(crate) panics: Counter,
    pub(crate) turn_yields: Counter,
    /// The worker's CPU, noted when it yields (`colocation.rs`).
    pub(crate) cpu: crate::colocation::NotedCpu,
}

/// The callers' counters (written by the turn holder).
#[derive(Default)]
pub(crate) struct CallerCounters {
    pub(crate) full: Counter,
    pub(crate) limited: Counter,
    pub(crate) unparks: Counter,
    pub(crate) spins: Counter,
    pub(crate) wait_ticks: Counter,
    pub(crate) wait_histogram: [Counter; 6],
    pub(crate) panics: Counter,
    pub(crate) moves: Counter,
    /// Written outside the turn lock, by every caller at once.
    pub(crate) inline: StripedCounter,
    pub(crate) withdrawn: Counter,
}

impl CallerCounters {
    /// Records one barrier wait of `ns` nanoseconds and `spins` spins.
    #[inline]
    pub(crate) fn record_wait(&self, ticks: u64, ns: u64, spins: u64) {
        self.wait_ticks.add(ticks);
        self.spins.add(spins);
        let bucket = WAIT_BUCKET_BOUNDS_NS
            .iter()
            .position(|&bound| ns < bound)
            .unwrap_or(WAIT_BUCKET_BOUNDS_NS.len());
        self.wait_histogram[bucket].add(1);
    }
}

/// A snapshot of one pool's counters since it was built. Read with
/// [`Pool::stats`](crate::Pool::stats); subtract two snapshots
/// ([`PoolStats::since`]) for an interval.
///
/// ```
/// let pool = pool_core::Pool::with_spin(1, 1 << 20);
/// for _ in 0..10 {
///     pool.run(|_, _| {});
/// }
/// let stats = pool.stats();
/// assert_eq!(stats.dispatches_full, 10);
/// assert_eq!(stats.worker_jobs(), 10);
/// ```
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PoolStats {
    /// Jobs handed to every worker (`run`).
    pub dispatches_full: u64,
    /// Jobs handed to some workers only (`run_limited`, row jobs).
    pub dispatches_limited: u64,
    /// `unpark` syscalls issued by callers (goal in steady decode: 0).
    pub unparks: u64,
    /// Times a worker parked.
    pub parks: u64,
    /// Jobs a worker found while spinning and ran: no syscall on either
    /// side. A seat the caller withdrew first counts in [`withdrawn`]
    /// instead.
    ///
    /// [`withdrawn`]: PoolStats::withdrawn
    pub jobs_hot: u64,
    /// Jobs a worker picked up after parking during that wait, and ran.
    pub jobs_after_park: u64,
    /// Spin iterations spent by workers waiting for tickets.
    pub worker_spins: u64,
    /// Spin iterations spent by callers waiting at the barrier.
    pub caller_spins: u64,
    /// Time callers waited at the barrier after their own share, in ns.
    pub caller_wait_ns: u64,
    /// Barrier waits by length: < 1 µs, < 10 µs, < 100 µs, < 1 ms,
    /// < 10 ms, longer ([`WAIT_BUCKET_BOUNDS_NS`]).
    pub caller_wait_histogram: [u64; 6],
    /// Panics caught in participants (workers and callers).
    pub panics: u64,
    /// Times a caller found an invited worker on its own CPU after a wait
    /// that had to yield, and moved one of the two off that CPU (the
    /// worker, or the caller when the worker is pinned there; see
    /// docs/design.md, "Caller and worker on one CPU").
    pub caller_moves: u64,
    /// Jobs that asked for workers but ran on the caller alone because the
    /// adaptive policy found no CPU for one (other processes' load, or
    /// this process's callers filling the CPUs), or because the fork
    /// trials found a short job cheaper on the caller alone
    /// ([`fork_trial_epochs`]). Nested and forked-child runs are not
    /// counted.
    ///
    /// [`fork_trial_epochs`]: PoolStats::fork_trial_epochs
    pub jobs_inline: u64,
    /// Invitations of withdrawable jobs (row jobs) that no worker took up
    /// before the caller finished the work alone (`tickets.rs`).
    pub withdrawn: u64,
    /// Times a worker gave its CPU away before a row job's seat because
    /// its time slice was nearly used (under foreign load, on Linux;
    /// docs/design.md, "Yielding at the end of a turn").
    pub turn_yields: u64,
    /// Epochs the wake trials scored beside foreign load: `[awake workers
    /// only, parked ones woken]` (docs/design.md, "Waking by trial"). Their
    /// ratio says which way the trials found cheaper: one epoch in 16 goes
    /// to the other way.
    pub wake_trial_epochs: [u64; 2],
    /// Epochs the fork trials scored on CPUs other processes left free:
    /// `[dispatched, short jobs run by the caller alone]`
    /// (docs/design.md, "Forking by trial"). One epoch in 16 or 64 goes
    /// to the way not preferred.
    pub fork_trial_epochs: [u64; 2],
}

impl PoolStats {
    /// All dispatches (full and limited).
    pub fn dispatches(&self) -> u64 {
        self.dispatches_full + self.dispatches_limited
    }

    /// Jobs run by workers.
    pub fn worker_jobs(&self) -> u64 {
        self.jobs_hot + self.jobs_after_park
    }

    /// Unpark syscalls per dispatch.
    pub fn unparks_per_dispatch(&self) -> f64 {
        self.unparks as f64 / self.dispatches().max(1) as f64
    }

    /// The counts between `earlier` and `self`.
    pub fn since(&self, earlier: &PoolStats) -> PoolStats {
        self.combine(earlier, u64::wrapping_sub)
    }

    /// The counts of `self` and `other` together: two pools' (or two
    /// samples') counters as one.
    ///
    /// ```
    /// let a = pool_core::PoolStats { unparks: 2, ..Default::default() };
    /// let b = pool_core::PoolStats { unparks: 3, ..Default::default() };
    /// assert_eq!(a.plus(&b).unparks, 5);
    /// ```
    pub fn plus(&self, other: &PoolStats) -> PoolStats {
        self.combine(other, u64::wrapping_add)
    }

    /// Every counter of `self` and `other` through `op`.
    fn combine(&self, other: &PoolStats, op: fn(u64, u64) -> u64) -> PoolStats {
        PoolStats {
            dispatches_full: op(self.dispatches_full, other.dispatches_full),
            dispatches_limited: op(self.dispatches_limited, other.dispatches_limited),
            unparks: op(self.unparks, other.unparks),
            parks: op(self.parks, other.parks),
            jobs_hot: op(self.jobs_hot, other.jobs_hot),
            jobs_after_park: op(self.jobs_after_park, other.jobs_after_park),
            worker_spins: op(self.worker_spins, other.worker_spins),
            caller_spins: op(self.caller_spins, other.caller_spins),
            caller_wait_ns: op(self.caller_wait_ns, other.caller_wait_ns),
            caller_wait_histogram: std::array::from_fn(|i| {
                op(
                    self.caller_wait_histogram[i],
                    other.caller_wait_histogram[i],
                )
            }),
            panics: op(self.panics, other.panics),
            caller_moves: op(self.caller_moves, other.caller_moves),
            jobs_inline: op(self.jobs_inline, other.jobs_inline),
            withdrawn: op(self.withdrawn, other.withdrawn),
            turn_yields: op(self.turn_yields, other.turn_yields),
            wake_trial_epochs: std::array::from_fn(|i| {
                op(self.wake_trial_epochs[i], other.wake_trial_epochs[i])
            }),
            fork_trial_epochs: std::array::from_fn(|i| {
                op(self.fork_trial_epochs[i], other.fork_trial_epochs[i])
            }),
        }
    }
}

impl fmt::Display for PoolStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} dispatches ({} full, {} limited), {} unparks ({:.3}/dispatch), {} parks, \
             {} hot / {} parked pickups, {} withdrawn, caller waited {} µs, {} panics",
            self.dispatches(),
            self.dispatches_full,
            self.dispatches_limited,
            self.unparks,
            self.unparks_per_dispatch(),
            self.parks,
            self.jobs_hot,
            self.jobs_after_park,
            self.withdrawn,
            self.caller_wait_ns / 1000,
            self.panics
        )
    }
}

/// Sums the counters into a snapshot.
pub(crate) fn snapshot<'a>(
    caller: &CallerCounters,
    workers: impl Iterator<Item = &'a WorkerCounters>,
    ns_per_tick: f64,
) -> PoolStats {
    let mut stats = PoolStats {
        dispatches_full: caller.full.get(),
        dispatches_limited: caller.limited.get(),
        unparks: caller.unparks.get(),
        caller_spins: caller.spins.get(),
        caller_wait_ns: (caller.wait_ticks.get() as f64 * ns_per_tick) as u64,
        caller_wait_histogram: std::array::from_fn(|i| caller.wait_histogram[i].get()),
        panics: caller.panics.get(),
        caller_moves: caller.moves.get(),
        jobs_inline: caller.inline.get(),
        withdrawn: caller.withdrawn.get(),
        ..PoolStats::default()
    };
    for w in workers {
        stats.jobs_hot += w.jobs_hot.get();
        stats.jobs_after_park += w.jobs_after_park.get();
        stats.parks += w.parks.get();
        stats.worker_spins += w.spins.get();
        stats.panics += w.panics.get();
        stats.turn_yields += w.turn_yields.get();
    }
    stats
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_striped_counter_counts_every_add_of_threads_adding_at_once() {
        testkit::watched("threads adding to one striped counter", |stage| {
            // Twice the stripes: threads share stripes, as more callers
            // than stripes do.
            const THREADS: u64 = 2 * STRIPES as u64;
            let adds: u64 = if cfg!(miri) { 200 } else { 500_000 };
            let counter = StripedCounter::default();
            let start = std::sync::Barrier::new(THREADS as usize);
            stage.set("adding");
            std::thread::scope(|scope| {
                for _ in 0..THREADS {
                    scope.spawn(|| {
                        start.wait();
                        for _ in 0..adds {
                            counter.add(1);
                        }
                    });
                }
            });
            assert_eq!(counter.get(), THREADS * adds);
        });
    }
}
