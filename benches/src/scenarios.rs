//! The settings engines run the pool in, each built for real, so that the
//! pool, rayon and a serial loop can be measured side by side inside it
//! (`pool bench --scenarios` and the criterion group `scenarios`).
//!
//! A [`Scenario`] enters its setting when created (pins the calling
//! thread, starts a busy or decoding neighbour process, moves this process
//! into a cgroup with a CPU quota, ...) and leaves it when dropped. Inside,
//! [`Scenario::time_tokens`] decodes tokens on one kind of executor
//! ([`Exec`]) the way that setting uses executors (one caller, two callers,
//! two pools in turn, idle gaps between tokens).

use std::cell::Cell;
use std::collections::HashMap;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use pool_core::{Pool, SpinPolicy};
use pool_matvec::decode::{DecodeExecutor, DecodeModel, Input, Matrix, Serial};
use pool_matvec::{grain_for, RowFn, RowParallel};
use rayon::prelude::*;

/// What a setting decodes: the synthetic f32 layer stack of
/// `pool_matvec::decode`, or a real model (a GGUF or llama2.c file loaded
/// by `pool_llama`, greedy tokens from BOS).
#[derive(Clone, Copy)]
pub enum Workload<'a> {
    /// The synthetic decode: the layer stack's matvecs, no attention.
    Synthetic(&'a DecodeModel),
    /// A model's forward pass, attention and all, on its own tensor types.
    Model(&'a pool_llama::Model),
}

impl<'a> From<&'a DecodeModel> for Workload<'a> {
    fn from(model: &'a DecodeModel) -> Workload<'a> {
        Workload::Synthetic(model)
    }
}

impl<'a> From<&'a pool_llama::Model> for Workload<'a> {
    fn from(model: &'a pool_llama::Model) -> Workload<'a> {
        Workload::Model(model)
    }
}

impl Workload<'_> {
    /// Decodes `tokens` tokens on `exec`.
    fn decode(self, exec: &dyn Executes, tokens: usize) {
        match self {
            Workload::Synthetic(model) => {
                std::hint::black_box(model.decode(exec, tokens));
            }
            Workload::Model(model) => {
                std::hint::black_box(model.generate(exec, tokens, |_, _| {}));
            }
        }
    }
}

/// An executor both workloads run on.
trait Executes: DecodeExecutor + RowParallel {}

impl<E: DecodeExecutor + RowParallel + ?Sized> Executes for E {}

/// The environment variable that turns a spawned copy of a bench binary
/// into a decoding neighbour (setting 8): `decode:<seconds>`.
pub const NEIGHBOUR_ENV: &str = "POOL_BENCH_NEIGHBOUR";

/// The deployment settings, numbered as `pool bench --scenarios` prints them.
pub const SETTINGS: [(u32, &str); 18] = [
    (1, "baseline: unpinned pool, unpinned caller"),
    (2, "caller pinned to one CPU before the pool is built"),
    (
        3,
        "Pool::from_env (pinned workers), caller on the plan's CPU",
    ),
    (4, "two pools used in turn by one thread"),
    (5, "two pools used at once by two threads"),
    (6, "one pool shared by two caller threads"),
    (7, "a busy process on one CPU"),
    (8, "a second process decoding with its own pool"),
    (9, "a CPU quota of 1 CPU (cgroup)"),
    (10, "oversubscribed: 4x as many workers as CPUs"),
    (11, "bursty: 1 ms idle gaps between tokens"),
    (12, "bursty: 20 ms idle gaps between tokens"),
    (13, "three busy processes beside the decode"),
    (14, "a bursty 2-thread neighbour, 20 ms on, 20 ms off"),
    (15, "the decode at nice 10, a busy neighbour at nice 0"),
    (16, "two pools pinned by the user to the same CPUs, in turn"),
    (17, "two pools pinned by the user to the same CPUs, at once"),
    (18, "two planned pools (Pool::for_this_machine) at once"),
];

/// The shortest sample inside a CPU quota (setting 9): three of its
/// 100 ms periods.
pub const QUOTA_SAMPLE: Duration = Duration::from_millis(300);

/// The shortest sample of a full `pool bench --scenarios` run outside a
/// quota (see [`Scenario::min_sample`]).
pub const MIN_SAMPLE: Duration = Duration::from_millis(20);

