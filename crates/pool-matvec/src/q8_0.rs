//! Q8_0: GGUF's 8-bit block format, and its matvec.
//!
//! A block is 32 `i8` weights and one `f16` scale `d` (34 bytes, the layout
//! GGUF and llama.cpp use): value `j` is `d * qs[j]`. As in llama.cpp, the
//! activation is quantized to Q8_0 too (values in -127..=127), and each
//! row is `sum_b sumi[b] * (d_w[b] * d_x[b])` with `sumi[b]` the exact
//! integer dot of block `b`, the terms added in the fixed eight-lane order
//! of `blocks.rs`. The integer part is exact on every path: VNNI multiplies
//! `w + 128` (unsigned) by `x` and subtracts `128 * sum(x)`, NEON signed by
//! signed, and the AVX2 path multiplies `|w|` (as unsigned, so even -128
//! is 128) by `x * sign(w)` with `maddubs`, whose pair sums stay within
//! i16 because `x` is never -128 (the quantizer's range; on AVX2 a
//! caller's `x` holding -128 takes the scalar path). So every path agrees
//! bit for bit, for any thread count.

use crate::executor::{gated, Executor};
use half::f16;

use crate::rows::{RowParallel, RowsInto};
use crate::shape::{check_block_row, check_blocks};
use crate::tier::SimdTier;

/// Weights per Q8_0 block.
pub const QK8_0: usize = 32;

/// One Q8_0 block: scale, then 32 quantized values (GGUF layout).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BlockQ8_0 {
    /// The scale: value `j` is `d * qs[j]`.
    pub d: f16,
    /// The quantized values.
    pub qs: [i8; QK8_0],
}

impl BlockQ8_0 {
    /// A block of zeros (scale 0): what output buffers start as.
    pub(crate) const ZERO: BlockQ8_0 = BlockQ8_0 {
        d: f16::ZERO,
        qs: [0; QK8_0],
    };
}

/// Quantizes `x` to Q8_0 as llama.cpp's reference does: `d = max|x| / 127`,
/// `qs = round(x / d)` (half away from zero), `d` stored as f16.
///
/// # Panics
///
/// If `x.len()` is not a multiple of 32.
///
/// ```
/// let blocks = pool_matvec::quantize_q8_0(&[1.0; 32]);
/// assert_eq!(blocks[0].qs, [127; 32]);
/// ```
pub fn quantize_q8_0(x: &[f32]) -> Vec<BlockQ8_0> {
    let mut blocks = Vec::new();
    quantize_q8_0_into(x, &mut blocks);
    blocks
}

/// [`quantize_q8_0`] into `blocks`, resized to `x`'s blocks: no
/// allocation once `blocks` has held that many.
///
/// # Panics
///
/// If `x.len()` is not a multiple of 32.
pub(crate) fn quantize_q8_0_into(x: &[f32], blocks: &mut Vec<BlockQ8_0>) {
    assert!(
        x.len().is_multiple_of(QK8_0),
        "quantize_q8_0: {} values is not a multiple of the block size {QK8_0}",
        x.len()
    );
    #[cfg(target_arch = "x86_64")]
    if crate::tier::simd_tier() == SimdTier::Avx512 {
        // SAFETY: the AVX-512 tier has F and BW.
        return unsafe { crate::quantize_avx512::quantize_q8_0_into(x, blocks) };
    }
    quantize_widest(x, blocks)
}

crate::tier::widest_tier! {
    fn quantize_widest(x: &[f32], blocks: &mut Vec<BlockQ8_0>) -> () = quantize_q8_0_loops_into;
}

/// The quantizer as plain loops, the reference the AVX-512 path equals bit
/// for bit.
#[cfg(all(test, target_arch = "x86_64"))]
pub(crate) fn quantize_q8_0_loops(x: &[f32]) -> Vec<BlockQ8_0> {
    let mut blocks = Vec::new();
    quantize_q8_0_loops_into(x, &mut blocks);
    blocks
}

/// [`quantize_q8_0_loops`] into `blocks` (resized; every field of every
/// block written). No iterator adapters: an adapter's `fold` is a
/// function of its own, compiled for the baseline tier, not inlined into
/// `widest_tier!`'s wider copies.
#[inline(always)]
fn quantize_q8_0_loops_into(x: &[f32], blocks: &mut Vec<BlockQ8_0>) {
    blocks.resize(x.len() / QK8_0, BlockQ8_0::ZERO);
    for (block, values) in blocks.iter_mut().zip(x.chunks_exact(QK8_0)) {
        let d = abs_max(values) / 127.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        for (q, v) in block.qs.iter_mut().zip(values) {
            *q = round_half_away(v * id) as i8;
        }
        block.d = f16::from_f32(d);
    }
}

/// `v.round()` (half away from zero), bit for bit, without the C
/// library's `roundf`: the quantizers call it for every activation value,
/// and without SSE4.1 at compile time `f32::round` is a call (1 % of a
/// decode token) into a library that may get it wrong (mingw-w64's
/// rounds 0.49999997 to 1: a quantized activation, and so the logits,
/// could differ between Linux and Windows GNU builds). Below 2^23 the fraction `v - trunc(v)` is exact; above,
/// every f32 is an integer already (NaN and infinities pass through).
#[inline]
pub(crate) fn round_half_away(v: f32) -> f32 {
    // Branch-free, so the quantizers' loops vectorize.
    let a = v.abs();
    // Toward zero, exact below 2^23; so is the difference.
    let t = a as i32 as f32;
    let rounded = t + f32::from(u8::from(a - t >= 0.5));
    // -0.3 rounds to -0.0.
    let rounded = rounded.copysign(v);
    if a < 8_388_608.0 {
        rounded
    } else {
        v
    }
}

/// `max |v|` over `values`, in eight lanes: `max` is exact and order-free,
/// so this is the sequential fold's value, in a loop that vectorizes.
#[inline]
pub(crate) fn abs_max(values: &[f32]) -> f32 {
    let mut lanes = [0.0f32; 8];
    let mut chunks = values.chunks_exact(8);
    for chunk in &mut chunks {
        for (m, v) in lanes.iter_mut().zip(chunk) {
            *m = m.max(v.abs());
        }
    }
    let tail = chunks
        .remainder()
        .iter()
        .fold(0.0f32, |m, v| m.max(v.abs()));
    lanes.iter().fold(tail, |m, &v| m.max(v))
}

/// The values a block row stands for.
pub fn dequantize_q8_0(blocks: &[BlockQ8_0]) -> Vec<f32> {
    let mut out = vec![0.0; blocks.len() * QK8_0];
    dequantize_q8_0_into(blocks, &mut out);
    out
}

/// [`dequantize_q8_0`] into `out` (`blocks.len() * 32` values).
pub(crate) fn dequantize_q8_0_into(blocks: &[BlockQ8_0], out: &mut [f32]) {
    assert_eq!(out.len(), blocks.len() * QK8_0);
    for (b, out) in blocks.iter().zip(out.chunks_exact_mut(QK8_0)) {
        let d = b.d.to_f32();
        for (o, &q) in out.iter_mut().zip(&b.qs) {
            *o = d * q as f32;
        }
    }
}

/// `out = W x` for Q8_0 weights (`w` row-major, `x.len() / 32` blocks per
/// row), with `x` quantized to Q8_0 first. Deterministic across thread
/// counts; AVX2 and scalar paths agree bit for bit.
///
/// # Panics
///
/// If `x.len()` is not a multiple of 32, or `w` holds fewer than
/// `out.len() * x.len() / 32` blocks (message names the shapes).
pub fn matvec_q8_0(exec: impl Executor, w: &[BlockQ8_0], x: &[f32], out: &mut [f32]) {
    check_block_row("matvec_q8_0", x.len());
    matvec_q8_0_prepared(exec, w, &quantize_q8_0(x), out);
}

