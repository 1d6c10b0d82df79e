//! The dispatch protocol, caller side, and the state it shares with workers.
//!
//! # Memory ordering
//!
//! Guarantees given to users:
//! - everything the caller wrote before `run` is visible to every
//!   participant when it starts its share;
//! - everything any participant wrote during its share is visible to the
//!   caller when `run` returns.
//!
//! Which atomics carry them:
//! - **publish**: the caller writes the worker's inbox (`job`) and then
//!   stores the worker's `ticket` with `Release`; the worker loads its
//!   `ticket` with `Acquire` (in `idle.rs`). Everything before the store,
//!   including the inbox, happens-before the worker's share.
//! - **complete**: each worker decrements `remaining` with `Release` after
//!   its share; the caller loads `remaining` with `Acquire` until it reads 0.
//!   The decrements form one release sequence on `remaining`, so reading 0
//!   synchronises with every worker's decrement.
//! - **wake**: the caller stores tickets, issues a `SeqCst` fence, then loads
//!   each invited worker's `parked` flag; a worker about to park stores
//!   `parked = true`, issues a `SeqCst` fence, then re-loads its ticket. The
//!   two fences are totally ordered, so at least one side sees the other's
//!   store: either the worker sees its new ticket and does not park, or the
//!   caller sees `parked` and unparks it (park/unpark keep one token, so an
//!   unpark that arrives before the park is not lost). `parked` itself can be
//!   `Relaxed`: the fences order it.
//! - `epoch`, `spin_budget`: hints only (whether to keep spinning), `Relaxed`.
//! - `remaining = k` is stored `Relaxed` before the `Release` ticket stores,
//!   so a worker that acquired its ticket sees it.
//! - `worker_panicked` is stored `Relaxed` by a worker before its `Release`
//!   decrement, and read `Relaxed` by the caller after its `Acquire` load of
//!   0: published by the **complete** pair.
//! - The captured caller contexts are written and read exactly like an inbox
//!   (invariant 1), ordered by the **publish** and **complete** pairs.
//! - Telemetry counters, the spin-policy words and `contended` are
//!   statistics and hints (`std` atomics, `Relaxed`): they decide how long
//!   to spin, never whether a job is seen.
//!
//! # Invariants
//!
//! 1. Only a ticket holder reads an inbox, and a worker reads only its own.
//!    The caller rewrites a worker's inbox only after `remaining` reached 0
//!    for the previous job, so no inbox read ever races a write.
//! 2. The caller bumps a worker's ticket again only after that worker's
//!    decrement for the previous job (`run` waits for `remaining == 0`, and
//!    callers take turns on `turn`), so a worker never misses or doubles a
//!    job: each ticket value differs from the last by exactly one job.
//! 3. An uninvited worker's ticket is not bumped, so it never reads an inbox
//!    and never touches `remaining`. (The first failed protocol let every
//!    worker read one shared descriptor on each epoch bump; see
//!    docs/design.md.)
//! 4. A worker's last-seen ticket starts at the construction value 0, never
//!    a fresh read, so a ticket issued before the OS starts the thread is
//!    still seen as new.

use std::any::Any;
use std::panic::{self, AssertUnwindSafe};

use crossbeam_utils::CachePadded;

use crate::clock;
use crate::context::{Captured, JobContext};
use crate::fork;
use crate::job::{Job, JobFn};
use crate::load;
use crate::policy::{linger_spins, ticks_per_spin, SpinPolicy, MIN_ADAPTIVE_SPIN};
use crate::seeded::SeededBug;
use crate::sleep::{self, Sleepers};
use crate::spinners;
use crate::stats::{self, CallerCounters, PoolStats, WorkerCounters};
use crate::sync::process::TryLockError;
use crate::sync::{fence, lock, process, spin_loop, thread, thread_local, SPIN_SCALE_SHIFT};
use crate::sync::{AtomicBool, AtomicU64, AtomicUsize, Mutex, Ordering, Thread, UnsafeCell};
use crate::tickets;

/// The caller waits this many spins before yielding when the pool is
/// oversubscribed: a ticket holder may be waiting for this very CPU.
pub(crate) const OVERSUBSCRIBED_SPINS_BEFORE_YIELD: u32 = 64;

/// Barrier waits shorter than this many spins are timed by their spin
/// count instead of a clock read.
const SHORT_WAIT_SPINS: u64 = 64;

/// Even with a CPU per thread, a caller that has spun this long (~5 µs)
/// yields on every further check: a participant it waits for may be queued
/// on this very CPU (the scheduler placed it there, or another process holds
/// its own). A yield with nothing else runnable returns at once, so a long
/// wait costs a syscall per check, never a time slice of a waiting worker.
const CALLER_SPINS_BEFORE_YIELD: u32 = 512;

