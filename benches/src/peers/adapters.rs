//! Each peer driven the way its own users drive it, behind one trait.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use crossbeam_utils::CachePadded;
use pool_core::Pool;
use pool_matvec::decode::{matvec_many_on, DecodeExecutor, DecodeModel, Input, Matrix};
use pool_matvec::{RowFn, RowParallel};
use rayon::prelude::*;

use super::Construct;
use crate::baselines::{PingPong, SpinPool};
use crate::RayonExecutor;

/// A share of a region: `f(idx, n)`.
pub type ShareFn<'a> = dyn Fn(usize, usize) + Sync + 'a;
/// A participant's value for a reduction: `f(idx, n)`.
pub type ValueFn<'a> = dyn Fn(usize, usize) -> f64 + Sync + 'a;

/// One peer at one thread count. Built fresh for each timed batch and
/// dropped after it, so no peer's idle threads (fork_union's spin for
/// ever, chili's heartbeat ticks) run while another is measured.
pub trait Peer {
    /// Participants of its parallel region.
    fn threads(&self) -> usize;
    /// Every participant runs `f(idx, n)`; returns when all did.
    fn region(&mut self, f: &ShareFn<'_>);
    /// One region whose participants run `f(idx, n)` then meet at a
    /// barrier, `barriers` times. Default: a ggml-style barrier (one
    /// arrival counter, spin on a generation) inside [`Peer::region`],
    /// what an engine on this pool would write.
    fn barriers(&mut self, barriers: usize, f: &ShareFn<'_>) {
        let barrier = GgmlBarrier::default();
        self.region(&|idx, n| {
            for _ in 0..barriers {
                f(idx, n);
                barrier.wait(n);
            }
        });
    }
    /// Each participant's value, summed; the caller reads the sum.
    /// Default: a padded slot per participant inside [`Peer::region`].
    fn reduce(&mut self, f: &ValueFn<'_>) -> f64 {
        let slots: Vec<CachePadded<AtomicU64>> = (0..self.threads())
            .map(|_| CachePadded::new(AtomicU64::new(0)))
            .collect();
        self.region(&|idx, n| slots[idx].store(f(idx, n).to_bits(), Ordering::Relaxed));
        slots
            .iter()
            .map(|s| f64::from_bits(s.load(Ordering::Relaxed)))
            .sum()
    }
    /// `f(start, end)` over `0..rows`, grains by the peer's own rule.
    fn rows(&mut self, rows: usize, f: &RowFn<'_>);
    /// One decode token.
    fn decode(&mut self, model: &DecodeModel) -> Vec<f32> {
        struct Rows<'a, P: Peer + ?Sized>(std::cell::RefCell<&'a mut P>);
        // SAFETY: every `Peer::rows` in this crate calls `f` once per grain
        // of disjoint grains covering `0..rows`, and returns after its
        // region (tests/peers.rs counts every row once per job).
        unsafe impl<P: Peer + ?Sized> RowParallel for Rows<'_, P> {
            fn run_rows(&self, rows: usize, f: &RowFn<'_>) {
                self.0.borrow_mut().rows(rows, f);
            }
        }
        impl<P: Peer + ?Sized> DecodeExecutor for Rows<'_, P> {
            fn matvec_many(&self, mats: &[&Matrix], x: &Input<'_>, outs: &mut [&mut [f32]]) {
                matvec_many_on(self, mats, x, outs);
            }
        }
        model.decode(&Rows(std::cell::RefCell::new(self)), 1)
    }
    /// Whether it can express `construct`.
    fn supports(&self, construct: Construct) -> bool;
}

/// ggml's barrier (`ggml_barrier`): the last of `n` arrivals resets the
/// count and bumps the generation the others spin on.
#[derive(Default)]
pub struct GgmlBarrier {
    arrived: CachePadded<AtomicUsize>,
    generation: CachePadded<AtomicUsize>,
}

impl GgmlBarrier {
    /// Waits for `n` arrivals. AcqRel arrivals and a Release/Acquire
    /// generation, as ggml's (SeqCst there).
    pub fn wait(&self, n: usize) {
        if n == 1 {
            return;
        }
        let generation = self.generation.load(Ordering::Acquire);
        if self.arrived.fetch_add(1, Ordering::AcqRel) == n - 1 {
            self.arrived.store(0, Ordering::Relaxed);
            self.generation.store(generation + 1, Ordering::Release);
            return;
        }
        while self.generation.load(Ordering::Acquire) == generation {
            std::hint::spin_loop();
        }
    }
}

// ---- this pool -------------------------------------------------------

