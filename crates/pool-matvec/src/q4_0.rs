//! Q4_0: GGUF's 4-bit block format, and its matvec.
//!
//! A block is one `f16` scale `d` and 16 bytes of nibbles for 32 weights
//! (18 bytes, ggml's layout): byte `j`'s low nibble is weight `j`, its high
//! nibble weight `j + 16`, and a weight is `d * (nibble - 8)`. The
//! activation is Q8_0 ([`crate::quantize_q8_0`], once per input vector),
//! and a row is `sum_b sumi[b] * (d_w[b] * d_x[b])` in `blocks.rs`'s fixed
//! order, `sumi[b]` exact on every path, so every path agrees bit for bit.

use crate::executor::{gated, Executor};
use half::f16;

use crate::blocks;
use crate::q8_0::{quantize_q8_0, Activation, ActivationExtras, BlockQ8_0, QK8_0};
use crate::rows::{RowParallel, RowsInto};
use crate::shape::{check_block_row, check_blocks};
use crate::tier::SimdTier;

/// Weights per Q4_0 block.
pub const QK4_0: usize = 32;

/// One Q4_0 block: scale, then 32 4-bit values (ggml layout).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BlockQ4_0 {
    /// The scale: weight `j` is `d * (nibble_j - 8)`.
    pub d: f16,
    /// Byte `j`: weight `j` in the low nibble, weight `j + 16` in the high.
    pub qs: [u8; QK4_0 / 2],
}

impl BlockQ4_0 {
    /// Weight `j`'s signed 4-bit value, `-8..=7`.
    #[inline]
    pub fn value(&self, j: usize) -> i8 {
        let byte = self.qs[j % 16];
        let nibble = if j < 16 { byte & 0x0F } else { byte >> 4 };
        nibble as i8 - 8
    }
}

/// Quantizes `x` to Q4_0 as ggml's reference does: the value of largest
/// magnitude `max` (sign kept) gives `d = max / -8`; each weight becomes
/// `min(15, trunc(x / d + 8.5))`.
///
/// # Panics
///
/// If `x.len()` is not a multiple of 32.
///
/// ```
/// let blocks = pool_matvec::quantize_q4_0(&[-1.0; 32]);
/// assert_eq!(blocks[0].value(0), -8);
/// assert_eq!(pool_matvec::dequantize_q4_0(&blocks)[31], -1.0);
/// ```
pub fn quantize_q4_0(x: &[f32]) -> Vec<BlockQ4_0> {
    assert!(
        x.len().is_multiple_of(QK4_0),
        "quantize_q4_0: {} values is not a multiple of the block size {QK4_0}",
        x.len()
    );
    x.chunks_exact(QK4_0)
        .map(|values| {
            let (mut amax, mut max) = (0.0f32, 0.0f32);
            for &v in values {
                if amax < v.abs() {
                    amax = v.abs();
                    max = v;
                }
            }
            let d = max / -8.0;
            let id = if d != 0.0 { 1.0 / d } else { 0.0 };
            let q = |v: f32| ((v * id + 8.5) as i8).min(15) as u8;
            let qs = std::array::from_fn(|j| q(values[j]) | (q(values[j + 16]) << 4));
            BlockQ4_0 {
                d: f16::from_f32(d),
                qs,
            }
        })
        .collect()
}

/// The values a block row stands for.
pub fn dequantize_q4_0(blocks: &[BlockQ4_0]) -> Vec<f32> {
    let mut out = vec![0.0; blocks.len() * QK4_0];
    dequantize_q4_0_into(blocks, &mut out);
    out
}

/// [`dequantize_q4_0`] into `out` (`blocks.len() * 32` values).
pub(crate) fn dequantize_q4_0_into(blocks: &[BlockQ4_0], out: &mut [f32]) {
    assert_eq!(out.len(), blocks.len() * QK4_0);
    for (b, out) in blocks.iter().zip(out.chunks_exact_mut(QK4_0)) {
        let d = b.d.to_f32();
        for (j, o) in out.iter_mut().enumerate() {
            *o = d * f32::from(b.value(j));
        }
    }
}

/// `out = W x` for Q4_0 weights (`w` row-major, `x.len() / 32` blocks per
/// row), with `x` quantized to Q8_0 first. Deterministic across thread
/// counts; every SIMD tier equals the scalar path bit for bit.
///
/// # Panics
///
/// If `x.len()` is not a multiple of 32, or `w` holds fewer than
/// `out.len() * x.len() / 32` blocks (message names the shapes).
pub fn matvec_q4_0(exec: impl Executor, w: &[BlockQ4_0], x: &[f32], out: &mut [f32]) {
    check_block_row("matvec_q4_0", x.len());
    matvec_q4_0_prepared(exec, w, &quantize_q8_0(x), out);
}

/// [`matvec_q4_0`] with the activation already quantized (one
/// [`quantize_q8_0`] shared by every matrix that reads the same input, as
/// Q, K and V do). An `xq` holding -128 (which `quantize_q8_0` never
/// makes) runs the scalar path, still exact.
///
/// # Panics
///
/// If `w` holds fewer than `out.len() * xq.len()` blocks.
pub fn matvec_q4_0_prepared(
    exec: impl Executor,
    w: &[BlockQ4_0],
    xq: &[BlockQ8_0],
    out: &mut [f32],
) {
    let (rows, blocks_per_row) = (out.len(), xq.len());
    check_blocks("matvec_q4_0", w.len(), rows, blocks_per_row);
    let extras = ActivationExtras::for_q4_0(xq);
    let x = extras.with(xq);
    let exec = gated(&exec, rows, blocks_per_row * QK4_0 / 4);
    rows_into(exec, w, blocks_per_row, &x, out);
}

