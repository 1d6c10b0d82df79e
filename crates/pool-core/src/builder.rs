//! `PoolBuilder`: worker count, spin budget, pinning, names, start hook.

use std::fmt;
use std::io;

use crate::context::JobContext;
use crate::dispatch::Shared;
use crate::env::spin_policy_from_env;
use crate::policy::SpinPolicy;
use crate::pool::Pool;
use crate::priority::{QosClass, SchedPolicy, WorkerPriority};
use crate::sync::{process, thread, Arc};
use crate::worker::run_worker;

type StartHook = process::Arc<dyn Fn(usize) + Send + Sync + 'static>;

/// Configures and starts a [`Pool`].
///
/// ```
/// let pool = pool_core::Pool::builder()
///     .workers(1)
///     .spin(0)
///     .thread_name_prefix("decode")
///     .on_start(|worker| tracing::debug!(worker, "decode worker up"))
///     .build()
///     .expect("spawn workers");
/// assert_eq!(pool.n_workers(), 1);
/// ```
#[must_use]
pub struct PoolBuilder {
    workers: usize,
    spin: Option<SpinPolicy>,
    worker_cpus: Option<Vec<usize>>,
    caller_cpu: Option<usize>,
    thread_name_prefix: String,
    on_start: Option<StartHook>,
    assume_cpus: Option<usize>,
    stack_size: Option<usize>,
    contexts: Vec<process::Arc<dyn JobContext>>,
    priority: WorkerPriority,
    /// Built by `global()`/`init_global`: its start hooks may not wait for
    /// the global pool (`global.rs`).
    for_global: bool,
    /// `participants(0)` was asked for: an error at `build`.
    zero_width: bool,
    /// Re-check the pins against the CPUs other pools hold, at `build`.
    share_cpus: bool,
    #[cfg(loom)]
    seeded_bug: Option<crate::seeded::SeededBug>,
}

impl fmt::Debug for PoolBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PoolBuilder")
            .field("workers", &self.workers)
            .field("spin", &self.spin)
            .field("worker_cpus", &self.worker_cpus)
            .field("thread_name_prefix", &self.thread_name_prefix)
            .field("on_start", &self.on_start.is_some())
            .field("assume_cpus", &self.assume_cpus)
            .field("contexts", &self.contexts.len())
            .finish()
    }
}

impl Default for PoolBuilder {
    fn default() -> Self {
        Self::new()
    }
}

impl PoolBuilder {
    /// The CPU the plan keeps for the thread that will call `run` (see
    /// [`Pool::pin_caller`]); [`PoolBuilder::from_plan`] sets it.
    pub fn caller_cpu(mut self, cpu: usize) -> Self {
        self.caller_cpu = Some(cpu);
        self
    }

    /// Zero workers (a caller-only pool), spin budget from the environment,
    /// no pinning, threads named `pool-worker-{i}`.
    pub fn new() -> PoolBuilder {
        PoolBuilder {
            workers: 0,
            spin: None,
            worker_cpus: None,
            caller_cpu: None,
            thread_name_prefix: "pool-worker".to_owned(),
            on_start: None,
            assume_cpus: None,
            stack_size: None,
            contexts: Vec::new(),
            priority: WorkerPriority::platform_default(),
            for_global: false,
            zero_width: false,
            share_cpus: false,
            #[cfg(loom)]
            seeded_bug: None,
        }
    }

    /// Worker threads to spawn; the caller makes `workers + 1` participants.
    pub fn workers(mut self, workers: usize) -> Self {
        self.workers = workers;
        self.zero_width = false;
        self
    }

    /// The pool's width in participants, the calling thread included:
    /// `participants(n)` spawns `n - 1` workers. The unit of
    /// `FERROX_CPU_THREADS`, `pool --threads` and rayon's `num_threads`:
    /// code ported from `num_threads(8)` wants `participants(8)`.
    /// `participants(0)` makes `build` fail (a pool always has the caller).
    ///
    /// ```
    /// let pool = pool_core::Pool::builder().participants(3).build()?;
    /// assert_eq!((pool.participants(), pool.n_workers()), (3, 2));
    /// assert!(pool_core::Pool::builder().participants(0).build().is_err());
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn participants(mut self, participants: usize) -> Self {
        self.workers = participants.saturating_sub(1);
        self.zero_width = participants == 0;
        self
    }