/// The shortest sample of a full run beside another process (settings 7,
/// 8, 13, 14 and 15) or another caller (5, 6, 17 and 18, each caller the
/// other's neighbour): 30 scheduler ticks at `HZ=250`, and three periods
/// of setting 14's bursts. The scheduler repays a thread that ran less in one
/// sample during the next, a tick or two, which in a 20 ms sample is
/// 20-40 %: beside three busy processes, the pool running every job
/// inline and the serial loop (the same work) read 0.87-1.13x each other
/// in 20 ms samples and 0.97-1.05x in 100 ms ones (three runs each). With
/// two callers in lock step ([`two_callers`] before it decoded
/// continuously), stories110M Q4_0: the pool 0.87-1.16x the best of rayon
/// and serial and sample spreads of 33-88 % in 20 ms samples (three
/// runs), 0.96-1.17x and 18-58 % in 120 ms ones (three runs).
pub const NEIGHBOUR_SAMPLE: Duration = Duration::from_millis(120);

/// The fixed budget measured beside the default policy.
pub const FIXED_BUDGET: usize = 4000;

/// The setting whose row also measures the longer fixed budgets
/// ([`Exec::WITH_BUDGETS`]): a busy process on one CPU, where the adaptive
/// policy must stay within 3 % of the best fixed budget.
pub const BUDGETS_SETTING: u32 = 7;

/// An executor kind measured in every setting.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Exec {
    /// The pool with its default (adaptive) policy.
    PoolDefault,
    /// The pool with a fixed spin budget of [`FIXED_BUDGET`].
    PoolFixed,
    /// The pool with a fixed spin budget of 20,000 (setting
    /// [`BUDGETS_SETTING`] only).
    PoolFixed20000,
    /// The pool with a fixed spin budget of 100,000 (setting
    /// [`BUDGETS_SETTING`] only).
    PoolFixed100000,
    /// rayon, the token's loop inside `install`.
    RayonInside,
    /// rayon, entered from outside for every matvec.
    RayonPerMatvec,
    /// A serial loop on the calling thread.
    Serial,
}

impl Exec {
    /// Every kind measured in every setting, in table order (a prime
    /// number of them: the matrix's round order needs one).
    pub const ALL: [Exec; 5] = [
        Exec::PoolDefault,
        Exec::PoolFixed,
        Exec::RayonInside,
        Exec::RayonPerMatvec,
        Exec::Serial,
    ];

    /// [`Exec::ALL`] and the longer fixed budgets (seven, a prime too),
    /// measured in setting [`BUDGETS_SETTING`].
    pub const WITH_BUDGETS: [Exec; 7] = [
        Exec::PoolDefault,
        Exec::PoolFixed,
        Exec::RayonInside,
        Exec::RayonPerMatvec,
        Exec::Serial,
        Exec::PoolFixed20000,
        Exec::PoolFixed100000,
    ];

    /// The executors measured in setting `number`.
    pub fn of_setting(number: u32) -> &'static [Exec] {
        if number == BUDGETS_SETTING {
            &Exec::WITH_BUDGETS
        } else {
            &Exec::ALL
        }
    }

    /// A short stable name (JSON keys, criterion ids).
    pub fn name(self) -> &'static str {
        match self {
            Exec::PoolDefault => "pool_default",
            Exec::PoolFixed => "pool_fixed_4000",
            Exec::PoolFixed20000 => "pool_fixed_20000",
            Exec::PoolFixed100000 => "pool_fixed_100000",
            Exec::RayonInside => "rayon_inside_install",
            Exec::RayonPerMatvec => "rayon_per_matvec",
            Exec::Serial => "serial",
        }
    }

    /// The fixed spin budget of a pool executor that has one.
    pub fn fixed_budget(self) -> Option<usize> {
        match self {
            Exec::PoolFixed => Some(FIXED_BUDGET),
            Exec::PoolFixed20000 => Some(20_000),
            Exec::PoolFixed100000 => Some(100_000),
            _ => None,
        }
    }
}

/// The decode workload on the *current* rayon pool (call inside
/// `install`): one `par_chunks_mut` per matrix.
struct RayonHere;

impl DecodeExecutor for RayonHere {
    fn matvec_many(&self, mats: &[&Matrix], x: &Input<'_>, outs: &mut [&mut [f32]]) {
        let threads = rayon::current_num_threads();
        for (m, out) in mats.iter().zip(outs.iter_mut()) {
            let grain = grain_for(m.rows(), threads);
            out.par_chunks_mut(grain)
                .enumerate()
                .for_each(|(chunk, o)| m.rows_into(x, chunk * grain, o));
        }
    }
}

