//! The peers suite: this pool beside the pools an engine author would
//! weigh against it (rayon four ways, candle's `BarrierPool`, fork_union,
//! chili, OpenMP, and the floors: a minimal spin pool and a cache-line
//! ping-pong), on the same constructs, measured EPCC-style.
//!
//! # Method (EPCC syncbench)
//!
//! A construct's **overhead** is its time around a calibrated delay minus
//! that delay's time when run serially (the reference, measured in the
//! same round). Each sample is one batch of repetitions (about 1-2 ms)
//! after untimed warm-up repetitions. Peers are built once and kept, as an
//! engine keeps its pool (a fresh pool's worker starts on its creator's
//! CPU, and the first milliseconds measure the scheduler moving it), except
//! those whose idle threads spin for ever (fork_union, the minimal spin
//! pool, the ping-pong): they are built for each batch and dropped after
//! it, so they never run beside another peer's batch (spawns are not
//! timed). Before each batch the
//! suite waits until this process uses no CPU (every peer's idle threads
//! stopped spinning: libgomp's and candle's spin for up to milliseconds
//! after a region, and a batch measured beside them on 2 CPUs measures
//! their spinning, not the construct). Rounds interleave all peers and
//! constructs in a fresh shuffled order each, so drift and whoever ran
//! last hit all alike; the figure is the median over rounds, with the
//! spread.
//!
//! One process measures one thread count (candle's pool is sized once per
//! process, by `CANDLE_NUM_THREADS`): `pool bench --peers` runs a child
//! per count.

pub mod adapters;

use std::time::{Duration, Instant};

use pool_core::Pool;
use pool_matvec::decode::{DecodeConfig, DecodeModel, Serial, WeightFormat};

pub use adapters::{GgmlBarrier, Peer, RayonWay, ShareFn, ValueFn};

use crate::Stats;

/// What is measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Construct {
    /// An empty parallel region: the fork-join alone.
    Region,
    /// A region whose participants each run a 1 µs delay.
    RegionDelay,
    /// Inside one running region, each participant runs a 1 µs delay then
    /// meets the others at a barrier, [`BARRIERS`] times; per barrier.
    Barrier,
    /// Each participant adds its share (a 1 µs delay, then a value) and
    /// the caller reads the sum.
    Reduction,
    /// 4,096 rows with a small delay each, grain by the peer's own rule.
    Rows,
    /// One token of the decode workload at its smallest shape
    /// ([`tiny_decode`]), so the dispatch share is large.
    Decode,
}

impl Construct {
    /// Every construct, in report order.
    pub const ALL: [Construct; 6] = [
        Construct::Region,
        Construct::RegionDelay,
        Construct::Barrier,
        Construct::Reduction,
        Construct::Rows,
        Construct::Decode,
    ];

    /// Its name in reports.
    pub fn name(self) -> &'static str {
        match self {
            Construct::Region => "fork-join (empty)",
            Construct::RegionDelay => "fork-join (1 us each)",
            Construct::Barrier => "barrier in a region",
            Construct::Reduction => "reduction",
            Construct::Rows => "row job (4096 rows)",
            Construct::Decode => "decode token (tiny)",
        }
    }
}

/// Barriers per region in [`Construct::Barrier`].
pub const BARRIERS: usize = 32;
/// Rows of [`Construct::Rows`].
pub const ROWS: usize = 4096;
/// Delay per participant (region, barrier, reduction), ns.
pub const SHARE_DELAY_NS: f64 = 1000.0;
/// Delay per row, ns.
pub const ROW_DELAY_NS: f64 = 50.0;

/// What the shares of [`Construct::Reduction`] add up to, whatever the
/// participant count (a pool may run a job inline, with one participant).
pub const REDUCTION_TOTAL: f64 = 1_000_000.0;

/// Participant `idx`'s share of [`REDUCTION_TOTAL`] out of `n`.
pub fn reduction_share(idx: usize, n: usize) -> f64 {
    let total = REDUCTION_TOTAL as usize;
    (total * (idx + 1) / n - total * idx / n) as f64
}