/// Rows `0..out.len()` of `w` (`blocks_per_row` blocks each) against `x`
/// on `exec`, two rows per kernel call where the tier has a pair kernel
/// (each row's arithmetic is the one-row kernel's: the same bits).
pub(crate) fn rows_into(
    exec: &dyn RowParallel,
    w: &[BlockQ4_0],
    blocks_per_row: usize,
    x: &Activation<'_>,
    out: &mut [f32],
) {
    let (dot, dot2) = (select_dot(), select_dot2());
    // The tier's pair kernel, else the one-row kernel twice (chosen once).
    let two_rows = |w0: &[_], w1: &[_]| match dot2 {
        Some(dot2) => dot2(w0, w1, x),
        None => (dot(w0, x), dot(w1, x)),
    };
    let row = |r: usize| &w[r * blocks_per_row..(r + 1) * blocks_per_row];
    exec.run_rows_into(out, |start, chunk| {
        let mut pairs = chunk.chunks_exact_mut(2);
        let mut r = start;
        for pair in &mut pairs {
            (pair[0], pair[1]) = two_rows(row(r), row(r + 1));
            r += 2;
        }
        if let [last] = pairs.into_remainder() {
            *last = dot(row(r), x);
        }
    });
}

/// Two rows against one activation.
pub(crate) type Dot2Fn = fn(&[BlockQ4_0], &[BlockQ4_0], &Activation<'_>) -> (f32, f32);

/// The tier's pair kernel where it has one (AVX-512, AVX2); `None`: the
/// caller runs the one-row kernel twice.
fn select_dot2() -> Option<Dot2Fn> {
    #[cfg(target_arch = "x86_64")]
    if crate::tier::simd_tier() == SimdTier::Avx512 && crate::tier::has_avx512_vbmi() {
        return Some(avx512::dot2_wide);
    }
    #[cfg(target_arch = "x86_64")]
    if crate::tier::simd_tier() == SimdTier::Avx512 && crate::tier::has_avx512_vnni() {
        return Some(avx512::dot2);
    }
    #[cfg(target_arch = "x86_64")]
    if crate::tier::simd_tier() == SimdTier::Avx512 {
        return Some(avx512bw::dot2);
    }
    #[cfg(target_arch = "x86_64")]
    if crate::tier::simd_tier() == SimdTier::Avx2 {
        return Some(avx2::dot2);
    }
    None
}

/// One row's dot product with a Q8_0 activation, scalar path: the
/// reference every SIMD path equals bit for bit.
pub fn dot_q4_0_scalar(w: &[BlockQ4_0], x: &[BlockQ8_0]) -> f32 {
    let blocks = w.len().min(x.len());
    blocks::accumulate(blocks, |b| {
        let sumi = (0..QK8_0)
            .map(|j| i32::from(w[b].value(j)) * i32::from(x[b].qs[j]))
            .sum();
        blocks::term(sumi, w[b].d.to_f32(), x[b].d.to_f32())
    })
}

/// One row's dot product by the tier the kernels use (exact for any `x`).
pub fn dot_q4_0(w: &[BlockQ4_0], x: &[BlockQ8_0]) -> f32 {
    let extras = ActivationExtras::for_q4_0(x);
    select_dot()(w, &extras.with(x))
}

/// One row against a prepared activation.
pub(crate) type DotFn = fn(&[BlockQ4_0], &Activation<'_>) -> f32;

fn dot_scalar(w: &[BlockQ4_0], x: &Activation<'_>) -> f32 {
    dot_q4_0_scalar(w, x.q)
}

/// The tier's kernel (exact for any activation: the unsigned nibbles
/// times any `i8` stay within `maddubs`' i16 pairs).
pub(crate) fn select_dot() -> DotFn {
    kernel_for(crate::tier::simd_tier())
}

/// The kernel `tier` runs (an available tier).
fn kernel_for(tier: SimdTier) -> DotFn {
    match tier {
        #[cfg(target_arch = "aarch64")]
        SimdTier::Neon if crate::tier::has_neon_dotprod() => neon::dot_sdot,
        #[cfg(target_arch = "aarch64")]
        SimdTier::Neon => neon::dot_mull,
        #[cfg(target_arch = "x86_64")]
        SimdTier::Avx512 if crate::tier::has_avx512_vbmi() => avx512::dot_wide,
        #[cfg(target_arch = "x86_64")]
        SimdTier::Avx512 if crate::tier::has_avx512_vnni() => avx512::dot,
        #[cfg(target_arch = "x86_64")]
        SimdTier::Avx512 => avx512bw::dot,
        #[cfg(target_arch = "x86_64")]
        SimdTier::Avx2 => avx2::dot,
        _ => dot_scalar,
    }
}

/// One row's dot product by `tier`'s code path; `None` if this CPU cannot
/// run the tier. Every tier gives the scalar path's bits.
pub fn dot_q4_0_on(tier: SimdTier, w: &[BlockQ4_0], x: &[BlockQ8_0]) -> Option<f32> {
    if !tier.is_available() {
        return None;
    }
    let extras = ActivationExtras::for_q4_0(x);
    Some(kernel_for(tier)(w, &extras.with(x)))
}

/// The loop every x86 Q4_0 kernel runs over one row: whole groups of
/// eight blocks (each prefetched ahead), `$group` giving a group's eight
/// block sums `sum(nibble * x)` and eight weight scales, `scaled_add`,
/// then `finish`'s tail blocks. A macro, not a function taking a closure:
/// the loop must expand inside each kernel's `#[target_feature]` function
/// for the group's intrinsics to inline. Expects `blocks`,
/// `prefetch_ahead`, `Q4_0_L2_AHEAD`, `scaled_add`, `finish` and the x86
/// intrinsics in scope.
#[cfg(target_arch = "x86_64")]
macro_rules! one_row {
    ($w:expr, $x:expr, |$gw:ident, $gq:ident| $group:expr) => {{
        let (w, x) = ($w, $x);
        let blocks = w.len().min(x.q.len());
        let mut acc = _mm256_setzero_ps();
        let groups = blocks::eights(w, blocks).iter().zip(x.groups(blocks));
        for (($gw, (_, gsum, gd)), $gq) in groups.zip(x.quad_groups(blocks)) {
            prefetch_ahead::<Q4_0_L2_AHEAD>($gw.as_ptr().cast(), std::mem::size_of_val($gw));
            let (sums, dw) = $group;
            acc = scaled_add(acc, sums, dw, gsum, gd);
        }
        let b = blocks / blocks::LANES * blocks::LANES;
        finish(acc, &w[b..blocks], &x.q[b..blocks], &x.d[b..blocks])
    }};
}

/// [`one_row!`] for two rows in one pass: each activation group loaded
/// once for both, `$groups` giving both rows' `(sums, scales)`, each row's
/// float steps the one-row kernel's (the same bits).
#[cfg(target_arch = "x86_64")]
macro_rules! two_rows {
    ($w0:expr, $w1:expr, $x:expr, |$g0:ident, $g1:ident, $gq:ident| $groups:expr) => {{
        let (w0, w1, x) = ($w0, $w1, $x);
        let blocks = w0.len().min(w1.len()).min(x.q.len());
        let (mut acc0, mut acc1) = (_mm256_setzero_ps(), _mm256_setzero_ps());
        let rows = blocks::eights(w0, blocks)
            .iter()
            .zip(blocks::eights(w1, blocks));
        for ((($g0, $g1), (_, gsum, gd)), $gq) in
            rows.zip(x.groups(blocks)).zip(x.quad_groups(blocks))
        {
            prefetch_ahead::<Q4_0_L2_AHEAD>($g0.as_ptr().cast(), std::mem::size_of_val($g0));
            prefetch_ahead::<Q4_0_L2_AHEAD>($g1.as_ptr().cast(), std::mem::size_of_val($g1));
            let ((sums0, dw0), (sums1, dw1)) = $groups;
            acc0 = scaled_add(acc0, sums0, dw0, gsum, gd);
            acc1 = scaled_add(acc1, sums1, dw1, gsum, gd);
        }
        let b = blocks / blocks::LANES * blocks::LANES;
        let (tail, dx) = (&x.q[b..blocks], &x.d[b..blocks]);
        (
            finish(acc0, &w0[b..blocks], tail, dx),
            finish(acc1, &w1[b..blocks], tail, dx),
        )
    }};
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    use super::{Activation, BlockQ4_0, BlockQ8_0};
    use crate::blocks;
    use crate::q8_0::simd::{prefetch_ahead, scales_of, Q4_0_L2_AHEAD};

    /// Safe entry: only selected for the AVX2 tier or wider.
    pub(super) fn dot(w: &[BlockQ4_0], x: &Activation<'_>) -> f32 {
        // SAFETY: `select_dot` returns this function only for the AVX2
        // tier or wider (`SimdTier::is_available`), which requires AVX2
        // and F16C.
        unsafe { dot_avx2(w, x) }
    }

    /// As the Q8_0 kernel: eight blocks in flight, `blocks.rs`'s order.
    /// Each block's integer dot is `sum(nibble * x) - 8 * sum(x)`, the
    /// second sum computed once per activation; blocks go two to a
    /// register (`packed_nibbles`).
    ///
    /// # Safety
    ///
    /// The CPU must support AVX2 and F16C.
    #[target_feature(enable = "avx2,f16c")]
    unsafe fn dot_avx2(w: &[BlockQ4_0], x: &Activation<'_>) -> f32 {
        one_row!(w, x, |gw, gq| group(gw, gq))
    }

    /// Safe entry for two rows: as for `dot`.
    pub(super) fn dot2(w0: &[BlockQ4_0], w1: &[BlockQ4_0], x: &Activation<'_>) -> (f32, f32) {
        // SAFETY: as for `dot`: `select_dot2` returns this only for the
        // AVX2 tier, which requires AVX2 and F16C.
        unsafe { dot2_avx2(w0, w1, x) }
    }

    /// Two rows in one pass: each activation group loaded once for both,
    /// each row's operations exactly `dot_avx2`'s (the same bits), two
    /// dependency chains in flight. On one core of an AMD EPYC (Zen 3),
    /// four matrices from DRAM, against one row at a time in the same
    /// run: 32000 x 768 13.5 -> 15.0 GB/s, 8192 x 4096 14.9 -> 15.5.
    /// Q4_0's stream stays well below the read ceiling (rows of 768 and
    /// 4096 measured); Q8_0's runs near it, and its pair form is kept to
    /// short rows (`q8_0::AVX2_PAIR_MAX_BLOCKS`).
    ///
    /// # Safety
    ///
    /// The CPU must support AVX2 and F16C.
    #[target_feature(enable = "avx2,f16c")]
    unsafe fn dot2_avx2(w0: &[BlockQ4_0], w1: &[BlockQ4_0], x: &Activation<'_>) -> (f32, f32) {
        two_rows!(w0, w1, x, |g0, g1, gq| (group(g0, gq), group(g1, gq)))
    }

    /// One group of eight blocks: their eight sums `sum(nibble * x)` and
    /// eight weight scales.
    #[target_feature(enable = "avx2,f16c")]
    #[inline]
    fn group(gw: &[BlockQ4_0; 8], gq: &[[i8; 128]; 2]) -> (__m256i, __m256) {
        let sums: [__m256i; 4] = std::array::from_fn(|p| {
            let (low, high) = packed_nibbles(&gw[2 * p], &gw[2 * p + 1]);
            let (xlo, xhi) = pair_halves(&gq[p / 2], p % 2);
            // Each `maddubs` pair is within ±3840 (nibbles 0..=15),
            // their sum within i16: exact.
            let pairs = _mm256_add_epi16(
                _mm256_maddubs_epi16(low, xlo),
                _mm256_maddubs_epi16(high, xhi),
            );
            _mm256_madd_epi16(pairs, _mm256_set1_epi16(1))
        });
        let dw = scales_of(std::array::from_fn(|k| gw[k].d.to_bits()));
        (reduce_pairs(sums), dw)
    }

    /// `acc + (sums - 8 * xsum) * (dw * dx)`: every x86 Q4_0 kernel's
    /// float steps for a group, in this order.
    #[target_feature(enable = "avx2")]
    #[inline]
    pub(super) fn scaled_add(
        acc: __m256,
        sums: __m256i,
        dw: __m256,
        gsum: &[i32; 8],
        gd: &[f32; 8],
    ) -> __m256 {
        // SAFETY: `gsum` and `gd` are eight values each.
        let (xsum, dx) = unsafe {
            (
                _mm256_loadu_si256(gsum.as_ptr().cast()),
                _mm256_loadu_ps(gd.as_ptr()),
            )
        };
        let sumi = _mm256_cvtepi32_ps(_mm256_sub_epi32(sums, _mm256_slli_epi32::<3>(xsum)));
        _mm256_add_ps(acc, _mm256_mul_ps(sumi, _mm256_mul_ps(dw, dx)))
    }

    /// The lanes' fixed reduction, then the tail blocks (`w` and `x` from
    /// the end of the eight-block body on) in block order.
    #[target_feature(enable = "avx2,f16c")]
    #[inline]
    pub(super) fn finish(acc: __m256, w: &[BlockQ4_0], x: &[BlockQ8_0], dx: &[f32]) -> f32 {
        let mut result = crate::lanes::reduce_ps(acc);
        for ((bw, bx), &dx) in w.iter().zip(x).zip(dx) {
            let dw = crate::lanes::f16_to_f32(bw.d.to_bits());
            result += blocks::term(block_dot_exact(bw, &bx.qs), dw, dx);
        }
        result
    }

    /// One block's exact integer dot for the tail past the last group of
    /// eight: its nibbles as signed values (`nibble - 8`), the weights and
    /// `x` widened to `i16`, multiplied in pairs into `i32` (exact for any
    /// `x`).
    #[target_feature(enable = "avx2")]
    #[inline]
    fn block_dot_exact(w: &BlockQ4_0, x: &[i8; 32]) -> i32 {
        // SAFETY: `qs` is 16 bytes and `x` 32: one and two 16-byte loads.
        let (packed, x0, x1) = unsafe {
            (
                _mm_loadu_si128(w.qs.as_ptr().cast()),
                _mm_loadu_si128(x.as_ptr().cast()),
                _mm_loadu_si128(x.as_ptr().add(16).cast()),
            )
        };
        let (mask, eight) = (_mm_set1_epi8(0x0F), _mm_set1_epi8(8));
        let low = _mm_sub_epi8(_mm_and_si128(packed, mask), eight);
        let high = _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16::<4>(packed), mask), eight);
        let wide = |v| _mm256_cvtepi8_epi16(v);
        let sums = _mm256_add_epi32(
            _mm256_madd_epi16(wide(low), wide(x0)),
            _mm256_madd_epi16(wide(high), wide(x1)),
        );
        crate::q8_0::avx2::reduce1(sums)
    }

    /// Two consecutive blocks' nibbles as unsigned bytes: the packed
    /// bytes of `a` in the low 128-bit half and of `b` in the high (a load
    /// and an insert from memory, which any vector port runs), then
    /// `(low nibbles, high nibbles)`: weights 0..16 and 16..32 of each.
    /// With `Activation::quads`' halves, four i32 lanes per block where a
    /// block per register gives eight: half the reduction
    /// (`reduce_pairs`). Measured from L2 on one core (VNNI pair kernel):
    /// 1.16 -> 1.03 ns per block.
    #[target_feature(enable = "avx2")]
    #[inline]
    pub(super) fn packed_nibbles(a: &BlockQ4_0, b: &BlockQ4_0) -> (__m256i, __m256i) {
        // SAFETY: `qs` is exactly 16 bytes: one unaligned load each.
        let packed = unsafe {
            _mm256_inserti128_si256::<1>(
                _mm256_castsi128_si256(_mm_loadu_si128(a.qs.as_ptr().cast())),
                _mm_loadu_si128(b.qs.as_ptr().cast()),
            )
        };
        let mask = _mm256_set1_epi8(0x0F);
        (
            _mm256_and_si256(packed, mask),
            _mm256_and_si256(_mm256_srli_epi16::<4>(packed), mask),
        )
    }

    /// The low and high halves of a quad's (`Activation::quads`) first
    /// (`pair` 0) or second two blocks: what their low and high nibbles
    /// multiply.
    #[target_feature(enable = "avx2")]
    #[inline]
    pub(super) fn pair_halves(quad: &[i8; 128], pair: usize) -> (__m256i, __m256i) {
        let (low, high) = (&quad[32 * pair..][..32], &quad[64 + 32 * pair..][..32]);
        // SAFETY: two 32-byte slices: one load each.
        unsafe {
            (
                _mm256_loadu_si256(low.as_ptr().cast()),
                _mm256_loadu_si256(high.as_ptr().cast()),
            )
        }
    }

    /// Lane `k` of the result is block `k`'s sum, from four vectors of two
    /// blocks' four partial sums each (lanes 0..4 the even block, 4..8
    /// the odd): three horizontal adds and one permute, where eight lanes
    /// per block take six and two.
    #[target_feature(enable = "avx2")]
    #[inline]
    pub(super) fn reduce_pairs(v: [__m256i; 4]) -> __m256i {
        // Half 0: pair sums of blocks 0, 2 (v0, v1); half 1: of 1, 3.
        let h01 = _mm256_hadd_epi32(v[0], v[1]);
        let h23 = _mm256_hadd_epi32(v[2], v[3]);
        // Half 0: blocks 0, 2, 4, 6; half 1: blocks 1, 3, 5, 7.
        let h = _mm256_hadd_epi32(h01, h23);
        _mm256_permutevar8x32_epi32(h, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7))
    }
}

