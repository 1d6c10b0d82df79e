//! Q4_0: GGUF's 4-bit block format, and its matvec.
//!
//! A block is one `f16` scale `d` and 16 bytes of nibbles for 32 weights
//! (18 bytes, ggml's layout): byte `j`'s low nibble is weight `j`, its high
//! nibble weight `j + 16`, and a weight is `d * (nibble - 8)`. The
//! activation is Q8_0 ([`crate::quantize_q8_0`], once per input vector),
//! and a row is `sum_b sumi[b] * (d_w[b] * d_x[b])` in `blocks.rs`'s fixed
//! order, `sumi[b]` exact on every path, so every path agrees bit for bit.

use half::f16;
use pool_core::Pool;

use crate::blocks;
use crate::q8_0::{quantize_q8_0, Activation, ActivationExtras, BlockQ8_0, QK8_0};
use crate::rows::RowsInto;
use crate::shape::{check_block_row, check_blocks, should_parallelize};
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
    blocks
        .iter()
        .flat_map(|b| {
            let d = b.d.to_f32();
            (0..QK4_0).map(move |j| d * f32::from(b.value(j)))
        })
        .collect()
}

/// `out = W x` for Q4_0 weights (`w` row-major, `x.len() / 32` blocks per
/// row), with `x` quantized to Q8_0 first. Deterministic across thread
/// counts; every SIMD tier equals the scalar path bit for bit.
///
/// # Panics
///
/// If `x.len()` is not a multiple of 32, or `w` holds fewer than
/// `out.len() * x.len() / 32` blocks (message names the shapes).
pub fn matvec_q4_0(pool: Option<&Pool>, w: &[BlockQ4_0], x: &[f32], out: &mut [f32]) {
    check_block_row("matvec_q4_0", x.len());
    matvec_q4_0_prepared(pool, w, &quantize_q8_0(x), out);
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
    pool: Option<&Pool>,
    w: &[BlockQ4_0],
    xq: &[BlockQ8_0],
    out: &mut [f32],
) {
    let (rows, blocks_per_row) = (out.len(), xq.len());
    check_blocks("matvec_q4_0", w.len(), rows, blocks_per_row);
    let extras = ActivationExtras::of(xq);
    let x = extras.with(xq);
    let pool = pool.filter(|_| should_parallelize(rows, blocks_per_row * QK4_0 / 4));
    rows_into(pool, w, blocks_per_row, &x, out);
}