// SAFETY: chunk `c` covers rows `c * grain..min((c + 1) * grain, rows)`:
// disjoint, non-empty, inside `0..rows`; rayon's `for_each` calls each
// index once and returns after every call.
unsafe impl RowParallel for RayonHere {
    fn run_rows(&self, rows: usize, f: &RowFn<'_>) {
        if rows == 0 {
            return;
        }
        let grain = grain_for(rows, rayon::current_num_threads());
        let chunks = rows.div_ceil(grain);
        if chunks == 1 {
            return f(0, rows);
        }
        (0..chunks)
            .into_par_iter()
            .for_each(|c| f(c * grain, ((c + 1) * grain).min(rows)));
    }
}

/// rayon entered from outside for every matvec.
struct RayonPerMatvec<'a>(&'a rayon::ThreadPool);

// SAFETY: `RayonHere`'s ranges, and `install` returns after every call.
unsafe impl RowParallel for RayonPerMatvec<'_> {
    fn run_rows(&self, rows: usize, f: &RowFn<'_>) {
        self.0.install(|| RayonHere.run_rows(rows, f));
    }
}

impl DecodeExecutor for RayonPerMatvec<'_> {
    fn matvec_many(&self, mats: &[&Matrix], x: &Input<'_>, outs: &mut [&mut [f32]]) {
        self.0.install(|| RayonHere.matvec_many(mats, x, outs));
    }
}

/// Two executors used in turn, one matvec each (a prefill and a decode
/// pool driven by one thread).
struct InTurn<'a> {
    executors: [&'a dyn Executes; 2],
    next: Cell<usize>,
}

impl InTurn<'_> {
    fn next(&self) -> &dyn Executes {
        let turn = self.next.get();
        self.next.set(turn ^ 1);
        self.executors[turn]
    }
}

impl DecodeExecutor for InTurn<'_> {
    fn matvec_many(&self, mats: &[&Matrix], x: &Input<'_>, outs: &mut [&mut [f32]]) {
        self.next().matvec_many(mats, x, outs);
    }
}

// SAFETY: each job runs whole on one of two `RowParallel` executors, which
// keep the contract themselves.
unsafe impl RowParallel for InTurn<'_> {
    fn run_rows(&self, rows: usize, f: &RowFn<'_>) {
        self.next().run_rows(rows, f);
    }

    fn run_many(&self, parts: &[(usize, &RowFn<'_>)]) {
        self.next().run_many(parts);
    }
}

/// One built executor (pools are built on the thread that enters the
/// setting, after it pinned itself).
enum Built {
    Pool(Pool),
    Rayon(rayon::ThreadPool),
    Serial,
}

impl Built {
    /// Decodes `tokens` tokens as `exec` does.
    fn decode(&self, exec: Exec, work: Workload<'_>, tokens: usize) {
        match (self, exec) {
            (Built::Pool(pool), _) => work.decode(pool, tokens),
            (Built::Rayon(rayon), Exec::RayonInside) => {
                rayon.install(|| work.decode(&RayonHere, tokens))
            }
            (Built::Rayon(rayon), _) => work.decode(&RayonPerMatvec(rayon), tokens),
            (Built::Serial, _) => work.decode(&Serial, tokens),
        }
    }

    fn as_executor(&self) -> Box<dyn Executes + '_> {
        match self {
            Built::Pool(pool) => Box::new(PoolRef(pool)),
            Built::Rayon(rayon) => Box::new(RayonPerMatvec(rayon)),
            Built::Serial => Box::new(Serial),
        }
    }
}

struct PoolRef<'a>(&'a Pool);

impl DecodeExecutor for PoolRef<'_> {
    fn matvec_many(&self, mats: &[&Matrix], x: &Input<'_>, outs: &mut [&mut [f32]]) {
        self.0.matvec_many(mats, x, outs);
    }
}

