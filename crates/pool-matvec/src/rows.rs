//! Row parallelism: one dispatch, each participant on rows of its own.
//!
//! On the pool, each participant of a row job starts on its home range, a
//! contiguous share of the rows, and claims it front to back; one that
//! runs out takes the back half of what another has left
//! (`home_ranges.rs`). Each participant then reads one memory stream per
//! job, plus one per steal, and fast cores still take more rows. Claims
//! shrink to a quarter of [`grain_for`], so the participants finish within
//! a small claim of each other. Rows are never split. A job of `c` grains
//! invites only `min(c - 1, n_workers)` workers: the caller takes a share
//! too.
//!
//! [`Broadcast`] executors (which do not number their participants) and
//! the phased decode pull guided chunks from one shared cursor instead.

use crate::sync::{AtomicUsize, Ordering};

use std::time::Duration;

use crossbeam_utils::CachePadded;
use pool_core::Pool;

use crate::disjoint::DisjointRows;
use crate::home_ranges::{HomeRanges, MAX_ROWS};

/// The callback of a row job: `f(start, end)` over rows `start..end`
/// (`dyn Fn(usize, usize) + Sync`).
pub type RowFn<'a> = dyn Fn(usize, usize) + Sync + 'a;

/// The smallest grain when there is enough work: keeps the kernel's stride
/// (four-row blocks, cache lines) intact.
pub const MIN_GRAIN: usize = 32;

/// Grains per participant aimed for: enough that a slow core's lag is one
/// small grain, few enough that the cursor is not contended.
pub const GRAINS_PER_PARTICIPANT: usize = 8;

/// The grain (rows per pull) for `rows` rows over `participants`:
/// `rows / (participants * 8)`, at least 32, but never coarser than
/// `rows.div_ceil(participants)` so every participant can get a chunk, and
/// never 0. `participants == 0` counts as 1.
///
/// A floor of 32 alone once sent a 24-row job, called 86 times a token,
/// entirely to one worker while 48 others woke for nothing.
///
/// ```
/// use pool_matvec::grain_for;
/// assert_eq!(grain_for(24, 49), 1);
/// assert_eq!(grain_for(4096, 49), 32);
/// assert_eq!(grain_for(32768, 49), 83);
/// assert_eq!(grain_for(0, 49), 1);
/// assert_eq!(grain_for(7, 1), 7);
/// ```
pub fn grain_for(rows: usize, participants: usize) -> usize {
    let participants = participants.max(1);
    let target = (rows / (participants * GRAINS_PER_PARTICIPANT)).max(MIN_GRAIN);
    target.min(rows.div_ceil(participants)).max(1)
}