/// AVX-512 VNNI on 256-bit registers: the AVX2 kernel with `vpdpbusd`
/// of the unsigned nibbles and `x` in one instruction.
#[cfg(target_arch = "x86_64")]
mod avx512 {
    use std::arch::x86_64::*;

    use super::avx2::{finish, packed_nibbles, pair_halves, reduce_pairs, scaled_add};
    use super::{Activation, BlockQ4_0};
    use crate::blocks;
    use crate::lanes::{block_sums, block_sums_of_two_rows, table, QuadDots, Table};
    use crate::q8_0::simd::{prefetch_ahead, Q4_0_L2_AHEAD};

    /// Safe entry: only selected for the AVX-512 tier with VNNI.
    pub(super) fn dot(w: &[BlockQ4_0], x: &Activation<'_>) -> f32 {
        // SAFETY: `kernel_for` returns this function only when
        // `has_avx512_vnni()`: the AVX-512 tier (F/BW/DQ/VL, AVX2, F16C)
        // and AVX512-VNNI.
        unsafe { dot_vnni(w, x) }
    }

    /// Safe entry for two rows: as for `dot`.
    pub(super) fn dot2(w0: &[BlockQ4_0], w1: &[BlockQ4_0], x: &Activation<'_>) -> (f32, f32) {
        // SAFETY: as for `dot`: `select_dot2` returns this only when
        // `has_avx512_vnni()`.
        unsafe { dot2_vnni(w0, w1, x) }
    }

