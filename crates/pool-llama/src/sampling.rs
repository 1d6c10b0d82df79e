//! Picking the next token: the greedy argmax, serial and as a row job with
//! the same answer.

use pool_matvec::RowParallel;

/// The first index of the largest logit. NaN never wins, wherever it
/// stands; with no number at all (empty, or every logit NaN) the answer
/// is 0.
///
/// ```
/// use pool_llama::argmax;
/// assert_eq!(argmax(&[f32::NAN, 1.0, 3.0, 3.0]), 2);
/// assert_eq!(argmax(&[f32::NAN, f32::NAN]), 0);
/// ```
pub fn argmax(logits: &[f32]) -> u32 {
    let mut best: Option<(usize, f32)> = None;
    for (i, &v) in logits.iter().enumerate() {
        if !v.is_nan() && best.is_none_or(|(_, top)| v > top) {
            best = Some((i, v));
        }
    }
    best.map_or(0, |(i, _)| i as u32)
}

/// [`argmax`] as a row job: each range's best folded into one atomic key
/// ordered by value, then by lower index, so the answer is the serial
/// one whatever the ranges.
pub fn argmax_on(exec: &dyn RowParallel, logits: &[f32]) -> u32 {
    use std::sync::atomic::{AtomicU64, Ordering};
    /// Larger for a larger value, then for a lower index; NaN lowest.
    fn key(value: f32, index: usize) -> u64 {
        let ordered = if value.is_nan() {
            0
        } else {
            // -0.0 and 0.0 compare equal: one key for both.
            let bits = (value + 0.0).to_bits();
            if bits >> 31 == 1 {
                !bits
            } else {
                bits | 1 << 31
            }
        };
        (u64::from(ordered) << 32) | u64::from(u32::MAX - index as u32)
    }
    if logits.is_empty() {
        return 0;
    }
    assert!(logits.len() <= u32::MAX as usize, "{} logits", logits.len());
    // Relaxed: a max over values; the job's barrier publishes the result.
    let best = AtomicU64::new(0);
    exec.run_rows(logits.len(), &|start, end| {
        let local = start + argmax(&logits[start..end]) as usize;
        best.fetch_max(key(logits[local], local), Ordering::Relaxed);
    });
    let best = best.into_inner();
    if best >> 32 == 0 {
        return 0; // every logit NaN: as `argmax`
    }
    u32::MAX - (best as u32)
}