    /// A fixed spin budget instead of `CMF_POOL_SPIN` (`0`: park at once).
    pub fn spin(mut self, spins: usize) -> Self {
        self.spin = Some(SpinPolicy::Fixed(spins));
        self
    }

    /// A spin policy instead of `CMF_POOL_SPIN` (e.g. the adaptive policy
    /// with another linger).
    pub fn spin_policy(mut self, policy: SpinPolicy) -> Self {
        self.spin = Some(policy);
        self
    }

    /// Pins worker `i` to logical CPU `cpus[i]`. `build` fails with
    /// `InvalidInput` unless there is exactly one CPU per worker, and with
    /// the OS error if a pin is refused.
    ///
    /// Without it, workers run on the process's CPUs
    /// (`pool_topo::process_affinity_cpus`), even when the thread that builds
    /// the pool is pinned narrower: a thread inherits its creator's mask, and
    /// an engine that pinned its decode thread first would otherwise get
    /// every worker on that one CPU.
    pub fn pin_workers(mut self, cpus: Vec<usize>) -> Self {
        self.worker_cpus = Some(cpus);
        self
    }

    /// The workers' QoS class on macOS (default: user-interactive, so the
    /// pool's placement never depends on the class of the thread that built
    /// it). Ignored elsewhere: Linux and Android have no QoS classes.
    pub fn qos(mut self, class: QosClass) -> Self {
        self.priority.qos = Some(class);
        self
    }

    /// The workers' nice value (Linux, Android; `setpriority` on each
    /// worker thread). `build` returns the OS error if it is refused (a
    /// negative value needs privilege), and `Unsupported` elsewhere.
    pub fn nice(mut self, nice: i32) -> Self {
        self.priority.nice = Some(nice);
        self
    }

    /// The workers' scheduling policy (Linux, Android;
    /// `sched_setscheduler` on each worker thread). `build` returns the OS
    /// error if it is refused, and `Unsupported` elsewhere.
    pub fn sched_policy(mut self, policy: SchedPolicy) -> Self {
        self.priority.policy = Some(policy);
        self
    }

    /// Shares the machine with this process's other pools: at `build`, if
    /// any CPU in `pin_workers` (or the caller's CPU) is already held by
    /// another live pool's pinned threads (`pool_topo::held_cpus`), the
    /// workers are not pinned on top of them but left unpinned, with a
    /// `tracing` warning saying why. For a plan made earlier
    /// (`pool_topo::plan_cpu_pool`) and built after another pool took
    /// some of its CPUs. Plans made by [`PoolBuilder::from_env`] and
    /// [`Pool::for_this_machine`](crate::Pool::for_this_machine) already
    /// avoid held CPUs.
    pub fn share_cpus_with_other_pools(mut self) -> Self {
        self.share_cpus = true;
        self
    }

    /// Drops any `pin_workers` request: workers run on the process's CPUs.
    pub fn unpinned(mut self) -> Self {
        self.worker_cpus = None;
        self
    }

    /// `share_cpus_with_other_pools`: unpins the workers (and forgets the
    /// caller's CPU) when another pool holds any of their CPUs.
    fn leave_held_cpus_to_their_pools(&mut self) {
        let held = pool_topo::held_cpus();
        let taken: Vec<usize> = self
            .worker_cpus
            .iter()
            .flatten()
            .copied()
            .chain(self.caller_cpu)
            .filter(|cpu| held.contains(cpu))
            .collect();
        if !taken.is_empty() {
            tracing::warn!(
                "pool-core: CPUs {} are held by this process's other pools; building this pool \
                 unpinned rather than on top of them",
                pool_topo::format_cpu_list(&taken)
            );
            self.worker_cpus = None;
            self.caller_cpu = None;
        }
    }

