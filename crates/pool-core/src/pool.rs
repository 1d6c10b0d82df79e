//! The public pool type and its lifecycle.

use std::fmt;

use crate::builder::PoolBuilder;
use crate::dispatch::Shared;
use crate::policy::SpinPolicy;
use crate::stats::PoolStats;
use crate::sync::{fence, Arc, JoinHandle, Ordering, Thread};

/// A persistent fork-join pool: `workers` threads spawned once, plus the
/// calling thread, which always takes part as the last participant.
///
/// Each job is one closure `f(idx, n)`, called once for every participant
/// `idx` in `0..n`. `run` returns only after every participant finished, so
/// `f` may borrow freely from the caller's stack.
///
/// ```
/// use std::sync::atomic::{AtomicUsize, Ordering};
/// let pool = pool_core::Pool::new(2);
/// let (calls, width) = (AtomicUsize::new(0), AtomicUsize::new(0));
/// pool.run(|idx, n| {
///     assert!(idx < n);
///     calls.fetch_add(1, Ordering::Relaxed);
///     width.store(n, Ordering::Relaxed);
/// });
/// // Every participant ran once: n_workers() + 1 of them, or fewer when
/// // the adaptive policy left workers out (see below).
/// assert_eq!(calls.load(Ordering::Relaxed), width.load(Ordering::Relaxed));
/// ```
///
/// Panics in any participant are caught, every participant still finishes,
/// and `run` re-raises one payload (the caller's own, else the first
/// worker's); the pool stays usable. Two threads calling `run` on one pool
/// take turns.
///
/// `n` is not always `n_workers() + 1`: use the `n` you are given. The job
/// runs inline on the calling thread as `f(0, 1)` when it is nested (a job
/// calling `run` on a pool it is already inside, at any depth: A -> B -> A;
/// or a thread inside any pool's job finding this pool's turn taken, which
/// could otherwise close a cycle of waits), in a forked child (its workers
/// do not exist there), and, under the adaptive spin policy, when other
/// processes keep every CPU a worker could use busy (a worker sharing a CPU
/// with a busy process would hold the barrier for that process's time
/// slice; under lighter foreign load it invites only as many workers as
/// there are free CPUs), or when this process's own callers (two or more
/// threads dispatching now) already fill its CPUs. Under the adaptive
/// policy an oversubscribed pool also invites at most one worker per CPU
/// besides the caller's (a job never waits for a worker with no CPU to run
/// on). A fixed spin budget always invites every worker. See `docs/design.md`.
pub struct Pool {
    pub(crate) shared: Arc<Shared>,
    /// Worker `i`'s handle, for `unpark`.
    pub(crate) threads: Box<[Thread]>,
    pub(crate) handles: Vec<JoinHandle<()>>,
    pub(crate) tids: Vec<i32>,
    /// The CPU the plan kept for the caller, if the pool came from one.
    pub(crate) caller_cpu: Option<usize>,
    /// This pool's pinned CPUs in the process's record, released on drop.
    pub(crate) cpu_hold: Option<pool_topo::CpuHold>,
}

impl Pool {
    /// A pool of `workers` worker threads (plus the caller: `workers + 1`
    /// participants; [`PoolBuilder::participants`] counts the caller in),
    /// spin policy from
    /// `CMF_POOL_SPIN`: a fixed budget when set, else the adaptive policy
    /// (an invalid value is warned about and the adaptive policy used).
    ///
    /// # Panics
    ///
    /// If the OS refuses to spawn a thread; use [`Pool::builder`] to handle
    /// that as an error.
    pub fn new(workers: usize) -> Pool {
        Self::expect_built(Pool::builder().workers(workers).build())
    }

    /// A pool of `workers` threads with a fixed spin budget (`0`: park as
    /// soon as idle, for sharing the machine).
    ///
    /// # Panics
    ///
    /// If the OS refuses to spawn a thread.
    pub fn with_spin(workers: usize, spin: usize) -> Pool {
        Self::expect_built(Pool::builder().workers(workers).spin(spin).build())
    }

    pub(crate) fn expect_built(result: std::io::Result<Pool>) -> Pool {
        match result {
            Ok(pool) => pool,
            Err(err) => panic!("pool-core: could not start the pool's workers: {err}"),
        }
    }

    /// A builder for worker count, spin budget, pinning, thread names and an
    /// on-start hook.
    pub fn builder() -> PoolBuilder {
        PoolBuilder::new()
    }

    /// Worker threads (not counting the caller).
    #[inline]
    pub fn n_workers(&self) -> usize {
        self.threads.len()
    }

    /// Participants of a full job: the workers and the calling thread.
    /// The unit `FERROX_CPU_THREADS`, `--threads` and
    /// [`PoolBuilder::participants`] count in (rayon's `num_threads`).
    #[inline]
    pub fn participants(&self) -> usize {
        self.threads.len() + 1
    }