    /// Two rows in one pass: each activation block loaded once for both,
    /// each row's operations exactly `dot_vnni`'s (the same bits), two
    /// streams in flight. Measured from DRAM on one core: 12.1 GB/s
    /// against one row at a time's 10.8.
    ///
    /// # Safety
    ///
    /// AVX-512 VL/VNNI, AVX2 and F16C.
    #[target_feature(enable = "avx512f,avx512vl,avx512vnni,avx2,f16c")]
    unsafe fn dot2_vnni(w0: &[BlockQ4_0], w1: &[BlockQ4_0], x: &Activation<'_>) -> (f32, f32) {
        two_rows!(w0, w1, x, |g0, g1, gq| {
            let mut sums0 = [_mm256_setzero_si256(); 4];
            let mut sums1 = [_mm256_setzero_si256(); 4];
            for p in 0..4 {
                // SAFETY: the features, by this function's contract.
                unsafe {
                    let (xlo, xhi) = pair_halves(&gq[p / 2], p % 2);
                    sums0[p] = two_blocks_dots(&g0[2 * p], &g0[2 * p + 1], xlo, xhi);
                    sums1[p] = two_blocks_dots(&g1[2 * p], &g1[2 * p + 1], xlo, xhi);
                }
            }
            // SAFETY: `g0` and `g1` are eight blocks each.
            let (dw0, dw1) =
                unsafe { (gathered_scales(g0.as_ptr()), gathered_scales(g1.as_ptr())) };
            ((reduce_pairs(sums0), dw0), (reduce_pairs(sums1), dw1))
        })
    }