// SAFETY: the pool's own `RowParallel`, which keeps the contract.
unsafe impl RowParallel for PoolRef<'_> {
    fn run_rows(&self, rows: usize, f: &RowFn<'_>) {
        self.0.run_rows(rows, f);
    }

    fn run_many(&self, parts: &[(usize, &RowFn<'_>)]) {
        RowParallel::run_many(self.0, parts);
    }
}

/// What the pool did in a setting, beyond tokens/s.
#[derive(Debug, Clone, Copy, Default)]
pub struct PoolProbe {
    /// Median of a hot empty `run` (ns).
    pub hot_run_ns: f64,
    /// Unparks per dispatch while decoding.
    pub unparks_per_dispatch: f64,
    /// CPU time the pool's workers burned in the window after the last
    /// token (ms; the caller sleeps).
    pub cpu_ms_after_last_token: f64,
    /// The window (ms).
    pub idle_window_ms: f64,
    /// The most CPU that window may take: the linger times the workers.
    pub linger_allowance_ms: f64,
    /// The epochs the default pool's wake trials scored over the whole
    /// setting, `[awake only, woken]` (`PoolStats::wake_trial_epochs`):
    /// zero where no job ran beside foreign load.
    pub wake_trial_epochs: [u64; 2],
    /// The same for the fork trials on free CPUs, `[dispatched, short
    /// jobs inline]` (`PoolStats::fork_trial_epochs`).
    pub fork_trial_epochs: [u64; 2],
}

/// A setting, entered. Dropping it leaves the setting.
pub struct Scenario {
    number: u32,
    cpus: Vec<usize>,
    workers: usize,
    /// Mask of the entering thread, restored on drop (settings 2, 3).
    restore_mask: Option<Vec<usize>>,
    neighbour: Option<Child>,
    /// More neighbours (setting 13).
    more_neighbours: Vec<Child>,
    /// The nice value to restore on drop (setting 15).
    restore_nice: Option<i32>,
    quota: Option<pool_topo::CpuQuotaGroup>,
    throttled_at_entry: Option<u64>,
    built: HashMap<(Exec, usize), Built>,
    /// The shortest sample outside a quota ([`Scenario::min_sample`]).
    min_sample: Duration,
}

impl Scenario {
    /// Enters setting `number` (see [`SETTINGS`]). An error is the reason
    /// the setting cannot be built here (e.g. no cgroup without root).
    pub fn enter(number: u32) -> Result<Scenario, String> {
        let cpus = pool_topo::process_affinity_cpus();
        let usable = pool_topo::usable_cpus();
        let mut s = Scenario {
            number,
            workers: usable.saturating_sub(1).max(1),
            cpus,
            restore_mask: None,
            neighbour: None,
            more_neighbours: Vec::new(),
            restore_nice: None,
            quota: None,
            throttled_at_entry: None,
            built: HashMap::new(),
            min_sample: Duration::ZERO,
        };
        match number {
            2 => s.pin_caller(s.cpus[0])?,
            3 => {
                let width = pool_topo::resolve_cpu_threads(None);
                let plan = pool_topo::plan_cpu_pool(width.threads, false);
                s.workers = plan.workers.max(1);
                if let Some(cpu) = plan.caller_cpu {
                    s.pin_caller(cpu)?;
                }
            }
            7 => s.neighbour = Some(busy_process(*s.cpus.last().unwrap())?),
            8 => s.neighbour = Some(decoding_process()?),
            9 => {
                let name = format!("pool-bench-{}", std::process::id());
                let group = pool_topo::CpuQuotaGroup::create(&name, 1.0)?;
                group
                    .add_process(std::process::id())
                    .map_err(|err| format!("cannot join cgroup {name}: {err}"))?;
                s.throttled_at_entry = group.throttled_periods();
                s.quota = Some(group);
                // The pool sizes itself inside the quota, as it would there.
                s.workers = pool_topo::usable_cpus().saturating_sub(1).max(1);
            }
            10 => s.workers = 4 * usable,
            13 => {
                for _ in 0..3 {
                    s.more_neighbours.push(unpinned_busy_process()?);
                }
            }
            14 => s.neighbour = Some(neighbour_process("bursty:120")?),
            15 => {
                // Every thread built here inherits the entering thread's
                // nice value: the pools', rayon's and the caller itself.
                s.restore_nice = Some(set_own_nice(10)?);
                s.neighbour = Some(busy_process(*s.cpus.last().unwrap())?);
            }
            1 | 4 | 5 | 6 | 11 | 12 | 16 | 17 | 18 => {}
            _ => return Err(format!("no setting {number}")),
        }
        if s.has_neighbours() {
            // Let the neighbour get going.
            std::thread::sleep(Duration::from_millis(200));
        }
        Ok(s)
    }

    /// Whether other processes run beside the decode in this setting.
    pub fn has_neighbours(&self) -> bool {
        self.neighbour.is_some() || !self.more_neighbours.is_empty()
    }

    /// The setting's number.
    pub fn number(&self) -> u32 {
        self.number
    }

    /// Workers of the pools built here (participants minus the caller).
    pub fn workers(&self) -> usize {
        self.workers
    }

    /// The counters of the default (adaptive) pool so far, summed over
    /// its copies (the two pools of settings 4, 5 and 16-18): where its
    /// jobs ran (dispatched to workers or inline), what waking cost, how
    /// long its callers waited.
    pub fn default_pool_stats(&self) -> pool_core::PoolStats {
        let mut sum = pool_core::PoolStats::default();
        for ((exec, _), built) in &self.built {
            if let (Exec::PoolDefault, Built::Pool(pool)) = (exec, built) {
                sum = sum.plus(&pool.stats());
            }
        }
        sum
    }

    /// The cgroup version and the periods throttled since entering (setting
    /// 9).
    pub fn throttling(&self) -> Option<(&'static str, u64)> {
        let group = self.quota.as_ref()?;
        let now = group.throttled_periods()?;
        Some((
            group.version(),
            now.saturating_sub(self.throttled_at_entry.unwrap_or(0)),
        ))
    }

    /// Makes every sample (outside a quota, which has [`QUOTA_SAMPLE`])
    /// repeat its tokens for at least `d`. A neighbour's CPU time comes in
    /// scheduler ticks (4 ms at `HZ=250`); a sample of three half-
    /// millisecond tokens falls inside one tick or across two, and the
    /// same executor read 0.6-1.4x its median from sample to sample
    /// ([`MIN_SAMPLE`] spans several). Beside other processes, and with
    /// two callers, a nonzero `d` is raised to [`NEIGHBOUR_SAMPLE`].
    pub fn min_sample(mut self, d: Duration) -> Self {
        self.min_sample = d;
        self
    }

    /// At least `tokens`; under a quota, at least 12 (and a sample then
    /// repeats them for at least [`QUOTA_SAMPLE`]), so throttled time is in
    /// the sample.
    pub fn tokens_per_sample(&self, tokens: usize) -> usize {
        if self.quota.is_some() {
            tokens.max(12)
        } else {
            tokens.max(1)
        }
    }

    fn pin_caller(&mut self, cpu: usize) -> Result<(), String> {
        self.restore_mask = Some(pool_topo::thread_affinity_cpus());
        pool_topo::pin_current_thread(&[cpu]).map_err(|err| format!("pin to CPU {cpu}: {err}"))
    }

    /// Builds (once) the executor `exec` number `copy` of this setting.
    fn built(&mut self, exec: Exec, copy: usize) -> &Built {
        let workers = self.workers;
        let number = self.number;
        self.built.entry((exec, copy)).or_insert_with(|| {
            let policy = exec
                .fixed_budget()
                .map_or_else(SpinPolicy::adaptive, SpinPolicy::Fixed);
            match exec {
                Exec::RayonInside | Exec::RayonPerMatvec => Built::Rayon(
                    rayon::ThreadPoolBuilder::new()
                        .num_threads(workers + 1)
                        .build()
                        .expect("build the rayon pool"),
                ),
                Exec::Serial => Built::Serial,
                // The pool's executors, adaptive or with a fixed budget.
                _ if number == 18 => {
                    // As two decode threads would each build theirs: the
                    // second plan avoids the first pool's CPUs.
                    let width = pool_topo::resolve_cpu_threads(None);
                    let plan = pool_topo::plan_cpu_pool(width.threads, false);
                    Built::Pool(
                        pool_core::PoolBuilder::from_plan(&plan)
                            .spin_policy(policy)
                            .build()
                            .or_else(|_| {
                                Pool::builder()
                                    .workers(plan.workers)
                                    .spin_policy(policy)
                                    .build()
                            })
                            .expect("spawn the pool's workers"),
                    )
                }
                _ => {
                    let mut builder = Pool::builder().workers(workers).spin_policy(policy);
                    if number == 16 || number == 17 {
                        // The user pins both pools' workers the same way:
                        // the CPUs after the first, as a naive engine would.
                        let cpus = pool_topo::process_affinity_cpus();
                        let pins = (0..workers).map(|w| cpus[(w + 1) % cpus.len()]).collect();
                        builder = builder.pin_workers(pins);
                    }
                    if number == 3 {
                        // The plan one pool gets alone: the executors of a
                        // setting are measured in turn, never at once, so
                        // each gets the CPUs as if it were the only pool.
                        let width = pool_topo::resolve_cpu_threads(None);
                        let plan = pool_topo::plan_cpu_pool_in(
                            &pool_topo::CpuTopology::detect(),
                            width.threads,
                            false,
                        );
                        if plan.workers == workers {
                            builder = builder.pin_workers(plan.worker_cpus);
                        }
                    }
                    Built::Pool(builder.build().expect("spawn the pool's workers"))
                }
            }
        })
    }

    /// Wall time per token, decoding `tokens` tokens on `exec` the way this
    /// setting uses executors. With two callers (5, 6, 17, 18) it is the
    /// wall time over the tokens both decoded, each decoding continuously
    /// through the sample ([`two_callers`]); with idle gaps (11, 12) the
    /// gaps are not counted.
    pub fn time_tokens<'w>(
        &mut self,
        exec: Exec,
        work: impl Into<Workload<'w>>,
        tokens: usize,
    ) -> Duration {
        let work = work.into();
        let tokens = self.tokens_per_sample(tokens);
        match self.number {
            4 | 16 => {
                self.built(exec, 0);
                self.built(exec, 1);
                let (a, b) = (&self.built[&(exec, 0)], &self.built[&(exec, 1)]);
                let (a, b) = (a.as_executor(), b.as_executor());
                let in_turn = InTurn {
                    executors: [a.as_ref(), b.as_ref()],
                    next: Cell::new(0),
                };
                let start = Instant::now();
                work.decode(&in_turn, tokens);
                start.elapsed() / tokens as u32
            }
            5 | 6 | 17 | 18 => {
                let copies = if self.number == 6 { [0, 0] } else { [0, 1] };
                for copy in copies {
                    self.built(exec, copy);
                }
                let executors = copies.map(|copy| &self.built[&(exec, copy)]);
                // Each caller is the other's neighbour.
                let shortest = if self.min_sample.is_zero() {
                    self.min_sample
                } else {
                    self.min_sample.max(NEIGHBOUR_SAMPLE)
                };
                two_callers(executors, exec, work, tokens, shortest)
            }
            11 | 12 => {
                let gap = Duration::from_millis(if self.number == 11 { 1 } else { 20 });
                let executor = self.built(exec, 0);
                let mut total = Duration::ZERO;
                for _ in 0..tokens {
                    std::thread::sleep(gap);
                    let start = Instant::now();
                    executor.decode(exec, work, 1);
                    total += start.elapsed();
                }
                total / tokens as u32
            }
            _ => {
                let shortest = if self.quota.is_some() {
                    QUOTA_SAMPLE
                } else if self.has_neighbours() && !self.min_sample.is_zero() {
                    self.min_sample.max(NEIGHBOUR_SAMPLE)
                } else {
                    self.min_sample
                };
                let executor = self.built(exec, 0);
                let start = Instant::now();
                let mut decoded = 0;
                // Under a quota a sample spans several of its 100 ms
                // periods whatever a token costs: a shorter burst runs two
                // threads unthrottled and measures the burst, not the
                // quota.
                while decoded == 0 || start.elapsed() < shortest {
                    executor.decode(exec, work, tokens);
                    decoded += tokens;
                }
                start.elapsed() / decoded as u32
            }
        }
    }

    /// The default pool's hot empty `run` now, in ns: a short look (about
    /// 0.1 ms) to take before the rounds, where a stretch of slow
    /// cross-CPU transfers (a vCPU moved on the host) that ends inside them
    /// shows, while the look after them ([`Scenario::probe_pool`]) misses
    /// it. Not between rounds: on a pool of its own the look timed the
    /// scheduler wherever other threads held the CPUs (up to 0.96 ms a
    /// run), and on the default pool it fed the adaptive policy 900
    /// back-to-back jobs a round (stories15M's setting 12, 20 ms idle
    /// gaps: 0.92x the best of rayon and serial against 1.04-1.11).
    pub fn hot_run_ns(&mut self) -> f64 {
        let Built::Pool(pool) = self.built(Exec::PoolDefault, 0) else {
            unreachable!("the default executor is a pool")
        };
        crate::time_per_iter(3, 300, || pool.run(|_, _| {})).median
    }

    /// The default pool's hot empty `run`, unparks per dispatch over
    /// `tokens` tokens, and the CPU it burns after the last token.
    /// Call it last: it drops every other executor first, so their idle
    /// threads do not count in the CPU burned after the last token.
    pub fn probe_pool<'w>(&mut self, work: impl Into<Workload<'w>>, tokens: usize) -> PoolProbe {
        let work = work.into();
        let workers = self.workers;
        self.built
            .retain(|(exec, copy), _| *exec == Exec::PoolDefault && *copy == 0);
        // Let the dropped executors' threads wind down.
        std::thread::sleep(Duration::from_millis(20));
        self.time_tokens(Exec::PoolDefault, work, 1);
        let Built::Pool(pool) = self.built(Exec::PoolDefault, 0) else {
            unreachable!("the default executor is a pool")
        };
        let before = pool.stats();
        let wake_trial_epochs = before.wake_trial_epochs;
        let fork_trial_epochs = before.fork_trial_epochs;
        work.decode(pool, tokens.max(1));
        let unparks_per_dispatch = pool.stats().since(&before).unparks_per_dispatch();
        let hot_run_ns = crate::time_per_iter(9, 2000, || pool.run(|_, _| {})).median;
        let window = Duration::from_millis(200);
        work.decode(pool, 1);
        let tids = pool.worker_tids();
        let cpu_before = crate::cpu_clock::threads_cpu_ms(&tids);
        std::thread::sleep(window);
        let cpu_ms_after_last_token = crate::cpu_clock::threads_cpu_ms(&tids) - cpu_before;
        PoolProbe {
            hot_run_ns,
            unparks_per_dispatch,
            cpu_ms_after_last_token,
            idle_window_ms: window.as_secs_f64() * 1e3,
            linger_allowance_ms: pool_core::DEFAULT_LINGER.as_secs_f64() * 1e3 * workers as f64,
            wake_trial_epochs,
            fork_trial_epochs,
        }
    }
}