    /// The worker count this builder will spawn.
    pub fn worker_count(&self) -> usize {
        self.workers
    }

    /// Names the threads `{prefix}-{i}`.
    pub fn thread_name_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.thread_name_prefix = prefix.into();
        self
    }

    /// Called on each worker thread, with its index, before it takes jobs
    /// (after pinning). `build` returns after every hook returned.
    pub fn on_start(mut self, hook: impl Fn(usize) + Send + Sync + 'static) -> Self {
        self.on_start = Some(process::Arc::new(hook));
        self
    }

    /// Decide oversubscription as if this process could use `cpus` CPUs,
    /// instead of reading the affinity mask and cgroup quota. For tests,
    /// models and planning for another machine.
    pub fn assume_cpus(mut self, cpus: usize) -> Self {
        self.assume_cpus = Some(cpus);
        self
    }

    /// Carries a kind of caller context into every job: captured on the
    /// caller at dispatch, entered on each worker for the job, restored
    /// after. May be called several times.
    pub fn context(mut self, context: impl JobContext) -> Self {
        self.contexts.push(process::Arc::new(context));
        self
    }

    /// Enters the caller's current `tracing` span on every participant
    /// ([`TracingSpanContext`](crate::TracingSpanContext)).
    pub fn trace_spans(self) -> Self {
        self.context(crate::context::TracingSpanContext)
    }

    /// Reinstates a known bug in this pool, for the loom models that must
    /// catch it (`--cfg loom` builds only).
    #[cfg(loom)]
    #[doc(hidden)]
    pub fn seeded_bug(mut self, bug: crate::seeded::SeededBug) -> Self {
        self.seeded_bug = Some(bug);
        self
    }

    /// Stack size of each worker thread (default: the platform's).
    pub fn stack_size(mut self, bytes: usize) -> Self {
        self.stack_size = Some(bytes);
        self
    }

    /// Marks this builder as the global pool's (`global.rs`).
    pub(crate) fn for_global(mut self) -> Self {
        self.for_global = true;
        self
    }

    /// Spawns the workers and returns once all of them are running (their
    /// kernel thread ids recorded, pins applied, start hooks returned).
    ///
    /// # Errors
    /// `InvalidInput` for a zero-width pool or a pin list of the wrong
    /// length; the OS error if a thread cannot be spawned; pinning,
    /// priority and start-hook failures, named; `TimedOut` if a worker
    /// has not run its first line within 10 s (stuck in the thread
    /// library's start-up: in a child forked from a multi-threaded parent
    /// whose other threads were starting threads at the fork; that thread
    /// is leaked, not joined).
    pub fn build(mut self) -> io::Result<Pool> {
        if self.share_cpus {
            self.leave_held_cpus_to_their_pools();
        }
        if self.zero_width {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "participants(0): a pool has at least one participant, the calling thread",
            ));
        }
        if let Some(cpus) = &self.worker_cpus {
            if cpus.len() != self.workers {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!(
                        "pin_workers got {} CPUs for {} workers; give exactly one per worker",
                        cpus.len(),
                        self.workers
                    ),
                ));
            }
        }
        crate::fork::register_handler();
        let policy = self.spin.unwrap_or_else(spin_policy_from_env);
        let (cpus, quota_bounded) = match self.assume_cpus {
            Some(cpus) => (cpus.max(1), false),
            None => usable_cpus(),
        };
        let oversubscribed = self.workers + 1 > cpus;
        #[allow(unused_mut)]
        let mut shared = Shared::new(self.workers, policy, cpus, quota_bounded, self.contexts);
        #[cfg(loom)]
        {
            shared.seeded_bug = self.seeded_bug;
        }
        let shared = Arc::new(shared);
        let startup = Arc::new(startup::Startup::new());

        let mut pool = Pool {
            shared: shared.clone(),
            threads: Box::new([]),
            handles: Vec::with_capacity(self.workers),
            tids: Vec::new(),
            caller_cpu: self.caller_cpu,
            cpu_hold: None,
        };
        let widen = process::Arc::new(if self.worker_cpus.is_none() {
            cpus_to_widen_to()
        } else {
            None
        });
        let mut threads = Vec::with_capacity(self.workers);
        for index in 0..self.workers {
            let shared = shared.clone();
            let startup = startup.clone();
            let widen = widen.clone();
            let pin = self.worker_cpus.as_ref().map(|cpus| cpus[index]);
            let hook = self.on_start.clone();
            let priority = self.priority;
            let for_global = self.for_global;
            let mut builder =
                thread::Builder::new().name(format!("{}-{index}", self.thread_name_prefix));
            if let Some(bytes) = self.stack_size {
                builder = builder.stack_size(bytes);
            }
            // Until the new thread runs its first line it is inside the
            // standard library's thread start, which a fork must not split
            // (`fork.rs`). Dropped with the closure if the spawn fails.
            let starting = crate::fork::ThreadTransition::begin();
            let spawned = builder.spawn(move || {
                drop(starting);
                startup.started(index);
                let hook = hook
                    .as_deref()
                    .map(|hook| move || crate::global::run_start_hook(for_global, || hook(index)));
                startup.register(index, pin, widen.as_ref().as_ref(), priority, hook);
                drop(startup);
                run_worker(shared, index);
            });
            match spawned {
                Ok(handle) => {
                    threads.push(handle.thread().clone());
                    pool.handles.push(handle);
                }
                Err(err) => {
                    // Dropping `pool` shuts down and joins what started.
                    pool.threads = threads.into_boxed_slice();
                    return Err(err);
                }
            }
        }
        pool.threads = threads.into_boxed_slice();
        pool.tids = match startup.wait_all(self.workers) {
            Ok(tids) => tids,
            Err(startup::Failed {
                error,
                never_started,
            }) => {
                // A thread stuck in its start can never be joined: leak
                // it; dropping `pool` joins the others.
                for index in never_started.into_iter().rev() {
                    std::mem::forget(pool.handles.remove(index));
                }
                return Err(error);
            }
        };
        // The pinned workers' CPUs and the caller's, for the plans of the
        // pools built after this one (`pool_topo::held_cpus`).
        let pinned: Vec<usize> = self
            .worker_cpus
            .iter()
            .flatten()
            .copied()
            .chain(self.caller_cpu)
            .collect();
        if !pinned.is_empty() {
            pool.cpu_hold = Some(pool_topo::hold_cpus(&pinned));
        }
        crate::global::registry::add(pool.shared.id(), &pool.tids);
        tracing::debug!(
            workers = self.workers,
            ?policy,
            oversubscribed,
            cpus,
            "pool-core: pool started ({} participants on {} usable CPUs)",
            self.workers + 1,
            cpus
        );
        Ok(pool)
    }
}