    /// Runs `f(idx, n)` for every `idx` in `0..n`; the calling thread is
    /// `idx = n - 1`. What `n` is:
    /// - under a fixed spin budget, `participants()` (`n_workers() + 1`),
    ///   unless the call runs inline;
    /// - under the adaptive policy (the default), at most that: the job
    ///   invites at most one worker per CPU besides the caller's, fewer
    ///   when other processes keep CPUs busy, and none when this
    ///   process's own callers already fill its CPUs;
    /// - 1 (inline, `f(0, 1)`) when nested in a job of this pool, when
    ///   nested in another pool's job and this pool's turn is taken, in a
    ///   forked child, and from a thread-local destructor late in a
    ///   thread's exit.
    ///
    /// So split work by the `n` you are given, and expect results that
    /// depend on `n` (a float sum of per-participant parts) to change
    /// with it: for the same bits on every call, split by the data
    /// instead (`pool_matvec::map_reduce`).
    ///
    /// The closure may be passed by value or by reference (`|..| ..` or
    /// `&|..| ..`); it is never boxed.
    #[inline]
    pub fn run(&self, f: impl Fn(usize, usize) + Sync) {
        self.shared.run(&self.threads, self.threads.len(), &f);
    }

    /// Runs `f(idx, n)` on workers `0..k` and the caller only,
    /// `k = min(max_workers, n_workers())`, `n` at most `k + 1` (as
    /// [`Pool::run`] decides it). The other workers neither run nor wait:
    /// a job with few grains wakes only what it needs.
    #[inline]
    pub fn run_limited(&self, max_workers: usize, f: impl Fn(usize, usize) + Sync) {
        self.shared.run(&self.threads, max_workers, &f);
    }

    /// Runs `f(idx, n)` on the caller (`idx = n - 1`) and on those of
    /// workers `0..k` (`k = min(max_workers, n_workers())`, `n = k + 1`)
    /// that start before the caller's share returns: for a job whose
    /// participants share its work through something like a cursor of
    /// grains, so that whoever runs does the work. A worker that has not
    /// started when the caller is done is withdrawn, not waited for: on a
    /// busy machine a worker that the scheduler keeps waiting costs the
    /// job nothing (the caller does the rest), where `run_limited` would
    /// wait for it. Each `idx` runs at most once; the caller's always.
    /// Under the adaptive policy, when other processes leave no CPU for a
    /// worker, only workers still awake are invited (a parked one woken
    /// then lands beside the caller and takes its time: see
    /// "Withdrawable invitations" in docs/design.md), unless the job is
    /// known to be long ([`Pool::run_optional_workers_for`]); the CPU cap
    /// and this process's own callers shrink the invitation too.
    ///
    /// ```
    /// use std::sync::atomic::{AtomicUsize, Ordering};
    /// let pool = pool_core::Pool::new(2);
    /// let (cursor, done) = (AtomicUsize::new(0), AtomicUsize::new(0));
    /// pool.run_optional_workers(2, |_, _| {
    ///     // Pull grains until none is left: whoever runs does the work.
    ///     while cursor.fetch_add(1, Ordering::Relaxed) < 100 {
    ///         done.fetch_add(1, Ordering::Relaxed);
    ///     }
    /// });
    /// assert_eq!(done.into_inner(), 100);
    /// ```
    #[inline]
    pub fn run_optional_workers(&self, max_workers: usize, f: impl Fn(usize, usize) + Sync) {
        self.shared.run_optional(&self.threads, max_workers, 0, &f);
    }

    /// [`Pool::run_optional_workers`] for a job that takes one thread about
    /// `expected` (the caller's estimate: a matvec's bytes over one core's
    /// read rate, say). Only the adaptive policy beside foreign load reads
    /// it: a job of [`WORTH_A_WAKE`](crate::WORTH_A_WAKE) or more wakes a
    /// parked worker even when other processes seem to leave it no CPU,
    /// since a share of a busy CPU for the rest of the job repays the
    /// wake; a shorter one invites only the workers still awake, unless
    /// trials of both ways, timed against `expected`, found that waking
    /// pays ("Waking by trial" in docs/design.md). A caller below normal
    /// priority (a positive nice value) wakes none for a long job, except
    /// on Linux, where workers end their time slices between jobs and so
    /// delay no join ("Yielding at the end of a turn"). `Duration::ZERO`
    /// is an estimate of almost nothing (1 ns), a short job: for a job of
    /// unknown length use [`Pool::run_optional_workers`], which the trials
    /// leave out.
    ///
    /// ```
    /// use std::sync::atomic::{AtomicUsize, Ordering};
    /// use std::time::Duration;
    /// let pool = pool_core::Pool::new(1);
    /// let (cursor, done) = (AtomicUsize::new(0), AtomicUsize::new(0));
    /// pool.run_optional_workers_for(1, Duration::from_millis(1), |_, _| {
    ///     while cursor.fetch_add(1, Ordering::Relaxed) < 100 {
    ///         done.fetch_add(1, Ordering::Relaxed);
    ///     }
    /// });
    /// assert_eq!(done.into_inner(), 100);
    /// ```
    #[inline]
    pub fn run_optional_workers_for(
        &self,
        max_workers: usize,
        expected: std::time::Duration,
        f: impl Fn(usize, usize) + Sync,
    ) {
        // At least 1 ns: 0 means no estimate.
        let expected_ns = u64::try_from(expected.as_nanos())
            .unwrap_or(u64::MAX)
            .max(1);
        self.shared
            .run_optional(&self.threads, max_workers, expected_ns, &f);
    }