    /// Two consecutive blocks' dots as four i32 partial sums each: lanes
    /// 0..4 block `a`, 4..8 block `b` (`packed_nibbles`). Exact: nibbles
    /// unsigned 0..=15, four products per lane in i32.
    ///
    /// # Safety
    ///
    /// AVX-512 VL/VNNI and AVX2.
    #[target_feature(enable = "avx512f,avx512vl,avx512vnni,avx2")]
    #[inline]
    unsafe fn two_blocks_dots(a: &BlockQ4_0, b: &BlockQ4_0, xlo: __m256i, xhi: __m256i) -> __m256i {
        let (low, high) = packed_nibbles(a, b);
        let dots = _mm256_dpbusd_epi32(_mm256_setzero_si256(), low, xlo);
        _mm256_dpbusd_epi32(dots, high, xhi)
    }

    /// # Safety
    ///
    /// AVX-512 VL/VNNI, AVX2 and F16C.
    #[target_feature(enable = "avx512f,avx512vl,avx512vnni,avx2,f16c")]
    unsafe fn dot_vnni(w: &[BlockQ4_0], x: &Activation<'_>) -> f32 {
        one_row!(w, x, |gw, gq| {
            let sums: [__m256i; 4] = std::array::from_fn(|p| {
                // SAFETY: the features, by this function's contract.
                unsafe {
                    let (xlo, xhi) = pair_halves(&gq[p / 2], p % 2);
                    two_blocks_dots(&gw[2 * p], &gw[2 * p + 1], xlo, xhi)
                }
            });
            // SAFETY: `gw` is eight blocks.
            let dw = unsafe { gathered_scales(gw.as_ptr()) };
            (reduce_pairs(sums), dw)
        })
    }

    /// Safe entry: only selected for the AVX-512 tier with VNNI and VBMI.
    pub(super) fn dot_wide(w: &[BlockQ4_0], x: &Activation<'_>) -> f32 {
        // SAFETY: `kernel_for` returns this function only when
        // `has_avx512_vbmi()`: `has_avx512_vnni()`, AVX512-VBMI and GFNI.
        unsafe { wide_dot(w, x) }
    }

    /// Safe entry for two rows: as for `dot_wide`.
    pub(super) fn dot2_wide(w0: &[BlockQ4_0], w1: &[BlockQ4_0], x: &Activation<'_>) -> (f32, f32) {
        // SAFETY: as for `dot_wide`: `select_dot2` returns this only when
        // `has_avx512_vbmi()`.
        unsafe { wide_dot2(w0, w1, x) }
    }

    /// Four blocks per 512-bit register (`wide_group`), then the 256-bit
    /// kernels' float steps: the same bits.
    ///
    /// # Safety
    ///
    /// AVX-512 F/BW/VL/VNNI/VBMI, GFNI, AVX2 and F16C.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx512vbmi,gfni,avx2,f16c")]
    unsafe fn wide_dot(w: &[BlockQ4_0], x: &Activation<'_>) -> f32 {
        one_row!(w, x, |gw, gq| {
            let (dots, dw) = wide_group(gw, gq);
            (block_sums(dots), dw)
        })
    }