/// [`matvec_q8_0`] with the activation already quantized (one
/// [`quantize_q8_0`] shared by every matrix that reads the same input, as
/// Q, K and V do). An `xq` holding -128 (which `quantize_q8_0` never
/// makes) is exact too (on the AVX2 tier it runs the scalar path).
///
/// # Panics
///
/// If `w` holds fewer than `out.len() * xq.len()` blocks.
pub fn matvec_q8_0_prepared(
    exec: impl Executor,
    w: &[BlockQ8_0],
    xq: &[BlockQ8_0],
    out: &mut [f32],
) {
    let (rows, blocks_per_row) = (out.len(), xq.len());
    check_blocks("matvec_q8_0", w.len(), rows, blocks_per_row);
    let extras = ActivationExtras::of(xq);
    let x = extras.with(xq);
    let exec = gated(&exec, rows, blocks_per_row * QK8_0);
    rows_into(exec, w, blocks_per_row, &x, out);
}

/// Rows `0..out.len()` of `w` (`blocks_per_row` blocks each) against `x`
/// on `exec`, two rows per kernel call where the tier has a pair kernel
/// (each row's arithmetic is the one-row kernel's: the same bits).
pub(crate) fn rows_into(
    exec: &dyn RowParallel,
    w: &[BlockQ8_0],
    blocks_per_row: usize,
    x: &Activation<'_>,
    out: &mut [f32],
) {
    let (dot, dot2) = (select_dot(x), select_dot2(x));
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
pub(crate) type Dot2Fn = fn(&[BlockQ8_0], &[BlockQ8_0], &Activation<'_>) -> (f32, f32);

/// The pair kernel for `x` where the tier has one (VNNI; AVX2 for rows
/// of at most [`AVX2_PAIR_MAX_BLOCKS`]); `None`: the caller runs the
/// one-row kernel twice.
fn select_dot2(x: &Activation<'_>) -> Option<Dot2Fn> {
    #[cfg(target_arch = "x86_64")]
    if crate::tier::simd_tier() == SimdTier::Avx512 {
        if crate::tier::has_avx512_vbmi() {
            return Some(avx512::dot2_vbmi);
        }
        if crate::tier::has_avx512_vnni() {
            return Some(avx512::dot2);
        }
    }
    #[cfg(target_arch = "x86_64")]
    if crate::tier::simd_tier() == SimdTier::Avx2 && !x.has_min && x.q.len() <= AVX2_PAIR_MAX_BLOCKS
    {
        return Some(avx2::dot2);
    }
    let _ = x;
    None
}

/// The longest rows (in blocks: 512 values) that AVX2 reads two at a
/// time. One Zen 3 core, four matrices from DRAM, GB/s one row at a time
/// -> two (two runs each): rows of 288 values 16.6, 16.0 -> 18.9, 17.8;
/// 384: 13.6, 13.9 -> 15.3, 15.5; 512: 18.7, 19.3 -> 20.3, 19.8; 576:
/// 16.9, 16.5 -> 19.7, 19.7; but 640: 14.9, 15.1 -> 13.5, 14.6; 768:
/// 20.8, 18.0 -> 12.6, 12.6; 1024: 19.3, 19.6 -> 12.8, 12.6 (the stream
/// slows near the read ceiling when two rows of this length advance side
/// by side; at 4096 the two read level). Decoding stories15M (rows of
/// 288 and 768), `pool decode --threads 1`, 7 interleaved runs: Q4_0
/// (a Q8_0 classifier) 1027 -> 1103 tokens/s, Q8_0 962 -> 1056.
#[cfg(target_arch = "x86_64")]
const AVX2_PAIR_MAX_BLOCKS: usize = 16;

/// A Q8_0 activation and what every row's kernel needs of it, computed
/// once per input vector: the scales as f32 and each block's sum of
/// values (Q4_0's kernel multiplies unsigned nibbles and subtracts
/// `8 * sum`).
#[derive(Clone, Copy)]
pub(crate) struct Activation<'a> {
    pub(crate) q: &'a [BlockQ8_0],
    // Read by the SIMD paths (NEON reads the scales only).
    #[cfg_attr(
        not(any(target_arch = "x86_64", target_arch = "aarch64")),
        allow(dead_code)
    )]
    pub(crate) d: &'a [f32],
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    pub(crate) sum: &'a [i32],
    /// Blocks `4q..4q + 4` as the four low halves, then the four high
    /// halves (`[x0[..16], x1[..16], x2[..16], x3[..16], x0[16..], ..]`):
    /// what Q4_0's x86 kernels multiply low and high nibbles by, one load
    /// per two blocks' (32 bytes) or four blocks' (64 bytes) halves.
    /// Empty unless built by [`ActivationExtras::for_q4_0`].
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    pub(crate) quads: &'a [[i8; 128]],
    /// Whether a value is -128 (never from `quantize_q8_0`): the AVX2
    /// sign trick is not exact then, and the scalar path runs instead.
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    pub(crate) has_min: bool,
}

impl Activation<'_> {
    /// The first `blocks` blocks in whole groups of eight: blocks, sums,
    /// scales.
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    pub(crate) fn groups(
        &self,
        blocks: usize,
    ) -> impl Iterator<Item = (&[BlockQ8_0; 8], &[i32; 8], &[f32; 8])> {
        use crate::blocks::eights;
        eights(self.q, blocks)
            .iter()
            .zip(eights(self.sum, blocks))
            .zip(eights(self.d, blocks))
            .map(|((q, sum), d)| (q, sum, d))
    }

    /// `quads` for the first `blocks` blocks' whole groups of eight: two
    /// quads per group.
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    pub(crate) fn quad_groups(&self, blocks: usize) -> &[[[i8; 128]; 2]] {
        let groups = blocks / crate::blocks::LANES;
        self.quads[..groups * 2].as_chunks::<2>().0
    }
}

/// What [`Activation`] adds to the blocks, owned (kept beside them).
#[derive(Debug, Clone, Default)]
pub(crate) struct ActivationExtras {
    d: Vec<f32>,
    sum: Vec<i32>,
    quads: Vec<[i8; 128]>,
    has_min: bool,
}

impl ActivationExtras {
    /// What every kernel reads: scales, sums, whether -128 occurs. No
    /// `quads` (only Q4_0's kernels read them: [`ActivationExtras::for_q4_0`]).
    pub(crate) fn of(q: &[BlockQ8_0]) -> ActivationExtras {
        let mut extras = ActivationExtras::default();
        extras.fill(q, false);
        extras
    }

    /// [`ActivationExtras::of`] plus the `quads` the x86 Q4_0 kernels
    /// read (elsewhere none: no work).
    pub(crate) fn for_q4_0(q: &[BlockQ8_0]) -> ActivationExtras {
        let mut extras = ActivationExtras::default();
        extras.fill(q, true);
        extras
    }

    /// Recomputes these extras for `q` in place (with `quads` when
    /// `for_q4_0`): no allocation once they have held as many blocks.
    pub(crate) fn fill(&mut self, q: &[BlockQ8_0], for_q4_0: bool) {
        extras_into(q, self, for_q4_0);
    }

    /// The activation of `q`, which these extras were computed from.
    pub(crate) fn with<'a>(&'a self, q: &'a [BlockQ8_0]) -> Activation<'a> {
        debug_assert_eq!(q.len(), self.d.len());
        Activation {
            q,
            d: &self.d,
            sum: &self.sum,
            quads: &self.quads,
            has_min: self.has_min,
        }
    }
}

crate::tier::widest_tier! {
    fn extras_into(q: &[BlockQ8_0], extras: &mut ActivationExtras, for_q4_0: bool) -> () = extras_into_body;
}

