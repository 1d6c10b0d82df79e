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
    // Two passes a compiler vectorises instead of one that keeps the first
    // strictly greater value (a branch per logit: 17 us for 32,000, 4 % of
    // a stories15M token): the largest value (NaN never compares greater),
    // then the first logit equal to it. The same index: ties under `>` are
    // exactly the values `==` the largest (-0.0 and 0.0 included), and the
    // first of them is the one the single pass keeps.
    const LANES: usize = 16;
    let mut lanes = [f32::NEG_INFINITY; LANES];
    let chunks = logits.chunks_exact(LANES);
    let tail = chunks.remainder();
    for chunk in chunks {
        for (top, &v) in lanes.iter_mut().zip(chunk) {
            if v > *top {
                *top = v;
            }
        }
    }
    let mut max = f32::NEG_INFINITY;
    for &v in lanes.iter().chain(tail) {
        if v > max {
            max = v;
        }
    }
    let mut start = 0;
    for chunk in logits.chunks(LANES) {
        if chunk.iter().fold(false, |seen, &v| seen | (v == max)) {
            let at = chunk.iter().position(|&v| v == max).unwrap_or(0);
            return (start + at) as u32;
        }
        start += chunk.len();
    }
    // No number at all: every logit NaN, or none.
    0
}

/// [`argmax`] as a row job: each range's best folded into one atomic key
/// ordered by value, then by lower index, so the answer is the serial
/// one whatever the ranges.
pub fn argmax_on(exec: &dyn RowParallel, logits: &[f32]) -> u32 {
    if logits.is_empty() {
        return 0;
    }
    let best = BestLogit::new(logits.len());
    exec.run_rows(logits.len(), &|start, end| {
        best.fold(start, &logits[start..end]);
    });
    best.index()
}

/// The greedy argmax of logits computed in ranges, each range folded in
/// as it is done (by whoever computed it, while its logits are in that
/// core's cache): the first index of the largest logit whatever the
/// ranges and their order, [`argmax`]'s answer.
pub(crate) struct BestLogit {
    /// Larger for a larger value, then for a lower index; 0: no number
    /// seen (NaN keys are 0 too).
    key: std::sync::atomic::AtomicU64,
}

impl BestLogit {
    /// For `len` logits (at most `u32::MAX`: indices are packed in 32 bits).
    pub(crate) fn new(len: usize) -> BestLogit {
        assert!(len <= u32::MAX as usize, "{len} logits");
        BestLogit {
            key: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// Folds in `logits`, the range starting at index `start`.
    pub(crate) fn fold(&self, start: usize, logits: &[f32]) {
        if logits.is_empty() {
            return;
        }
        let local = argmax(logits) as usize;
        // Relaxed: a max over values; the job's barrier publishes it to
        // the caller that reads `index`.
        self.key.fetch_max(
            key(logits[local], start + local),
            std::sync::atomic::Ordering::Relaxed,
        );
    }

    /// The index of the best logit folded in (0 if none was a number).
    pub(crate) fn index(&self) -> u32 {
        let best = self.key.load(std::sync::atomic::Ordering::Relaxed);
        if best >> 32 == 0 {
            return 0; // every logit NaN: as `argmax`
        }
        u32::MAX - (best as u32)
    }
}

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

#[cfg(test)]
mod tests {
    use super::{argmax, BestLogit};

    /// The one-pass definition: the first logit strictly greater than every
    /// number before it.
    fn first_greatest(logits: &[f32]) -> u32 {
        let mut best: Option<(usize, f32)> = None;
        for (i, &v) in logits.iter().enumerate() {
            if !v.is_nan() && best.is_none_or(|(_, top)| v > top) {
                best = Some((i, v));
            }
        }
        best.map_or(0, |(i, _)| i as u32)
    }

    #[test]
    fn the_two_pass_argmax_picks_the_first_greatest_logit() {
        let specials = [
            f32::NAN,
            f32::NEG_INFINITY,
            f32::INFINITY,
            -0.0,
            0.0,
            1.0,
            -1.0,
            f32::MAX,
            f32::MIN,
        ];
        let mut state = 0x9e37_79b9_7f4a_7c15_u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for len in (0..70).chain([255, 256, 257, 32_000]) {
            for _ in 0..200 {
                let logits: Vec<f32> = (0..len)
                    .map(|_| {
                        let r = next();
                        if r % 4 == 0 {
                            specials[(r >> 8) as usize % specials.len()]
                        } else {
                            // Few distinct values: ties are common.
                            ((r >> 16) % 7) as f32 - 3.0
                        }
                    })
                    .collect();
                assert_eq!(argmax(&logits), first_greatest(&logits), "{logits:?}");
            }
        }
    }

    #[test]
    fn ranges_folded_in_any_order_give_the_argmax_of_the_whole() {
        let logits = [
            f32::NAN,
            1.0,
            3.0,
            -0.0,
            3.0,
            f32::NAN,
            0.0,
            2.0,
            3.0,
            -1.0,
            3.0,
            1.0,
        ];
        // Cuts at every pair of points, ranges folded back to front.
        for a in 0..=logits.len() {
            for b in a..=logits.len() {
                let best = BestLogit::new(logits.len());
                for (start, end) in [(b, logits.len()), (a, b), (0, a)] {
                    best.fold(start, &logits[start..end]);
                }
                assert_eq!(best.index(), argmax(&logits), "cut at {a} and {b}");
            }
        }
        let nans = BestLogit::new(3);
        nans.fold(1, &[f32::NAN, f32::NAN]);
        nans.fold(0, &[f32::NAN]);
        assert_eq!(nans.index(), 0, "no number at all: 0, as argmax");
    }
}
