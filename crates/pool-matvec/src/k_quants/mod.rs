//! The k-quants: GGUF's super-block formats Q4_K and Q6_K (256 weights per
//! super-block, the layouts of ggml's `ggml-common.h`), their Q8_K
//! activation, and their matvecs.
//!
//! This file holds each format's layout and its scalar reference; each
//! ISA's kernels live in a file of their own (`x86.rs`, `neon.rs`), chosen
//! in one place ([`kernels`]).
//!
//! # One order of arithmetic, every path
//!
//! A super-block's dot product splits into an exact integer part and a
//! float part:
//! - Q4_K: `sdot = sum_j sc_j * sum_{32 values of sub-block j} q4 * q8`
//!   and `smin = sum_j m_j * (bsum_{2j} + bsum_{2j+1})`, both exact `i32`;
//!   the term is `sdot as f32 * (d_w * d_x) - smin as f32 * (dmin_w * d_x)`.
//! - Q6_K: `sdot = sum_g sc_g * (sum_{16 values of group g} q6u * q8 -
//!   32 * bsum_g)`, `q6u` the unsigned 6-bit value (`q6u - 32` is the
//!   weight's), exact; the term is `sdot as f32 * (d_w * d_x)`.
//!
//! Both use the activation's 16-value sums `bsum` as stored, so every path
//! agrees for any activation, even one whose sums are not its values'.
//!
//! The terms of a row's super-blocks are added in `blocks.rs`'s fixed
//! eight-lane order, with no fused multiply-add. Every SIMD path computes
//! the same integers (they are exact) and does the float part as the
//! scalar reference does, so every path gives the same bits, for any
//! thread count.

use half::f16;

use crate::blocks;
use crate::tier::SimdTier;

#[cfg(target_arch = "aarch64")]
mod neon;
#[cfg(target_arch = "x86_64")]
mod x86;

/// Weights per super-block.
pub const QK_K: usize = 256;

/// A Q8_K block: the activation the k-quants multiply, 256 values
/// quantized once per input vector.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BlockQ8K {
    /// The scale: value `j` is `d * qs[j]`.
    pub d: f32,
    /// The quantized values, `-127..=127`.
    pub qs: [i8; QK_K],
    /// `bsums[g]`: the sum of `qs[16 g..16 g + 16]`.
    pub bsums: [i16; QK_K / 16],
}

impl BlockQ8K {
    /// A block of zeros (scale 0): what output buffers start as.
    pub(crate) const ZERO: BlockQ8K = BlockQ8K {
        d: 0.0,
        qs: [0; QK_K],
        bsums: [0; QK_K / 16],
    };
}

/// A Q4_K super-block (144 bytes): eight sub-blocks of 32 weights, each
/// with a 6-bit scale and a 6-bit min; weight `v` is
/// `d * sc[v / 32] * q[v] - dmin * m[v / 32]`, `q` a 4-bit value.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BlockQ4K {
    /// The super-block's scale for the sub-block scales.
    pub d: f16,
    /// The super-block's scale for the sub-block mins.
    pub dmin: f16,
    /// Eight scales and eight mins, 6 bits each (ggml's packing; see
    /// [`BlockQ4K::scales_and_mins`]).
    pub scales: [u8; 12],
    /// Byte `32 c + l`: weight `64 c + l` in the low nibble, weight
    /// `64 c + 32 + l` in the high nibble.
    pub qs: [u8; QK_K / 2],
}

