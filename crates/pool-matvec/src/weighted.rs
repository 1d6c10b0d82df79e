//! Weighted sums of rows: attention's `out += sum_t a_t * v_t`.
//!
//! Each output element adds its products in `t` order, the multiply and
//! the add rounded separately, exactly as the scalar `o += a * v` does:
//! elements are independent, so the vector width changes nothing and
//! every tier gives the scalar loop's bits.

use crate::shape::{check_strided_rows, prefetch_values, ROWS_AHEAD};
use crate::tier::{simd_tier, SimdTier};

/// Output elements a pass keeps in registers: four AVX-512 vectors, one
/// llama head (64 dims) at once.
const CHUNK: usize = 64;

/// `out[i] += sum over t of weights[t] * values[t * stride + i]`, rows
/// `t` of `values` starting `stride` apart; the bits of the scalar loop on
/// every SIMD tier.
///
/// # Panics
///
/// If `stride < out.len()`, or `values` is too short for its last row.
///
/// ```
/// let mut out = [1.0f32, 1.0];
/// // Rows [1, 2] and [3, 4], 3 apart.
/// pool_matvec::add_weighted_rows(&mut out, &[0.5, 2.0], &[1.0, 2.0, 9.0, 3.0, 4.0], 3);
/// assert_eq!(out, [1.0 + 0.5 + 6.0, 1.0 + 1.0 + 8.0]);
/// ```
pub fn add_weighted_rows(out: &mut [f32], weights: &[f32], values: &[f32], stride: usize) {
    check(out, weights, values, stride);
    kernel_for(simd_tier())(out, weights, values, stride);
}

/// [`add_weighted_rows`] by `tier`'s code path; `None` if this CPU cannot
/// run it (for tests: every tier gives the same bits).
pub fn add_weighted_rows_on(
    tier: SimdTier,
    out: &mut [f32],
    weights: &[f32],
    values: &[f32],
    stride: usize,
) -> Option<()> {
    if !tier.is_available() {
        return None;
    }
    check(out, weights, values, stride);
    kernel_for(tier)(out, weights, values, stride);
    Some(())
}

#[track_caller]
fn check(out: &[f32], weights: &[f32], values: &[f32], stride: usize) {
    check_strided_rows(
        "add_weighted_rows",
        out.len(),
        values.len(),
        stride,
        weights.len(),
    );
}

type WeightedFn = fn(&mut [f32], &[f32], &[f32], usize);

/// The kernel of an available `tier`.
fn kernel_for(tier: SimdTier) -> WeightedFn {
    match tier {
        #[cfg(target_arch = "x86_64")]
        SimdTier::Avx512 => x86::avx512,
        #[cfg(target_arch = "x86_64")]
        SimdTier::Avx2 => x86::avx2,
        _ => add_weighted_rows_generic,
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::add_weighted_rows_generic;

    /// Safe entry: only selected for an available AVX-512 tier.
    pub(super) fn avx512(out: &mut [f32], weights: &[f32], values: &[f32], stride: usize) {
        // SAFETY: `kernel_for` hands this out only for `SimdTier::Avx512`,
        // which `simd_tier` and `add_weighted_rows_on` select only where
        // the CPU has AVX-512F.
        unsafe { with_avx512(out, weights, values, stride) }
    }

    /// Safe entry: only selected for an available AVX2 tier.
    pub(super) fn avx2(out: &mut [f32], weights: &[f32], values: &[f32], stride: usize) {
        // SAFETY: as above, for `SimdTier::Avx2` and AVX2.
        unsafe { with_avx2(out, weights, values, stride) }
    }

    /// # Safety
    ///
    /// AVX-512F.
    #[target_feature(enable = "avx512f")]
    unsafe fn with_avx512(out: &mut [f32], weights: &[f32], values: &[f32], stride: usize) {
        add_weighted_rows_generic(out, weights, values, stride);
    }

    /// # Safety
    ///
    /// AVX2.
    #[target_feature(enable = "avx2")]
    unsafe fn with_avx2(out: &mut [f32], weights: &[f32], values: &[f32], stride: usize) {
        add_weighted_rows_generic(out, weights, values, stride);
    }
}

/// The loop each tier compiles with its own vector width: whole chunks
/// accumulate in a fixed-size array the compiler keeps in registers.
#[inline(always)]
fn add_weighted_rows_generic(out: &mut [f32], weights: &[f32], values: &[f32], stride: usize) {
    let whole = out.len() / CHUNK * CHUNK;
    for start in (0..whole).step_by(CHUNK) {
        let mut acc: [f32; CHUNK] = out[start..start + CHUNK].try_into().expect("a chunk");
        for (t, &a) in weights.iter().enumerate() {
            let ahead = values
                .as_ptr()
                .wrapping_add((t + ROWS_AHEAD) * stride + start);
            prefetch_values(ahead, CHUNK);
            let row: &[f32; CHUNK] = values[t * stride + start..][..CHUNK]
                .try_into()
                .expect("a chunk");
            for (o, v) in acc.iter_mut().zip(row) {
                *o += a * v;
            }
        }
        out[start..start + CHUNK].copy_from_slice(&acc);
    }
    let tail = &mut out[whole..];
    for (t, &a) in weights.iter().enumerate() {
        let row = &values[t * stride + whole..][..tail.len()];
        for (o, v) in tail.iter_mut().zip(row) {
            *o += a * v;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::random::XorShift;

    /// The loop attention ran before this kernel.
    fn scalar(out: &mut [f32], weights: &[f32], values: &[f32], stride: usize) {
        for (t, &a) in weights.iter().enumerate() {
            for (o, v) in out.iter_mut().zip(&values[t * stride..]) {
                *o += a * v;
            }
        }
    }

    #[test]
    fn every_tier_gives_the_scalar_loops_bits() {
        let mut rng = XorShift(0x9e37_79b9_7f4a_7c15);
        // A head of 64, of 128 with gaps between rows, and odd lengths
        // that leave a tail after the whole chunks.
        for (len, stride, rows) in [
            (64, 64, 1),
            (64, 768, 37),
            (128, 130, 5),
            (100, 100, 9),
            (3, 7, 4),
            (0, 1, 3),
        ] {
            let weights: Vec<f32> = (0..rows).map(|_| rng.uniform()).collect();
            let values: Vec<f32> = (0..(rows - 1) * stride + len)
                .map(|_| rng.uniform() * 8.0 - 4.0)
                .collect();
            let start: Vec<f32> = (0..len).map(|_| rng.uniform()).collect();
            let mut expected = start.clone();
            scalar(&mut expected, &weights, &values, stride);
            for tier in SimdTier::available() {
                let mut out = start.clone();
                add_weighted_rows_on(tier, &mut out, &weights, &values, stride).expect("available");
                let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                assert_eq!(
                    bits(&out),
                    bits(&expected),
                    "{} at {len}/{stride}/{rows}",
                    tier.name()
                );
            }
        }
    }

    #[test]
    #[should_panic(expected = "need more than")]
    fn values_too_short_for_the_last_row_are_refused() {
        add_weighted_rows(&mut [0.0; 4], &[1.0, 1.0], &[0.0; 7], 4);
    }

    #[test]
    #[should_panic(expected = "overlap")]
    fn rows_closer_than_the_output_are_refused() {
        add_weighted_rows(&mut [0.0; 4], &[1.0], &[0.0; 8], 2);
    }
}