/// CPUs this process may use (the affinity mask, bounded by the cgroup
/// quota, as `pool_topo::usable_cpus`) and whether the quota is the
/// tighter bound, from one read of each. Under loom the machine is mocked
/// as never oversubscribed unless a model says otherwise with
/// `assume_cpus`.
#[cfg(not(loom))]
fn usable_cpus() -> (usize, bool) {
    let allowed = pool_topo::process_affinity_cpus().len();
    let quota = pool_topo::quota_cpus();
    let usable = quota.map_or(allowed, |quota| allowed.min(quota)).max(1);
    (usable, quota.is_some_and(|quota| quota < allowed))
}

#[cfg(loom)]
fn usable_cpus() -> (usize, bool) {
    (usize::MAX, false)
}

/// The CPUs an unpinned worker should run on, when the constructing thread
/// was pinned narrower than the process: a new thread inherits its
/// creator's mask, and an engine that pinned its decode thread to one CPU
/// before building the pool would otherwise get workers stuck on that very
/// CPU. `None`: the inherited mask is already the process's.
#[cfg(all(any(target_os = "linux", target_os = "android"), not(loom), not(miri)))]
fn cpus_to_widen_to() -> Option<Vec<usize>> {
    let process = pool_topo::process_affinity_cpus();
    (pool_topo::thread_affinity_cpus() != process).then_some(process)
}