/// A Q6_K super-block (210 bytes): sixteen groups of 16 weights, each with
/// an `i8` scale; weight `v` is `d * sc[v / 16] * (q[v] - 32)`, `q` a
/// 6-bit value split into 4 low bits (`ql`) and 2 high bits (`qh`).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BlockQ6K {
    /// Low 4 bits: in each half `n` of 128 weights, byte `64 n + l` holds
    /// weight `128 n + l` (low nibble) and `128 n + 64 + l` (high nibble)
    /// for `l < 32`, and byte `64 n + 32 + l` weights `128 n + 32 + l`
    /// and `128 n + 96 + l`.
    pub ql: [u8; QK_K / 2],
    /// High 2 bits: byte `32 n + l` holds, from bit 0 up, those of weights
    /// `128 n + l`, `+ 32`, `+ 64` and `+ 96`.
    pub qh: [u8; QK_K / 4],
    /// The groups' scales.
    pub scales: [i8; QK_K / 16],
    /// The super-block's scale.
    pub d: f16,
}

impl BlockQ4K {
    /// The eight sub-block scales and mins, unpacked from `scales`
    /// (ggml's `get_scale_min_k4`).
    #[inline]
    pub fn scales_and_mins(&self) -> ([u8; 8], [u8; 8]) {
        unpack_scales(&self.scales)
    }

    /// Weight `v`'s 4-bit value.
    #[inline]
    pub fn value(&self, v: usize) -> u8 {
        let byte = self.qs[32 * (v / 64) + v % 32];
        if v % 64 < 32 {
            byte & 0x0F
        } else {
            byte >> 4
        }
    }
}

impl BlockQ6K {
    /// Weight `v`'s 6-bit value, `0..=63` (the weight is `value - 32`
    /// times the scales).
    #[inline]
    pub fn value(&self, v: usize) -> u8 {
        let (n, r) = (v / 128, v % 128);
        let (l, quarter) = (r % 32, r / 32);
        let low = self.ql[64 * n + l + 32 * (quarter % 2)];
        let low = if quarter < 2 { low & 0x0F } else { low >> 4 };
        let high = (self.qh[32 * n + l] >> (2 * quarter)) & 3;
        low | (high << 4)
    }
}

