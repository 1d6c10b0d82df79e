//! Element- and chunk-parallel loops over an output slice.
//!
//! Both run on the calling thread below the serial gate (fewer than
//! [`crate::PARALLEL_THRESHOLD`] elements: a dispatch would cost more than
//! a tiny loop), and as one row job above it.

use crate::disjoint::DisjointRows;
use crate::executor::{gated, Executor};

/// Calls `f(i, &mut out[i])` for every element, in parallel on `exec`
/// (serially with `None`, [`crate::Serial`], or below the serial gate).
/// Each element is visited exactly once. For elements heavy enough that a
/// short slice is worth a dispatch, use [`crate::RowsInto::run_rows_into`].
///
/// ```
/// let mut squares = vec![0usize; 100];
/// pool_matvec::for_each_row(None, &mut squares, |i, v| *v = i * i);
/// assert_eq!(squares[9], 81);
/// ```
pub fn for_each_row<T: Send>(exec: impl Executor, out: &mut [T], f: impl Fn(usize, &mut T) + Sync) {
    let rows = out.len();
    let out = DisjointRows::new(out);
    gated(&exec, rows, 1).run_rows(rows, &|start, end| {
        // SAFETY: run_rows hands out each range once (DisjointRows invariant).
        let slice = unsafe { out.rows(start, end) };
        for (offset, item) in slice.iter_mut().enumerate() {
            f(start + offset, item);
        }
    });
}

/// Splits `out` into chunks of `chunk` elements (the last may be shorter)
/// and calls `f(&mut state, chunk_index, chunk)` for each, in parallel on
/// `exec` (serially below the serial gate, counted in elements). `init`
/// makes a scratch state once per pulled range of chunks, not once per
/// chunk (a per-participant buffer, as rayon's `for_each_init`).
///
/// # Panics
///
/// If `chunk` is 0.
///
/// ```
/// let mut out = vec![0u32; 10];
/// pool_matvec::for_each_chunk_init(None, &mut out, 4, Vec::<u32>::new, |scratch, index, chunk| {
///     scratch.push(index as u32);
///     chunk.fill(index as u32);
/// });
/// assert_eq!(out, [0, 0, 0, 0, 1, 1, 1, 1, 2, 2]);
/// ```
pub fn for_each_chunk_init<T: Send, S>(
    exec: impl Executor,
    out: &mut [T],
    chunk: usize,
    init: impl Fn() -> S + Sync,
    f: impl Fn(&mut S, usize, &mut [T]) + Sync,
) {
    assert!(
        chunk > 0,
        "for_each_chunk_init: chunk size must be at least 1"
    );
    let len = out.len();
    let chunks = len.div_ceil(chunk);
    let out = DisjointRows::new(out);
    gated(&exec, len, 1).run_rows(chunks, &|first, last| {
        let mut state = init();
        for index in first..last {
            let (start, end) = (index * chunk, ((index + 1) * chunk).min(len));
            // SAFETY: chunk ranges of distinct indices are disjoint, and
            // run_rows hands out each index once.
            f(&mut state, index, unsafe { out.rows(start, end) });
        }
    });
}