#[cfg(not(all(any(target_os = "linux", target_os = "android"), not(loom), not(miri))))]
fn cpus_to_widen_to() -> Option<Vec<usize>> {
    None
}

/// Worker registration: every worker's tid recorded before `build` returns.
/// A per-pool record (a process-wide list shared by concurrent constructors
/// once deadlocked a constructor).
#[cfg(not(loom))]
mod startup {
    use std::io;
    use std::time::{Duration, Instant};

    use crate::priority::WorkerPriority;
    use crate::sync::{lock, Condvar, Mutex};

    #[derive(Default)]
    struct Record {
        started: Vec<usize>,
        tids: Vec<(usize, i32)>,
        errors: Vec<String>,
    }

    /// How long a spawned thread may take to run its first line. Thread
    /// start takes microseconds even on a loaded machine; longer means it
    /// is stuck in the thread library for good (a lock a forked child
    /// inherited held), and the build fails instead of hanging.
    const START_LIMIT: Duration = Duration::from_secs(10);

    /// Why a build failed, and which workers never ran a line (they cannot
    /// be joined).
    pub(super) struct Failed {
        pub(super) error: io::Error,
        pub(super) never_started: Vec<usize>,
    }

    pub(super) struct Startup {
        record: Mutex<Record>,
        changed: Condvar,
    }

    impl Startup {
        pub(super) fn new() -> Self {
            Startup {
                record: Mutex::new(Record::default()),
                changed: Condvar::new(),
            }
        }

        /// Runs first on the new worker: it is out of the thread start.
        pub(super) fn started(&self, index: usize) {
            lock(&self.record).started.push(index);
            self.changed.notify_all();
        }

        /// Runs on the new worker: pin, hook, record the tid.
        pub(super) fn register(
            &self,
            index: usize,
            pin: Option<usize>,
            widen: Option<&Vec<usize>>,
            priority: WorkerPriority,
            hook: Option<impl FnOnce()>,
        ) {
            if let Some(cpus) = widen {
                // Not an error: the worker still runs, on fewer CPUs.
                if let Err(err) = pool_topo::pin_current_thread(cpus) {
                    tracing::warn!(
                        index,
                        %err,
                        "pool-core: could not widen an unpinned worker to the process's CPUs"
                    );
                }
            }
            let pin_error = pin.and_then(|cpu| {
                pool_topo::pin_current_thread(&[cpu])
                    .err()
                    .map(|err| format!("worker {index}: pinning to CPU {cpu} failed: {err}"))
            });
            let priority_error = priority
                .apply()
                .err()
                .map(|err| format!("worker {index}: {err}"));
            let hook_error = hook.and_then(|hook| {
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(hook))
                    .err()
                    .map(|payload| {
                        let message = payload
                            .downcast_ref::<&str>()
                            .map(|text| (*text).to_owned())
                            .or_else(|| payload.downcast_ref::<String>().cloned())
                            .unwrap_or_else(|| "a non-text payload".to_owned());
                        crate::dispatch::drop_payload(payload);
                        format!("worker {index}: the on_start hook panicked: {message}")
                    })
            });
            let mut record = lock(&self.record);
            record.tids.push((index, current_tid()));
            record.errors.extend(pin_error);
            record.errors.extend(priority_error);
            record.errors.extend(hook_error);
            drop(record);
            self.changed.notify_all();
        }