/// ggml's `get_scale_min_k4` for all eight sub-blocks.
#[inline(always)]
pub(crate) fn unpack_scales(q: &[u8; 12]) -> ([u8; 8], [u8; 8]) {
    let mut sc = [0u8; 8];
    let mut m = [0u8; 8];
    for j in 0..4 {
        sc[j] = q[j] & 63;
        m[j] = q[j + 4] & 63;
    }
    for j in 4..8 {
        sc[j] = (q[j + 4] & 0x0F) | ((q[j - 4] >> 6) << 4);
        m[j] = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
    (sc, m)
}

/// The inverse of [`unpack_scales`] for 6-bit values.
fn pack_scales(sc: &[u8; 8], m: &[u8; 8]) -> [u8; 12] {
    let mut q = [0u8; 12];
    for j in 0..4 {
        q[j] = (sc[j] & 63) | ((sc[j + 4] >> 4) << 6);
        q[j + 4] = (m[j] & 63) | ((m[j + 4] >> 4) << 6);
        q[j + 8] = (sc[j + 4] & 0x0F) | ((m[j + 4] & 0x0F) << 4);
    }
    q
}

/// Panics unless `len` is whole super-blocks.
#[track_caller]
fn check_super_blocks(what: &str, len: usize) {
    assert!(
        len.is_multiple_of(QK_K),
        "{what}: {len} values is not a multiple of the super-block size {QK_K}"
    );
}

/// Quantizes `x` to Q8_K: per 256 values `d = max|x| / 127` and
/// `qs = round(x / d)`, with the 16-value sums the k-quant dots use.
///
/// # Panics
///
/// If `x.len()` is not a multiple of 256.
pub fn quantize_q8_k(x: &[f32]) -> Vec<BlockQ8K> {
    let mut blocks = Vec::new();
    quantize_q8_k_into(x, &mut blocks);
    blocks
}

/// [`quantize_q8_k`] into `blocks`, resized to `x`'s super-blocks: no
/// allocation once `blocks` has held that many.
///
/// # Panics
///
/// If `x.len()` is not a multiple of 256.
pub(crate) fn quantize_q8_k_into(x: &[f32], blocks: &mut Vec<BlockQ8K>) {
    check_super_blocks("quantize_q8_k", x.len());
    #[cfg(target_arch = "x86_64")]
    if crate::tier::simd_tier() == SimdTier::Avx512 {
        // SAFETY: the AVX-512 tier has F and BW.
        return unsafe { crate::quantize_avx512::quantize_q8_k_into(x, blocks) };
    }
    quantize_q8_k_widest(x, blocks)
}

crate::tier::widest_tier! {
    fn quantize_q8_k_widest(x: &[f32], blocks: &mut Vec<BlockQ8K>) -> () = quantize_q8_k_loops_into;
}

/// The quantizer as plain loops, as Q8_0's `quantize_q8_0_loops`: the
/// reference of the AVX-512 path.
#[cfg(all(test, target_arch = "x86_64"))]
pub(crate) fn quantize_q8_k_loops(x: &[f32]) -> Vec<BlockQ8K> {
    let mut blocks = Vec::new();
    quantize_q8_k_loops_into(x, &mut blocks);
    blocks
}

/// [`quantize_q8_k_loops`] into `blocks` (resized; every field of every
/// super-block written).
#[inline(always)]
fn quantize_q8_k_loops_into(x: &[f32], blocks: &mut Vec<BlockQ8K>) {
    blocks.resize(x.len() / QK_K, BlockQ8K::ZERO);
    for (block, values) in blocks.iter_mut().zip(x.chunks_exact(QK_K)) {
        let d = crate::q8_0::abs_max(values) / 127.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        for (q, v) in block.qs.iter_mut().zip(values) {
            *q = crate::q8_0::round_half_away(v * id).clamp(-127.0, 127.0) as i8;
        }
        for (sum, group) in block.bsums.iter_mut().zip(block.qs.chunks_exact(16)) {
            let mut s = 0i16;
            for &q in group {
                s += i16::from(q);
            }
            *sum = s;
        }
        block.d = d;
    }
}

/// Quantizes `x` to Q4_K (a straightforward quantizer: each sub-block's
/// range, its scale and min rounded to 6 bits; for tests and test files,
/// not llama.cpp's error-minimising search).
///
/// # Panics
///
/// If `x.len()` is not a multiple of 256.
pub fn quantize_q4_k(x: &[f32]) -> Vec<BlockQ4K> {
    check_super_blocks("quantize_q4_k", x.len());
    x.chunks_exact(QK_K)
        .map(|values| {
            let mut scale = [0.0f32; 8];
            let mut min = [0.0f32; 8];
            for (j, sub) in values.chunks_exact(32).enumerate() {
                let lo = sub.iter().fold(0.0f32, |m, &v| m.min(v));
                let hi = sub.iter().fold(lo, |m, &v| m.max(v));
                min[j] = -lo;
                scale[j] = (hi - lo) / 15.0;
            }
            let d = scale.iter().fold(0.0f32, |m, &s| m.max(s)) / 63.0;
            let dmin = min.iter().fold(0.0f32, |m, &s| m.max(s)) / 63.0;
            let (d, dmin) = (f16::from_f32(d), f16::from_f32(dmin));
            let six = |v: f32, by: f32| -> u8 {
                if by == 0.0 {
                    0
                } else {
                    (v / by).round().clamp(0.0, 63.0) as u8
                }
            };
            let sc: [u8; 8] = std::array::from_fn(|j| six(scale[j], d.to_f32()));
            let m: [u8; 8] = std::array::from_fn(|j| six(min[j], dmin.to_f32()));
            let mut qs = [0u8; QK_K / 2];
            for (v, &value) in values.iter().enumerate() {
                let j = v / 32;
                let step = d.to_f32() * f32::from(sc[j]);
                let offset = dmin.to_f32() * f32::from(m[j]);
                let q = if step == 0.0 {
                    0
                } else {
                    ((value + offset) / step).round().clamp(0.0, 15.0) as u8
                };
                let byte = &mut qs[32 * (v / 64) + v % 32];
                *byte |= if v % 64 < 32 { q } else { q << 4 };
            }
            BlockQ4K {
                d,
                dmin,
                scales: pack_scales(&sc, &m),
                qs,
            }
        })
        .collect()
}

/// Quantizes `x` to Q6_K (each 16-value group's scale rounded to `i8`;
/// for tests and test files).
///
/// # Panics
///
/// If `x.len()` is not a multiple of 256.
pub fn quantize_q6_k(x: &[f32]) -> Vec<BlockQ6K> {
    check_super_blocks("quantize_q6_k", x.len());
    x.chunks_exact(QK_K)
        .map(|values| {
            let group_scale: [f32; 16] = std::array::from_fn(|g| {
                values[16 * g..16 * g + 16]
                    .iter()
                    .fold(0.0f32, |m, v| m.max(v.abs()))
                    / 31.0
            });
            let d = f16::from_f32(group_scale.iter().fold(0.0f32, |m, &s| m.max(s)) / 127.0);
            let scales: [i8; 16] = std::array::from_fn(|g| {
                if d.to_f32() == 0.0 {
                    0
                } else {
                    (group_scale[g] / d.to_f32()).round().clamp(-127.0, 127.0) as i8
                }
            });
            let mut block = BlockQ6K {
                ql: [0; QK_K / 2],
                qh: [0; QK_K / 4],
                scales,
                d,
            };
            for (v, &value) in values.iter().enumerate() {
                let step = d.to_f32() * f32::from(scales[v / 16]);
                let q = if step == 0.0 {
                    32
                } else {
                    ((value / step).round().clamp(-32.0, 31.0) as i32 + 32) as u8
                };
                let (n, r) = (v / 128, v % 128);
                let (l, quarter) = (r % 32, r / 32);
                let low = &mut block.ql[64 * n + l + 32 * (quarter % 2)];
                *low |= if quarter < 2 {
                    q & 0x0F
                } else {
                    (q & 0x0F) << 4
                };
                block.qh[32 * n + l] |= (q >> 4) << (2 * quarter);
            }
            block
        })
        .collect()
}

/// The values a Q4_K row stands for.
pub fn dequantize_q4_k(blocks: &[BlockQ4K]) -> Vec<f32> {
    let mut out = vec![0.0; blocks.len() * QK_K];
    dequantize_q4_k_into(blocks, &mut out);
    out
}

/// [`dequantize_q4_k`] into `out` (`blocks.len() * 256` values).
pub(crate) fn dequantize_q4_k_into(blocks: &[BlockQ4K], out: &mut [f32]) {
    assert_eq!(out.len(), blocks.len() * QK_K);
    for (b, out) in blocks.iter().zip(out.chunks_exact_mut(QK_K)) {
        let (sc, m) = b.scales_and_mins();
        let (d, dmin) = (b.d.to_f32(), b.dmin.to_f32());
        for (v, o) in out.iter_mut().enumerate() {
            let j = v / 32;
            *o = d * f32::from(sc[j]) * f32::from(b.value(v)) - dmin * f32::from(m[j]);
        }
    }
}

/// The values a Q6_K row stands for.
pub fn dequantize_q6_k(blocks: &[BlockQ6K]) -> Vec<f32> {
    let mut out = vec![0.0; blocks.len() * QK_K];
    dequantize_q6_k_into(blocks, &mut out);
    out
}

/// [`dequantize_q6_k`] into `out` (`blocks.len() * 256` values).
pub(crate) fn dequantize_q6_k_into(blocks: &[BlockQ6K], out: &mut [f32]) {
    assert_eq!(out.len(), blocks.len() * QK_K);
    for (b, out) in blocks.iter().zip(out.chunks_exact_mut(QK_K)) {
        let d = b.d.to_f32();
        for (v, o) in out.iter_mut().enumerate() {
            let q = i32::from(b.value(v)) - 32;
            *o = d * f32::from(b.scales[v / 16]) * q as f32;
        }
    }
}

/// A Q4_K super-block's term from its exact integer sums (module docs).
#[inline(always)]
pub(crate) fn q4_k_term(w: &BlockQ4K, x: &BlockQ8K, sdot: i32, smin: i32) -> f32 {
    let dx = x.d;
    sdot as f32 * (w.d.to_f32() * dx) - smin as f32 * (w.dmin.to_f32() * dx)
}

/// The mins' integer part of a Q4_K super-block: `sum_j m_j * (bsum_2j +
/// bsum_2j+1)`.
#[inline(always)]
pub(crate) fn q4_k_smin(m: &[u8; 8], x: &BlockQ8K) -> i32 {
    (0..8)
        .map(|j| i32::from(m[j]) * (i32::from(x.bsums[2 * j]) + i32::from(x.bsums[2 * j + 1])))
        .sum()
}

/// The offset half of a Q6_K super-block's integer part:
/// `32 * sum_g sc_g * bsum_g`.
#[inline(always)]
pub(crate) fn q6_k_bias(w: &BlockQ6K, x: &BlockQ8K) -> i32 {
    32 * (0..16)
        .map(|g| i32::from(w.scales[g]) * i32::from(x.bsums[g]))
        .sum::<i32>()
}

/// A Q6_K super-block's term from its exact integer sum.
#[inline(always)]
pub(crate) fn q6_k_term(w: &BlockQ6K, x: &BlockQ8K, sdot: i32) -> f32 {
    blocks::term(sdot, w.d.to_f32(), x.d)
}

/// The scalar reference: a Q4_K row dotted with a Q8_K activation.
pub fn dot_q4_k_scalar(w: &[BlockQ4K], x: &[BlockQ8K]) -> f32 {
    let n = w.len().min(x.len());
    blocks::accumulate(n, |b| {
        let (w, x) = (&w[b], &x[b]);
        let (sc, m) = w.scales_and_mins();
        let sdot: i32 = (0..8)
            .map(|j| {
                let s: i32 = (0..32)
                    .map(|l| i32::from(w.value(32 * j + l)) * i32::from(x.qs[32 * j + l]))
                    .sum();
                i32::from(sc[j]) * s
            })
            .sum();
        q4_k_term(w, x, sdot, q4_k_smin(&m, x))
    })
}

/// The scalar reference: a Q6_K row dotted with a Q8_K activation.
pub fn dot_q6_k_scalar(w: &[BlockQ6K], x: &[BlockQ8K]) -> f32 {
    let n = w.len().min(x.len());
    blocks::accumulate(n, |b| {
        let (w, x) = (&w[b], &x[b]);
        let unsigned: i32 = (0..16)
            .map(|g| {
                let s: i32 = (0..16)
                    .map(|l| {
                        let v = 16 * g + l;
                        i32::from(w.value(v)) * i32::from(x.qs[v])
                    })
                    .sum();
                i32::from(w.scales[g]) * s
            })
            .sum();
        q6_k_term(w, x, unsigned - q6_k_bias(w, x))
    })
}

/// A row kernel: one row's blocks dotted with the activation.
pub(crate) type DotFn<W> = fn(&[W], &[BlockQ8K]) -> f32;

/// The Q4_K and Q6_K row kernels for `tier`.
pub(crate) fn kernels(tier: SimdTier) -> (DotFn<BlockQ4K>, DotFn<BlockQ6K>) {
    match tier {
        #[cfg(target_arch = "x86_64")]
        SimdTier::Avx512 => (x86::dot_q4_k_512, x86::dot_q6_k_512),
        #[cfg(target_arch = "x86_64")]
        SimdTier::Avx2 => (x86::dot_q4_k, x86::dot_q6_k),
        #[cfg(target_arch = "aarch64")]
        SimdTier::Neon if crate::tier::has_neon_dotprod() => {
            (neon::dot_q4_k_sdot, neon::dot_q6_k_sdot)
        }
        #[cfg(target_arch = "aarch64")]
        SimdTier::Neon => (neon::dot_q4_k_mull, neon::dot_q6_k_mull),
        _ => (dot_q4_k_scalar, dot_q6_k_scalar),
    }
}

/// A two-row kernel: two rows against one activation, each row's bits the
/// one-row kernel's.
pub(crate) type Dot2Fn<W> = fn(&[W], &[W], &[BlockQ8K]) -> (f32, f32);

/// The tier's two-row Q4_K and Q6_K kernels, where it has them.
pub(crate) fn pair_kernels(tier: SimdTier) -> (Option<Dot2Fn<BlockQ4K>>, Option<Dot2Fn<BlockQ6K>>) {
    match tier {
        #[cfg(target_arch = "x86_64")]
        SimdTier::Avx512 => (Some(x86::dot2_q4_k_512), Some(x86::dot2_q6_k_512)),
        #[cfg(target_arch = "x86_64")]
        SimdTier::Avx2 => (Some(x86::dot2_q4_k), None),
        _ => (None, None),
    }
}

/// Rows of `w` (`per_row` super-blocks each) dotted with `x` into `out`:
/// two at a time with `dot2` where the tier has one, else `dot` each.
pub(crate) fn rows_with<W>(
    w: &[W],
    per_row: usize,
    x: &[BlockQ8K],
    out: &mut [f32],
    dot: DotFn<W>,
    dot2: Option<Dot2Fn<W>>,
) {
    let row = |r: usize| &w[r * per_row..(r + 1) * per_row];
    let Some(dot2) = dot2 else {
        for (r, o) in out.iter_mut().enumerate() {
            *o = dot(row(r), x);
        }
        return;
    };
    let mut pairs = out.chunks_exact_mut(2);
    let mut r = 0;
    for pair in &mut pairs {
        (pair[0], pair[1]) = dot2(row(r), row(r + 1), x);
        r += 2;
    }
    if let [last] = pairs.into_remainder() {
        *last = dot(row(r), x);
    }
}

/// Q4_K rows on this CPU's tier.
pub(crate) fn q4_k_rows(w: &[BlockQ4K], per_row: usize, x: &[BlockQ8K], out: &mut [f32]) {
    let tier = crate::tier::simd_tier();
    rows_with(w, per_row, x, out, kernels(tier).0, pair_kernels(tier).0);
}

/// Q6_K rows on this CPU's tier.
pub(crate) fn q6_k_rows(w: &[BlockQ6K], per_row: usize, x: &[BlockQ8K], out: &mut [f32]) {
    let tier = crate::tier::simd_tier();
    rows_with(w, per_row, x, out, kernels(tier).1, pair_kernels(tier).1);
}

/// A Q4_K row dotted with a Q8_K activation on this CPU's tier (the same
/// bits as [`dot_q4_k_scalar`]).
pub fn dot_q4_k(w: &[BlockQ4K], x: &[BlockQ8K]) -> f32 {
    kernels(crate::tier::simd_tier()).0(w, x)
}

/// A Q6_K row dotted with a Q8_K activation on this CPU's tier (the same
/// bits as [`dot_q6_k_scalar`]).
pub fn dot_q6_k(w: &[BlockQ6K], x: &[BlockQ8K]) -> f32 {
    kernels(crate::tier::simd_tier()).1(w, x)
}

/// [`dot_q4_k`] on a given tier; `None` if this CPU cannot run it.
pub fn dot_q4_k_on(tier: SimdTier, w: &[BlockQ4K], x: &[BlockQ8K]) -> Option<f32> {
    tier.is_available().then(|| kernels(tier).0(w, x))
}

/// [`dot_q6_k`] on a given tier; `None` if this CPU cannot run it.
pub fn dot_q6_k_on(tier: SimdTier, w: &[BlockQ6K], x: &[BlockQ8K]) -> Option<f32> {
    tier.is_available().then(|| kernels(tier).1(w, x))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::random::XorShift;

    fn values(rng: &mut XorShift, n: usize) -> Vec<f32> {
        (0..n).map(|_| rng.uniform() * 2.0).collect()
    }

    #[test]
    fn the_block_sizes_are_ggmls() {
        assert_eq!(std::mem::size_of::<BlockQ4K>(), 144);
        assert_eq!(std::mem::size_of::<BlockQ6K>(), 210);
        assert_eq!(std::mem::size_of::<BlockQ8K>(), 292);
    }

    #[test]
    fn scales_pack_and_unpack() {
        let sc = [0, 1, 17, 63, 32, 47, 5, 62];
        let m = [63, 0, 31, 2, 60, 16, 33, 9];
        assert_eq!(unpack_scales(&pack_scales(&sc, &m)), (sc, m));
    }

    #[test]
    fn quantized_values_come_back_close() {
        let mut rng = XorShift(3);
        let x = values(&mut rng, 4 * QK_K);
        let q4 = dequantize_q4_k(&quantize_q4_k(&x));
        let q6 = dequantize_q6_k(&quantize_q6_k(&x));
        for ((&v, &a), &b) in x.iter().zip(&q4).zip(&q6) {
            assert!((v - a).abs() < 0.15, "q4_k {v} -> {a}");
            assert!((v - b).abs() < 0.05, "q6_k {v} -> {b}");
        }
    }

    #[test]
    fn the_scalar_dots_equal_the_dequantized_dot_to_rounding() {
        let mut rng = XorShift(5);
        let (w, x) = (values(&mut rng, 3 * QK_K), values(&mut rng, 3 * QK_K));
        let xq = quantize_q8_k(&x);
        let xd: Vec<f32> = xq
            .iter()
            .flat_map(|b| b.qs.iter().map(move |&q| b.d * f32::from(q)))
            .collect();
        let q4 = quantize_q4_k(&w);
        let want: f32 = dequantize_q4_k(&q4)
            .iter()
            .zip(&xd)
            .map(|(a, b)| a * b)
            .sum();
        let got = dot_q4_k_scalar(&q4, &xq);
        assert!(
            (got - want).abs() < 1e-3 * want.abs().max(1.0),
            "{got} vs {want}"
        );
        let q6 = quantize_q6_k(&w);
        let want: f32 = dequantize_q6_k(&q6)
            .iter()
            .zip(&xd)
            .map(|(a, b)| a * b)
            .sum();
        let got = dot_q6_k_scalar(&q6, &xq);
        assert!(
            (got - want).abs() < 1e-3 * want.abs().max(1.0),
            "{got} vs {want}"
        );
    }

    /// Extreme blocks: every 4- and 6-bit value at its ends, scales at
    /// their ends, activations at +-127.
    fn extreme_rows(
        rng: &mut XorShift,
        blocks: usize,
    ) -> (Vec<BlockQ4K>, Vec<BlockQ6K>, Vec<BlockQ8K>) {
        let byte = |rng: &mut XorShift| (rng.next_u64() >> 24) as u8;
        let q4 = (0..blocks)
            .map(|b| BlockQ4K {
                d: f16::from_f32(0.5 + b as f32),
                dmin: f16::from_f32(0.25),
                scales: std::array::from_fn(|i| if i % 3 == 0 { 0xFF } else { byte(rng) }),
                qs: std::array::from_fn(|i| if i % 5 == 0 { 0xFF } else { byte(rng) }),
            })
            .collect();
        let q6 = (0..blocks)
            .map(|_| BlockQ6K {
                ql: std::array::from_fn(|i| if i % 4 == 0 { 0xFF } else { byte(rng) }),
                qh: std::array::from_fn(|i| if i % 4 == 0 { 0xFF } else { byte(rng) }),
                scales: std::array::from_fn(|i| match i % 4 {
                    0 => 127,
                    1 => -128,
                    _ => byte(rng) as i8,
                }),
                d: f16::from_f32(0.125),
            })
            .collect();
        let x = (0..blocks)
            .map(|_| {
                let qs: [i8; QK_K] = std::array::from_fn(|i| match i % 7 {
                    0 => 127,
                    1 => -127,
                    _ => byte(rng) as i8,
                });
                let mut bsums = [0i16; 16];
                for (s, g) in bsums.iter_mut().zip(qs.chunks_exact(16)) {
                    *s = g.iter().map(|&q| i16::from(q)).sum();
                }
                BlockQ8K { d: 0.75, qs, bsums }
            })
            .collect();
        (q4, q6, x)
    }

    #[test]
    fn the_pair_kernels_give_each_rows_scalar_bits() {
        let mut rng = XorShift(13);
        let sizes: &[usize] = if cfg!(miri) {
            &[1, 9]
        } else {
            &[1, 3, 8, 9, 17]
        };
        for &blocks in sizes {
            let (a, _, x) = extreme_rows(&mut rng, blocks);
            let (b, _, _) = extreme_rows(&mut rng, blocks);
            let (_, a6, _) = extreme_rows(&mut rng, blocks);
            let (_, b6, _) = extreme_rows(&mut rng, blocks);
            for tier in SimdTier::available() {
                let (pair4, pair6) = pair_kernels(tier);
                if let Some(dot2) = pair4 {
                    let (ra, rb) = dot2(&a, &b, &x);
                    assert_eq!(ra.to_bits(), dot_q4_k_scalar(&a, &x).to_bits(), "{tier:?}");
                    assert_eq!(rb.to_bits(), dot_q4_k_scalar(&b, &x).to_bits(), "{tier:?}");
                }
                if let Some(dot2) = pair6 {
                    let (ra, rb) = dot2(&a6, &b6, &x);
                    assert_eq!(ra.to_bits(), dot_q6_k_scalar(&a6, &x).to_bits(), "{tier:?}");
                    assert_eq!(rb.to_bits(), dot_q6_k_scalar(&b6, &x).to_bits(), "{tier:?}");
                }
            }
            let w: Vec<BlockQ4K> = a.iter().chain(&b).chain(&a).copied().collect();
            let mut out = [0.0f32; 3];
            q4_k_rows(&w, blocks, &x, &mut out);
            assert_eq!(out[1].to_bits(), dot_q4_k_scalar(&b, &x).to_bits());
            assert_eq!(out[2].to_bits(), dot_q4_k_scalar(&a, &x).to_bits());
            let w: Vec<BlockQ6K> = a6.iter().chain(&b6).copied().collect();
            let mut out = [0.0f32; 2];
            q6_k_rows(&w, blocks, &x, &mut out);
            assert_eq!(out[1].to_bits(), dot_q6_k_scalar(&b6, &x).to_bits());
        }
    }

    #[test]
    fn every_tier_this_cpu_has_gives_the_scalar_bits() {
        let mut rng = XorShift(11);
        let sizes: &[usize] = if cfg!(miri) {
            &[1, 3, 9]
        } else {
            &[1, 2, 3, 7, 8, 9, 17]
        };
        for &blocks in sizes {
            let (q4, q6, x) = extreme_rows(&mut rng, blocks);
            let (want4, want6) = (dot_q4_k_scalar(&q4, &x), dot_q6_k_scalar(&q6, &x));
            for tier in SimdTier::available() {
                let got4 = dot_q4_k_on(tier, &q4, &x).unwrap();
                let got6 = dot_q6_k_on(tier, &q6, &x).unwrap();
                assert_eq!(
                    got4.to_bits(),
                    want4.to_bits(),
                    "q4_k {tier:?}, {blocks} blocks"
                );
                assert_eq!(
                    got6.to_bits(),
                    want6.to_bits(),
                    "q6_k {tier:?}, {blocks} blocks"
                );
            }
        }
    }
}