/// `pool_core::Pool` with its default policy (adaptive), as `Pool::new`.
pub struct PoolPeer(pub Pool);

impl Peer for PoolPeer {
    fn threads(&self) -> usize {
        self.0.n_workers() + 1
    }
    fn region(&mut self, f: &ShareFn<'_>) {
        self.0.run(f);
    }
    fn barriers(&mut self, barriers: usize, f: &ShareFn<'_>) {
        self.0.run_phased(|idx, n, barrier| {
            for _ in 0..barriers {
                f(idx, n);
                barrier.wait();
            }
        });
    }
    /// The pool's own reduction: slots on the caller's stack, folded in
    /// participant order (no `Vec` per call, as the default builds).
    fn reduce(&mut self, f: &ValueFn<'_>) -> f64 {
        self.0.reduce(f, |a, b| a + b)
    }
    fn rows(&mut self, rows: usize, f: &RowFn<'_>) {
        self.0.run_rows(rows, f);
    }
    fn decode(&mut self, model: &DecodeModel) -> Vec<f32> {
        model.decode(&self.0, 1)
    }
    fn supports(&self, _: Construct) -> bool {
        true
    }
}

/// The pool with a fork-join per phase instead of a barrier inside one
/// job (barriers), and a token as one `run_phased` job (decode): the two
/// sides of the barrier-in-a-job trade.
pub struct PoolAltPeer(pub Pool);

impl Peer for PoolAltPeer {
    fn threads(&self) -> usize {
        self.0.n_workers() + 1
    }
    fn region(&mut self, f: &ShareFn<'_>) {
        self.0.run(f);
    }
    fn barriers(&mut self, barriers: usize, f: &ShareFn<'_>) {
        // Every phase has all the region's shares: under foreign load the
        // adaptive policy may run a job narrower than the pool, and then
        // the participants that came run the missing ones (on a loaded
        // machine a phase of one share after phases of two broke the
        // suite's barrier check).
        let width = self.threads();
        for _ in 0..barriers {
            self.0.run(|idx, n| {
                for share in (idx..width).step_by(n.max(1)) {
                    f(share, width);
                }
            });
        }
    }
    fn rows(&mut self, rows: usize, f: &RowFn<'_>) {
        self.0.run_rows(rows, f);
    }
    fn decode(&mut self, model: &DecodeModel) -> Vec<f32> {
        model.decode_phased(&self.0, 1)
    }
    fn supports(&self, construct: Construct) -> bool {
        matches!(construct, Construct::Barrier | Construct::Decode)
    }
}

// ---- the floors ------------------------------------------------------

/// The minimal hand-written spin pool (one worker: 2 threads only).
pub struct SpinPeer(pub SpinPool);

impl Peer for SpinPeer {
    fn threads(&self) -> usize {
        2
    }
    fn region(&mut self, f: &ShareFn<'_>) {
        self.0.run(f);
    }
    fn rows(&mut self, _: usize, _: &RowFn<'_>) {
        unreachable!("not offered")
    }
    fn supports(&self, construct: Construct) -> bool {
        matches!(
            construct,
            Construct::Region | Construct::RegionDelay | Construct::Barrier | Construct::Reduction
        )
    }
}

/// Two threads bouncing one cache line: the floor of an empty fork-join.
pub struct PingPongPeer(pub PingPong);

impl Peer for PingPongPeer {
    fn threads(&self) -> usize {
        2
    }
    fn region(&mut self, _: &ShareFn<'_>) {
        self.0.round_trip();
    }
    fn rows(&mut self, _: usize, _: &RowFn<'_>) {
        unreachable!("not offered")
    }
    fn supports(&self, construct: Construct) -> bool {
        construct == Construct::Region
    }
}

// ---- rayon -----------------------------------------------------------

/// How a rayon user forks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RayonWay {
    /// `broadcast` from inside `install`: the caller is one of the threads.
    BroadcastInside,
    /// `broadcast` from a thread outside the pool, which only waits.
    BroadcastOutside,
    /// A tree of `join`s inside `install`.
    Join,
    /// `scope` with a spawn per participant inside `install`.
    Scope,
}

/// rayon, driven one of four ways.
pub struct RayonPeer {
    /// The pool (also the decode executor: `par_chunks_mut`).
    pub pool: RayonExecutor,
    /// How it forks.
    pub way: RayonWay,
}

fn join_tree(lo: usize, hi: usize, n: usize, f: &ShareFn<'_>) {
    if hi - lo == 1 {
        f(lo, n);
    } else {
        let mid = (lo + hi) / 2;
        rayon::join(|| join_tree(lo, mid, n, f), || join_tree(mid, hi, n, f));
    }
}