/// The smallest decode shape: 4 layers of dim 64, hidden 128, vocab 512,
/// f32 (0.8 MB: in cache, so dispatch is a large share of a token).
pub fn tiny_decode() -> DecodeConfig {
    DecodeConfig {
        dim: 64,
        hidden: 128,
        layers: 4,
        vocab: 512,
    }
}

/// A busy loop calibrated to nanoseconds (EPCC's `delay`).
#[derive(Debug, Clone, Copy)]
pub struct Delay {
    iters_per_ns: f64,
}

impl Delay {
    /// Calibrates on this thread (median of a few 2 ms runs).
    pub fn calibrate() -> Delay {
        let probe = 200_000u64;
        let runs: Vec<f64> = (0..7)
            .map(|_| {
                let start = Instant::now();
                spin(probe);
                probe as f64 / start.elapsed().as_nanos().max(1) as f64
            })
            .collect();
        Delay {
            iters_per_ns: Stats::of(runs).median,
        }
    }

    /// Busy for about `ns` nanoseconds.
    #[inline]
    pub fn run(&self, ns: f64) {
        spin((ns * self.iters_per_ns) as u64);
    }
}

#[inline(never)]
fn spin(iters: u64) {
    let mut acc = 0u64;
    for i in 0..iters {
        acc = std::hint::black_box(acc.wrapping_add(i));
    }
    std::hint::black_box(acc);
}

/// A peer of the suite, by name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PeerKind {
    /// This pool (`Pool::new`): barrier = `run_phased`, decode = a
    /// fork-join per matvec.
    Pool,
    /// This pool, the other side of each trade: a fork-join per phase
    /// (barrier) and a token as one `run_phased` job (decode).
    PoolAlt,
    /// The minimal spin pool (2 threads only).
    SpinPool,
    /// The cache-line ping-pong (empty fork-join, 2 threads only).
    PingPong,
    /// rayon, one of four ways.
    Rayon(RayonWay),
    /// candle's `BarrierPool` (feature `peers`).
    Candle,
    /// fork_union (feature `peers`).
    ForkUnion,
    /// chili (feature `peers`).
    Chili,
    /// libgomp through `c/epcc_omp.c`.
    OpenMp,
}

impl PeerKind {
    /// Every peer, in report order.
    pub const ALL: [PeerKind; 12] = [
        PeerKind::Pool,
        PeerKind::PoolAlt,
        PeerKind::SpinPool,
        PeerKind::PingPong,
        PeerKind::Rayon(RayonWay::BroadcastInside),
        PeerKind::Rayon(RayonWay::BroadcastOutside),
        PeerKind::Rayon(RayonWay::Join),
        PeerKind::Rayon(RayonWay::Scope),
        PeerKind::Candle,
        PeerKind::ForkUnion,
        PeerKind::Chili,
        PeerKind::OpenMp,
    ];