/// Row-parallel jobs over an executor: the pool, [`Serial`], or any
/// [`Broadcast`] executor of your own.
///
/// # Safety
///
/// [`RowsInto`] and this crate's kernels hand every range `run_rows` gives
/// out a `&mut` to those rows of an output, so an implementation must keep
/// the contract of [`RowParallel::run_rows`]: every call `f(start, end)` has
/// `start < end <= rows`, no row is handed out twice in one job (the ranges
/// are disjoint and each is called once), and `run_rows` returns only after
/// every call of `f` returned. Two calls on the same rows would be two live
/// `&mut` to them: a data race.
///
/// You rarely need to implement it: implement the safe [`Broadcast`]
/// instead, and the rows are handed out by this crate's own cursor, which
/// keeps the contract whatever your executor does.
///
/// ```compile_fail,E0200
/// // Implementing it without `unsafe` does not compile:
/// struct Twice;
/// impl pool_matvec::RowParallel for Twice {
///     fn run_rows(&self, rows: usize, f: &pool_matvec::RowFn<'_>) {
///         f(0, rows);
///         f(0, rows); // two `&mut` to the same rows
///     }
/// }
/// ```
///
/// [`Serial`]: crate::serial::Serial
pub unsafe trait RowParallel {
    /// Calls `f(start, end)` over disjoint, non-empty ranges covering
    /// `0..rows` exactly once, in one dispatch. `rows == 0`: no callback,
    /// no dispatch; a single chunk runs on the caller without a dispatch.
    fn run_rows(&self, rows: usize, f: &RowFn<'_>);

    /// [`RowParallel::run_rows`] for a job that streams `bytes` of memory
    /// (a matvec's weights; `0`: unknown). The pool weighs it when other
    /// processes keep its CPUs busy: a job long enough wakes a parked
    /// worker, a short one runs on the workers still awake
    /// ([`pool_core::Pool::run_optional_workers_for`]); an unknown one
    /// runs the default way and its time is left out of the pool's trials
    /// ([`pool_core::Pool::run_optional_workers`]). Other executors ignore
    /// it.
    fn run_rows_reading(&self, rows: usize, bytes: usize, f: &RowFn<'_>) {
        let _ = bytes;
        self.run_rows(rows, f);
    }

    /// Several row spaces (e.g. Q, K and V) laid end to end and pulled from
    /// one cursor: one barrier instead of one per part. Each part's callback
    /// sees its own row indices (`0..rows` of that part).
    fn run_many(&self, parts: &[(usize, &RowFn<'_>)]) {
        self.run_many_reading(parts, 0);
    }

    /// [`RowParallel::run_many`] for parts that stream `bytes` of memory
    /// in all (as [`RowParallel::run_rows_reading`]).
    fn run_many_reading(&self, parts: &[(usize, &RowFn<'_>)], bytes: usize) {
        let total: usize = parts.iter().map(|(rows, _)| rows).sum();
        self.run_rows_reading(total, bytes, &|start, end| for_parts_in(parts, start, end));
    }
}

/// A fork-join executor of your own (a rayon pool, a C library's thread
/// pool, ...) that runs row jobs: implement this safe trait, and the
/// executor is a [`RowParallel`] (so [`RowsInto`] and every kernel take
/// it).
///
/// Rows are not handed out by your code: each call of `f` pulls row ranges
/// from a cursor this crate owns until none is left, so whatever
/// `broadcast` does (call `f` on every thread, on one, twice on the same
/// thread, or not at all), each row runs exactly once; rows no call took
/// run on the calling thread after `broadcast` returns. `f` borrows the
/// caller's stack, so safe code cannot call it after `broadcast` returned.
///
/// ```
/// use pool_matvec::{Broadcast, RowsInto};
/// /// Scoped std threads: a new thread per job (slow, but it shows the shape).
/// struct ScopedThreads(usize);
/// impl Broadcast for ScopedThreads {
///     fn width(&self) -> usize {
///         self.0
///     }
///     fn broadcast(&self, f: &(dyn Fn() + Sync)) {
///         std::thread::scope(|s| {
///             for _ in 1..self.0 {
///                 s.spawn(f);
///             }
///             f();
///         });
///     }
/// }
/// let mut squares = vec![0usize; 1000];
/// ScopedThreads(3).run_rows_into(&mut squares, |start, rows| {
///     for (i, row) in rows.iter_mut().enumerate() {
///         *row = (start + i) * (start + i);
///     }
/// });
/// assert_eq!(squares[999], 999 * 999);
/// ```
pub trait Broadcast {
    /// How many threads `broadcast` runs `f` on at once, the caller's
    /// included: the row grain is sized for them. `0` counts as 1.
    fn width(&self) -> usize;

    /// Calls `f` on up to [`Broadcast::width`] threads and returns once
    /// every call returned.
    fn broadcast(&self, f: &(dyn Fn() + Sync));
}

// SAFETY: the rows come from `pull_chunks` over a cursor this function
// owns: every range it hands out is non-empty, inside `0..rows`, and
// claimed by one successful compare-exchange, so no row is handed out twice
// however often `broadcast` calls the closure. The closure borrows
// `cursor` and `f` from this frame, so every call ends before
// `broadcast` returns (safe code cannot keep a non-`'static` borrow past
// it), and the final `pull_chunks` runs on this thread.
unsafe impl<E: Broadcast + ?Sized> RowParallel for E {
    fn run_rows(&self, rows: usize, f: &RowFn<'_>) {
        if rows == 0 {
            return;
        }
        let width = self.width().max(1);
        let cursor = CachePadded::new(AtomicUsize::new(0));
        if rows.div_ceil(grain_for(rows, width)) > 1 {
            self.broadcast(&|| pull_chunks(&cursor, rows, width, f));
        }
        // Whatever no call took (or everything, for one chunk).
        pull_chunks(&cursor, rows, width, f);
    }
}

/// The callback of a row job with outputs: `f(start, rows)` with `rows`
/// the `&mut` slice of the output from `start` on
/// (`dyn Fn(usize, &mut [T]) + Sync`).
pub type RowsIntoFn<'a, T> = dyn Fn(usize, &mut [T]) + Sync + 'a;

/// Row jobs that write their outputs: each range gets its own `&mut`
/// slice, so no `unsafe`, no lock and no copy at the call site. For every
/// [`RowParallel`] executor (`dyn` ones too).
///
/// ```
/// use pool_matvec::{RowParallel, RowsInto};
/// let pool = pool_core::Pool::new(1);
/// let (dim, x) = (64, vec![1.0f32; 64]);
/// let (wq, wk) = (vec![0.5f32; dim * dim], vec![0.25f32; dim * dim]);
/// let (mut q, mut k) = (vec![0.0; dim], vec![0.0; dim]);
/// // Q and K share their input: one dispatch, one barrier for both.
/// let q_rows = |start: usize, out: &mut [f32]| {
///     let rows = &wq[start * dim..(start + out.len()) * dim];
///     pool_matvec::matvec_f32_fast(None, rows, &x, out);
/// };
/// let k_rows = |start: usize, out: &mut [f32]| {
///     let rows = &wk[start * dim..(start + out.len()) * dim];
///     pool_matvec::matvec_f32_fast(None, rows, &x, out);
/// };
/// pool.run_many_into(&mut [(&mut q[..], &q_rows), (&mut k[..], &k_rows)]);
/// assert!(q.iter().all(|&v| v == 32.0) && k.iter().all(|&v| v == 16.0));
/// ```
pub trait RowsInto: RowParallel {
    /// [`RowParallel::run_rows`] over `out.len()` rows: `f(start, rows)`
    /// with `rows` the `&mut` slice `out[start..start + rows.len()]`.
    fn run_rows_into<T: Send>(&self, out: &mut [T], f: impl Fn(usize, &mut [T]) + Sync) {
        self.run_rows_into_reading(out, 0, f);
    }

    /// [`RowsInto::run_rows_into`] for a job that streams `bytes` of
    /// memory (as [`RowParallel::run_rows_reading`]).
    fn run_rows_into_reading<T: Send>(
        &self,
        out: &mut [T],
        bytes: usize,
        f: impl Fn(usize, &mut [T]) + Sync,
    ) {
        let target = DisjointRows::new(out);
        self.run_rows_reading(target.len(), bytes, &|start, end| {
            // SAFETY: run_rows hands out each range once per job
            // (DisjointRows invariant).
            f(start, unsafe { target.rows(start, end) })
        });
    }

    /// [`RowParallel::run_many`] with outputs: each part is an output
    /// slice and its callback, which sees its own row indices and the
    /// `&mut` rows it computes.
    fn run_many_into<T: Send>(&self, parts: &mut [(&mut [T], &RowsIntoFn<'_, T>)]) {
        self.run_many_into_reading(parts, 0);
    }

    /// [`RowsInto::run_many_into`] for parts that stream `bytes` of memory
    /// in all (as [`RowParallel::run_rows_reading`]).
    fn run_many_into_reading<T: Send>(
        &self,
        parts: &mut [(&mut [T], &RowsIntoFn<'_, T>)],
        bytes: usize,
    ) {
        if parts.len() > INLINE_PARTS {
            return run_many_into_spilled(self, parts, bytes);
        }
        // Up to `INLINE_PARTS` parts on the stack: a decode's Q, K and V
        // job allocates nothing (an allocation between jobs is a chain of
        // cache misses once the weights' stream has evicted the
        // allocator's lists).
        let n = parts.len();
        let mut given = parts.iter_mut();
        let targets: [Option<(DisjointRows<'_, T>, &RowsIntoFn<'_, T>)>; INLINE_PARTS] =
            std::array::from_fn(|_| given.next().map(|(out, f)| (DisjointRows::new(out), *f)));
        let callbacks = targets.each_ref().map(|target| {
            target.as_ref().map(|(target, f)| {
                move |start: usize, end: usize| {
                    // SAFETY: run_many hands out each row of each part
                    // once per job (DisjointRows invariant).
                    f(start, unsafe { target.rows(start, end) })
                }
            })
        });
        let unused = |_: usize, _: usize| {};
        let row_fns: [(usize, &RowFn<'_>); INLINE_PARTS] =
            std::array::from_fn(|i| match (&targets[i], &callbacks[i]) {
                (Some((target, _)), Some(f)) => (target.len(), f as &RowFn<'_>),
                _ => (0, &unused as &RowFn<'_>),
            });
        self.run_many_reading(&row_fns[..n], bytes);
    }
}

/// Parts [`RowsInto::run_many_into`] keeps on the stack.
const INLINE_PARTS: usize = 4;

/// [`RowsInto::run_many_into`] for more parts than fit on the stack.
fn run_many_into_spilled<E: RowParallel + ?Sized, T: Send>(
    exec: &E,
    parts: &mut [(&mut [T], &RowsIntoFn<'_, T>)],
    bytes: usize,
) {
    let targets: Vec<(DisjointRows<'_, T>, &RowsIntoFn<'_, T>)> = parts
        .iter_mut()
        .map(|(out, f)| (DisjointRows::new(out), *f))
        .collect();
    let callbacks: Vec<_> = targets
        .iter()
        .map(|(target, f)| {
            move |start: usize, end: usize| {
                // SAFETY: run_many hands out each row of each part once
                // per job (DisjointRows invariant).
                f(start, unsafe { target.rows(start, end) })
            }
        })
        .collect();
    let parts: Vec<(usize, &RowFn<'_>)> = targets
        .iter()
        .zip(&callbacks)
        .map(|((target, _), f)| (target.len(), f as &RowFn<'_>))
        .collect();
    exec.run_many_reading(&parts, bytes);
}

impl<E: RowParallel + ?Sized> RowsInto for E {}

/// `None` runs serially: an `Option<Pool>` from `Pool::from_env` needs no
/// branch at the call site.
// SAFETY: forwards to the pool's or `Serial`'s `run_rows`, which keep the
// contract.
unsafe impl RowParallel for Option<Pool> {
    fn run_rows(&self, rows: usize, f: &RowFn<'_>) {
        self.run_rows_reading(rows, 0, f);
    }

    fn run_rows_reading(&self, rows: usize, bytes: usize, f: &RowFn<'_>) {
        match self {
            Some(pool) => pool.run_rows_reading(rows, bytes, f),
            None => crate::serial::Serial.run_rows(rows, f),
        }
    }
}

/// As for `Option<Pool>`.
// SAFETY: as for `Option<Pool>`.
unsafe impl RowParallel for Option<&Pool> {
    fn run_rows(&self, rows: usize, f: &RowFn<'_>) {
        self.run_rows_reading(rows, 0, f);
    }

    fn run_rows_reading(&self, rows: usize, bytes: usize, f: &RowFn<'_>) {
        match self {
            Some(pool) => pool.run_rows_reading(rows, bytes, f),
            None => crate::serial::Serial.run_rows(rows, f),
        }
    }
}

// SAFETY: `pull_rows` hands out ranges of `0..rows` by compare-exchange on
// its own home ranges or cursor (each row once), and
// `run_optional_workers` returns only after every participant that started
// finished.
unsafe impl RowParallel for Pool {
    fn run_rows(&self, rows: usize, f: &RowFn<'_>) {
        pull_rows(self, rows, 0, f);
    }

    fn run_rows_reading(&self, rows: usize, bytes: usize, f: &RowFn<'_>) {
        pull_rows(self, rows, bytes, f);
    }
}

/// The serial executor: the whole range in one call on the calling thread,
/// so code written against `&dyn RowParallel` needs no branch for it.
// SAFETY: one call over the whole range, on this thread, before returning.
unsafe impl RowParallel for crate::serial::Serial {
    fn run_rows(&self, rows: usize, f: &RowFn<'_>) {
        if rows > 0 {
            f(0, rows);
        }
    }
}

/// Maps the virtual range `start..end` of the concatenated parts onto each
/// part it overlaps, in that part's own indices.
fn for_parts_in(parts: &[(usize, &RowFn<'_>)], start: usize, end: usize) {
    let mut offset = 0;
    for (rows, f) in parts {
        let (part_start, part_end) = (offset, offset + rows);
        offset = part_end;
        if part_end <= start {
            continue;
        }
        if part_start >= end {
            break;
        }
        let (from, to) = (start.max(part_start), end.min(part_end));
        if from < to {
            f(from - part_start, to - part_start);
        }
    }
}

/// What one core is taken to stream from memory, in bytes per ns, to turn a
/// job's bytes into the time [`Pool::run_optional_workers_for`] weighs: a
/// round figure below the one-thread read ceilings measured (10-15 GB/s),
/// so a job is taken for longer, not shorter, than it is.
const ONE_CORE_BYTES_PER_NS: u64 = 10;

/// The pool's row job behind `run_rows` and `run_many`: home ranges (the
/// shared cursor past [`MAX_ROWS`] rows). `bytes`: what the job streams
/// (0: unknown).
fn pull_rows(pool: &Pool, rows: usize, bytes: usize, f: &RowFn<'_>) {
    if rows == 0 {
        return;
    }
    let grain = grain_for(rows, pool.n_workers() + 1);
    let chunks = rows.div_ceil(grain);
    let invited = (chunks - 1).min(pool.n_workers());
    if invited == 0 {
        f(0, rows);
        return;
    }
    // Whoever runs does the work: a worker that has not started when the
    // caller has claimed the last rows is withdrawn, not waited for, and
    // its home range was the caller's to steal.
    let job = |f: &(dyn Fn(usize, usize) + Sync)| {
        if bytes == 0 {
            // No estimate, not an estimate of nothing: the pool's trials
            // leave the job out, and it runs the default way. Read as
            // 1 ns, the classifier (20 MB of stories110M's 83 MB token)
            // ran on the caller alone in the fork trials' inline epochs.
            pool.run_optional_workers(invited, f);
        } else {
            let expected = Duration::from_nanos(bytes as u64 / ONE_CORE_BYTES_PER_NS);
            pool.run_optional_workers_for(invited, expected, f);
        }
    };
    if rows <= MAX_ROWS {
        let ranges = HomeRanges::new(rows, invited + 1, smallest_claim(grain));
        job(&|me, n| {
            if n == 1 {
                // Alone (no worker invited: inline, or the adaptive
                // policy's fit): all of it in one call, as a serial loop.
                f(0, rows);
            } else {
                ranges.run(me, f);
            }
        });
    } else {
        let cursor = CachePadded::new(AtomicUsize::new(0));
        job(&|_, n| pull_chunks(&cursor, rows, n, f));
    }
}

/// One participant's side of a row job: claims chunks of `0..rows` from
/// `cursor` (shared by the job's `participants`, starting at 0) and calls
/// `f(start, end)` on each until none is left. Every range goes to exactly
/// one caller of this function. Shared by `run_rows` and the phased decode.
pub(crate) fn pull_chunks(
    cursor: &AtomicUsize,
    rows: usize,
    participants: usize,
    mut f: impl FnMut(usize, usize),
) {
    let floor = smallest_claim(grain_for(rows, participants));
    // Relaxed: the CAS hands each range to exactly one participant; the
    // job's barrier orders the rows' writes before anyone reads them.
    let mut start = cursor.load(Ordering::Relaxed);
    while start < rows {
        let end = start + guided_chunk(rows - start, participants, floor);
        if crate::sync::claim_bug() {
            // Seeded (loom builds only): a claim another participant can
            // make between the load and this store.
            cursor.store(end, Ordering::Relaxed);
            f(start, end);
            start = cursor.load(Ordering::Relaxed);
            continue;
        }
        match cursor.compare_exchange_weak(start, end, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => {
                f(start, end);
                start = cursor.load(Ordering::Relaxed);
            }
            Err(now) => start = now,
        }
    }
}

/// The smallest claim a row job makes: a quarter of its grain, so the
/// participants finish within a small claim of each other.
fn smallest_claim(grain: usize) -> usize {
    (grain / 4).max(1)
}

/// The next chunk when `remaining` rows are left for `participants`:
/// guided, as OpenMP's `schedule(guided)`: a share of what is left, so
/// chunks shrink as the job ends and the participants finish within a
/// small chunk of each other (fixed grains leave half a grain of tail on
/// average: 8 µs of a 4096-row job on 2 CPUs, against 2 µs for a static
/// split), while a slow or descheduled participant still holds at most a
/// quarter of the rows. At least `floor` rows, a multiple of 4 when it can
/// be (the kernels' stride), never more than what is left.
fn guided_chunk(remaining: usize, participants: usize, floor: usize) -> usize {
    if participants <= 1 {
        // Alone (a job the adaptive policy ran inline): all of it in one
        // call, as a serial loop would. Halving it anyway cost a cursor
        // CAS and a cold start of the kernel's prefetch stream per chunk,
        // about ten per matrix.
        return remaining;
    }
    let share = (remaining / (2 * participants.max(1))).max(floor);
    let share = if share >= 4 { share & !3 } else { share };
    share.clamp(1, remaining)
}
