//! The activation quantizers (Q8_0 for Q8_0/Q4_0 weights, Q8_K for the
//! k-quants) on AVX-512: the scalar loops' bits, sixteen values per
//! instruction. They run once per input vector on the caller while the
//! workers wait; the loops as written took 2.6 µs for 768 values on a
//! baseline x86-64 build (5 % of a stories110M decode token), 1.7 µs
//! compiled for AVX-512, since the saturating `as i8` casts stay scalar.
//!
//! Each step is the scalar one exactly: `max` ignoring NaN (the NaN lane
//! is the first operand of `vmaxps`, which then returns the second), the
//! same `/` and `*`, rounding half away from zero by truncation plus the
//! fraction test, and the cast's saturation and `NaN -> 0` made explicit.

use std::arch::x86_64::*;

use half::f16;

use crate::k_quants::{BlockQ8K, QK_K};
use crate::q8_0::{BlockQ8_0, QK8_0};

/// `|v|`: the sign bit cleared, as `f32::abs`.
#[target_feature(enable = "avx512f")]
#[inline]
fn abs(v: __m512) -> __m512 {
    _mm512_castsi512_ps(_mm512_and_si512(
        _mm512_castps_si512(v),
        _mm512_set1_epi32(0x7fff_ffff),
    ))
}

/// `acc.max(|v|)` per lane, as `f32::max`: a NaN `|v|` leaves `acc`.
#[target_feature(enable = "avx512f")]
#[inline]
fn max_abs(acc: __m512, v: __m512) -> __m512 {
    _mm512_max_ps(abs(v), acc)
}

/// `round_half_away(p).clamp(lo, hi) as i8` per lane, as i32 lanes (the
/// clamp is the `as i8` cast's own saturation when `lo` is -128).
#[target_feature(enable = "avx512f")]
#[inline]
fn round_to_i32(p: __m512, lo: f32, hi: f32) -> __m512i {
    let a = abs(p);
    let t = _mm512_roundscale_ps::<{ _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC }>(a);
    let half_up = _mm512_cmp_ps_mask::<_CMP_GE_OQ>(_mm512_sub_ps(a, t), _mm512_set1_ps(0.5));
    let rounded = _mm512_mask_add_ps(t, half_up, t, _mm512_set1_ps(1.0));
    // `copysign`: `rounded` is never negative, so or in `p`'s sign bit.
    let sign = _mm512_and_si512(_mm512_castps_si512(p), _mm512_set1_epi32(i32::MIN));
    let rounded = _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(rounded), sign));
    // From 2^23 on every f32 is an integer: `p` itself (NaN too).
    let small = _mm512_cmp_ps_mask::<_CMP_LT_OQ>(a, _mm512_set1_ps(8_388_608.0));
    let v = _mm512_mask_blend_ps(small, p, rounded);
    let nan = _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(v, v);
    let clamped = _mm512_min_ps(_mm512_max_ps(v, _mm512_set1_ps(lo)), _mm512_set1_ps(hi));
    // A NaN is 0 after `as i8`.
    _mm512_maskz_mov_epi32(!nan, _mm512_cvttps_epi32(clamped))
}

/// `1 / (max|v| / 127)` and the scale, as the scalar quantizers compute
/// them from the lanes' maxima.
#[target_feature(enable = "avx512f")]
#[inline]
fn scale_of(maxima: __m512) -> (f32, f32) {
    let d = _mm512_reduce_max_ps(maxima) / 127.0;
    (d, if d != 0.0 { 1.0 / d } else { 0.0 })
}

/// [`crate::quantize_q8_0`]'s blocks, into `blocks` (resized; every
/// field of every block written).
///
/// # Safety
///
/// AVX-512 F and BW.
#[target_feature(enable = "avx512f,avx512bw")]
pub(crate) unsafe fn quantize_q8_0_into(x: &[f32], blocks: &mut Vec<BlockQ8_0>) {
    blocks.resize(x.len() / QK8_0, BlockQ8_0::ZERO);
    for (block, values) in blocks.iter_mut().zip(x.chunks_exact(QK8_0)) {
        // SAFETY: `values` is 32 f32: two unaligned 16-lane loads.
        let (v0, v1) = unsafe {
            (
                _mm512_loadu_ps(values.as_ptr()),
                _mm512_loadu_ps(values.as_ptr().add(16)),
            )
        };
        let (d, id) = scale_of(max_abs(max_abs(_mm512_setzero_ps(), v0), v1));
        let id = _mm512_set1_ps(id);
        for (half, v) in [v0, v1].into_iter().enumerate() {
            let q = _mm512_cvtepi32_epi8(round_to_i32(_mm512_mul_ps(v, id), -128.0, 127.0));
            // SAFETY: 16 bytes into the 32 of `qs`, at 0 or 16.
            unsafe { _mm_storeu_si128(block.qs.as_mut_ptr().add(16 * half).cast(), q) };
        }
        block.d = f16::from_f32(d);
    }
}