    /// The current spin budget: spins before an idle worker parks (for
    /// the adaptive policy, the most it spins: its linger in iterations).
    pub fn spin_budget(&self) -> usize {
        match self.spin_policy() {
            SpinPolicy::Fixed(spins) => spins,
            SpinPolicy::Adaptive { linger } => crate::policy::linger_spins(linger),
        }
    }

    /// Switches to a fixed spin budget; idle workers pick it up at their
    /// next wait.
    pub fn set_spin_budget(&self, spins: usize) {
        self.set_spin_policy(SpinPolicy::Fixed(spins));
    }

    /// The spin policy in force.
    pub fn spin_policy(&self) -> SpinPolicy {
        self.shared.settings.policy()
    }

    /// Sets the spin policy; idle workers pick it up at their next wait.
    pub fn set_spin_policy(&self, policy: SpinPolicy) {
        self.shared.settings.set_policy(policy);
    }

    /// Whether workers + caller exceed the CPUs this process may use
    /// (affinity mask and cgroup quota). Waiting then yields early.
    pub fn is_oversubscribed(&self) -> bool {
        self.shared.settings.oversubscribed
    }

    /// This pool's counters since it was built: dispatches, unparks,
    /// parks, spins, barrier waits, panics. Cheap enough to read often;
    /// see [`PoolStats`].
    pub fn stats(&self) -> PoolStats {
        self.shared.stats()
    }

    /// Whether the last dispatch's barrier wait looked like foreign load
    /// (far longer than the caller's own share and than a wake-up): the
    /// adaptive policy's spinners are then yielding and parking early.
    pub fn is_contended(&self) -> bool {
        self.shared.is_contended()
    }

    /// The workers' thread ids, in worker order, all recorded before the
    /// constructor returned: kernel tids on Linux and Android (for `/proc`,
    /// `sched_*`, the Android performance-hint API), Mach thread ports on
    /// macOS, -1 where the OS gives none (Windows).
    pub fn worker_tids(&self) -> Vec<i32> {
        self.tids.clone()
    }
}

impl fmt::Debug for Pool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Pool")
            .field("workers", &self.n_workers())
            .field("spin_policy", &self.spin_policy())
            .field("oversubscribed", &self.is_oversubscribed())
            .finish()
    }
}

// A panic inside a job leaves the pool as it was: `run` waits for every
// participant, re-raises the panic on the caller after the barrier, and
// the next job starts from a clean slate (tests/panics.rs). So a `&Pool`
// may cross `catch_unwind` without `AssertUnwindSafe`.
impl std::panic::UnwindSafe for Pool {}
impl std::panic::RefUnwindSafe for Pool {}

impl Drop for Pool {
    /// Wakes every worker, parked or spinning, and joins them. No job can be
    /// in flight: `run` borrows the pool.
    fn drop(&mut self) {
        crate::global::registry::remove(self.shared.id());
        if crate::fork::generation() != self.shared.fork_generation {
            // A forked child: the workers were never copied into it. There
            // is nobody to wake or join; leak the handles (joining a thread
            // that does not exist would hang or worse).
            std::mem::forget(std::mem::take(&mut self.handles));
            return;
        }
        // From here until the joins return the workers are exiting, which
        // a fork must not split (`fork.rs`).
        let _exiting = crate::fork::ThreadTransition::begin();
        // Release: pairs with the workers' Acquire loads of `shutdown`.
        self.shared.settings.shutdown.store(true, Ordering::Release);
        // Pairs with a parking worker's fence: it either sees `shutdown`, or
        // is parked (or about to be) and gets the unpark below.
        fence(Ordering::SeqCst);
        for thread in self.threads.iter() {
            thread.unpark();
        }
        for handle in self.handles.drain(..) {
            if handle.join().is_err() {
                tracing::error!("pool-core: a worker thread panicked outside a job");
            }
        }
    }
}
