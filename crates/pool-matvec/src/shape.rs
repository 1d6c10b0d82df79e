//! Shape checks and the serial gate.

/// Element-ops below which a matvec runs serially: the fork-join would cost
/// more than it saves (about 256k multiply-adds, measured in the engines
/// this pool replaced). Under Miri 16k, so that the parallel paths run on
/// shapes it interprets in seconds.
#[cfg(not(miri))]
pub const PARALLEL_THRESHOLD: usize = 256 * 1024;
/// Element-ops below which a matvec runs serially (Miri's smaller gate).
#[cfg(miri)]
pub const PARALLEL_THRESHOLD: usize = 16 * 1024;

/// Whether a `rows x cols` matvec is worth a fork-join.
///
/// ```
/// assert!(!pool_matvec::should_parallelize(64, 64));
/// assert!(pool_matvec::should_parallelize(4096, 4096));
/// ```
#[inline]
pub fn should_parallelize(rows: usize, cols: usize) -> bool {
    rows.saturating_mul(cols) >= PARALLEL_THRESHOLD
}

/// Panics, naming the shapes, unless `w_len >= rows * cols`: never an
/// out-of-bounds read, in release builds too.
#[inline]
#[track_caller]
pub(crate) fn check_matvec(kernel: &str, w_len: usize, rows: usize, cols: usize) {
    let needed = rows.checked_mul(cols);
    if needed.is_none_or(|needed| w_len < needed) {
        panic!(
            "{kernel}: weights hold {w_len} values but out has {rows} rows and x has {cols} columns \
             (need {rows} x {cols})"
        );
    }
}

/// Panics, naming the shapes, unless `rows` rows of `len` values, `stride`
/// apart, fit in `values` values without overlapping: the bounds of the
/// strided kernels (`dot_fast_rows`, `add_weighted_rows`).
#[inline]
#[track_caller]
pub(crate) fn check_strided_rows(
    kernel: &str,
    len: usize,
    values: usize,
    stride: usize,
    rows: usize,
) {
    assert!(
        stride >= len,
        "{kernel}: rows {stride} apart overlap {len} values"
    );
    if let Some(last) = rows.checked_sub(1) {
        let needed = last.checked_mul(stride).and_then(|at| at.checked_add(len));
        assert!(
            needed.is_some_and(|n| n <= values),
            "{kernel}: {rows} rows of {len}, {stride} apart, need more than the {values} values given"
        );
    }
}

/// Panics, naming the shapes, unless `x_len` is whole 32-value blocks.
#[inline]
#[track_caller]
pub(crate) fn check_block_row(kernel: &str, x_len: usize) {
    assert!(
        x_len.is_multiple_of(32),
        "{kernel}: row length {x_len} is not a multiple of the block size 32"
    );
}

/// Panics, naming the shapes, unless `w_blocks >= rows * blocks_per_row`:
/// the quantized kernels' [`check_matvec`].
#[inline]
#[track_caller]
pub(crate) fn check_blocks(kernel: &str, w_blocks: usize, rows: usize, blocks_per_row: usize) {
    let cols = blocks_per_row * 32;
    if rows
        .checked_mul(blocks_per_row)
        .is_none_or(|needed| w_blocks < needed)
    {
        panic!(
            "{kernel}: weights hold {w_blocks} blocks but out has {rows} rows of {cols} columns \
             (need {rows} x {blocks_per_row} blocks)"
        );
    }
}

/// Rows ahead that the strided-row kernels (attention's scores and
/// weighted sum over the KV cache) prefetch. A head's row of the cache is
/// 64-128 values, one row per position `kv_dim` apart: a stride the
/// hardware prefetcher does not follow across pages, so each row was a
/// miss to L3 (the weights' stream evicts the cache from L2 every layer).
pub(crate) const ROWS_AHEAD: usize = 8;

/// Prefetches into L1 the cache lines of `len` values at `at` (any
/// address: a prefetch never faults, and `wrapping_add` forms it).
#[inline(always)]
pub(crate) fn prefetch_values(at: *const f32, len: usize) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        let mut line = 0;
        while line < len {
            // SAFETY: SSE is in every x86_64 CPU; a prefetch reads
            // nothing and never faults, whatever the address.
            unsafe { _mm_prefetch::<_MM_HINT_T0>(at.wrapping_add(line).cast()) };
            line += 16;
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (at, len);
}