    /// Its name in reports.
    pub fn name(self) -> &'static str {
        match self {
            PeerKind::Pool => "pool",
            PeerKind::PoolAlt => "pool, fork-join per phase / token as one job",
            PeerKind::SpinPool => "minimal spin pool",
            PeerKind::PingPong => "ping-pong floor",
            PeerKind::Rayon(RayonWay::BroadcastInside) => "rayon broadcast in install",
            PeerKind::Rayon(RayonWay::BroadcastOutside) => "rayon broadcast from outside",
            PeerKind::Rayon(RayonWay::Join) => "rayon join tree",
            PeerKind::Rayon(RayonWay::Scope) => "rayon scope",
            PeerKind::Candle => "candle BarrierPool",
            PeerKind::ForkUnion => "fork_union",
            PeerKind::Chili => "chili",
            PeerKind::OpenMp => "OpenMP (libgomp)",
        }
    }

    /// Whether the suite keeps one instance for the whole run: all but
    /// those whose idle threads spin for ever (fork_union, the minimal spin
    /// pool, the ping-pong's partner).
    pub fn kept(self) -> bool {
        !matches!(
            self,
            PeerKind::ForkUnion | PeerKind::SpinPool | PeerKind::PingPong
        )
    }

    /// Builds the peer with `threads` participants, or says why it cannot.
    pub fn build(self, threads: usize) -> Result<Box<dyn Peer>, String> {
        Ok(match self {
            PeerKind::Pool => Box::new(adapters::PoolPeer(Pool::new(threads - 1))),
            PeerKind::PoolAlt => Box::new(adapters::PoolAltPeer(Pool::new(threads - 1))),
            PeerKind::SpinPool | PeerKind::PingPong if threads != 2 => {
                return Err("2 threads only".into())
            }
            PeerKind::SpinPool => Box::new(adapters::SpinPeer(crate::SpinPool::new())),
            PeerKind::PingPong => Box::new(adapters::PingPongPeer(crate::PingPong::new())),
            PeerKind::Rayon(way) => Box::new(adapters::RayonPeer {
                pool: crate::RayonExecutor::new(threads),
                way,
            }),
            #[cfg(feature = "peers")]
            PeerKind::Candle => {
                let peer = adapters::CandlePeer;
                if peer.threads() != threads {
                    return Err(format!(
                        "candle's pool has {} threads in this process (CANDLE_NUM_THREADS)",
                        peer.threads()
                    ));
                }
                Box::new(peer)
            }
            #[cfg(feature = "peers")]
            PeerKind::ForkUnion => Box::new(adapters::ForkUnionPeer(
                fork_union::ThreadPool::try_spawn(threads)
                    .map_err(|e| format!("fork_union: {e:?}"))?,
            )),
            #[cfg(feature = "peers")]
            PeerKind::Chili => Box::new(adapters::ChiliPeer {
                pool: chili::ThreadPool::with_config(chili::Config {
                    thread_count: std::num::NonZero::new(threads),
                    ..chili::Config::default()
                }),
                threads,
            }),
            #[cfg(not(feature = "peers"))]
            PeerKind::Candle | PeerKind::ForkUnion | PeerKind::Chili => {
                return Err("built without the `peers` feature".into())
            }
            #[cfg(pool_openmp)]
            PeerKind::OpenMp => Box::new(adapters::OpenMpPeer { threads }),
            #[cfg(not(pool_openmp))]
            PeerKind::OpenMp => return Err(crate::openmp::status().unwrap_err().to_string()),
        })
    }
}

/// What the work of a construct needs, built once per process.
pub struct Work {
    delay: Delay,
    model: DecodeModel,
}

impl Work {
    /// Calibrates the delay and builds the tiny decode model.
    pub fn new() -> Work {
        Work {
            delay: Delay::calibrate(),
            model: DecodeModel::random(tiny_decode(), WeightFormat::F32, 11),
        }
    }

    /// One repetition of `construct` on `peer` (what the suite times).
    pub fn once(&self, peer: &mut dyn Peer, construct: Construct) {
        let delay = self.delay;
        match construct {
            Construct::Region => peer.region(&|_, _| {}),
            Construct::RegionDelay => peer.region(&|_, _| delay.run(SHARE_DELAY_NS)),
            Construct::Barrier => peer.barriers(BARRIERS, &|_, _| delay.run(SHARE_DELAY_NS)),
            Construct::Reduction => {
                let sum = peer.reduce(&|idx, n| {
                    delay.run(SHARE_DELAY_NS);
                    reduction_share(idx, n)
                });
                assert_eq!(sum, REDUCTION_TOTAL, "a reduction lost a share");
            }
            // One delay per row, whatever the range: the same work for a
            // peer that calls per row (rayon, chili) as for one that calls
            // per range, and as the reference.
            Construct::Rows => peer.rows(ROWS, &|start, end| {
                for _ in start..end {
                    delay.run(ROW_DELAY_NS)
                }
            }),
            Construct::Decode => {
                std::hint::black_box(peer.decode(&self.model));
            }
        }
    }