impl Peer for RayonPeer {
    fn threads(&self) -> usize {
        self.pool.0.current_num_threads()
    }
    fn region(&mut self, f: &ShareFn<'_>) {
        let pool = &self.pool.0;
        let n = pool.current_num_threads();
        match self.way {
            RayonWay::BroadcastInside => {
                pool.install(|| pool.broadcast(|ctx| f(ctx.index(), ctx.num_threads())));
            }
            RayonWay::BroadcastOutside => {
                pool.broadcast(|ctx| f(ctx.index(), ctx.num_threads()));
            }
            RayonWay::Join => pool.install(|| join_tree(0, n, n, f)),
            RayonWay::Scope => pool.install(|| {
                rayon::scope(|s| {
                    for idx in 0..n - 1 {
                        s.spawn(move |_| f(idx, n));
                    }
                    f(n - 1, n);
                })
            }),
        }
    }
    fn rows(&mut self, rows: usize, f: &RowFn<'_>) {
        // rayon's own rule: adaptive splitting of the index range.
        self.pool
            .0
            .install(|| (0..rows).into_par_iter().for_each(|r| f(r, r + 1)));
    }
    fn decode(&mut self, model: &DecodeModel) -> Vec<f32> {
        model.decode(&self.pool, 1)
    }
    fn supports(&self, construct: Construct) -> bool {
        match construct {
            Construct::Region | Construct::RegionDelay | Construct::Reduction => true,
            // A barrier needs every participant running at once: only
            // broadcast promises that (a join or scope task may run after
            // another on the same thread, and a barrier there deadlocks).
            Construct::Barrier => matches!(
                self.way,
                RayonWay::BroadcastInside | RayonWay::BroadcastOutside
            ),
            Construct::Rows | Construct::Decode => self.way == RayonWay::BroadcastInside,
        }
    }
}

// ---- OpenMP ----------------------------------------------------------

/// libgomp, through `c/epcc_omp.c`.
#[cfg(pool_openmp)]
pub struct OpenMpPeer {
    /// `num_threads` of every region.
    pub threads: usize,
}

#[cfg(pool_openmp)]
mod omp {
    use std::ffi::{c_int, c_void};

    pub(super) type Share = extern "C" fn(*mut c_void, usize, usize);
    pub(super) type Value = extern "C" fn(*mut c_void, usize, usize) -> f64;

    extern "C" {
        pub(super) fn epcc_omp_region(threads: c_int, f: Share, ctx: *mut c_void);
        pub(super) fn epcc_omp_barriers(
            threads: c_int,
            barriers: c_int,
            f: Share,
            ctx: *mut c_void,
        );
        pub(super) fn epcc_omp_reduce(threads: c_int, f: Value, ctx: *mut c_void) -> f64;
        pub(super) fn epcc_omp_rows(threads: c_int, rows: usize, f: Share, ctx: *mut c_void);
    }

    /// Calls the `&&ShareFn` behind `ctx`.
    pub(super) extern "C" fn share(ctx: *mut c_void, a: usize, b: usize) {
        // SAFETY: every caller passes a pointer to a live `&ShareFn` (or
        // `&RowFn`, the same type) that outlives the C call.
        let f = unsafe { *(ctx as *const &super::ShareFn<'_>) };
        // A panic must not unwind into C: abort instead.
        if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(a, b))).is_err() {
            std::process::abort();
        }
    }

    /// Calls the `&&ValueFn` behind `ctx`.
    pub(super) extern "C" fn value(ctx: *mut c_void, idx: usize, n: usize) -> f64 {
        // SAFETY: as for `share`, with a `&ValueFn`.
        let f = unsafe { *(ctx as *const &super::ValueFn<'_>) };
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(idx, n)))
            .unwrap_or_else(|_| std::process::abort())
    }
}

#[cfg(pool_openmp)]
impl OpenMpPeer {
    fn threads_c(&self) -> std::ffi::c_int {
        self.threads
            .try_into()
            .expect("a thread count that fits an int")
    }
}