/// Wall time per token of two caller threads decoding at once on
/// `executors` for at least `min_sample`, `tokens` tokens a call, each as
/// fast as it can: an engine serving two requests. The threads start
/// together at a barrier, the timing thread sleeps through the sample,
/// and the time runs from the first caller's first call to the last
/// caller's end (thread creation, which once cost the pool 0.77-0.85x
/// two serial loops when timed, stays outside it).
///
/// Before, the callers decoded in lock step, three tokens a call, with
/// a barrier after each call, and a third thread timed each call from
/// its own pass of the barrier. Released by the last caller to arrive,
/// that thread then waited for a CPU the two callers held, and the clock
/// started late by as long: the same executor's samples fell into two
/// groups 1.5x apart (stories15M Q4_0: 4,300 and 6,300 tokens/s), two
/// serial callers read 10-45 % more tokens/s than the same callers
/// decoding continuously, and the pool, running inline as the serial
/// loop does, read 0.95-1.21x it from run to run. Decoding continuously
/// and timed by the callers themselves, in interleaved runs: sample
/// spreads of 3-28 % against 34-95 %, and the pool at 0.97-1.00x the
/// serial loop with each run's 90 % interval within 2 % of its reading
/// (docs/benchmarks.md, "Two callers decoding continuously").
fn two_callers(
    executors: [&Built; 2],
    exec: Exec,
    work: Workload<'_>,
    tokens: usize,
    min_sample: Duration,
) -> Duration {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Barrier;
    let start = Barrier::new(3);
    let stop = AtomicBool::new(false);
    // Each caller's first call's start, last call's end, and tokens.
    let spans: Vec<(Instant, Instant, usize)> = std::thread::scope(|scope| {
        let callers: Vec<_> = executors
            .into_iter()
            .map(|executor| {
                let (start, stop) = (&start, &stop);
                scope.spawn(move || {
                    start.wait();
                    let began = Instant::now();
                    let mut decoded = 0;
                    loop {
                        executor.decode(exec, work, tokens);
                        decoded += tokens;
                        // Relaxed: only ends the loop.
                        if stop.load(Ordering::Relaxed) {
                            return (began, Instant::now(), decoded);
                        }
                    }
                })
            })
            .collect();
        start.wait();
        std::thread::sleep(min_sample);
        stop.store(true, Ordering::Relaxed);
        callers
            .into_iter()
            .map(|caller| {
                caller
                    .join()
                    .unwrap_or_else(|p| std::panic::resume_unwind(p))
            })
            .collect()
    });
    let began = spans.iter().map(|s| s.0).min().expect("two callers");
    let ended = spans.iter().map(|s| s.1).max().expect("two callers");
    let decoded: usize = spans.iter().map(|s| s.2).sum();
    (ended - began) / decoded as u32
}