    /// Two rows in one pass, each row's steps `wide_dot`'s.
    ///
    /// # Safety
    ///
    /// As for `wide_dot`.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx512vbmi,gfni,avx2,f16c")]
    unsafe fn wide_dot2(w0: &[BlockQ4_0], w1: &[BlockQ4_0], x: &Activation<'_>) -> (f32, f32) {
        two_rows!(w0, w1, x, |g0, g1, gq| {
            let (dots0, dw0) = wide_group(g0, gq);
            let (dots1, dw1) = wide_group(g1, gq);
            let (sums0, sums1) = block_sums_of_two_rows(dots0, dots1);
            ((sums0, dw0), (sums1, dw1))
        })
    }

    /// Where a block's byte lies in the two 64-byte loads `vpermt2b`
    /// reads (index 0..64: the first, at group byte `first`; 64..128: the
    /// second, at group byte `second`).
    const fn table_index(byte: usize, first: usize, second: usize) -> u8 {
        if byte < first + 64 {
            (byte - first) as u8
        } else {
            (64 + byte - second) as u8
        }
    }

    /// The nibble bytes of blocks `4 * quad..4 * quad + 4`, block by
    /// block, from the loads at group bytes `first` and `second`.
    const fn nibble_table(quad: usize, first: usize, second: usize) -> Table {
        let mut t = [0u8; 64];
        let mut j = 0;
        while j < 64 {
            let byte = BLOCK * (4 * quad + j / 16) + 2 + j % 16;
            t[j] = table_index(byte, first, second);
            j += 1;
        }
        Table(t)
    }

    /// The eight blocks' f16 scales, from the loads at group bytes 0
    /// and 64 (the rest of the table unused).
    const fn scale_table() -> Table {
        let mut t = [0u8; 64];
        let mut j = 0;
        while j < 16 {
            t[j] = table_index(BLOCK * (j / 2) + j % 2, 0, 64);
            j += 1;
        }
        Table(t)
    }

    const BLOCK: usize = std::mem::size_of::<BlockQ4_0>();
    /// `vgf2p8affineqb`'s matrix for `byte >> 4`: row byte `7 - i` picks
    /// the source bit of result bit `i` (bits 4..8 for 0..4, none above).
    const HIGH_NIBBLE: i64 = 0x1020_4080_0000_0000;
    /// Loads at group bytes 0, 64 and 80: all 144 bytes, none past them.
    static NIBBLES_LOW: Table = nibble_table(0, 0, 64);
    static NIBBLES_HIGH: Table = nibble_table(1, 64, 80);
    static SCALES: Table = scale_table();

    /// A group's partial dots (`sum(nibble * x)`) and eight scales: three 64-byte loads of
    /// the group's 144 bytes, a byte permute each for blocks 0..4's
    /// nibbles, 4..8's and the scales (`vpermt2b`, one shuffle-port
    /// instruction where the 256-bit kernel takes an insert per pair and
    /// a gather), one `vpdpbusd` per four blocks' low or high nibbles.
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni,avx512vbmi,gfni,f16c")]
    #[inline]
    fn wide_group(gw: &[BlockQ4_0; 8], gq: &[[i8; 128]; 2]) -> (QuadDots, __m256) {
        let base: *const u8 = gw.as_ptr().cast();
        // SAFETY: bytes 0..64, 64..128 and 80..144 of the group's 144.
        let (l0, l1, l2) = unsafe {
            (
                _mm512_loadu_si512(base.cast()),
                _mm512_loadu_si512(base.add(64).cast()),
                _mm512_loadu_si512(base.add(80).cast()),
            )
        };
        let low = _mm512_permutex2var_epi8(l0, table(&NIBBLES_LOW), l1);
        let high = _mm512_permutex2var_epi8(l1, table(&NIBBLES_HIGH), l2);
        let scales = _mm512_permutex2var_epi8(l0, table(&SCALES), l1);
        let dots = [
            four_blocks_dots(low, &gq[0]),
            four_blocks_dots(high, &gq[1]),
        ];
        (dots, _mm256_cvtph_ps(_mm512_castsi512_si128(scales)))
    }

    /// Four blocks' dots (`packed`: their 16 nibble bytes each) as four
    /// i32 partial sums per block, against a quad's low and high halves.
    /// Exact: unsigned nibbles times `i8`, eight products per lane.
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni,gfni")]
    #[inline]
    fn four_blocks_dots(packed: __m512i, quad: &[i8; 128]) -> __m512i {
        let low = _mm512_and_si512(packed, _mm512_set1_epi8(0x0F));
        // Each byte shifted right by four in one GFNI affine (bit `i` of
        // the result is bit `i + 4` of the byte): one instruction where a
        // shift and a mask take two.
        let high = _mm512_gf2p8affine_epi64_epi8::<0>(packed, _mm512_set1_epi64(HIGH_NIBBLE));
        // SAFETY: `quad` is 128 bytes: two 64-byte loads.
        let (xlo, xhi) = unsafe {
            (
                _mm512_loadu_si512(quad.as_ptr().cast()),
                _mm512_loadu_si512(quad.as_ptr().add(64).cast()),
            )
        };
        _mm512_dpbusd_epi32(
            _mm512_dpbusd_epi32(_mm512_setzero_si512(), low, xlo),
            high,
            xhi,
        )
    }