/// Jobs handed to at least one worker since process start, all pools.
static DISPATCHES: process::AtomicU64 = process::AtomicU64::new(0);

/// Jobs handed to at least one worker since process start, summed over all
/// pools in the process. Inline runs (caller-only pools, nested calls,
/// `run_limited(0, ..)`) are not counted.
///
/// ```
/// let before = pool_core::dispatch_count();
/// let pool = pool_core::Pool::with_spin(1, 0);
/// pool.run(|_, _| {});
/// assert!(pool_core::dispatch_count() > before);
/// ```
pub fn dispatch_count() -> u64 {
    DISPATCHES.load(process::Ordering::Relaxed)
}

/// Whether a job's invitation may be shrunk by the adaptive policy.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Invitation {
    /// Fitted to the CPUs other processes and callers leave free.
    Fitted,
    /// Every worker asked for, as a fixed budget would.
    Exact,
    /// Withdrawable (`tickets.rs`): a worker that has not started when
    /// the caller's share ends is not waited for, so other processes' load
    /// does not shrink the job to none; `expected_ns`: the caller's
    /// estimate of the job's one-thread time (0: none), which decides
    /// whether waking a parked worker repays even then.
    Optional { expected_ns: u64 },
}

/// How the caller's barrier wait went.
struct BarrierWait {
    /// Checks of `remaining` that found it non-zero (spins and yields).
    spins: u64,
    /// Whether the wait had to yield.
    yielded: bool,
    /// The clock when the wait reached `SHORT_WAIT_SPINS` checks; `None`
    /// for a short wait, which reads no clock.
    long_since: Option<u64>,
}

/// One worker's slot. The inbox line is written only by the caller, the
/// `parked` line only by the worker, so neither bounces on the other's
/// writes.
pub(crate) struct WorkerSlot {
    pub(crate) inbox: CachePadded<Inbox>,
    /// Set by the worker just before it parks, cleared after it wakes.
    pub(crate) parked: CachePadded<AtomicBool>,
    /// Telemetry, written only by the worker, on a line the caller never
    /// reads while dispatching.
    pub(crate) counters: CachePadded<WorkerCounters>,
}

/// Ticket and job descriptor share a line: a worker that sees its new
/// ticket finds the job in the same cache-line transfer.
pub(crate) struct Inbox {
    /// The ticket of the last job handed to this worker (`tickets.rs`:
    /// the job's sequence number and whether its invitation may be
    /// withdrawn); only the caller writes it.
    pub(crate) ticket: AtomicU64,
    /// The job the current ticket was issued for (invariant 1).
    pub(crate) job: UnsafeCell<Job>,
}

// SAFETY: `job` is the only non-`Sync` part. It is written by the caller only
// while the worker holds no ticket for an unfinished job, and read by the
// worker only between acquiring its ticket and its `remaining` decrement
// (invariant 1); the Release/Acquire pairs on `ticket` and `remaining` order
// every write before every read that follows it.
unsafe impl Sync for Inbox {}
// SAFETY: `Job` is a pointer to a `Sync` closure; moving the inbox to another
// thread moves no ownership of it, and all access follows invariant 1.
unsafe impl Send for Inbox {}

/// The current job's captured caller contexts.
pub(crate) struct CapturedContexts(pub(crate) UnsafeCell<Vec<Captured>>);

// SAFETY: the values are `Send + Sync`; the cell is written only by the turn
// holder while no ticket holder of an unfinished job exists, and read only by
// ticket holders between their Acquire ticket load and their Release
// decrement (invariant 1), so accesses never overlap.
unsafe impl Sync for CapturedContexts {}

