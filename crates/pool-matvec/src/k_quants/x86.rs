//! x86_64 k-quant kernels (AVX2; the AVX-512 tier runs them too).
//!
//! Per super-block, the integer part on 256-bit registers: the 4- or
//! 6-bit weights, unsigned, times the activation's signed bytes with
//! `maddubs` (pair sums within i16: at most 63 * 128 * 2), each 16- or
//! 32-value group weighted by its scale with `madd`, summed in `i32`. The
//! sums are exact, so the float part (`mod.rs`) sees the scalar
//! reference's integers.

use std::arch::x86_64::*;

use super::{
    q4_k_smin, q4_k_term, q6_k_bias, q6_k_term, unpack_scales, BlockQ4K, BlockQ6K, BlockQ8K,
};
use crate::blocks;

/// Safe entry: `kernels` hands it out only for the AVX2 and AVX-512 tiers,
/// which it picks only when the CPU has them (both include AVX2).
pub(super) fn dot_q4_k(w: &[BlockQ4K], x: &[BlockQ8K]) -> f32 {
    // SAFETY: AVX2 is available (the entry's contract above).
    unsafe { dot_q4_k_avx2(w, x) }
}

/// Safe entry, as [`dot_q4_k`].
pub(super) fn dot_q6_k(w: &[BlockQ6K], x: &[BlockQ8K]) -> f32 {
    // SAFETY: AVX2 is available (the entry's contract).
    unsafe { dot_q6_k_avx2(w, x) }
}

/// # Safety
///
/// The CPU has AVX2.
#[target_feature(enable = "avx2")]
unsafe fn dot_q4_k_avx2(w: &[BlockQ4K], x: &[BlockQ8K]) -> f32 {
    let n = w.len().min(x.len());
    blocks::accumulate(n, |b| {
        let (w, x) = (&w[b], &x[b]);
        let (sc, m) = unpack_scales(&w.scales);
        q4_k_term(w, x, q4_k_sdot(w, x, &sc), q4_k_smin(&m, x))
    })
}

/// # Safety
///
/// The CPU has AVX2.
#[target_feature(enable = "avx2")]
unsafe fn dot_q6_k_avx2(w: &[BlockQ6K], x: &[BlockQ8K]) -> f32 {
    let n = w.len().min(x.len());
    blocks::accumulate(n, |b| {
        let (w, x) = (&w[b], &x[b]);
        q6_k_term(w, x, q6_k_unsigned_sdot(w, x) - q6_k_bias(w, x))
    })
}

/// 32 bytes from `bytes[at..at + 32]`.
#[target_feature(enable = "avx2")]
#[inline]
fn load32<T>(bytes: &[T], at: usize) -> __m256i {
    assert!(at + 32 <= std::mem::size_of_val(bytes));
    // SAFETY: the 32 bytes at `at` are inside `bytes` (checked above; the
    // callers' constant offsets make the check vanish).
    unsafe { _mm256_loadu_si256(bytes.as_ptr().cast::<u8>().add(at).cast()) }
}

/// The eight `i32` lanes summed (exact: integer addition).
#[target_feature(enable = "avx2")]
#[inline]
fn hsum(v: __m256i) -> i32 {
    let s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256::<1>(v));
    let s = _mm_add_epi32(s, _mm_shuffle_epi32::<0b01_00_11_10>(s));
    let s = _mm_add_epi32(s, _mm_shuffle_epi32::<0b10_11_00_01>(s));
    _mm_cvtsi128_si32(s)
}

/// `sum_j sc_j * sum_{sub-block j} q4 * q8` of one super-block.
#[target_feature(enable = "avx2")]
#[inline]
fn q4_k_sdot(w: &BlockQ4K, x: &BlockQ8K, sc: &[u8; 8]) -> i32 {
    let nibble = _mm256_set1_epi8(0x0F);
    let mut acc = _mm256_setzero_si256();
    for c in 0..4 {
        let bits = load32(&w.qs, 32 * c);
        let low = _mm256_and_si256(bits, nibble);
        let high = _mm256_and_si256(_mm256_srli_epi16::<4>(bits), nibble);
        let pairs_low = _mm256_maddubs_epi16(low, load32(&x.qs, 64 * c));
        let pairs_high = _mm256_maddubs_epi16(high, load32(&x.qs, 64 * c + 32));
        let scaled_low = _mm256_madd_epi16(pairs_low, _mm256_set1_epi16(i16::from(sc[2 * c])));
        let scaled_high =
            _mm256_madd_epi16(pairs_high, _mm256_set1_epi16(i16::from(sc[2 * c + 1])));
        acc = _mm256_add_epi32(acc, _mm256_add_epi32(scaled_low, scaled_high));
    }
    hsum(acc)
}

/// `sum_g sc_g * sum_{group g} q6 * q8` with `q6` unsigned (`0..=63`).
#[target_feature(enable = "avx2")]
#[inline]
fn q6_k_unsigned_sdot(w: &BlockQ6K, x: &BlockQ8K) -> i32 {
    let four = _mm256_set1_epi8(0x0F);
    let two = _mm256_set1_epi8(3);
    // Group `g` in the low 128-bit half, `g + 1` in the high one.
    let scales = |g: usize| {
        _mm256_inserti128_si256::<1>(
            _mm256_castsi128_si256(_mm_set1_epi16(i16::from(w.scales[g]))),
            _mm_set1_epi16(i16::from(w.scales[g + 1])),
        )
    };
    let mut acc = _mm256_setzero_si256();
    for n in 0..2 {
        let (ql0, ql1, qh) = (
            load32(&w.ql, 64 * n),
            load32(&w.ql, 64 * n + 32),
            load32(&w.qh, 32 * n),
        );
        // The high bits sit 2 to a pair of weights: mask after shifting,
        // so no bit crosses into a neighbouring byte.
        let high = |shift: __m128i| {
            _mm256_slli_epi16::<4>(_mm256_and_si256(_mm256_srl_epi16(qh, shift), two))
        };
        let quarters = [
            _mm256_or_si256(_mm256_and_si256(ql0, four), high(_mm_cvtsi32_si128(0))),
            _mm256_or_si256(_mm256_and_si256(ql1, four), high(_mm_cvtsi32_si128(2))),
            _mm256_or_si256(
                _mm256_and_si256(_mm256_srli_epi16::<4>(ql0), four),
                high(_mm_cvtsi32_si128(4)),
            ),
            _mm256_or_si256(
                _mm256_and_si256(_mm256_srli_epi16::<4>(ql1), four),
                high(_mm_cvtsi32_si128(6)),
            ),
        ];
        for (k, q) in quarters.into_iter().enumerate() {
            let pairs = _mm256_maddubs_epi16(q, load32(&x.qs, 128 * n + 32 * k));
            acc = _mm256_add_epi32(acc, _mm256_madd_epi16(pairs, scales(8 * n + 2 * k)));
        }
    }
    hsum(acc)
}