impl Drop for Scenario {
    fn drop(&mut self) {
        // Executors first: their threads must not outlive the setting's
        // cgroup or pins.
        self.built.clear();
        for mut child in self
            .neighbour
            .take()
            .into_iter()
            .chain(self.more_neighbours.drain(..))
        {
            let _ = child.kill();
            let _ = child.wait();
        }
        if let Some(nice) = self.restore_nice.take() {
            // Lowering nice again needs privilege; where refused, the
            // thread stays at 10 (the setting is the matrix's last but
            // three, and the bench process exits after it).
            let _ = set_own_nice(nice);
        }
        self.quota = None;
        if let Some(mask) = self.restore_mask.take() {
            let _ = pool_topo::pin_current_thread(&mask);
        }
    }
}

/// The neighbours' shell loop: it spins while the process that started it
/// lives, and exits within a fraction of a second once that process is
/// gone, so a bench killed mid-setting leaves no loop behind (as
/// `testkit::BUSY_LOOP_WHILE_PARENT_LIVES`, which a published crate cannot
/// depend on).
const BUSY_LOOP: &str = "parent=$PPID; i=0; while :; do i=$((i + 1)); \
     if [ \"$i\" -ge 100000 ]; then kill -0 \"$parent\" 2>/dev/null || exit 0; i=0; fi; done";