        /// Waits for `workers` registrations; their tids in worker order.
        /// A worker that has not started within [`START_LIMIT`] fails the
        /// build; a start hook may take as long as it likes.
        pub(super) fn wait_all(&self, workers: usize) -> Result<Vec<i32>, Failed> {
            let deadline = Instant::now() + START_LIMIT;
            let mut record = lock(&self.record);
            while record.tids.len() < workers {
                let left = deadline.saturating_duration_since(Instant::now());
                if record.started.len() < workers && left.is_zero() {
                    let never_started: Vec<usize> = (0..workers)
                        .filter(|index| !record.started.contains(index))
                        .collect();
                    return Err(Failed {
                        error: not_started(&never_started, workers),
                        never_started,
                    });
                }
                record = if record.started.len() < workers {
                    match self.changed.wait_timeout(record, left) {
                        Ok((guard, _)) => guard,
                        Err(poisoned) => poisoned.into_inner().0,
                    }
                } else {
                    match self.changed.wait(record) {
                        Ok(guard) => guard,
                        Err(poisoned) => poisoned.into_inner(),
                    }
                };
            }
            if !record.errors.is_empty() {
                return Err(Failed {
                    error: io::Error::other(record.errors.join("; ")),
                    never_started: Vec::new(),
                });
            }
            record.tids.sort_unstable();
            Ok(record.tids.iter().map(|&(_, tid)| tid).collect())
        }
    }

    fn not_started(never_started: &[usize], workers: usize) -> io::Error {
        io::Error::new(
            io::ErrorKind::TimedOut,
            format!(
                "{} of {workers} worker threads did not start within {START_LIMIT:?}: stuck \
                 inside the thread library's start-up{}. The known cause is a process forked \
                 from a multi-threaded parent while another parent thread held a lock thread \
                 start-up takes (pool-core holds its own threads' starts back across a fork, \
                 not other threads'): build pools before forking, or exec",
                never_started.len(),
                if crate::fork::generation() > 0 {
                    " (this process is a forked child)"
                } else {
                    ""
                }
            ),
        )
    }

    /// The kernel thread id (Linux, Android: what `/proc`, `sched_*` and
    /// the Android performance-hint API take).
    #[cfg(any(target_os = "linux", target_os = "android"))]
    fn current_tid() -> i32 {
        // SAFETY: gettid takes no arguments and cannot fail.
        unsafe { libc::syscall(libc::SYS_gettid) as i32 }
    }

    /// The Mach thread port (macOS: what `thread_policy_set` takes).
    #[cfg(target_vendor = "apple")]
    fn current_tid() -> i32 {
        // SAFETY: `pthread_self` is always valid; the call has no other
        // preconditions.
        unsafe { libc::pthread_mach_thread_np(libc::pthread_self()) as i32 }
    }

    /// The Windows thread id (what `OpenThread` and the tools take).
    #[cfg(windows)]
    fn current_tid() -> i32 {
        #[link(name = "kernel32")]
        extern "system" {
            fn GetCurrentThreadId() -> u32;
        }
        // SAFETY: no arguments, cannot fail.
        unsafe { GetCurrentThreadId() as i32 }
    }

    /// No thread id the pool can report here: -1.
    #[cfg(not(any(
        target_os = "linux",
        target_os = "android",
        target_vendor = "apple",
        windows
    )))]
    fn current_tid() -> i32 {
        -1
    }
}

/// Under loom, registration is not modelled: workers start taking jobs at
/// once, which is exactly the race invariant 4 exists for.
#[cfg(loom)]
mod startup {
    use std::io;

    use crate::priority::WorkerPriority;

    pub(super) struct Startup;

    impl Startup {
        pub(super) fn new() -> Self {
            Startup
        }

        pub(super) fn register(
            &self,
            index: usize,
            _pin: Option<usize>,
            _widen: Option<&Vec<usize>>,
            _priority: WorkerPriority,
            hook: Option<impl FnOnce()>,
        ) {
            let _ = index;
            if let Some(hook) = hook {
                hook();
            }
        }

        pub(super) fn started(&self, _index: usize) {}

        pub(super) fn wait_all(&self, _workers: usize) -> Result<Vec<i32>, Failed> {
            Ok(Vec::new())
        }
    }

    /// Never built under loom: the start is not modelled.
    pub(super) struct Failed {
        pub(super) error: io::Error,
        pub(super) never_started: Vec<usize>,
    }
}