    /// The scales of the eight blocks at `blocks` as f32: one gather of the
    /// dword at each block's start (the f16 scale and two bytes after it,
    /// inside the block), narrowed to the scales' 16 bits, converted. Off
    /// the shuffle port that eight word inserts would load.
    ///
    /// # Safety
    ///
    /// AVX-512 F/VL, AVX2 and F16C; eight blocks readable at `blocks`.
    #[target_feature(enable = "avx512f,avx512vl,avx2,f16c")]
    #[inline]
    unsafe fn gathered_scales(blocks: *const BlockQ4_0) -> __m256 {
        const STRIDE: i32 = std::mem::size_of::<BlockQ4_0>() as i32;
        let offsets = _mm256_setr_epi32(
            0,
            STRIDE,
            2 * STRIDE,
            3 * STRIDE,
            4 * STRIDE,
            5 * STRIDE,
            6 * STRIDE,
            7 * STRIDE,
        );
        // SAFETY: each of the eight 4-byte reads starts at a block and
        // stays inside it (a block is 18 bytes); the caller
        // guarantees the eight blocks.
        let words = unsafe { _mm256_i32gather_epi32::<1>(blocks.cast(), offsets) };
        _mm256_cvtph_ps(_mm256_cvtepi32_epi16(words))
    }
}

/// AVX-512BW without VNNI: four blocks per 512-bit register (their 16
/// packed bytes inserted 128 bits at a time), `maddubs` of the unsigned
/// nibbles against the activation's quad halves, the AVX2 kernel's float
/// steps. Exact for any `x`, as the AVX2 kernel.
#[cfg(target_arch = "x86_64")]
mod avx512bw {
    use std::arch::x86_64::*;

    use super::avx2::{finish, scaled_add};
    use super::{Activation, BlockQ4_0};
    use crate::blocks;
    use crate::lanes::{block_sums, block_sums_of_two_rows, QuadDots};
    use crate::q8_0::simd::{prefetch_ahead, scales_of, Q4_0_L2_AHEAD};

    /// Safe entry: only selected for the AVX-512 tier (F/BW/DQ/VL).
    pub(super) fn dot(w: &[BlockQ4_0], x: &Activation<'_>) -> f32 {
        // SAFETY: `kernel_for` returns this only for the AVX-512 tier
        // (`SimdTier::is_available`: AVX-512 F/BW/DQ/VL, AVX2, F16C).
        unsafe { bw_dot(w, x) }
    }

    /// Safe entry for two rows: as for `dot`.
    pub(super) fn dot2(w0: &[BlockQ4_0], w1: &[BlockQ4_0], x: &Activation<'_>) -> (f32, f32) {
        // SAFETY: as for `dot`: `select_dot2` returns this only for the
        // AVX-512 tier.
        unsafe { bw_dot2(w0, w1, x) }
    }

    /// # Safety
    ///
    /// AVX-512 F/BW, AVX2 and F16C.
    #[target_feature(enable = "avx512f,avx512bw,avx2,f16c")]
    unsafe fn bw_dot(w: &[BlockQ4_0], x: &Activation<'_>) -> f32 {
        one_row!(w, x, |gw, gq| {
            let dw = scales_of(std::array::from_fn(|k| gw[k].d.to_bits()));
            (block_sums(group_dots(gw, gq)), dw)
        })
    }

    /// Two rows in one pass, each row's steps `bw_dot`'s.
    ///
    /// # Safety
    ///
    /// As for `bw_dot`.
    #[target_feature(enable = "avx512f,avx512bw,avx2,f16c")]
    unsafe fn bw_dot2(w0: &[BlockQ4_0], w1: &[BlockQ4_0], x: &Activation<'_>) -> (f32, f32) {
        two_rows!(w0, w1, x, |g0, g1, gq| {
            let (sums0, sums1) = block_sums_of_two_rows(group_dots(g0, gq), group_dots(g1, gq));
            let dw0 = scales_of(std::array::from_fn(|k| g0[k].d.to_bits()));
            let dw1 = scales_of(std::array::from_fn(|k| g1[k].d.to_bits()));
            ((sums0, dw0), (sums1, dw1))
        })
    }

    /// A group's partial dots `sum(nibble * x)`, four i32 lanes per block.
    #[target_feature(enable = "avx512f,avx512bw")]
    #[inline]
    fn group_dots(gw: &[BlockQ4_0; 8], gq: &[[i8; 128]; 2]) -> QuadDots {
        let (first, second) = gw.split_at(4);
        [quad_dots(first, &gq[0]), quad_dots(second, &gq[1])]
    }

    /// Four blocks' dots against a quad's halves: each `maddubs` pair is
    /// within +-3840 (nibbles 0..=15), a low and a high pair within i16,
    /// then widened: exact for any `x`.
    #[target_feature(enable = "avx512f,avx512bw")]
    #[inline]
    fn quad_dots(four: &[BlockQ4_0], quad: &[i8; 128]) -> __m512i {
        let load = |k: usize| {
            // SAFETY: `qs` is exactly 16 bytes: one unaligned load.
            unsafe { _mm_loadu_si128(four[k].qs.as_ptr().cast()) }
        };
        let packed = _mm512_inserti32x4::<3>(
            _mm512_inserti32x4::<2>(
                _mm512_inserti32x4::<1>(_mm512_castsi128_si512(load(0)), load(1)),
                load(2),
            ),
            load(3),
        );
        let mask = _mm512_set1_epi8(0x0F);
        let low = _mm512_and_si512(packed, mask);
        let high = _mm512_and_si512(_mm512_srli_epi16::<4>(packed), mask);
        // SAFETY: `quad` is 128 bytes: two 64-byte loads.
        let (xlo, xhi) = unsafe {
            (
                _mm512_loadu_si512(quad.as_ptr().cast()),
                _mm512_loadu_si512(quad.as_ptr().add(64).cast()),
            )
        };
        let pairs = _mm512_add_epi16(
            _mm512_maddubs_epi16(low, xlo),
            _mm512_maddubs_epi16(high, xhi),
        );
        _mm512_madd_epi16(pairs, _mm512_set1_epi16(1))
    }
}

/// NEON: the nibbles unpacked to signed bytes (`nibble - 8`), then Q8_0's
/// NEON block dot and float order (`q8_0::neon`): the scalar path's bits.
#[cfg(target_arch = "aarch64")]
mod neon {
    use std::arch::aarch64::*;