/// A busy-looping process pinned to `cpu` (a shell loop: no dependency on
/// this binary).
fn busy_process(cpu: usize) -> Result<Child, String> {
    let child = Command::new("sh")
        .args(["-c", BUSY_LOOP])
        .spawn()
        .map_err(|err| format!("cannot start a busy process: {err}"))?;
    pin_process(child.id(), cpu);
    Ok(child)
}

/// A busy-looping process, not pinned.
fn unpinned_busy_process() -> Result<Child, String> {
    Command::new("sh")
        .args(["-c", BUSY_LOOP])
        .spawn()
        .map_err(|err| format!("cannot start a busy process: {err}"))
}

/// Sets the calling thread's nice value; returns the one it had.
fn set_own_nice(nice: i32) -> Result<i32, String> {
    // SAFETY: gettid takes no arguments and cannot fail.
    let tid = unsafe { libc::syscall(libc::SYS_gettid) } as libc::id_t;
    // SAFETY: plain syscalls on this thread's own id. getpriority can
    // return -1 as a value, so errno is cleared and checked.
    unsafe { *libc::__errno_location() = 0 };
    // SAFETY: as above.
    let before = unsafe { libc::getpriority(libc::PRIO_PROCESS, tid) };
    // SAFETY: as above.
    if before == -1 && unsafe { *libc::__errno_location() } != 0 {
        return Err(format!("getpriority: {}", std::io::Error::last_os_error()));
    }
    // SAFETY: as above.
    if unsafe { libc::setpriority(libc::PRIO_PROCESS, tid, nice) } != 0 {
        return Err(format!(
            "setpriority({nice}): {}",
            std::io::Error::last_os_error()
        ));
    }
    Ok(before)
}