/// State shared by the pool handle and its workers.
///
/// # Invariants
///
/// `captured` follows invariant 1 (see the module docs): written only by the
/// turn holder before it issues tickets, read only by ticket holders.
pub(crate) struct Shared {
    pub(crate) slots: Box<[WorkerSlot]>,
    /// Ticket holders that have not finished the current job, and the
    /// seats of a withdrawable job not yet taken (`tickets.rs`): one line,
    /// both read-modify-written by the workers of a job.
    pub(crate) completion: CachePadded<Completion>,
    /// The caller when it sleeps at the join (`sleep.rs`); its count is
    /// read by the last worker of every job.
    pub(crate) join_sleepers: CachePadded<Sleepers>,
    /// Set by a worker whose share panicked, before its `remaining`
    /// decrement; lets the caller skip the `worker_panic` lock on the
    /// common path.
    pub(crate) worker_panicked: CachePadded<AtomicBool>,
    /// Bumped once per published limited job: tells a spinning worker that
    /// was not invited that the pool is busy, so it re-arms its spin budget.
    /// (A full job invites everyone; their new tickets re-arm them.)
    pub(crate) epoch: CachePadded<AtomicUsize>,
    pub(crate) settings: CachePadded<Settings>,
    /// Telemetry written by the turn holder.
    pub(crate) caller_counters: CachePadded<CallerCounters>,
    /// Converts `clock::ticks` to nanoseconds.
    pub(crate) ns_per_tick: f64,
    /// Callers take turns: one job in flight per pool. On its own line:
    /// the caller writes it twice per job, and beside the fields a worker
    /// reads on every job (`slots`, `contexts`) it cost each job one more
    /// line transfer on the worker's path (docs/benchmarks.md).
    pub(crate) turn: CachePadded<Mutex<()>>,
    /// Caller context kinds carried into every job (empty: none, one branch).
    pub(crate) contexts: Box<[process::Arc<dyn JobContext>]>,
    /// The current job's captured contexts: written by the turn holder
    /// before the tickets, read by ticket holders (invariant 1, like an
    /// inbox).
    pub(crate) captured: CapturedContexts,
    /// Where the threads sit when bound to NUMA nodes (`sides.rs`).
    pub(crate) placement: crate::sides::Placement,
    /// The fork generation this pool was built in (`fork.rs`): in a forked
    /// child, jobs run inline.
    pub(crate) fork_generation: usize,
    /// A bug reinstated for a loom model (`seeded.rs`).
    #[cfg(loom)]
    pub(crate) seeded_bug: Option<SeededBug>,
    /// The first panic payload caught from a worker during the current job.
    pub(crate) worker_panic: Mutex<Option<Box<dyn Any + Send + 'static>>>,
    /// Whether waking a parked worker for a short job pays beside foreign
    /// load (`wake_trials.rs`); touched only under foreign load.
    pub(crate) wake_trials: crate::wake_trials::WakeTrials,
    /// Whether a short withdrawable job's fork-join pays on free CPUs
    /// (`fork_trials.rs`); touched only without foreign load.
    pub(crate) fork_trials: crate::fork_trials::ForkTrials,
}

/// A job's completion count and its open seats (`tickets.rs`).
pub(crate) struct Completion {
    /// Ticket holders that have not finished the current job.
    pub(crate) remaining: AtomicUsize,
    /// A withdrawable job's seats not yet taken: its sequence number and
    /// the count (`tickets::seats`).
    pub(crate) seats: AtomicU64,
    /// The last job's sequence number; only the turn holder writes it.
    /// On this line, which the caller writes every job anyway: a field of
    /// its own among the workers' read-mostly fields cost every worker a
    /// line transfer per job (the hot fork-join 120 -> 170 ns).
    pub(crate) job_seq: AtomicU64,
}

/// Rarely written words, read by spinning workers.
pub(crate) struct Settings {
    pub(crate) shutdown: AtomicBool,
    /// The fixed budget (used when `linger_ns == 0`).
    pub(crate) spin_budget: AtomicUsize,
    /// Adaptive policy: its linger in ns (0: the fixed budget applies) and
    /// in spin iterations. Hints, so `std` atomics even under loom.
    pub(crate) linger_ns: process::AtomicU64,
    pub(crate) linger_spins: process::AtomicUsize,
    /// The linger and the budget floor in `clock::ticks`.
    pub(crate) linger_ticks: process::AtomicU64,
    pub(crate) floor_ticks: process::AtomicU64,
    /// Set by a caller whose barrier wait was far longer than its own share
    /// (participants not being scheduled); cleared when waits are short.
    pub(crate) contended: process::AtomicBool,
    /// Bumped by every bind and unbind that publishes a mask for calling
    /// threads (`sides.rs`); 0: never bound, so callers skip the check.
    pub(crate) mask_generation: process::AtomicU64,
    /// More threads (workers + caller) than CPUs this process may use.
    pub(crate) oversubscribed: bool,
    /// The CPUs this process may use (for the foreign-load test).
    pub(crate) usable_cpus: usize,
    /// A cgroup CPU quota bounds the usable CPUs below the affinity set:
    /// waiting threads must not spend quota by yield-spinning.
    pub(crate) quota_bounded: bool,
}

impl Settings {
    /// Installs `policy` (Relaxed: a hint, read at each wait's start).
    pub(crate) fn set_policy(&self, policy: SpinPolicy) {
        match policy {
            SpinPolicy::Fixed(spins) => {
                self.spin_budget.store(spins, Ordering::Relaxed);
                self.linger_ns.store(0, process::Ordering::Relaxed);
            }
            SpinPolicy::Adaptive { linger } => {
                let ns = (linger.as_nanos() as u64).max(1);
                let to_ticks = |ns: u64| (ns as f64 / clock::ns_per_tick()) as u64;
                self.linger_spins
                    .store(linger_spins(linger), process::Ordering::Relaxed);
                self.linger_ticks
                    .store(to_ticks(ns), process::Ordering::Relaxed);
                self.floor_ticks.store(
                    to_ticks(MIN_ADAPTIVE_SPIN.as_nanos() as u64),
                    process::Ordering::Relaxed,
                );
                self.linger_ns.store(ns, process::Ordering::Relaxed);
            }
        }
    }