#[inline(always)]
fn extras_into_body(q: &[BlockQ8_0], extras: &mut ActivationExtras, for_q4_0: bool) {
    // Plain loops, as in `quantize_q8_0_loops_into`; every element is
    // written, so resizing keeps no stale value.
    extras.d.resize(q.len(), 0.0);
    extras.sum.resize(q.len(), 0);
    let mut has_min = false;
    for ((block, d), sum) in q.iter().zip(&mut extras.d).zip(&mut extras.sum) {
        *d = block.d.to_f32();
        let mut s = 0i32;
        for &v in &block.qs {
            s += i32::from(v);
            has_min |= v == i8::MIN;
        }
        *sum = s;
    }
    extras.has_min = has_min;
    if for_q4_0 && cfg!(target_arch = "x86_64") {
        extras.quads.resize(q.len() / 4, [0i8; 128]);
        for (quad, four) in extras.quads.iter_mut().zip(q.chunks_exact(4)) {
            // Sixteen bytes at a time: half `h` of block `b`.
            for (j, part) in quad.chunks_exact_mut(16).enumerate() {
                let (h, b) = (j / 4, j % 4);
                part.copy_from_slice(&four[b].qs[16 * h..][..16]);
            }
        }
    } else {
        extras.quads.clear();
    }
}

/// One row's dot product, scalar path: the reference every SIMD path
/// equals bit for bit.
pub fn dot_q8_0_scalar(w: &[BlockQ8_0], x: &[BlockQ8_0]) -> f32 {
    let blocks = w.len().min(x.len());
    crate::blocks::accumulate(blocks, |b| {
        let sumi = w[b]
            .qs
            .iter()
            .zip(&x[b].qs)
            .map(|(&p, &q)| i32::from(p) * i32::from(q))
            .sum();
        crate::blocks::term(sumi, w[b].d.to_f32(), x[b].d.to_f32())
    })
}

/// One row's dot product by the tier the kernels use. Any `x` is exact:
/// on the AVX2 tier, one holding -128 (never produced by
/// [`quantize_q8_0`]) takes the scalar path.
pub fn dot_q8_0(w: &[BlockQ8_0], x: &[BlockQ8_0]) -> f32 {
    let extras = ActivationExtras::of(x);
    let x = extras.with(x);
    select_dot(&x)(w, &x)
}