/// Rows `0..out.len()` of `w` (`blocks_per_row` blocks each) against `x`
/// on `exec`, two rows per kernel call where the tier has a pair kernel
/// (each row's arithmetic is the one-row kernel's: the same bits).
pub(crate) fn rows_into(
    exec: Option<&Pool>,
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
    exec.run_rows_into(out, &|start, chunk| {
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

/// The tier's pair kernel where it has one (VNNI); `None`: the caller
/// runs the one-row kernel twice.
fn select_dot2() -> Option<Dot2Fn> {
    #[cfg(target_arch = "x86_64")]
    if crate::tier::simd_tier() == SimdTier::Avx512 && crate::tier::has_avx512_vnni() {
        return Some(avx512::dot2);
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
    let extras = ActivationExtras::of(x);
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
        SimdTier::Avx512 if crate::tier::has_avx512_vnni() => avx512::dot,
        #[cfg(target_arch = "x86_64")]
        SimdTier::Avx512 | SimdTier::Avx2 => avx2::dot,
        _ => dot_scalar,
    }
}

/// One row's dot product by `tier`'s code path; `None` if this CPU cannot
/// run the tier. Every tier gives the scalar path's bits.
pub fn dot_q4_0_on(tier: SimdTier, w: &[BlockQ4_0], x: &[BlockQ8_0]) -> Option<f32> {
    if !tier.is_available() {
        return None;
    }
    let extras = ActivationExtras::of(x);
    Some(kernel_for(tier)(w, &extras.with(x)))
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    use super::{Activation, BlockQ4_0};
    use crate::blocks;
    use crate::q8_0::simd::{prefetch_ahead, reduce1, reduce8, scales_of};

    /// Safe entry: only selected for the AVX2 tier or wider.
    pub(super) fn dot(w: &[BlockQ4_0], x: &Activation<'_>) -> f32 {
        // SAFETY: `select_dot` returns this function only for the AVX2
        // tier or wider (`SimdTier::is_available`), which requires AVX2
        // and F16C.
        unsafe { dot_avx2(w, x) }
    }

    /// As the Q8_0 kernel: eight blocks in flight, `blocks.rs`'s order.
    /// Each block's integer dot is `sum(nibble * x) - 8 * sum(x)`, the
    /// second sum computed once per activation.
    ///
    /// # Safety
    ///
    /// The CPU must support AVX2 and F16C.
    #[target_feature(enable = "avx2,f16c")]
    unsafe fn dot_avx2(w: &[BlockQ4_0], x: &Activation<'_>) -> f32 {
        let blocks = w.len().min(x.q.len());
        let body = blocks / blocks::LANES * blocks::LANES;
        let mut acc = _mm256_setzero_ps();
        let mut b = 0;
        while b < body {
            prefetch_ahead(w[b..].as_ptr().cast(), 8 * std::mem::size_of::<BlockQ4_0>());
            let sums: [__m256i; 8] =
                // SAFETY: AVX2, by this function's contract.
                std::array::from_fn(|k| unsafe { nibble_sums(&w[b + k], &x.q[b + k].qs) });
            // SAFETY: b + 8 <= blocks <= the activation's lengths.
            let (xsum, dx) = unsafe {
                (
                    _mm256_loadu_si256(x.sum.as_ptr().add(b).cast()),
                    _mm256_loadu_ps(x.d.as_ptr().add(b)),
                )
            };
            let exact = _mm256_sub_epi32(reduce8(sums), _mm256_slli_epi32::<3>(xsum));
            let sumi = _mm256_cvtepi32_ps(exact);
            let dw = scales_of(std::array::from_fn(|k| w[b + k].d.to_bits()));
            acc = _mm256_add_ps(acc, _mm256_mul_ps(sumi, _mm256_mul_ps(dw, dx)));
            b += blocks::LANES;
        }
        let mut lanes = [0.0f32; 8];
        // SAFETY: `lanes` is 32 writable bytes.
        unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), acc) };
        let mut result = blocks::reduce(lanes);
        let tail = w[b..blocks]
            .iter()
            .zip(&x.q[b..blocks])
            .zip(&x.sum[b..blocks]);
        for (k, ((bw, bx), xsum)) in tail.enumerate() {
            // SAFETY: AVX2, by this function's contract.
            let sumi = unsafe { reduce1(nibble_sums(bw, &bx.qs)) } - 8 * xsum;
            result += blocks::term(sumi, bw.d.to_f32(), x.d[b + k]);
        }
        result
    }

    /// A block's 32 nibbles as unsigned bytes in weight order: the 16
    /// packed bytes broadcast to both 128-bit halves (a load-port
    /// `vbroadcasti128`), the upper half shifted right by 4, both masked to
    /// 4 bits: low nibbles (weights 0..16), then high (16..32). Off the
    /// shuffle port that a `vinserti128` of two halves would take per
    /// block.
    #[target_feature(enable = "avx2")]
    #[inline]
    pub(super) fn unpack(qs: &[u8; 16]) -> __m256i {
        // SAFETY: `qs` is exactly 16 bytes: one unaligned load.
        let packed = _mm256_broadcastsi128_si256(unsafe { _mm_loadu_si128(qs.as_ptr().cast()) });
        let shifted = _mm256_srlv_epi64(packed, _mm256_setr_epi64x(0, 0, 4, 4));
        _mm256_and_si256(shifted, _mm256_set1_epi8(0x0F))
    }

    /// Eight i32 partial sums of `nibble * x` over one block: the nibbles
    /// unpacked in weight order (low nibbles, then high) as unsigned bytes
    /// (0..=15), so `maddubs` pairs stay far within i16 for any `x`.
    ///
    /// # Safety
    ///
    /// The CPU must support AVX2.
    #[target_feature(enable = "avx2")]
    #[inline]
    unsafe fn nibble_sums(w: &BlockQ4_0, x: &[i8; 32]) -> __m256i {
        // SAFETY: `qs` is exactly 16 bytes, `x` exactly 32.
        let vx = unsafe { _mm256_loadu_si256(x.as_ptr().cast()) };
        let nibbles = unpack(&w.qs);
        _mm256_madd_epi16(_mm256_maddubs_epi16(nibbles, vx), _mm256_set1_epi16(1))
    }
}