    /// The policy in force.
    pub(crate) fn policy(&self) -> SpinPolicy {
        match self.linger_ns.load(process::Ordering::Relaxed) {
            0 => SpinPolicy::Fixed(self.spin_budget.load(Ordering::Relaxed)),
            ns => SpinPolicy::Adaptive {
                linger: std::time::Duration::from_nanos(ns),
            },
        }
    }
}

#[cfg(not(loom))]
thread_local! {
    /// The pools whose jobs this thread is inside now, innermost last. A
    /// `run` on any of them from inside runs inline instead of waiting for
    /// a turn this thread (or the job it is part of) already holds. A
    /// `const` initialiser: read three times per job on the caller and
    /// twice on each worker, and a lazily initialised one checks its state
    /// on every access.
    static ACTIVE_POOLS: std::cell::RefCell<Vec<usize>> = const { std::cell::RefCell::new(Vec::new()) };
}

// loom's `thread_local!` takes no `const {}` initialiser.
#[cfg(loom)]
thread_local! {
    #[allow(clippy::missing_const_for_thread_local)]
    static ACTIVE_POOLS: std::cell::RefCell<Vec<usize>> = std::cell::RefCell::new(Vec::new());
}

/// Marks this thread as inside a job of `pool` for `f`'s duration,
/// unmarking it even if `f` unwinds. From a thread-local destructor that
/// runs after the mark's own was destroyed, `f` runs unmarked (the job then
/// runs inline anyway: `inside_pools` says so).
#[inline]
pub(crate) fn with_active_pool<R>(pool: usize, f: impl FnOnce() -> R) -> R {
    struct Restore(usize);
    impl Drop for Restore {
        fn drop(&mut self) {
            let depth = self.0;
            let _ = ACTIVE_POOLS.try_with(|active| active.borrow_mut().truncate(depth));
        }
    }
    let _restore = ACTIVE_POOLS
        .try_with(|active| {
            let mut active = active.borrow_mut();
            active.push(pool);
            active.len() - 1
        })
        .ok()
        .map(Restore);
    f()
}

/// Whether this thread is inside a job of `pool`, and of any pool; `None`
/// when the thread-local record is gone (a thread-local destructor running
/// after it was destroyed).
#[inline]
fn inside_pools(pool: usize) -> Option<(bool, bool)> {
    ACTIVE_POOLS
        .try_with(|active| {
            let active = active.borrow();
            (active.contains(&pool), !active.is_empty())
        })
        .ok()
}

/// A caller that forked inside its share of a job is, in the child, a
/// thread whose job's other participants do not exist: they will never
/// finish their shares, and waiting would hang for ever.
#[cold]
fn forked_inside_a_job() -> ! {
    panic!(
        "pool-core: fork() was called inside a pool job: in the child, the pool's workers do \
         not exist, so their shares of that job never run. Fork outside jobs (the child can use \
         the pool then: its jobs run inline), or exec/_exit in the child at once."
    )
}

/// Drops a panic payload whose own `Drop` may panic: that second panic is
/// caught and its payload leaked (logged), so no participant can unwind
/// past its `remaining` decrement or the barrier.
#[cold]
pub(crate) fn drop_payload(payload: Box<dyn Any + Send + 'static>) {
    if let Err(second) = panic::catch_unwind(AssertUnwindSafe(move || drop(payload))) {
        tracing::error!("pool-core: a panic payload panicked while being dropped; leaking it");
        std::mem::forget(second);
    }
}

impl Shared {
    pub(crate) fn new(
        workers: usize,
        policy: SpinPolicy,
        usable_cpus: usize,
        quota_bounded: bool,
        contexts: Vec<process::Arc<dyn JobContext>>,
    ) -> Shared {
        let slots = (0..workers)
            .map(|_| WorkerSlot {
                inbox: CachePadded::new(Inbox {
                    ticket: AtomicU64::new(0),
                    job: UnsafeCell::new(Job::none()),
                }),
                parked: CachePadded::new(AtomicBool::new(false)),
                counters: CachePadded::new(WorkerCounters::default()),
            })
            .collect();
        let shared = Shared {
            slots,
            completion: CachePadded::new(Completion {
                remaining: AtomicUsize::new(0),
                seats: AtomicU64::new(0),
                job_seq: AtomicU64::new(0),
            }),
            join_sleepers: CachePadded::new(Sleepers::with_room(4)),
            worker_panicked: CachePadded::new(AtomicBool::new(false)),
            epoch: CachePadded::new(AtomicUsize::new(0)),
            settings: CachePadded::new(Settings {
                shutdown: AtomicBool::new(false),
                spin_budget: AtomicUsize::new(0),
                linger_ns: process::AtomicU64::new(0),
                linger_spins: process::AtomicUsize::new(0),
                linger_ticks: process::AtomicU64::new(0),
                floor_ticks: process::AtomicU64::new(0),
                contended: process::AtomicBool::new(false),
                mask_generation: process::AtomicU64::new(0),
                oversubscribed: workers + 1 > usable_cpus,
                usable_cpus,
                quota_bounded,
            }),
            caller_counters: CachePadded::new(CallerCounters::default()),
            ns_per_tick: clock::ns_per_tick(),
            turn: CachePadded::new(Mutex::new(())),
            contexts: contexts.into_boxed_slice(),
            captured: CapturedContexts(UnsafeCell::new(Vec::new())),
            placement: crate::sides::Placement::new(workers),
            fork_generation: fork::generation(),
            #[cfg(loom)]
            seeded_bug: None,
            worker_panic: Mutex::new(None),
            wake_trials: Default::default(),
            fork_trials: Default::default(),
        };
        shared.settings.set_policy(policy);
        shared
    }

