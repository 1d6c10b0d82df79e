//! Shape checks and the serial gate.

/// Element-ops below which a matvec runs serially: the fork-join would cost
/// more than it saves (about 256k multiply-adds, measured in the seeds).
pub const PARALLEL_THRESHOLD: usize = 256 * 1024;

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