#[cfg(pool_openmp)]
impl Peer for OpenMpPeer {
    fn threads(&self) -> usize {
        self.threads
    }
    fn region(&mut self, f: &ShareFn<'_>) {
        let ctx = &f as *const &ShareFn<'_> as *mut std::ffi::c_void;
        // SAFETY: `ctx` points at `f`, which outlives the call; the region
        // returns only after every thread finished (OpenMP's implicit
        // barrier).
        unsafe { omp::epcc_omp_region(self.threads_c(), omp::share, ctx) };
    }
    fn barriers(&mut self, barriers: usize, f: &ShareFn<'_>) {
        let ctx = &f as *const &ShareFn<'_> as *mut std::ffi::c_void;
        let barriers = barriers
            .try_into()
            .expect("a barrier count that fits an int");
        // SAFETY: as in `region`.
        unsafe { omp::epcc_omp_barriers(self.threads_c(), barriers, omp::share, ctx) };
    }
    fn reduce(&mut self, f: &ValueFn<'_>) -> f64 {
        let ctx = &f as *const &ValueFn<'_> as *mut std::ffi::c_void;
        // SAFETY: as in `region`.
        unsafe { omp::epcc_omp_reduce(self.threads_c(), omp::value, ctx) }
    }
    fn rows(&mut self, rows: usize, f: &RowFn<'_>) {
        let f: &ShareFn<'_> = f;
        let ctx = &f as *const &ShareFn<'_> as *mut std::ffi::c_void;
        // SAFETY: as in `region`.
        unsafe { omp::epcc_omp_rows(self.threads_c(), rows, omp::share, ctx) };
    }
    fn supports(&self, _: Construct) -> bool {
        true
    }
}

// ---- the crates.io peers (feature `peers`) ----------------------------

/// candle's `BarrierPool` (`candle_core::utils::barrier_pool()`): one
/// process-wide pool sized by `CANDLE_NUM_THREADS` at first use; `execute`
/// for regions, `execute_chunked` for rows, as candle's CPU backend calls
/// them.
#[cfg(feature = "peers")]
pub struct CandlePeer;

#[cfg(feature = "peers")]
impl Peer for CandlePeer {
    fn threads(&self) -> usize {
        candle_core::utils::barrier_pool().n_workers() + 1
    }
    fn region(&mut self, f: &ShareFn<'_>) {
        let n = self.threads();
        candle_core::utils::barrier_pool().execute(|tid| f(tid, n));
    }
    fn rows(&mut self, rows: usize, f: &RowFn<'_>) {
        candle_core::utils::barrier_pool().execute_chunked(rows, |r| f(r.start, r.end));
    }
    fn supports(&self, _: Construct) -> bool {
        true
    }
}

/// fork_union's `ThreadPool` (caller inclusive): `for_threads` for regions,
/// `for_slices` (one contiguous slice per thread) for rows.
#[cfg(feature = "peers")]
pub struct ForkUnionPeer(pub fork_union::ThreadPool);

#[cfg(feature = "peers")]
impl Peer for ForkUnionPeer {
    fn threads(&self) -> usize {
        self.0.threads()
    }
    fn region(&mut self, f: &ShareFn<'_>) {
        let n = self.0.threads();
        self.0.for_threads(|thread, _| f(thread, n)).join();
    }
    fn rows(&mut self, rows: usize, f: &RowFn<'_>) {
        drop(self.0.for_slices(rows, |prong, count| {
            f(prong.task_index, prong.task_index + count)
        }));
    }
    fn supports(&self, _: Construct) -> bool {
        true
    }
}

/// chili's heartbeat-scheduled `join`: regions, reductions and rows as
/// join trees down to single items, its intended use.
#[cfg(feature = "peers")]
pub struct ChiliPeer {
    /// The pool.
    pub pool: chili::ThreadPool,
    /// Participants of a region.
    pub threads: usize,
}

#[cfg(feature = "peers")]
fn chili_tree(scope: &mut chili::Scope<'_>, lo: usize, hi: usize, f: &(dyn Fn(usize) + Sync)) {
    if hi - lo == 1 {
        f(lo);
    } else {
        let mid = (lo + hi) / 2;
        scope.join(|s| chili_tree(s, lo, mid, f), |s| chili_tree(s, mid, hi, f));
    }
}

#[cfg(feature = "peers")]
impl Peer for ChiliPeer {
    fn threads(&self) -> usize {
        self.threads
    }
    fn region(&mut self, f: &ShareFn<'_>) {
        let n = self.threads;
        chili_tree(&mut self.pool.scope(), 0, n, &|idx| f(idx, n));
    }
    fn rows(&mut self, rows: usize, f: &RowFn<'_>) {
        if rows > 0 {
            chili_tree(&mut self.pool.scope(), 0, rows, &|r| f(r, r + 1));
        }
    }
    fn supports(&self, construct: Construct) -> bool {
        // No barrier: join tasks are not promised to run at once.
        construct != Construct::Barrier
    }
}