    /// Whether this pool reinstates `bug` (loom models only; constant
    /// `false` otherwise).
    #[inline(always)]
    pub(crate) fn has_bug(&self, bug: SeededBug) -> bool {
        #[cfg(loom)]
        return self.seeded_bug == Some(bug);
        #[cfg(not(loom))]
        {
            let _ = bug;
            false
        }
    }

    /// An identity for the nested-call check: the shared state's address.
    #[inline]
    pub(crate) fn id(&self) -> usize {
        self as *const Shared as usize
    }

    /// Runs `f(idx, n)` for the caller and the first `invited` workers
    /// (`n = invited + 1`), returning once every participant finished, and
    /// re-raising a participant's panic. `threads[i]` is worker `i`'s handle.
    ///
    /// Runs the whole job inline as `f(0, 1)` instead when no worker is
    /// invited (also when foreign load leaves no CPU for one: `load.rs`),
    /// when this thread is already inside a job of this pool (its
    /// turn is held by this very job), when this thread is inside a job of
    /// another pool and this pool's turn is taken (waiting could close a
    /// cycle: see "Nesting" in docs/design.md), or in a forked child (the
    /// workers do not exist there).
    pub(crate) fn run(&self, threads: &[Thread], invited: usize, f: &JobFn<'_>) {
        self.run_with(threads, invited, f, Invitation::Fitted);
    }

    /// As [`Shared::run`] with every worker invited whatever the adaptive
    /// policy would do: for jobs that must reach each worker thread (pin
    /// it, restore its mask). Still inline when nested or in a forked
    /// child, which such a job must check for (`n`).
    pub(crate) fn run_on_every_worker(&self, threads: &[Thread], f: &JobFn<'_>) {
        self.run_with(threads, self.slots.len(), f, Invitation::Exact);
    }

    /// As [`Shared::run`] for a job whose participants share its work (a
    /// cursor of grains): workers that have not started when the caller's
    /// share ends are withdrawn, not waited for (`tickets.rs`).
    /// `expected_ns`: the job's one-thread time as the caller expects it
    /// (0: unknown), which decides whether a parked worker is woken beside
    /// foreign load (`contention.rs`).
    pub(crate) fn run_optional(
        &self,
        threads: &[Thread],
        invited: usize,
        expected_ns: u64,
        f: &JobFn<'_>,
    ) {
        let invited = invited.min(crate::tickets::MAX_SEATS);
        self.run_with(threads, invited, f, Invitation::Optional { expected_ns });
    }

