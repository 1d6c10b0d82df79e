//! Row parallelism: one dispatch, a shared cursor, grains pulled on demand.
//!
//! Participants pull `grain` rows at a time from one atomic cursor, so fast
//! cores take more grains and the skew between participants collapses to one
//! grain. Rows are never split. A job of `c` chunks invites only
//! `min(c - 1, n_workers)` workers: the caller takes a chunk too.

use std::sync::atomic::{AtomicUsize, Ordering};

use crossbeam_utils::CachePadded;
use pool_core::Pool;

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

/// Row-parallel jobs over a pool.
pub trait RowParallel {
    /// Calls `f(start, end)` over disjoint, non-empty ranges covering
    /// `0..rows` exactly once, in one dispatch. `rows == 0`: no callback,
    /// no dispatch; a single chunk runs on the caller without a dispatch.
    fn run_rows(&self, rows: usize, f: &RowFn<'_>);

    /// Several row spaces (e.g. Q, K and V) laid end to end and pulled from
    /// one cursor: one barrier instead of one per part. Each part's callback
    /// sees its own row indices (`0..rows` of that part).
    fn run_many(&self, parts: &[(usize, &RowFn<'_>)]) {
        let total: usize = parts.iter().map(|(rows, _)| rows).sum();
        self.run_rows(total, &|start, end| for_parts_in(parts, start, end));
    }
}

impl RowParallel for Pool {
    fn run_rows(&self, rows: usize, f: &RowFn<'_>) {
        pull_rows(self, rows, f);
    }
}

/// The serial executor: the whole range in one call on the calling thread,
/// so code written against `&dyn RowParallel` needs no branch for it.
impl RowParallel for crate::decode::Serial {
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

/// The shared cursor loop behind `run_rows` and `run_many`.
fn pull_rows(pool: &Pool, rows: usize, f: &RowFn<'_>) {
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
    // Relaxed: the RMW hands each range to exactly one participant; the
    // pool's barrier orders the rows' writes before `run_limited` returns.
    let cursor = CachePadded::new(AtomicUsize::new(0));
    pool.run_limited(invited, &|_, _| loop {
        let start = cursor.fetch_add(grain, Ordering::Relaxed);
        if start >= rows {
            break;
        }
        f(start, (start + grain).min(rows));
    });
}

/// Runs `f` over `0..rows` on `pool` when given, else serially in one call.
pub(crate) fn run_rows_on(pool: Option<&Pool>, rows: usize, f: &RowFn<'_>) {
    match pool {
        Some(pool) => pool.run_rows(rows, f),
        None if rows > 0 => f(0, rows),
        None => {}
    }
}
