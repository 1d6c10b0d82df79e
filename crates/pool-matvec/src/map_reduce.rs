//! A reduction with the same bits on every pool, width, policy and call.
//!
//! `Pool::reduce` folds one value per participant, so its bits depend on
//! how many participants a job got (under the adaptive policy, that
//! depends on the machine's load: two calls on one pool summing the same
//! floats gave two bit patterns, 382 and 118 times in 500). Here the range
//! is cut into chunks that depend on its length alone; whoever pulls a
//! chunk maps it, and the caller folds the chunks' values in chunk order.

use std::ops::Range;

use crate::executor::Executor;

/// Chunks a range is cut into, at most: enough grains for 32+ threads to
/// share a long range, few enough that the fold costs nothing.
pub const MAP_REDUCE_CHUNKS: usize = 256;

/// The chunks of `0..len`: `MAP_REDUCE_CHUNKS` of them (or `len` when
/// shorter), chunk `i` being `len * i / c .. len * (i + 1) / c`. They
/// depend on `len` only.
fn chunk(len: usize, chunks: usize, i: usize) -> Range<usize> {
    let at = |i: usize| (len as u128 * i as u128 / chunks as u128) as usize;
    at(i)..at(i + 1)
}

/// `fold(...fold(fold(map(c0), map(c1)), map(c2))..., map(cn))` over the
/// chunks `c0, c1, ..` of `0..len` (cut by `len` alone, at most
/// [`MAP_REDUCE_CHUNKS`]): each chunk mapped by whichever participant of
/// `exec` pulls it, the values folded in chunk order on the calling
/// thread. The result is the same, bit for bit, on every executor, width,
/// spin policy and call. `None` for `len == 0`. Serial below the serial
/// gate (same chunks, same bits).
///
/// ```
/// let values: Vec<f32> = (0..100_000).map(|i| (i as f32).sin()).collect();
/// let sum = |exec: Option<&pool_core::Pool>| {
///     pool_matvec::map_reduce(exec, values.len(), |r| values[r].iter().sum::<f32>(), |a, b| a + b)
/// };
/// let pool = pool_core::Pool::new(3);
/// assert_eq!(sum(Some(&pool)).unwrap().to_bits(), sum(None).unwrap().to_bits());
/// ```
///
/// # Panics
///
/// If `map` or `fold` panics (the panic reaches the caller after every
/// participant finished).
pub fn map_reduce<R: Send>(
    pool: impl Executor,
    len: usize,
    map: impl Fn(Range<usize>) -> R + Sync,
    mut fold: impl FnMut(R, R) -> R,
) -> Option<R> {
    if len == 0 {
        return None;
    }
    let chunks = len.min(MAP_REDUCE_CHUNKS);
    let mut values: Vec<Option<R>> = (0..chunks).map(|_| None).collect();
    if len < crate::PARALLEL_THRESHOLD {
        // Below the gate: the same chunks, on this thread.
        for (i, value) in values.iter_mut().enumerate() {
            *value = Some(map(chunk(len, chunks, i)));
        }
    } else {
        // One job over the chunk slots: the gate was passed on `len`, not
        // on the slot count.
        let exec = pool.rows();
        crate::RowsInto::run_rows_into(exec, &mut values, |first, slots| {
            for (k, value) in slots.iter_mut().enumerate() {
                *value = Some(map(chunk(len, chunks, first + k)));
            }
        });
    }
    let mut values = values
        .into_iter()
        .map(|v| v.expect("every chunk is mapped exactly once"));
    let first = values.next()?;
    Some(values.fold(first, &mut fold))
}