    fn run_with(&self, threads: &[Thread], invited: usize, f: &JobFn<'_>, invitation: Invitation) {
        // Other processes busy on this process's CPUs: invite only as many
        // workers as there are CPUs left for them (none: run inline). A
        // worker that must share its CPU with a busy process holds its
        // grain for that process's whole time slice, and the barrier waits
        // for it: measured beside a busy process on one of 2 CPUs, serial
        // 29.8 tokens/s, a pool that invited its worker anyway 15.0.
        // It is the adaptive policy's response; a fixed budget does exactly
        // what it is told (and tests that count participants stay exact on
        // a loaded machine).
        let now = clock::ticks();
        load::maybe_sample(now, self.ns_per_tick);
        let invited = invited.min(self.slots.len());
        let id = self.id();
        // One look at this thread's pool stack: (in a job of this pool, in
        // a job of any pool).
        let Some((inside_this, inside_any)) = inside_pools(id) else {
            // From a thread-local destructor after this thread's pool
            // record was destroyed: nesting cannot be ruled out, so the
            // job runs here, whole.
            return f(0, 1);
        };
        // A bound pool: a calling thread takes the node's mask at its
        // first dispatch after the bind, and its own back after unbind.
        // Relaxed: a hint; the mask itself is read under its lock.
        if !inside_any
            && self
                .settings
                .mask_generation
                .load(process::Ordering::Relaxed)
                != 0
        {
            crate::sides::adopt_caller_mask(self);
        }
        let asked = invited;
        let adaptive = self.settings.linger_ns.load(process::Ordering::Relaxed) != 0;
        let invited = match invitation {
            Invitation::Fitted if adaptive => self.fit_to_free_cpus(invited, now, inside_any),
            Invitation::Optional { expected_ns } if adaptive => {
                self.fit_optional(invited, now, inside_any, expected_ns)
            }
            _ => invited,
        };
        if invited == 0 && asked > 0 && !inside_this {
            // Outside the turn: callers sharing the pool count at once.
            self.caller_counters.inline.add(1);
        }
        let nested_here = if self.has_bug(SeededBug::NestingSeesInnermostOnly) {
            ACTIVE_POOLS.with(|active| active.borrow().last() == Some(&id))
        } else {
            inside_this
        };
        if invited == 0 || nested_here || fork::generation() != self.fork_generation {
            if invited == 0 && !inside_any {
                // A caller running its job alone is still a busy caller
                // (`spinners::as_busy_caller`).
                return spinners::as_busy_caller(|| self.run_inline(f));
            }
            return self.run_inline(f);
        }
        let turn = if inside_any && !self.has_bug(SeededBug::NestingSeesInnermostOnly) {
            // Nested through another pool: never block on a turn.
            match self.turn.try_lock() {
                Ok(guard) => guard,
                Err(TryLockError::Poisoned(poisoned)) => poisoned.into_inner(),
                Err(TryLockError::WouldBlock) => return self.run_inline(f),
            }
        } else {
            match self.turn.try_lock() {
                Ok(guard) => guard,
                Err(TryLockError::Poisoned(poisoned)) => poisoned.into_inner(),
                Err(TryLockError::WouldBlock) => {
                    // Asleep until the other caller's job ends: no CPU.
                    spinners::caller_blocked();
                    lock(&self.turn)
                }
            }
        };
        spinners::caller_active();
        let withdrawable = matches!(invitation, Invitation::Optional { .. });
        // Busy for the whole job, as an inline one is: a dispatched job
        // longer than the window (a 32000-row classifier) made this caller
        // look idle to another caller, which then invited its worker too,
        // and both stayed in that state (two callers on 2 CPUs: 36-51
        // dispatches of 294 jobs per sample, 0.75x the serial loop).
        let caller_result = spinners::as_busy_caller(|| {
            self.publish_and_join(threads, invited, f, now, withdrawable)
        });
        let worker_panic = self.take_worker_panic();
        // The captured contexts end with the job (a request's span must not
        // stay open until the next dispatch).
        let captured = if self.contexts.is_empty() {
            Vec::new()
        } else {
            // SAFETY: invariant 1: `remaining` reached 0, so no ticket holder
            // of this job reads the cell, and we still hold `turn`.
            self.captured
                .0
                .with_mut(|slot| std::mem::take(unsafe { &mut *slot }))
        };
        drop(turn);
        // Outside the turn: a value's `Drop` may itself use this pool.
        if let Err(payload) = panic::catch_unwind(AssertUnwindSafe(move || drop(captured))) {
            tracing::error!("pool-core: dropping a captured job context panicked");
            drop_payload(payload);
        }
        match caller_result {
            // The caller's own panic wins; a worker's is dropped with it.
            Err(payload) => {
                if let Some(surplus) = worker_panic {
                    drop_payload(surplus);
                }
                panic::resume_unwind(payload)
            }
            Ok(()) => {
                if let Some(payload) = worker_panic {
                    panic::resume_unwind(payload);
                }
            }
        }
    }

    /// The whole job on the calling thread, as the only participant.
    #[cold]
    fn run_inline(&self, f: &JobFn<'_>) {
        with_active_pool(self.id(), || f(0, 1));
    }