    use super::{Activation, BlockQ4_0};
    use crate::q8_0::neon::{accumulate, dot32_mull, dot32_sdot, halves};

    /// Safe entry: selected for the NEON tier when the CPU has `dotprod`.
    pub(super) fn dot_sdot(w: &[BlockQ4_0], x: &Activation<'_>) -> f32 {
        // SAFETY: `kernel_for` returns this only for an available NEON
        // tier with `has_neon_dotprod()`.
        unsafe { q4_0_sdot(w, x) }
    }

    /// Safe entry: selected for the NEON tier without `dotprod`.
    pub(super) fn dot_mull(w: &[BlockQ4_0], x: &Activation<'_>) -> f32 {
        // SAFETY: `kernel_for` returns this only for an available NEON
        // tier.
        unsafe { q4_0_mull(w, x) }
    }

    /// # Safety
    ///
    /// NEON and the dot-product extension.
    #[target_feature(enable = "neon,dotprod")]
    unsafe fn q4_0_sdot(w: &[BlockQ4_0], x: &Activation<'_>) -> f32 {
        let blocks = w.len().min(x.q.len());
        // The closures inherit this function's features.
        accumulate(
            blocks,
            x.d,
            |b| w[b].d.to_f32(),
            |b| dot32_sdot(signed_nibbles(&w[b].qs), halves(&x.q[b].qs)),
        )
    }

    /// # Safety
    ///
    /// NEON.
    #[target_feature(enable = "neon")]
    unsafe fn q4_0_mull(w: &[BlockQ4_0], x: &Activation<'_>) -> f32 {
        let blocks = w.len().min(x.q.len());
        accumulate(
            blocks,
            x.d,
            |b| w[b].d.to_f32(),
            |b| dot32_mull(signed_nibbles(&w[b].qs), halves(&x.q[b].qs)),
        )
    }

    /// A block's 32 weights as signed bytes in weight order: the low
    /// nibbles (weights 0..16), then the high (16..32), each minus 8.
    #[target_feature(enable = "neon")]
    #[inline]
    fn signed_nibbles(qs: &[u8; 16]) -> [int8x16_t; 2] {
        // SAFETY: `qs` is exactly 16 bytes: one load.
        let packed = unsafe { vld1q_u8(qs.as_ptr()) };
        let low = vandq_u8(packed, vdupq_n_u8(0x0F));
        let high = vshrq_n_u8::<4>(packed);
        let eight = vdupq_n_s8(8);
        [
            vsubq_s8(vreinterpretq_s8_u8(low), eight),
            vsubq_s8(vreinterpretq_s8_u8(high), eight),
        ]
    }
}

#[cfg(all(test, target_arch = "x86_64"))]
mod tests {
    use super::*;
    use crate::random::XorShift;
    use crate::tier::{has_avx512_vbmi, has_avx512_vnni};

    /// Every x86 kernel this CPU can run, by name: the tier picks one,
    /// so the others are reached only here.
    fn kernels() -> Vec<(&'static str, DotFn, Option<Dot2Fn>)> {
        let mut all: Vec<(&'static str, DotFn, Option<Dot2Fn>)> = Vec::new();
        if SimdTier::Avx2.is_available() {
            all.push(("avx2", avx2::dot, Some(avx2::dot2)));
        }
        if has_avx512_vnni() {
            all.push(("avx512-vnni", avx512::dot, Some(avx512::dot2)));
        }
        if has_avx512_vbmi() {
            all.push(("avx512-vbmi", avx512::dot_wide, Some(avx512::dot2_wide)));
        }
        if SimdTier::Avx512.is_available() {
            all.push(("avx512bw", avx512bw::dot, Some(avx512bw::dot2)));
        }
        all
    }

    fn random_rows(rng: &mut XorShift, rows: usize, blocks: usize) -> Vec<BlockQ4_0> {
        (0..rows * blocks)
            .map(|_| BlockQ4_0 {
                d: f16::from_f32(rng.uniform() - 0.5),
                qs: std::array::from_fn(|_| match rng.next_u64() % 4 {
                    0 => 0x00,
                    1 => 0xFF,
                    _ => rng.next_u64() as u8,
                }),
            })
            .collect()
    }

    #[test]
    fn every_x86_kernel_and_its_two_row_form_give_the_scalar_bits() {
        let mut rng = XorShift(91);
        // One block, a group less one, a group, a group and a tail, many.
        for blocks in [1, 7, 8, 9, 16, 17, 31, 128 + 3] {
            let w = random_rows(&mut rng, 2, blocks);
            let x: Vec<BlockQ8_0> = (0..blocks)
                .map(|_| BlockQ8_0 {
                    d: f16::from_f32(rng.uniform()),
                    qs: std::array::from_fn(|_| match rng.next_u64() % 5 {
                        0 => i8::MIN,
                        1 => i8::MAX,
                        _ => rng.next_u64() as i8,
                    }),
                })
                .collect();
            let extras = ActivationExtras::for_q4_0(&x);
            let act = extras.with(&x);
            let (w0, w1) = w.split_at(blocks);
            let expected = (dot_q4_0_scalar(w0, &x), dot_q4_0_scalar(w1, &x));
            for (name, dot, dot2) in kernels() {
                let one = (dot(w0, &act), dot(w1, &act));
                assert_eq!(
                    (one.0.to_bits(), one.1.to_bits()),
                    (expected.0.to_bits(), expected.1.to_bits()),
                    "{name}, {blocks} blocks"
                );
                if let Some(dot2) = dot2 {
                    let two = dot2(w0, w1, &act);
                    assert_eq!(
                        (two.0.to_bits(), two.1.to_bits()),
                        (expected.0.to_bits(), expected.1.to_bits()),
                        "{name} two rows, {blocks} blocks"
                    );
                }
            }
        }
    }
}