/// AVX-512 VNNI on 256-bit registers: the AVX2 kernel with `vpdpbusd`
/// of the unsigned nibbles and `x` in one instruction.
#[cfg(target_arch = "x86_64")]
mod avx512 {
    use std::arch::x86_64::*;

    use super::avx2::unpack;
    use super::{Activation, BlockQ4_0};
    use crate::blocks;
    use crate::q8_0::simd::{prefetch_ahead, reduce8};

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
        let blocks = w0.len().min(w1.len()).min(x.q.len());
        let body = blocks / blocks::LANES * blocks::LANES;
        let (mut acc0, mut acc1) = (_mm256_setzero_ps(), _mm256_setzero_ps());
        let mut b = 0;
        while b < body {
            prefetch_ahead(
                w0[b..].as_ptr().cast(),
                8 * std::mem::size_of::<BlockQ4_0>(),
            );
            prefetch_ahead(
                w1[b..].as_ptr().cast(),
                8 * std::mem::size_of::<BlockQ4_0>(),
            );
            let mut sums0 = [_mm256_setzero_si256(); 8];
            let mut sums1 = [_mm256_setzero_si256(); 8];
            for k in 0..8 {
                // SAFETY: `qs` is exactly 32 bytes: one unaligned load.
                let vx = unsafe { _mm256_loadu_si256(x.q[b + k].qs.as_ptr().cast()) };
                // SAFETY: the features, by this function's contract.
                unsafe {
                    sums0[k] = nibble_dots_with(&w0[b + k], vx);
                    sums1[k] = nibble_dots_with(&w1[b + k], vx);
                }
            }
            // SAFETY: b + 8 <= blocks <= the activation's lengths.
            let (xsum, dx) = unsafe {
                (
                    _mm256_slli_epi32::<3>(_mm256_loadu_si256(x.sum.as_ptr().add(b).cast())),
                    _mm256_loadu_ps(x.d.as_ptr().add(b)),
                )
            };
            // SAFETY: the eight blocks at `b` of each row are in bounds.
            let (dw0, dw1) = unsafe {
                (
                    gathered_scales(w0.as_ptr().add(b)),
                    gathered_scales(w1.as_ptr().add(b)),
                )
            };
            let sumi0 = _mm256_cvtepi32_ps(_mm256_sub_epi32(reduce8(sums0), xsum));
            let sumi1 = _mm256_cvtepi32_ps(_mm256_sub_epi32(reduce8(sums1), xsum));
            acc0 = _mm256_add_ps(acc0, _mm256_mul_ps(sumi0, _mm256_mul_ps(dw0, dx)));
            acc1 = _mm256_add_ps(acc1, _mm256_mul_ps(sumi1, _mm256_mul_ps(dw1, dx)));
            b += blocks::LANES;
        }
        let finish = |acc: __m256, w: &[BlockQ4_0]| {
            let mut lanes = [0.0f32; 8];
            // SAFETY: `lanes` is 32 writable bytes.
            unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), acc) };
            let mut result = blocks::reduce(lanes);
            for (bw, bx) in w[b..blocks].iter().zip(&x.q[b..blocks]) {
                let sumi = (0..32)
                    .map(|j| i32::from(bw.value(j)) * i32::from(bx.qs[j]))
                    .sum();
                result += blocks::term(sumi, bw.d.to_f32(), bx.d.to_f32());
            }
            result
        };
        (finish(acc0, w0), finish(acc1, w1))
    }

    /// `nibble_dots` with the activation block already loaded.
    ///
    /// # Safety
    ///
    /// AVX-512 VL/VNNI and AVX2.
    #[target_feature(enable = "avx512f,avx512vl,avx512vnni,avx2")]
    #[inline]
    unsafe fn nibble_dots_with(w: &BlockQ4_0, vx: __m256i) -> __m256i {
        _mm256_dpbusd_epi32(_mm256_setzero_si256(), unpack(&w.qs), vx)
    }

    /// # Safety
    ///
    /// AVX-512 VL/VNNI, AVX2 and F16C.
    #[target_feature(enable = "avx512f,avx512vl,avx512vnni,avx2,f16c")]
    unsafe fn dot_vnni(w: &[BlockQ4_0], x: &Activation<'_>) -> f32 {
        let blocks = w.len().min(x.q.len());
        let body = blocks / blocks::LANES * blocks::LANES;
        let mut acc = _mm256_setzero_ps();
        let mut b = 0;
        while b < body {
            prefetch_ahead(w[b..].as_ptr().cast(), 8 * std::mem::size_of::<BlockQ4_0>());
            let sums: [__m256i; 8] =
                // SAFETY: the features, by this function's contract.
                std::array::from_fn(|k| unsafe { nibble_dots(&w[b + k], &x.q[b + k].qs) });
            // SAFETY: b + 8 <= blocks <= the activation's lengths.
            let (xsum, dx) = unsafe {
                (
                    _mm256_loadu_si256(x.sum.as_ptr().add(b).cast()),
                    _mm256_loadu_ps(x.d.as_ptr().add(b)),
                )
            };
            let exact = _mm256_sub_epi32(reduce8(sums), _mm256_slli_epi32::<3>(xsum));
            let sumi = _mm256_cvtepi32_ps(exact);
            // SAFETY: the eight blocks at `b` are in bounds.
            let dw = unsafe { gathered_scales(w.as_ptr().add(b)) };
            acc = _mm256_add_ps(acc, _mm256_mul_ps(sumi, _mm256_mul_ps(dw, dx)));
            b += blocks::LANES;
        }
        let mut lanes = [0.0f32; 8];
        // SAFETY: `lanes` is 32 writable bytes.
        unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), acc) };
        let mut result = blocks::reduce(lanes);
        for (bw, bx) in w[b..blocks].iter().zip(&x.q[b..blocks]) {
            let sumi = (0..32)
                .map(|j| i32::from(bw.value(j)) * i32::from(bx.qs[j]))
                .sum();
            result += blocks::term(sumi, bw.d.to_f32(), bx.d.to_f32());
        }
        result
    }

    /// Eight i32 partial sums of `nibble * x` over one block (nibbles
    /// unsigned, 0..=15: exact for any `x`).
    ///
    /// # Safety
    ///
    /// AVX-512 VL/VNNI and AVX2.
    #[target_feature(enable = "avx512f,avx512vl,avx512vnni,avx2")]
    #[inline]
    unsafe fn nibble_dots(w: &BlockQ4_0, x: &[i8; 32]) -> __m256i {
        // SAFETY: `qs` is exactly 16 bytes, `x` exactly 32.
        let vx = unsafe { _mm256_loadu_si256(x.as_ptr().cast()) };
        let nibbles = unpack(&w.qs);
        _mm256_dpbusd_epi32(_mm256_setzero_si256(), nibbles, vx)
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