    /// Steps 1-5 of the protocol. Must hold `turn`. `now`: the clock read
    /// `run` took on entry, the start of the caller's share for the
    /// contention check (publishing is a small part of it).
    fn publish_and_join(
        &self,
        threads: &[Thread],
        invited: usize,
        f: &JobFn<'_>,
        now: u64,
        withdrawable: bool,
    ) -> Result<(), Box<dyn Any + Send + 'static>> {
        let participants = invited + 1;
        let job = Job::new(f, participants);
        // 1. Descriptor, count and seats. Relaxed: published by the Release
        //    ticket stores below. Only the turn holder writes `job_seq`.
        self.completion.remaining.store(invited, Ordering::Relaxed);
        let seq = self.completion.job_seq.load(Ordering::Relaxed) + 1;
        self.completion.job_seq.store(seq, Ordering::Relaxed);
        if withdrawable {
            self.completion
                .seats
                .store(tickets::seats(seq, invited), Ordering::Relaxed);
        }
        let ticket = tickets::ticket(seq, withdrawable);
        let counters = &*self.caller_counters;
        if invited < self.slots.len() {
            // Re-arm the uninvited spinners' budgets. Skipped for a full job:
            // every worker gets a ticket, and a write here would pull the
            // line out of every spinner's cache on the hot path. Skipped too
            // when only the CPU cap of the adaptive policy left workers out:
            // those workers get no job while the pool stays oversubscribed,
            // and spinning they would take CPU from the invited ones. Only
            // the turn holder writes `epoch`, so load + store is enough.
            if invited < self.invite_cap() {
                let epoch = self.epoch.load(Ordering::Relaxed);
                self.epoch.store(epoch.wrapping_add(1), Ordering::Relaxed);
            }
        }
        let id = self.id();
        if !self.contexts.is_empty() {
            // Inside the job: a `capture` that dispatches on this pool runs
            // that job inline instead of waiting for the turn we hold.
            let captured: Vec<Captured> =
                with_active_pool(id, || self.contexts.iter().map(|c| c.capture()).collect());
            // SAFETY: as for the inboxes below (invariant 1): no ticket holder
            // of an unfinished job exists while we hold `turn`.
            self.captured.0.with_mut(|slot| unsafe { *slot = captured });
        }
        // 2. Inbox, then ticket with Release: pairs with the worker's Acquire
        //    ticket load in `idle::wait_for_ticket`.
        for slot in &self.slots[..invited] {
            let inbox = &slot.inbox;
            // SAFETY: invariant 1: this worker finished its previous job
            // (`remaining` reached 0 before the last `run` returned, and we
            // hold `turn`), and its ticket is not yet bumped, so it is not
            // reading its inbox.
            inbox.job.with_mut(|job_ptr| unsafe { job_ptr.write(job) });
            inbox.ticket.store(ticket, Ordering::Release);
        }
        // 3. Pairs with the worker's fence between `parked = true` and its
        //    ticket re-check: one of us sees the other's store.
        if !self.has_bug(SeededBug::MissingWakeFence) {
            fence(Ordering::SeqCst);
        }
        let mut unparks = 0;
        for (slot, thread) in self.slots[..invited].iter().zip(threads) {
            if slot.parked.load(Ordering::Relaxed) {
                thread.unpark();
                unparks += 1;
            }
        }
        // 4. The caller's share, as the last participant.
        let caller_result = panic::catch_unwind(AssertUnwindSafe(|| {
            with_active_pool(id, || f(invited, participants))
        }));
        // A withdrawable job's work is done when the caller's share is:
        // the seats nobody took are withdrawn, not waited for.
        if withdrawable {
            let withdrawn = self.withdraw_seats(seq);
            if withdrawn > 0 {
                // Continues the release sequence of the workers'
                // decrements (an RMW), so the Acquire load that reads 0
                // still sees every worker's writes.
                self.completion
                    .remaining
                    .fetch_sub(withdrawn, Ordering::Relaxed);
                counters.withdrawn.add(withdrawn as u64);
                self.step_off_after_withdrawal(invited);
            }
        }
        // Bookkeeping after the share, where the workers are still busy
        // (before it, it would delay the caller's share).
        if unparks > 0 {
            counters.unparks.add(unparks);
        }
        if invited < self.slots.len() {
            counters.limited.add(1);
        } else {
            counters.full.add(1);
        }
        DISPATCHES.fetch_add(1, process::Ordering::Relaxed);
        // 5. Barrier: even if the caller panicked, every ticket holder must
        //    finish before `f`'s borrow may end.
        let wait = self.wait_for_workers(unparks > 0);
        if wait.yielded {
            self.step_off_shared_cpu(invited);
        }
        // A short wait reads no clock at all (a read would delay `run`'s
        // return): its length is its spins at the calibrated cost of one,
        // and a wait that short is never foreign load.
        match wait.long_since {
            None => {
                let waited = (wait.spins as f64 * ticks_per_spin()) as u64;
                counters.record_wait(
                    waited,
                    (waited as f64 * self.ns_per_tick) as u64,
                    wait.spins,
                );
                self.note_short_wait();
            }
            Some(marked) => {
                let start =
                    marked.wrapping_sub((SHORT_WAIT_SPINS as f64 * ticks_per_spin()) as u64);
                let waited = clock::ticks().wrapping_sub(start);
                let waited_ns = (waited as f64 * self.ns_per_tick) as u64;
                counters.record_wait(waited, waited_ns, wait.spins);
                self.note_contention(waited, waited_ns, start.saturating_sub(now));
            }
        }
        if caller_result.is_err() {
            counters.panics.add(1);
        }
        caller_result
    }

    /// Waits until `remaining == 0`. Acquire: pairs with every worker's
    /// Release decrement (one release sequence), so their writes are visible.
    /// `woke_someone`: this dispatch unparked a worker, which the scheduler
    /// may have queued on this very CPU (wake affinity): yield early, as
    /// when oversubscribed, or that worker waits for our whole spin budget
    /// (measured: ~0.7 ms instead of ~10 µs). The same when other processes
    /// crowd the CPUs (`load.rs`).
    #[inline]
    fn wait_for_workers(&self, woke_someone: bool) -> BarrierWait {
        let yield_after = if self.jobs_oversubscribed() || woke_someone || self.crowded() {
            OVERSUBSCRIBED_SPINS_BEFORE_YIELD
        } else {
            CALLER_SPINS_BEFORE_YIELD
        } >> SPIN_SCALE_SHIFT;
        let mut spins: u32 = 0;
        let mut yields: u64 = 0;
        let mut long_since = None;
        while self.completion.remaining.load(Ordering::Acquire) != 0 {
            if long_since.is_none() && u64::from(spins) + yields == SHORT_WAIT_SPINS {
                long_since = Some(clock::ticks());
            }
            if spins < yield_after {
                spins += 1;
                spin_loop();
            } else {
                yields += 1;
                let since = long_since.unwrap_or(0);
                if sleep::time_to_sleep(yields, since, self.ns_per_tick) {
                    if fork::generation() != self.fork_generation {
                        forked_inside_a_job();
                    }
                    // Long enough: sleep until the last worker's decrement
                    // wakes us (sleep.rs).
                    self.sleep_at_join();
                    break;
                }
                thread::yield_now();
            }
        }
        BarrierWait {
            spins: u64::from(spins) + yields,
            yielded: yields > 0,
            long_since,
        }
    }

    /// Parks the caller until `remaining` reaches 0, announcing itself
    /// with [`sleep::CALLER_ASLEEP`] in `remaining` by a compare-exchange
    /// that fails if the count moved (sleep.rs: the last decrement and
    /// this announcement are ordered in the word itself).
    #[cold]
    fn sleep_at_join(&self) {
        let id = self.join_sleepers.register();
        let remaining = &self.completion.remaining;
        loop {
            let word = remaining.load(Ordering::Acquire);
            if word & !sleep::CALLER_ASLEEP == 0 {
                break;
            }
            if word & sleep::CALLER_ASLEEP == 0 {
                let flagged = word | sleep::CALLER_ASLEEP;
                let announced = if self.has_bug(SeededBug::SleepFlagByStore) {
                    remaining.store(flagged, Ordering::Release);
                    true
                } else {
                    // Release: the registration above is visible to the
                    // worker whose decrement (Acquire) sees the flag.
                    remaining
                        .compare_exchange(word, flagged, Ordering::AcqRel, Ordering::Acquire)
                        .is_ok()
                };
                if !announced {
                    continue;
                }
            }
            sleep::park_in_pool();
        }
        self.join_sleepers.unregister(id);
    }

    /// Called by the worker whose decrement took `remaining` to 0, with
    /// the value it replaced: wakes the caller if it announced it sleeps.
    #[inline]
    pub(crate) fn job_completed(&self, previous: usize) {
        if previous & sleep::CALLER_ASLEEP != 0 {
            self.join_sleepers.wake_all();
        }
    }

    /// The pool's counters, summed.
    pub(crate) fn stats(&self) -> PoolStats {
        PoolStats {
            wake_trial_epochs: self.wake_trials.epochs(),
            fork_trial_epochs: self.fork_trials.epochs(),
            ..stats::snapshot(
                &self.caller_counters,
                self.slots.iter().map(|slot| &*slot.counters),
                self.ns_per_tick,
            )
        }
    }

    /// Records a worker's panic payload if it is the first of this job.
    /// Called before the worker's `remaining` decrement.
    #[cold]
    pub(crate) fn record_worker_panic(&self, payload: Box<dyn Any + Send + 'static>) {
        let mut slot = lock(&self.worker_panic);
        if slot.is_none() {
            *slot = Some(payload);
        } else {
            drop(slot);
            drop_payload(payload);
        }
        // Relaxed: published by the worker's Release decrement that follows.
        self.worker_panicked.store(true, Ordering::Relaxed);
    }

    /// The payload of a worker panic in the job just joined, if any. Only
    /// after `wait_for_workers`: its Acquire load of `remaining == 0` made
    /// every worker's `worker_panicked` store visible.
    #[inline]
    fn take_worker_panic(&self) -> Option<Box<dyn Any + Send + 'static>> {
        if !self.worker_panicked.load(Ordering::Relaxed) {
            return None;
        }
        self.worker_panicked.store(false, Ordering::Relaxed);
        lock(&self.worker_panic).take()
    }
}