/// [`crate::quantize_q8_k`]'s blocks, into `blocks` (resized; every
/// field of every block written).
///
/// # Safety
///
/// AVX-512 F and BW.
#[target_feature(enable = "avx512f,avx512bw")]
pub(crate) unsafe fn quantize_q8_k_into(x: &[f32], blocks: &mut Vec<BlockQ8K>) {
    blocks.resize(x.len() / QK_K, BlockQ8K::ZERO);
    for (block, values) in blocks.iter_mut().zip(x.chunks_exact(QK_K)) {
        let mut maxima = _mm512_setzero_ps();
        for sixteen in values.chunks_exact(16) {
            // SAFETY: 16 f32: one unaligned load.
            maxima = max_abs(maxima, unsafe { _mm512_loadu_ps(sixteen.as_ptr()) });
        }
        let (d, id) = scale_of(maxima);
        let id = _mm512_set1_ps(id);
        for (g, sixteen) in values.chunks_exact(16).enumerate() {
            // SAFETY: as above.
            let v = unsafe { _mm512_loadu_ps(sixteen.as_ptr()) };
            let q = round_to_i32(_mm512_mul_ps(v, id), -127.0, 127.0);
            // Sixteen values in -127..=127: the exact sum fits an i16.
            block.bsums[g] = _mm512_reduce_add_epi32(q) as i16;
            // SAFETY: 16 bytes into the 256 of `qs`, at 16 g.
            unsafe {
                _mm_storeu_si128(
                    block.qs.as_mut_ptr().add(16 * g).cast(),
                    _mm512_cvtepi32_epi8(q),
                );
            }
        }
        block.d = d;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::random::XorShift;
    use crate::SimdTier;

    /// Random values at many scales, and the values where rounding and
    /// casting have edges: ties, zeros of both signs, subnormals, the
    /// largest finite values, infinities, NaN.
    fn inputs() -> Vec<Vec<f32>> {
        let mut rng = XorShift(77);
        let mut all = Vec::new();
        for scale in [1e-40f32, 1e-30, 1e-3, 1.0, 1e3, 1e30, 3e38] {
            let len = if cfg!(miri) { 256 } else { 1024 };
            all.push((0..len).map(|_| rng.uniform() * scale).collect());
        }
        let edges = [
            0.0,
            -0.0,
            0.5,
            -0.5,
            1.5,
            -1.5,
            126.5,
            -126.5,
            127.0,
            -127.0,
            1e-45,
            -1e-45,
            f32::MIN_POSITIVE,
            f32::MAX,
            f32::MIN,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
            -f32::NAN,
            0.49999997,
            8_388_607.5,
            16_777_216.0,
        ];
        for (i, &e) in edges.iter().enumerate() {
            // Each edge beside ordinary values, and blocks of one edge.
            let mut v: Vec<f32> = (0..256).map(|_| rng.uniform()).collect();
            v[i * 7 % 256] = e;
            all.push(v);
            all.push(vec![e; 256]);
        }
        // Every value a tie after `* id` where the scale allows: halves
        // up to the block maximum 127.
        all.push((0..256).map(|k| (k % 255) as f32 * 0.5 - 63.5).collect());
        all
    }

    #[test]
    fn the_avx512_quantizers_give_the_scalar_loops_bits_in_fresh_or_reused_storage() {
        if !SimdTier::Avx512.is_available() {
            eprintln!("skipped: this CPU has no AVX-512");
            return;
        }
        // Reused across inputs of 1024 and 256 values: what the last
        // input left must never show through.
        let (mut reused_q8_0, mut reused_q8_k) = (Vec::new(), Vec::new());
        for x in inputs() {
            let (mut q8_0, mut q8_k) = (Vec::new(), Vec::new());
            // SAFETY: AVX-512 F/BW, checked above.
            unsafe {
                quantize_q8_0_into(&x, &mut q8_0);
                quantize_q8_k_into(&x, &mut q8_k);
                quantize_q8_0_into(&x, &mut reused_q8_0);
                quantize_q8_k_into(&x, &mut reused_q8_k);
            }
            let reference = crate::q8_0::quantize_q8_0_loops(&x);
            for blocks in [&q8_0, &reused_q8_0] {
                assert_eq!(blocks.len(), reference.len());
                for (a, b) in blocks.iter().zip(&reference) {
                    assert_eq!(
                        (a.d.to_bits(), a.qs),
                        (b.d.to_bits(), b.qs),
                        "Q8_0 of {:?}",
                        &x[..4]
                    );
                }
            }
            let reference = crate::k_quants::quantize_q8_k_loops(&x);
            for blocks in [&q8_k, &reused_q8_k] {
                assert_eq!(blocks.len(), reference.len());
                for (a, b) in blocks.iter().zip(&reference) {
                    assert_eq!(
                        (a.d.to_bits(), a.qs, a.bsums),
                        (b.d.to_bits(), b.qs, b.bsums),
                        "Q8_K of {:?}",
                        &x[..4]
                    );
                }
            }
        }
    }
}