    /// The serial time of one participant's share of `construct` at
    /// `threads` threads, measured now (ns): what the overhead is
    /// measured against.
    fn reference_ns(&self, construct: Construct, threads: usize) -> f64 {
        let delay = self.delay;
        let time = |reps: usize, f: &dyn Fn()| {
            let start = Instant::now();
            for _ in 0..reps {
                f();
            }
            start.elapsed().as_nanos() as f64 / reps as f64
        };
        match construct {
            Construct::Region => 0.0,
            Construct::RegionDelay | Construct::Reduction | Construct::Barrier => {
                time(200, &|| delay.run(SHARE_DELAY_NS))
            }
            Construct::Rows => {
                let share = ROWS.div_ceil(threads);
                time(20, &|| {
                    for _ in 0..share {
                        delay.run(ROW_DELAY_NS)
                    }
                })
            }
            Construct::Decode => {
                // The serial token split perfectly over the CPUs that can
                // run at once.
                let cpus = threads.min(pool_topo::usable_cpus()).max(1);
                time(20, &|| {
                    std::hint::black_box(self.model.decode(&Serial, 1));
                }) / cpus as f64
            }
        }
    }
}

impl Default for Work {
    fn default() -> Self {
        Work::new()
    }
}

/// One row of the suite's table.
#[derive(Debug, Clone)]
pub struct Row {
    /// Threads (participants).
    pub threads: usize,
    /// More threads than this process's usable CPUs.
    pub oversubscribed: bool,
    /// The construct.
    pub construct: Construct,
    /// The peer.
    pub peer: PeerKind,
    /// Time per repetition (per barrier for [`Construct::Barrier`]), ns.
    pub time_ns: Stats,
    /// Overhead: time minus the serial reference, per repetition, ns
    /// (median over rounds of each round's difference).
    pub overhead_ns: Stats,
}

/// How long to measure.
#[derive(Debug, Clone, Copy)]
pub struct SuiteConfig {
    /// Rounds (samples per cell).
    pub rounds: usize,
    /// Target time of one timed batch.
    pub batch: Duration,
    /// The longest wait for this process's CPUs to fall quiet before a
    /// batch (idle threads of the last peer stop spinning).
    pub settle: Duration,
}

impl SuiteConfig {
    /// About 20-40 s per thread count on 2 CPUs.
    pub const FULL: SuiteConfig = SuiteConfig {
        rounds: 15,
        batch: Duration::from_millis(2),
        settle: Duration::from_millis(50),
    };
    /// A few seconds per thread count.
    pub const QUICK: SuiteConfig = SuiteConfig {
        rounds: 5,
        batch: Duration::from_millis(1),
        settle: Duration::from_millis(20),
    };
}

/// Why a peer sat out at this thread count.
#[derive(Debug, Clone)]
pub struct Skipped {
    /// The peer.
    pub peer: PeerKind,
    /// Why.
    pub reason: String,
}

/// Measures every peer on every construct it can express at `threads`
/// threads, interleaved; returns the rows and the peers that sat out.
pub fn run_at(threads: usize, config: SuiteConfig, work: &Work) -> (Vec<Row>, Vec<Skipped>) {
    run_peers_at(&PeerKind::ALL, threads, config, work)
}