/// One row against a prepared activation (the kernel `select_dot` picked).
pub(crate) type DotFn = fn(&[BlockQ8_0], &Activation<'_>) -> f32;

fn dot_scalar(w: &[BlockQ8_0], x: &Activation<'_>) -> f32 {
    dot_q8_0_scalar(w, x.q)
}

/// The kernel for `x`: the tier's, or the scalar path where the tier's is
/// not exact for it (AVX2 and an `x` holding -128).
pub(crate) fn select_dot(x: &Activation<'_>) -> DotFn {
    kernel_for(crate::tier::simd_tier(), x)
}

/// The kernel `tier` runs for `x` (an available tier).
fn kernel_for(tier: SimdTier, x: &Activation<'_>) -> DotFn {
    // NEON multiplies signed by signed: exact for any `x`, -128 included.
    #[cfg(target_arch = "aarch64")]
    if tier == SimdTier::Neon {
        return if crate::tier::has_neon_dotprod() {
            neon::dot_sdot
        } else {
            neon::dot_mull
        };
    }
    match tier {
        // VNNI multiplies `w + 128` (unsigned) by `x` as is: exact for any
        // `x`, -128 included.
        #[cfg(target_arch = "x86_64")]
        SimdTier::Avx512 if crate::tier::has_avx512_vbmi() => avx512::dot_vbmi,
        #[cfg(target_arch = "x86_64")]
        SimdTier::Avx512 if crate::tier::has_avx512_vnni() => avx512::dot,
        // The AVX2 sign trick is exact only for an `x` without -128. On
        // AVX-512 without VNNI too: the same trick on 512-bit registers
        // (two blocks per register, an insert each for `w` and `x`, a
        // mask negation, lane permutes to reduce) measured 22 % slower
        // from L2 on one core (1.77-1.81 against 1.45 ns per block).
        #[cfg(target_arch = "x86_64")]
        SimdTier::Avx512 | SimdTier::Avx2 if !x.has_min => avx2::dot,
        _ => {
            let _ = x;
            dot_scalar
        }
    }
}

/// One row's dot product by `tier`'s code path; `None` if this CPU cannot
/// run the tier. Every tier gives the scalar path's bits.
pub fn dot_q8_0_on(tier: SimdTier, w: &[BlockQ8_0], x: &[BlockQ8_0]) -> Option<f32> {
    if !tier.is_available() {
        return None;
    }
    let extras = ActivationExtras::of(x);
    let x = extras.with(x);
    Some(kernel_for(tier, &x)(w, &x))
}

/// AVX-512 VNNI on 256-bit registers: `vpdpbusd` multiplies unsigned by
/// signed bytes, four products summed into each i32 lane. The weights go
/// in as `w + 128` (one XOR of the sign bit, 0..=255 unsigned), `x` as it
/// is, and each block's sum is corrected by `128 * sum(x)` (once per
/// activation): one instruction per block fewer than the AVX2 sign trick
/// (which signs both operands), and exact for any `x`: four products of
/// at most 255 * 128 per lane stay far within i32. Full
/// 512-bit registers were measured slower here: packing two 34-byte
/// blocks into one register costs shuffle-port work that the wider
/// multiply does not repay.
#[cfg(target_arch = "x86_64")]
mod avx512 {
    use std::arch::x86_64::*;

    use super::avx2::{prefetch_ahead, reduce8, Q8_0_L2_AHEAD};
    use super::{Activation, BlockQ8_0, QK8_0};
    use crate::blocks;
    use crate::lanes::{table, Table};

    /// Safe entry: only selected for the AVX-512 tier with VNNI (exact for
    /// any `x`).
    pub(super) fn dot(w: &[BlockQ8_0], x: &Activation<'_>) -> f32 {
        // SAFETY: `kernel_for` returns this function only when
        // `has_avx512_vnni()`: the AVX-512 tier (F/BW/DQ/VL, AVX2, F16C)
        // and AVX512-VNNI.
        unsafe { dot_vnni(w, x) }
    }

    /// Safe entry for two rows: as for `dot`.
    pub(super) fn dot2(w0: &[BlockQ8_0], w1: &[BlockQ8_0], x: &Activation<'_>) -> (f32, f32) {
        // SAFETY: as for `dot`: `select_dot2` returns this only when
        // `has_avx512_vnni()`.
        unsafe { dot2_vnni(w0, w1, x) }
    }

    /// Safe entry: `dot` with the scales permuted out of the group
    /// (`permuted_scales`), selected where the CPU has AVX-512 VBMI.
    pub(super) fn dot_vbmi(w: &[BlockQ8_0], x: &Activation<'_>) -> f32 {
        // SAFETY: `kernel_for` returns this function only when
        // `has_avx512_vbmi()`, which implies `has_avx512_vnni()`.
        unsafe { dot_vnni_vbmi(w, x) }
    }

    /// Safe entry for two rows: as for `dot_vbmi`.
    pub(super) fn dot2_vbmi(w0: &[BlockQ8_0], w1: &[BlockQ8_0], x: &Activation<'_>) -> (f32, f32) {
        // SAFETY: as for `dot_vbmi`: `select_dot2` returns this only when
        // `has_avx512_vbmi()`.
        unsafe { dot2_vnni_vbmi(w0, w1, x) }
    }

    /// The one-row and two-row kernels, once for each way of reading a
    /// group's scales (`$scales`, under `$features`): the same arithmetic,
    /// so the same bits.
    macro_rules! vnni_kernels {
        ($features:literal, $scales:ident, $dot:ident, $dot2:ident) => {
            /// # Safety
            ///
            /// The target features listed on it.
            #[target_feature(enable = $features)]
            unsafe fn $dot(w: &[BlockQ8_0], x: &Activation<'_>) -> f32 {
                let blocks = w.len().min(x.q.len());
                let mut acc = _mm256_setzero_ps();
                for (gw, (gx, gsum, gd)) in blocks::eights(w, blocks).iter().zip(x.groups(blocks))
                {
                    prefetch_ahead::<Q8_0_L2_AHEAD>(gw.as_ptr().cast(), std::mem::size_of_val(gw));
                    let sums: [__m256i; 8] =
                        // SAFETY: the features, by this function's contract.
                        std::array::from_fn(|k| unsafe { block_dots(&gw[k].qs, &gx[k].qs) });
                    // SAFETY: `gsum` and `gd` are eight values each.
                    let (xsum, dx) = unsafe {
                        (
                            _mm256_loadu_si256(gsum.as_ptr().cast()),
                            _mm256_loadu_ps(gd.as_ptr()),
                        )
                    };
                    let sumi = _mm256_cvtepi32_ps(unbias(reduce8(sums), xsum));
                    // SAFETY: the features, by this function's contract (the
                    // group's eight blocks are in its type).
                    let d = _mm256_mul_ps(unsafe { $scales(gw) }, dx);
                    acc = _mm256_add_ps(acc, _mm256_mul_ps(sumi, d));
                }
                let b = blocks / blocks::LANES * blocks::LANES;
                finish(acc, &w[b..blocks], &x.q[b..blocks], &x.d[b..blocks])
            }

            /// Two rows in one pass: each activation block loaded once for
            /// both, each row's operations exactly the one-row kernel's (the
            /// same bits), two weight streams in flight.
            ///
            /// # Safety
            ///
            /// The target features listed on it.
            #[target_feature(enable = $features)]
            unsafe fn $dot2(
                w0: &[BlockQ8_0],
                w1: &[BlockQ8_0],
                x: &Activation<'_>,
            ) -> (f32, f32) {
                let blocks = w0.len().min(w1.len()).min(x.q.len());
                let (mut acc0, mut acc1) = (_mm256_setzero_ps(), _mm256_setzero_ps());
                let rows = blocks::eights(w0, blocks)
                    .iter()
                    .zip(blocks::eights(w1, blocks));
                for ((g0, g1), (gx, gsum, gd)) in rows.zip(x.groups(blocks)) {
                    prefetch_ahead::<Q8_0_L2_AHEAD>(g0.as_ptr().cast(), std::mem::size_of_val(g0));
                    prefetch_ahead::<Q8_0_L2_AHEAD>(g1.as_ptr().cast(), std::mem::size_of_val(g1));
                    let mut sums0 = [_mm256_setzero_si256(); 8];
                    let mut sums1 = [_mm256_setzero_si256(); 8];
                    for k in 0..8 {
                        // SAFETY: `qs` is exactly 32 bytes: one unaligned load.
                        let vx = unsafe { _mm256_loadu_si256(gx[k].qs.as_ptr().cast()) };
                        // SAFETY: the features, by this function's contract.
                        unsafe {
                            sums0[k] = block_dots_with(&g0[k].qs, vx);
                            sums1[k] = block_dots_with(&g1[k].qs, vx);
                        }
                    }
                    // SAFETY: `gsum` and `gd` are eight values each.
                    let (xsum, dx) = unsafe {
                        (
                            _mm256_loadu_si256(gsum.as_ptr().cast()),
                            _mm256_loadu_ps(gd.as_ptr()),
                        )
                    };
                    // SAFETY: the features, by this function's contract (each
                    // group's eight blocks are in its type).
                    let (dw0, dw1) = unsafe { ($scales(g0), $scales(g1)) };
                    let sumi0 = _mm256_cvtepi32_ps(unbias(reduce8(sums0), xsum));
                    let sumi1 = _mm256_cvtepi32_ps(unbias(reduce8(sums1), xsum));
                    acc0 = _mm256_add_ps(acc0, _mm256_mul_ps(sumi0, _mm256_mul_ps(dw0, dx)));
                    acc1 = _mm256_add_ps(acc1, _mm256_mul_ps(sumi1, _mm256_mul_ps(dw1, dx)));
                }
                let b = blocks / blocks::LANES * blocks::LANES;
                let (tail, dx) = (&x.q[b..blocks], &x.d[b..blocks]);
                (
                    finish(acc0, &w0[b..blocks], tail, dx),
                    finish(acc1, &w1[b..blocks], tail, dx),
                )
            }
        };
    }

    vnni_kernels!(
        "avx512f,avx512vl,avx512vnni,avx2,f16c",
        gathered_scales,
        dot_vnni,
        dot2_vnni
    );
    vnni_kernels!(
        "avx512f,avx512bw,avx512vl,avx512vnni,avx512vbmi,avx2,f16c",
        permuted_scales,
        dot_vnni_vbmi,
        dot2_vnni_vbmi
    );

    /// The lanes' fixed reduction, then the tail blocks (`w` and `x` from
    /// the end of the eight-block body on) in block order.
    #[target_feature(enable = "avx512f,avx512vl,avx2,f16c")]
    #[inline]
    fn finish(acc: __m256, w: &[BlockQ8_0], x: &[BlockQ8_0], dx: &[f32]) -> f32 {
        let mut result = crate::lanes::reduce_ps(acc);
        for ((bw, bx), &dx) in w.iter().zip(x).zip(dx) {
            let sumi = super::avx2::block_dot_exact(&bw.qs, &bx.qs);
            result += blocks::term(sumi, crate::lanes::f16_to_f32(bw.d.to_bits()), dx);
        }
        result
    }

    /// `block_dots` with the activation block already loaded.
    ///
    /// # Safety
    ///
    /// AVX-512 VL/VNNI and AVX2.
    #[target_feature(enable = "avx512f,avx512vl,avx512vnni,avx2")]
    #[inline]
    unsafe fn block_dots_with(w: &[i8; QK8_0], vx: __m256i) -> __m256i {
        // SAFETY: the array is exactly 32 bytes: one unaligned load.
        let vw = unsafe { _mm256_loadu_si256(w.as_ptr().cast()) };
        // `w + 128` as unsigned bytes: the sign bit flipped.
        let biased_w = _mm256_xor_si256(vw, _mm256_set1_epi8(i8::MIN));
        _mm256_dpbusd_epi32(_mm256_setzero_si256(), biased_w, vx)
    }

    /// Each lane's block sum of `(w + 128) * x` less `128 * sum(x)`: the
    /// exact `sum(w * x)`.
    #[target_feature(enable = "avx2")]
    #[inline]
    fn unbias(biased: __m256i, xsum: __m256i) -> __m256i {
        _mm256_sub_epi32(biased, _mm256_slli_epi32::<7>(xsum))
    }

    /// One block's integer dot, biased: eight i32 partial sums of
    /// `(w + 128) * x` (`unbias` takes `128 * sum(x)` off the block's
    /// total). Exact: 0..=255 unsigned times any i8, four products per
    /// lane in i32.
    ///
    /// # Safety
    ///
    /// AVX-512 VL/VNNI and AVX2.
    #[target_feature(enable = "avx512f,avx512vl,avx512vnni,avx2")]
    #[inline]
    unsafe fn block_dots(w: &[i8; QK8_0], x: &[i8; QK8_0]) -> __m256i {
        // SAFETY: the array is exactly 32 bytes: one unaligned load; the
        // features, by this function's contract.
        unsafe { block_dots_with(w, _mm256_loadu_si256(x.as_ptr().cast())) }
    }

    /// A group's eight scales as f32: one gather of the dword at each
    /// block's start (the f16 scale and two bytes after it, inside the
    /// block), narrowed to the scales' 16 bits, converted. Off the shuffle
    /// port that eight word inserts would load. For CPUs without VBMI
    /// (`permuted_scales`).
    ///
    /// # Safety
    ///
    /// AVX-512 F/VL, AVX2 and F16C.
    #[target_feature(enable = "avx512f,avx512vl,avx2,f16c")]
    #[inline]
    unsafe fn gathered_scales(group: &[BlockQ8_0; 8]) -> __m256 {
        const STRIDE: i32 = std::mem::size_of::<BlockQ8_0>() as i32;
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
        // SAFETY: each of the eight 4-byte reads starts at a block of
        // `group` and stays inside it (a block is 34 bytes).
        let words = unsafe { _mm256_i32gather_epi32::<1>(group.as_ptr().cast(), offsets) };
        _mm256_cvtph_ps(_mm256_cvtepi32_epi16(words))
    }

    const BLOCK: usize = std::mem::size_of::<BlockQ8_0>();

    /// `vpermt2b`'s table for the scales of blocks `first..first + 4`
    /// from the two 64-byte loads at block `first`'s start, into result
    /// bytes `2 * first..2 * first + 8` (the rest zeroed by the mask).
    const fn scale_table(first: usize) -> Table {
        let mut t = [0u8; 64];
        let mut j = 0;
        while j < 8 {
            t[2 * first + j] = (BLOCK * (j / 2) + j % 2) as u8;
            j += 1;
        }
        Table(t)
    }
    static SCALES_LOW: Table = scale_table(0);
    static SCALES_HIGH: Table = scale_table(4);

    /// A group's eight scales as f32, with no gather: four 64-byte loads
    /// (bytes 0..128 and 136..264 of the group's 272, lines its dots read
    /// anyway) and a byte permute for each half of the scales. The gather
    /// it replaces was a third of the kernel's cycles from L2 (its
    /// latency stalled the scale product): 32-42 GB/s -> 42-54 GB/s on
    /// one core, 768- to 4096-column rows.
    ///
    /// # Safety
    ///
    /// AVX-512 F/BW/VBMI and F16C.
    #[target_feature(enable = "avx512f,avx512bw,avx512vbmi,f16c")]
    #[inline]
    unsafe fn permuted_scales(group: &[BlockQ8_0; 8]) -> __m256 {
        let base: *const u8 = group.as_ptr().cast();
        // SAFETY: bytes 0..128 and 4 * BLOCK..4 * BLOCK + 128 (136..264)
        // of the group's 272.
        let (l0, l1, l2, l3) = unsafe {
            (
                _mm512_loadu_si512(base.cast()),
                _mm512_loadu_si512(base.add(64).cast()),
                _mm512_loadu_si512(base.add(4 * BLOCK).cast()),
                _mm512_loadu_si512(base.add(4 * BLOCK + 64).cast()),
            )
        };
        let low = _mm512_maskz_permutex2var_epi8(0x00ff, l0, table(&SCALES_LOW), l1);
        let high = _mm512_maskz_permutex2var_epi8(0xff00, l2, table(&SCALES_HIGH), l3);
        _mm256_cvtph_ps(_mm512_castsi512_si128(_mm512_or_si512(low, high)))
    }
}

#[cfg(all(test, target_arch = "x86_64"))]
mod tests {
    use super::*;
    use crate::random::XorShift;
    use crate::tier::{has_avx512_vbmi, has_avx512_vnni};

    /// Every x86 kernel this CPU can run, by name, and whether it needs
    /// an `x` without -128.
    fn kernels() -> Vec<(&'static str, DotFn, bool)> {
        let mut all: Vec<(&'static str, DotFn, bool)> = Vec::new();
        if SimdTier::Avx2.is_available() {
            all.push(("avx2", avx2::dot, true));
        }
        if has_avx512_vnni() {
            all.push(("avx512-vnni", avx512::dot, false));
        }
        if has_avx512_vbmi() {
            all.push(("avx512-vbmi", avx512::dot_vbmi, false));
        }
        all
    }

    /// Every x86 pair kernel this CPU can run, by name, and whether it is
    /// exact for an `x` holding -128 (the AVX2 sign trick is not).
    fn pair_kernels() -> Vec<(&'static str, Dot2Fn, bool)> {
        let mut all: Vec<(&'static str, Dot2Fn, bool)> = Vec::new();
        if SimdTier::Avx2.is_available() {
            all.push(("avx2", avx2::dot2, false));
        }
        if has_avx512_vnni() {
            all.push(("avx512-vnni", avx512::dot2, true));
        }
        if has_avx512_vbmi() {
            all.push(("avx512-vbmi", avx512::dot2_vbmi, true));
        }
        all
    }

    #[test]
    fn every_pair_kernel_gives_each_row_the_scalar_bits() {
        let mut rng = XorShift(29);
        for (blocks, x_min) in [1, 7, 8, 9, 16, 24, 31, 64 + 5]
            .into_iter()
            .flat_map(|blocks| [(blocks, i8::MIN), (blocks, -127)])
        {
            let block = |rng: &mut XorShift, min: i8| BlockQ8_0 {
                d: half::f16::from_f32(rng.uniform() - 0.5),
                qs: std::array::from_fn(|_| (rng.next_u64() as i8).max(min)),
            };
            let w0: Vec<BlockQ8_0> = (0..blocks).map(|_| block(&mut rng, i8::MIN)).collect();
            let w1: Vec<BlockQ8_0> = (0..blocks).map(|_| block(&mut rng, i8::MIN)).collect();
            let x: Vec<BlockQ8_0> = (0..blocks).map(|_| block(&mut rng, x_min)).collect();
            let extras = ActivationExtras::of(&x);
            let act = extras.with(&x);
            let expected = (
                dot_q8_0_scalar(&w0, &x).to_bits(),
                dot_q8_0_scalar(&w1, &x).to_bits(),
            );
            for (name, dot2, exact_for_min) in pair_kernels() {
                if act.has_min && !exact_for_min {
                    continue;
                }
                let (r0, r1) = dot2(&w0, &w1, &act);
                assert_eq!(
                    (r0.to_bits(), r1.to_bits()),
                    expected,
                    "{name}, {blocks} blocks, x from {x_min}"
                );
            }
        }
    }

    #[test]
    fn every_x86_kernel_gives_the_scalar_bits() {
        let mut rng = XorShift(17);
        for blocks in [1, 7, 8, 9, 16, 17, 31, 128 + 3] {
            let block = |rng: &mut XorShift, min: i8| BlockQ8_0 {
                d: half::f16::from_f32(rng.uniform() - 0.5),
                qs: std::array::from_fn(|_| match rng.next_u64() % 5 {
                    0 => min,
                    1 => i8::MAX,
                    2 => 0,
                    _ => (rng.next_u64() as i8).max(min),
                }),
            };
            let w: Vec<BlockQ8_0> = (0..blocks).map(|_| block(&mut rng, i8::MIN)).collect();
            for min in [i8::MIN, -i8::MAX] {
                let x: Vec<BlockQ8_0> = (0..blocks).map(|_| block(&mut rng, min)).collect();
                let extras = ActivationExtras::of(&x);
                let act = extras.with(&x);
                let expected = dot_q8_0_scalar(&w, &x).to_bits();
                for (name, dot, needs_no_min) in kernels() {
                    if needs_no_min && act.has_min {
                        continue;
                    }
                    assert_eq!(
                        dot(&w, &act).to_bits(),
                        expected,
                        "{name}, {blocks} blocks, x down to {min}"
                    );
                }
            }
        }
    }
}

/// NEON: each block's exact integer dot (`sdot` where the CPU has the
/// dot-product extension, else widening multiplies), eight blocks' terms
/// in two 4-lane vectors: `blocks.rs`'s order, lane for lane, so the bits
/// of the scalar path. Signed times signed, so exact for any activation.
/// Run in CI under qemu-user (`scripts/stages/35-aarch64.sh`), with and
/// without the dot-product extension; no aarch64 host measured it.
#[cfg(target_arch = "aarch64")]
pub(crate) mod neon {
    use std::arch::aarch64::*;
    use std::arch::asm;

    use super::{Activation, BlockQ8_0};
    use crate::blocks;

    /// Safe entry: selected for the NEON tier when the CPU has `dotprod`.
    pub(super) fn dot_sdot(w: &[BlockQ8_0], x: &Activation<'_>) -> f32 {
        // SAFETY: `kernel_for` returns this only for an available NEON
        // tier with `has_neon_dotprod()`.
        unsafe { q8_0_sdot(w, x) }
    }

    /// Safe entry: selected for the NEON tier without `dotprod`.
    pub(super) fn dot_mull(w: &[BlockQ8_0], x: &Activation<'_>) -> f32 {
        // SAFETY: `kernel_for` returns this only for an available NEON
        // tier.
        unsafe { q8_0_mull(w, x) }
    }

    /// # Safety
    ///
    /// NEON and the dot-product extension.
    #[target_feature(enable = "neon,dotprod")]
    unsafe fn q8_0_sdot(w: &[BlockQ8_0], x: &Activation<'_>) -> f32 {
        let blocks = w.len().min(x.q.len());
        // The closures inherit this function's features.
        accumulate(
            blocks,
            x.d,
            |b| w[b].d.to_f32(),
            |b| dot32_sdot(halves(&w[b].qs), halves(&x.q[b].qs)),
        )
    }

    /// # Safety
    ///
    /// NEON.
    #[target_feature(enable = "neon")]
    unsafe fn q8_0_mull(w: &[BlockQ8_0], x: &Activation<'_>) -> f32 {
        let blocks = w.len().min(x.q.len());
        accumulate(
            blocks,
            x.d,
            |b| w[b].d.to_f32(),
            |b| dot32_mull(halves(&w[b].qs), halves(&x.q[b].qs)),
        )
    }

    /// A block's 32 values as two 16-byte vectors.
    #[target_feature(enable = "neon")]
    #[inline]
    pub(crate) fn halves(q: &[i8; 32]) -> [int8x16_t; 2] {
        // SAFETY: `q` is exactly 32 bytes: two 16-byte loads.
        unsafe { [vld1q_s8(q.as_ptr()), vld1q_s8(q.as_ptr().add(16))] }
    }

    /// `acc + ` four-way dot products of `a` and `b`'s signed bytes per
    /// i32 lane (`sdot`; inline asm: the intrinsic is not stable).
    #[target_feature(enable = "neon,dotprod")]
    #[inline]
    pub(crate) fn sdot(mut acc: int32x4_t, a: int8x16_t, b: int8x16_t) -> int32x4_t {
        // SAFETY: `sdot` reads and writes registers only; the
        // dot-product extension is enabled for this function.
        unsafe {
            asm!(
                "sdot {acc:v}.4s, {a:v}.16b, {b:v}.16b",
                acc = inout(vreg) acc,
                a = in(vreg) a,
                b = in(vreg) b,
                options(pure, nomem, nostack, preserves_flags)
            );
        }
        acc
    }

    /// The exact integer dot of 32 signed bytes by `sdot`: four products
    /// per i32 lane (each within 2^14), then the lanes summed.
    #[target_feature(enable = "neon,dotprod")]
    #[inline]
    pub(crate) fn dot32_sdot(w: [int8x16_t; 2], x: [int8x16_t; 2]) -> i32 {
        let acc = sdot(sdot(vdupq_n_s32(0), w[0], x[0]), w[1], x[1]);
        vaddvq_s32(acc)
    }

    /// The exact integer dot of 32 signed bytes by widening multiplies:
    /// i16 products (within 2^14), added pairwise into i32 lanes.
    #[target_feature(enable = "neon")]
    #[inline]
    pub(crate) fn dot32_mull(w: [int8x16_t; 2], x: [int8x16_t; 2]) -> i32 {
        let mut acc = vdupq_n_s32(0);
        for (w, x) in w.into_iter().zip(x) {
            acc = vpadalq_s16(acc, vmull_s8(vget_low_s8(w), vget_low_s8(x)));
            acc = vpadalq_s16(acc, vmull_high_s8(w, x));
        }
        vaddvq_s32(acc)
    }

    /// `blocks.rs`'s order for `blocks` blocks: block `b`'s term is
    /// `sumi(b) as f32 * (d_w(b) * d_x[b])`, eight blocks' terms added to
    /// lanes 0..4 and 4..8 of two vectors, the lanes reduced by
    /// `blocks::reduce`, the tail added in block order.
    #[target_feature(enable = "neon")]
    #[inline]
    pub(crate) fn accumulate(
        blocks: usize,
        d_x: &[f32],
        d_w: impl Fn(usize) -> f32,
        mut sumi: impl FnMut(usize) -> i32,
    ) -> f32 {
        let body = blocks / blocks::LANES * blocks::LANES;
        let (mut acc_lo, mut acc_hi) = (vdupq_n_f32(0.0), vdupq_n_f32(0.0));
        let mut b = 0;
        while b < body {
            let sums: [i32; 8] = std::array::from_fn(|k| sumi(b + k));
            let dw: [f32; 8] = std::array::from_fn(|k| d_w(b + k));
            let dx = &d_x[b..b + 8];
            // SAFETY: `sums`, `dw` and `dx` are 8 values each: two 4-lane
            // loads apiece.
            let (s_lo, s_hi, w_lo, w_hi, x_lo, x_hi) = unsafe {
                (
                    vld1q_s32(sums.as_ptr()),
                    vld1q_s32(sums.as_ptr().add(4)),
                    vld1q_f32(dw.as_ptr()),
                    vld1q_f32(dw.as_ptr().add(4)),
                    vld1q_f32(dx.as_ptr()),
                    vld1q_f32(dx.as_ptr().add(4)),
                )
            };
            // term = sumi * (d_w * d_x): two products, no fused add.
            let term_lo = vmulq_f32(vcvtq_f32_s32(s_lo), vmulq_f32(w_lo, x_lo));
            let term_hi = vmulq_f32(vcvtq_f32_s32(s_hi), vmulq_f32(w_hi, x_hi));
            acc_lo = vaddq_f32(acc_lo, term_lo);
            acc_hi = vaddq_f32(acc_hi, term_hi);
            b += blocks::LANES;
        }
        let mut lanes = [0.0f32; 8];
        // SAFETY: `lanes` is 8 writable f32: two 4-lane stores.
        unsafe {
            vst1q_f32(lanes.as_mut_ptr(), acc_lo);
            vst1q_f32(lanes.as_mut_ptr().add(4), acc_hi);
        }
        let mut result = blocks::reduce(lanes);
        for (b, &dx) in (body..blocks).zip(&d_x[body..blocks]) {
            result += blocks::term(sumi(b), d_w(b), dx);
        }
        result
    }
}

/// The AVX2 helpers the Q4_0 kernel shares.
#[cfg(target_arch = "x86_64")]
pub(crate) mod simd {
    pub(crate) use super::avx2::{prefetch_ahead, scales_of, Q4_0_L2_AHEAD};
}

#[cfg(target_arch = "x86_64")]
pub(crate) mod avx2 {
    use std::arch::x86_64::*;

    use super::{Activation, BlockQ8_0, QK8_0};
    use crate::blocks;

    /// Safe entry: only selected for the AVX2 tier or wider, and only for
    /// an `x` without -128 (`select_dot` checks `has_min`).
    pub(super) fn dot(w: &[BlockQ8_0], x: &Activation<'_>) -> f32 {
        // SAFETY: `select_dot` returns this function only for the AVX2
        // tier or wider (`SimdTier::is_available`), which requires AVX2
        // and F16C.
        unsafe { dot_avx2(w, x) }
    }

    /// Eight blocks in flight: eight exact integer dots reduced together,
    /// eight scale products in one multiply, eight lanes of terms added
    /// to eight accumulators: `blocks.rs`'s order, lane for lane.
    ///
    /// # Safety
    ///
    /// The CPU must support AVX2 and F16C.
    #[target_feature(enable = "avx2,f16c")]
    unsafe fn dot_avx2(w: &[BlockQ8_0], x: &Activation<'_>) -> f32 {
        let blocks = w.len().min(x.q.len());
        let mut acc = _mm256_setzero_ps();
        for (gw, (gx, _, gd)) in blocks::eights(w, blocks).iter().zip(x.groups(blocks)) {
            prefetch_ahead::<Q8_0_L2_AHEAD>(gw.as_ptr().cast(), std::mem::size_of_val(gw));
            // SAFETY: `gd` is eight f32.
            let dx = unsafe { _mm256_loadu_ps(gd.as_ptr()) };
            acc = scaled_add(acc, group(gw, gx), dx);
        }
        let b = blocks / blocks::LANES * blocks::LANES;
        finish(acc, &w[b..blocks], &x.q[b..blocks], &x.d[b..blocks])
    }

    /// Safe entry for two rows: as for `dot`.
    pub(super) fn dot2(w0: &[BlockQ8_0], w1: &[BlockQ8_0], x: &Activation<'_>) -> (f32, f32) {
        // SAFETY: as for `dot`: `select_dot2` returns this only for the
        // AVX2 tier and an `x` without -128.
        unsafe { dot2_avx2(w0, w1, x) }
    }

    /// Two rows in one pass, each row's operations exactly `dot_avx2`'s
    /// (the same bits): the activation's loads shared, two dependency
    /// chains in flight. Short rows only ([`super::AVX2_PAIR_MAX_BLOCKS`]).
    ///
    /// # Safety
    ///
    /// The CPU must support AVX2 and F16C.
    #[target_feature(enable = "avx2,f16c")]
    unsafe fn dot2_avx2(w0: &[BlockQ8_0], w1: &[BlockQ8_0], x: &Activation<'_>) -> (f32, f32) {
        let blocks = w0.len().min(w1.len()).min(x.q.len());
        let (mut acc0, mut acc1) = (_mm256_setzero_ps(), _mm256_setzero_ps());
        let rows = blocks::eights(w0, blocks)
            .iter()
            .zip(blocks::eights(w1, blocks));
        for ((g0, g1), (gx, _, gd)) in rows.zip(x.groups(blocks)) {
            prefetch_ahead::<Q8_0_L2_AHEAD>(g0.as_ptr().cast(), std::mem::size_of_val(g0));
            prefetch_ahead::<Q8_0_L2_AHEAD>(g1.as_ptr().cast(), std::mem::size_of_val(g1));
            // SAFETY: `gd` is eight f32.
            let dx = unsafe { _mm256_loadu_ps(gd.as_ptr()) };
            acc0 = scaled_add(acc0, group(g0, gx), dx);
            acc1 = scaled_add(acc1, group(g1, gx), dx);
        }
        let b = blocks / blocks::LANES * blocks::LANES;
        let (tail, dx) = (&x.q[b..blocks], &x.d[b..blocks]);
        (
            finish(acc0, &w0[b..blocks], tail, dx),
            finish(acc1, &w1[b..blocks], tail, dx),
        )
    }

    /// One group of eight blocks: their eight exact integer dots and
    /// eight weight scales.
    #[target_feature(enable = "avx2,f16c")]
    #[inline]
    fn group(gw: &[BlockQ8_0; 8], gx: &[BlockQ8_0; 8]) -> (__m256i, __m256) {
        let sums: [__m256i; 8] =
            // SAFETY: AVX2, by this function's contract.
            std::array::from_fn(|k| unsafe { block_sums(&gw[k].qs, &gx[k].qs) });
        (
            reduce8(sums),
            scales_of(std::array::from_fn(|k| gw[k].d.to_bits())),
        )
    }

    /// `acc + sums * (dw * dx)`: a group's float steps, in this order.
    #[target_feature(enable = "avx2")]
    #[inline]
    fn scaled_add(acc: __m256, (sums, dw): (__m256i, __m256), dx: __m256) -> __m256 {
        let d = _mm256_mul_ps(dw, dx);
        _mm256_add_ps(acc, _mm256_mul_ps(_mm256_cvtepi32_ps(sums), d))
    }

    /// The lanes' fixed reduction, then the tail blocks (`w` and `x` from
    /// the end of the eight-block body on) in block order, by the sign
    /// trick (this kernel's `x` has no -128). The VNNI kernels' `finish`
    /// takes the exact block dot instead; sharing it here read 2-3 %
    /// slower on stories15M (rows of nine blocks).
    #[target_feature(enable = "avx2,f16c")]
    #[inline]
    fn finish(acc: __m256, w: &[BlockQ8_0], x: &[BlockQ8_0], dx: &[f32]) -> f32 {
        let mut result = crate::lanes::reduce_ps(acc);
        for ((bw, bx), &dx) in w.iter().zip(x).zip(dx) {
            // SAFETY: AVX2, by this function's contract.
            let sumi = unsafe { reduce1(block_sums(&bw.qs, &bx.qs)) };
            result += blocks::term(sumi, crate::lanes::f16_to_f32(bw.d.to_bits()), dx);
        }
        result
    }

    /// Eight i32 partial sums of one block pair's products: `maddubs` of
    /// `|w|` (unsigned: -128 is 128) and `x * sign(w)`, exact while `x`
    /// has no -128 (pairs stay within i16: 2 x 128 x 127), then widened.
    ///
    /// # Safety
    ///
    /// The CPU must support AVX2.
    #[target_feature(enable = "avx2")]
    #[inline]
    unsafe fn block_sums(w: &[i8; QK8_0], x: &[i8; QK8_0]) -> __m256i {
        // SAFETY: both arrays are exactly 32 bytes: one unaligned load each.
        let (vw, vx) = unsafe {
            (
                _mm256_loadu_si256(w.as_ptr().cast()),
                _mm256_loadu_si256(x.as_ptr().cast()),
            )
        };
        let pairs = _mm256_maddubs_epi16(_mm256_sign_epi8(vw, vw), _mm256_sign_epi8(vx, vw));
        _mm256_madd_epi16(pairs, _mm256_set1_epi16(1))
    }

    /// The exact integer dot of two blocks' 32 signed values, for any
    /// values (-128 included): widened to `i16` and multiplied in pairs
    /// into `i32`. The tail blocks past the last group of eight use it:
    /// a row of 9 blocks (288 columns) spent a third of its time in a
    /// scalar tail before.
    #[target_feature(enable = "avx2")]
    #[inline]
    pub(crate) fn block_dot_exact(w: &[i8; QK8_0], x: &[i8; QK8_0]) -> i32 {
        // SAFETY: both arrays are exactly 32 bytes: two 16-byte loads each.
        let (w0, w1, x0, x1) = unsafe {
            (
                _mm_loadu_si128(w.as_ptr().cast()),
                _mm_loadu_si128(w.as_ptr().add(16).cast()),
                _mm_loadu_si128(x.as_ptr().cast()),
                _mm_loadu_si128(x.as_ptr().add(16).cast()),
            )
        };
        let wide = |v| _mm256_cvtepi8_epi16(v);
        let sums = _mm256_add_epi32(
            _mm256_madd_epi16(wide(w0), wide(x0)),
            _mm256_madd_epi16(wide(w1), wide(x1)),
        );
        reduce1(sums)
    }

    /// The sum of one vector's eight lanes.
    #[target_feature(enable = "avx2")]
    #[inline]
    pub(crate) fn reduce1(v: __m256i) -> i32 {
        let s128 = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256::<1>(v));
        let s64 = _mm_add_epi32(s128, _mm_unpackhi_epi64(s128, s128));
        let s32 = _mm_add_epi32(s64, _mm_shuffle_epi32::<0b01>(s64));
        _mm_cvtsi128_si32(s32)
    }

    /// Lane `k` of the result is the sum of `v[k]`'s eight lanes.
    #[target_feature(enable = "avx2")]
    #[inline]
    pub(crate) fn reduce8(v: [__m256i; 8]) -> __m256i {
        let h01 = _mm256_hadd_epi32(v[0], v[1]);
        let h23 = _mm256_hadd_epi32(v[2], v[3]);
        let h45 = _mm256_hadd_epi32(v[4], v[5]);
        let h67 = _mm256_hadd_epi32(v[6], v[7]);
        // Per 128-bit half: [v0, v1, v2, v3] sums of that half's lanes.
        let h0123 = _mm256_hadd_epi32(h01, h23);
        let h4567 = _mm256_hadd_epi32(h45, h67);
        let low_halves = _mm256_permute2x128_si256::<0x20>(h0123, h4567);
        let high_halves = _mm256_permute2x128_si256::<0x31>(h0123, h4567);
        _mm256_add_epi32(low_halves, high_halves)
    }

    /// Bytes ahead of the current eight blocks that the kernels prefetch
    /// into L1: a row streams from DRAM, and eight blocks of integer work
    /// are too little to hide a miss each. Measured from DRAM (`pool
    /// bench`, 2 threads, share of the read ceiling, Q8_0 / Q4_0, L1 only):
    /// none 61 % / 47 %, 1536 B 74 / 68, 2048 B 79 / 72, 4096 B 90 / 83,
    /// 8192 B 85 / 73.
    pub(crate) const PREFETCH_AHEAD: usize = 4096;

    /// How far ahead Q8_0's kernels also prefetch into L2, in bytes. An L1
    /// prefetch holds one of the core's few line-fill buffers for a whole
    /// DRAM round trip when its line is not in L2 yet; a second prefetch
    /// well ahead into L2 lets the L1 one find its line there. Measured
    /// from DRAM (4096 columns, `pool-benches` probe, two runs, share of
    /// the read ceiling over the same bytes): one thread 81, 83 % -> 93,
    /// 94 %; two threads 81, 84 % -> 93, 97 %.
    pub(crate) const Q8_0_L2_AHEAD: usize = 12288;

    /// The same for Q4_0 (a group is 144 bytes of weights against Q8_0's
    /// 272, so the same time ahead is fewer bytes): two threads 77 % ->
    /// 83, 86 % at 8192; 80, 82 % at 12288.
    pub(crate) const Q4_0_L2_AHEAD: usize = 8192;

    /// Prefetches the cache lines of `len` bytes at `PREFETCH_AHEAD` past
    /// `at` into L1, and at `L2_AHEAD` past it into L2. A prefetch never
    /// faults, and the addresses are computed with `wrapping_add`, so
    /// reading ahead of a row's end is harmless.
    #[target_feature(enable = "avx2")]
    #[inline]
    pub(crate) fn prefetch_ahead<const L2_AHEAD: usize>(at: *const u8, len: usize) {
        prefetch_at::<PREFETCH_AHEAD, L2_AHEAD>(at, len);
    }

    /// [`prefetch_ahead`] with the L1 distance given too (`L1_AHEAD`
    /// bytes past `at`).
    #[target_feature(enable = "avx2")]
    #[inline]
    pub(crate) fn prefetch_at<const L1_AHEAD: usize, const L2_AHEAD: usize>(
        at: *const u8,
        len: usize,
    ) {
        let (l1, l2) = (at.wrapping_add(L1_AHEAD), at.wrapping_add(L2_AHEAD));
        let mut line = 0;
        while line < len {
            _mm_prefetch::<_MM_HINT_T0>(l1.wrapping_add(line).cast());
            _mm_prefetch::<_MM_HINT_T1>(l2.wrapping_add(line).cast());
            line += 64;
        }
    }

    /// Eight f16 scales as f32 (F16C: exact, like `half`), packed into
    /// one register without a trip through memory.
    #[target_feature(enable = "avx2,f16c")]
    #[inline]
    pub(crate) fn scales_of(bits: [u16; 8]) -> __m256 {
        let [b0, b1, b2, b3, b4, b5, b6, b7] = bits.map(|b| b as i16);
        _mm256_cvtph_ps(_mm_setr_epi16(b0, b1, b2, b3, b4, b5, b6, b7))
    }
}

#[cfg(test)]
mod rounding_tests {
    use super::{abs_max, round_half_away};

    #[test]
    fn the_lane_wise_abs_max_is_the_sequential_folds_value() {
        let values: Vec<f32> = (0..77u32)
            .map(|i| {
                f32::from_bits(i.wrapping_mul(0x9e37_79b9) >> 2)
                    * if i % 3 == 0 { -1.0 } else { 1.0 }
            })
            .collect();
        for len in 0..values.len() {
            let v = &values[..len];
            let fold = v.iter().fold(0.0f32, |m, x| m.max(x.abs()));
            assert_eq!(abs_max(v).to_bits(), fold.to_bits(), "{len} values");
        }
        assert_eq!(
            abs_max(&[f32::NAN, -3.0, 2.0]),
            3.0,
            "NaN is skipped as the fold skips it"
        );
    }

    #[test]
    fn rounding_half_away_from_zero_is_exact_on_every_value() {
        let mut values = vec![
            0.0,
            -0.0,
            0.5,
            -0.5,
            1.5,
            -2.5,
            0.49999997,
            -0.49999997,
            126.5,
            127.49999,
            8_388_607.5,
            8_388_608.0,
            -8_388_609.0,
            1e30,
            f32::MIN_POSITIVE,
            f32::INFINITY,
            f32::NEG_INFINITY,
        ];
        // Every halfway point and its neighbours in the quantizers' range,
        // and a sweep of bit patterns across all magnitudes.
        for i in -300..300 {
            let half = i as f32 + 0.5;
            values.extend([half, half.next_up(), half.next_down()]);
        }
        // Fewer under Miri, which interprets every one.
        let sweep = if cfg!(miri) { 2_000u32 } else { 200_000 };
        values.extend((0..sweep).map(|i| f32::from_bits(i.wrapping_mul(21_473))));
        for v in values {
            // The reference in f64, where `v + 0.5` is exact for every
            // f32, so even a C library that rounds as `floor(x + 0.5)`
            // gets it right. Not `f32::round`: mingw-w64's `roundf` (the
            // Windows GNU target, run here under Wine) rounds 0.49999997
            // to 1, which is also why the quantizers no longer call it.
            // `black_box`: optimised, LLVM turns `round(f64(v)) as f32`
            // into `roundf(v)`, and the reference itself went wrong there.
            let reference = std::hint::black_box(f64::from(v)).round() as f32;
            let ours = round_half_away(v);
            assert!(
                ours.to_bits() == reference.to_bits() || (ours.is_nan() && reference.is_nan()),
                "{v:e}: {ours:e} against {reference:e}"
            );
        }
    }
}