/// Pins process `pid` to `cpu` (best effort: a neighbour left unpinned
/// still loads the machine, and the setting says what it measured).
fn pin_process(pid: u32, cpu: usize) {
    if let Err(e) = pool_topo::pin_thread(pid, &[cpu]) {
        eprintln!("scenarios: cannot pin neighbour {pid} to CPU {cpu}: {e}");
    }
}

/// A copy of this binary decoding with its own pool ([`NEIGHBOUR_ENV`]).
fn decoding_process() -> Result<Child, String> {
    neighbour_process("decode:120")
}

/// A copy of this binary as the neighbour `request` ([`NEIGHBOUR_ENV`]).
fn neighbour_process(request: &str) -> Result<Child, String> {
    let exe = std::env::current_exe().map_err(|err| format!("no current exe: {err}"))?;
    Command::new(exe)
        .env(NEIGHBOUR_ENV, request)
        .stdout(std::process::Stdio::null())
        .spawn()
        .map_err(|err| format!("cannot start a neighbour ({request}): {err}"))
}

/// Call first in `main` of every binary that enters setting 8: when this
/// process is the decoding neighbour, decodes with its own default pool
/// for the requested seconds (or until killed) and exits.
pub fn neighbour_main_if_requested() {
    let Ok(request) = std::env::var(NEIGHBOUR_ENV) else {
        return;
    };
    if let Some(seconds) = request.strip_prefix("bursty:") {
        bursty_neighbour(seconds.parse().unwrap_or(60));
    }
    let seconds: u64 = request
        .strip_prefix("decode:")
        .and_then(|s| s.parse().ok())
        .unwrap_or(60);
    let model = DecodeModel::random(
        pool_matvec::decode::DecodeConfig::default(),
        pool_matvec::decode::WeightFormat::F32,
        7,
    );
    let pool = Pool::new(pool_topo::usable_cpus().saturating_sub(1).max(1));
    let end = Instant::now() + Duration::from_secs(seconds);
    while Instant::now() < end {
        std::hint::black_box(model.decode(&pool, 1));
    }
    std::process::exit(0);
}

/// Setting 14's neighbour: two threads busy for 20 ms, then idle for 20
/// ms, over and over (a parallel build's shape, made regular), for
/// `seconds`; then exits.
fn bursty_neighbour(seconds: u64) -> ! {
    let end = Instant::now() + Duration::from_secs(seconds);
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(move || {
                while Instant::now() < end {
                    let burst = Instant::now() + Duration::from_millis(20);
                    while Instant::now() < burst {
                        std::hint::spin_loop();
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
            });
        }
    });
    std::process::exit(0);
}