/// [`run_at`] for some peers only.
pub fn run_peers_at(
    kinds: &[PeerKind],
    threads: usize,
    config: SuiteConfig,
    work: &Work,
) -> (Vec<Row>, Vec<Skipped>) {
    assert!(threads >= 2, "the suite measures 2 or more threads");
    let mut skipped = Vec::new();
    let mut cells: Vec<(PeerKind, Construct, usize)> = Vec::new();
    let mut kept: Vec<(PeerKind, Box<dyn Peer>)> = Vec::new();
    for &peer in kinds {
        match peer.build(threads) {
            Err(reason) => skipped.push(Skipped { peer, reason }),
            Ok(mut built) => {
                for construct in Construct::ALL {
                    if built.supports(construct) {
                        let reps = reps_for(&mut *built, construct, work, config.batch);
                        cells.push((peer, construct, reps));
                    }
                }
                if peer.kept() {
                    kept.push((peer, built));
                }
            }
        }
    }
    let mut times: Vec<Vec<f64>> = vec![Vec::new(); cells.len()];
    let mut overheads: Vec<Vec<f64>> = vec![Vec::new(); cells.len()];
    let mut order: Vec<usize> = (0..cells.len()).collect();
    let mut rng = pool_matvec::decode::XorShift(0x9e37_79b9_7f4a_7c15);
    for _ in 0..config.rounds {
        settle(config.settle);
        let references: Vec<f64> = Construct::ALL
            .iter()
            .map(|&c| work.reference_ns(c, threads))
            .collect();
        // Fisher-Yates: a fresh order each round.
        for k in (1..order.len()).rev() {
            order.swap(k, (rng.next_u64() % (k as u64 + 1)) as usize);
        }
        for &i in &order {
            let (peer, construct, reps) = cells[i];
            let mut fresh = (!peer.kept()).then(|| peer.build(threads).expect("built before"));
            let built: &mut dyn Peer = match &mut fresh {
                Some(fresh) => &mut **fresh,
                None => {
                    let (_, kept) = kept.iter_mut().find(|(k, _)| *k == peer).expect("kept");
                    &mut **kept
                }
            };
            settle(config.settle);
            for _ in 0..reps.div_ceil(10).max(2) {
                work.once(built, construct);
            }
            let start = Instant::now();
            for _ in 0..reps {
                work.once(built, construct);
            }
            let mut per_rep = start.elapsed().as_nanos() as f64 / reps as f64;
            drop(fresh);
            if construct == Construct::Barrier {
                per_rep /= BARRIERS as f64;
            }
            let reference =
                references[Construct::ALL.iter().position(|&c| c == construct).unwrap()];
            times[i].push(per_rep);
            overheads[i].push(per_rep - reference);
        }
    }
    let cpus = pool_topo::usable_cpus();
    let rows = cells
        .iter()
        .zip(times.into_iter().zip(overheads))
        .map(|(&(peer, construct, _), (time, overhead))| Row {
            threads,
            oversubscribed: threads > cpus,
            construct,
            peer,
            time_ns: Stats::of(time),
            overhead_ns: Stats::of(overhead),
        })
        .collect();
    (rows, skipped)
}

/// Waits (at most `max`) until this process's threads use under a tenth
/// of a CPU over a millisecond: every idle worker of the last peer parked.
fn settle(max: Duration) {
    let start = Instant::now();
    while start.elapsed() < max {
        let before = process_cpu_ns();
        std::thread::sleep(Duration::from_millis(1));
        if process_cpu_ns().saturating_sub(before) < 100_000 {
            return;
        }
    }
}

/// CPU time of every thread of this process, ns.
fn process_cpu_ns() -> u64 {
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: `usage` is a valid out-pointer for one `rusage`; all-zero is
    // a valid `rusage`, so it is initialised whatever the call does.
    let usage = unsafe {
        libc::getrusage(libc::RUSAGE_SELF, usage.as_mut_ptr());
        usage.assume_init()
    };
    let ns = |t: libc::timeval| t.tv_sec as u64 * 1_000_000_000 + t.tv_usec as u64 * 1000;
    ns(usage.ru_utime) + ns(usage.ru_stime)
}

/// Repetitions that fill about `batch`.
fn reps_for(peer: &mut dyn Peer, construct: Construct, work: &Work, batch: Duration) -> usize {
    for _ in 0..3 {
        work.once(peer, construct);
    }
    let start = Instant::now();
    let mut reps = 0;
    while start.elapsed() < batch / 4 && reps < 100_000 {
        work.once(peer, construct);
        reps += 1;
    }
    (reps * 4).clamp(3, 400_000)
}
