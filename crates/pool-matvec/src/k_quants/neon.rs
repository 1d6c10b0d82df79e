//! aarch64 k-quant kernels: `sdot` where the CPU has the dot-product
//! extension, widening multiplies (`smull` + `sadalp`) otherwise.
//!
//! The weights' 4- or 6-bit values (`0..=63`) are taken as signed bytes,
//! which they fit; each 16-byte vector is one Q6_K group or half a Q4_K
//! sub-block, its exact integer dot weighted by its scale in `i32`. The
//! float part is `mod.rs`'s, so the bits are the scalar reference's.

use std::arch::aarch64::*;

use super::{
    q4_k_smin, q4_k_term, q6_k_bias, q6_k_term, unpack_scales, BlockQ4K, BlockQ6K, BlockQ8K,
};
use crate::blocks;
use crate::q8_0::neon::sdot;

/// Safe entry: selected for the NEON tier when the CPU has `dotprod`.
pub(super) fn dot_q4_k_sdot(w: &[BlockQ4K], x: &[BlockQ8K]) -> f32 {
    // SAFETY: `kernels` returns this only for an available NEON tier with
    // `has_neon_dotprod()`.
    unsafe { q4_k_with(w, x, dot16_sdot) }
}

/// Safe entry: selected for the NEON tier without `dotprod`.
pub(super) fn dot_q4_k_mull(w: &[BlockQ4K], x: &[BlockQ8K]) -> f32 {
    // SAFETY: `kernels` returns this only for an available NEON tier.
    unsafe { q4_k_with(w, x, dot16_mull) }
}

/// Safe entry, as [`dot_q4_k_sdot`].
pub(super) fn dot_q6_k_sdot(w: &[BlockQ6K], x: &[BlockQ8K]) -> f32 {
    // SAFETY: as in `dot_q4_k_sdot`.
    unsafe { q6_k_with(w, x, dot16_sdot) }
}

/// Safe entry, as [`dot_q4_k_mull`].
pub(super) fn dot_q6_k_mull(w: &[BlockQ6K], x: &[BlockQ8K]) -> f32 {
    // SAFETY: as in `dot_q4_k_mull`.
    unsafe { q6_k_with(w, x, dot16_mull) }
}

/// The exact dot of 16 signed bytes, `dot16(a, b)`.
type Dot16 = unsafe fn(int8x16_t, int8x16_t) -> i32;

/// # Safety
///
/// NEON and the dot-product extension.
#[target_feature(enable = "neon,dotprod")]
unsafe fn dot16_sdot(a: int8x16_t, b: int8x16_t) -> i32 {
    vaddvq_s32(sdot(vdupq_n_s32(0), a, b))
}

/// # Safety
///
/// NEON.
#[target_feature(enable = "neon")]
unsafe fn dot16_mull(a: int8x16_t, b: int8x16_t) -> i32 {
    let low = vmull_s8(vget_low_s8(a), vget_low_s8(b));
    let high = vmull_s8(vget_high_s8(a), vget_high_s8(b));
    vaddvq_s32(vpadalq_s16(vpaddlq_s16(low), high))
}

/// 16 bytes of `bytes` from `at`.
#[target_feature(enable = "neon")]
#[inline]
fn load16<T>(bytes: &[T], at: usize) -> uint8x16_t {
    assert!(at + 16 <= std::mem::size_of_val(bytes));
    // SAFETY: the 16 bytes at `at` are inside `bytes` (checked above).
    unsafe { vld1q_u8(bytes.as_ptr().cast::<u8>().add(at)) }
}

/// # Safety
///
/// NEON, and whatever `dot16` needs.
#[target_feature(enable = "neon")]
unsafe fn q4_k_with(w: &[BlockQ4K], x: &[BlockQ8K], dot16: Dot16) -> f32 {
    let n = w.len().min(x.len());
    blocks::accumulate(n, |b| {
        let (w, x) = (&w[b], &x[b]);
        let (sc, m) = unpack_scales(&w.scales);
        let nibble = vdupq_n_u8(0x0F);
        let mut sdot = 0i32;
        for c in 0..4 {
            let mut low = 0;
            let mut high = 0;
            for h in 0..2 {
                let bits = load16(&w.qs, 32 * c + 16 * h);
                let (lo, hi) = (vandq_u8(bits, nibble), vshrq_n_u8::<4>(bits));
                let (xl, xh) = (
                    vreinterpretq_s8_u8(load16(&x.qs, 64 * c + 16 * h)),
                    vreinterpretq_s8_u8(load16(&x.qs, 64 * c + 32 + 16 * h)),
                );
                // SAFETY: the caller's contract covers `dot16`.
                unsafe {
                    low += dot16(vreinterpretq_s8_u8(lo), xl);
                    high += dot16(vreinterpretq_s8_u8(hi), xh);
                }
            }
            sdot += i32::from(sc[2 * c]) * low + i32::from(sc[2 * c + 1]) * high;
        }
        q4_k_term(w, x, sdot, q4_k_smin(&m, x))
    })
}

/// # Safety
///
/// NEON, and whatever `dot16` needs.
#[target_feature(enable = "neon")]
unsafe fn q6_k_with(w: &[BlockQ6K], x: &[BlockQ8K], dot16: Dot16) -> f32 {
    let n = w.len().min(x.len());
    blocks::accumulate(n, |b| {
        let (w, x) = (&w[b], &x[b]);
        let (four, two) = (vdupq_n_u8(0x0F), vdupq_n_u8(3));
        let mut unsigned = 0i32;
        for n in 0..2 {
            for h in 0..2 {
                let ql0 = load16(&w.ql, 64 * n + 16 * h);
                let ql1 = load16(&w.ql, 64 * n + 32 + 16 * h);
                let qh = load16(&w.qh, 32 * n + 16 * h);
                let quarters = [
                    vorrq_u8(vandq_u8(ql0, four), vshlq_n_u8::<4>(vandq_u8(qh, two))),
                    vorrq_u8(
                        vandq_u8(ql1, four),
                        vshlq_n_u8::<4>(vandq_u8(vshrq_n_u8::<2>(qh), two)),
                    ),
                    vorrq_u8(
                        vshrq_n_u8::<4>(ql0),
                        vshlq_n_u8::<4>(vandq_u8(vshrq_n_u8::<4>(qh), two)),
                    ),
                    vorrq_u8(vshrq_n_u8::<4>(ql1), vshlq_n_u8::<4>(vshrq_n_u8::<6>(qh))),
                ];
                for (k, q) in quarters.into_iter().enumerate() {
                    // Values 128 n + 32 k + 16 h .. +16: group 8 n + 2 k + h.
                    let at = 128 * n + 32 * k + 16 * h;
                    let xq = vreinterpretq_s8_u8(load16(&x.qs, at));
                    // SAFETY: the caller's contract covers `dot16`.
                    let dot = unsafe { dot16(vreinterpretq_s8_u8(q), xq) };
                    unsigned += i32::from(w.scales[at / 16]) * dot;
                }
            }
        }
        q6_k_term(w, x, unsigned - q6_k_bias(w, x))
    })
}
