//! Q8_0 and Q4_0 matrices with their rows interleaved by sixteen: the
//! layout the AVX-512 VNNI kernels read without a horizontal sum per block.
//! The k-quants' layouts and kernels (super-blocks of 256) are in `q4_k.rs`
//! and `q6_k.rs`, what they share in `super_blocks.rs`; the group loop
//! ([`groups_into`]) and the float part (`accumulate_terms`) serve all.
//!
//! Row-major (GGUF's layout) gives each block of one row a 32-value
//! integer dot spread over eight lanes, which must be summed across them
//! before the block's scale applies: on x86 a tree of `vphaddd` shuffles
//! per eight blocks, and on a CPU with one shuffle port (Intel's) it costs
//! more than the multiplies. Interleaved, a block of sixteen rows keeps
//! each row's bytes in its own 32-bit lane of a 512-bit register: one
//! `vpdpbusd` per 4-byte chunk of the activation (broadcast from memory,
//! no instruction of its own) leaves row `r`'s exact block sum in lane
//! `r`, with no shuffle at all, and the rows' float terms and their final
//! sums are lane-wise too. This is the layout llama.cpp's AMX back end
//! repacks Q8_0 and Q4_0 into for the same reason. Measured on one core of
//! an Intel Xeon (AVX-512 VNNI), a 2048 x 768 matrix from L2, against the
//! row-major kernel in the same run: interleaved by eight rows on 256-bit
//! registers (the layout before this one, whose eight lanes were summed
//! per row at the end) Q8_0 1.5-1.75x, Q4_0 1.2-1.3x; by sixteen on
//! 512-bit registers Q8_0 2.0x, Q4_0 1.7x (about half the instructions
//! per row: one load and one `vpdpbusd` per 64 bytes instead of two each,
//! and the float work shared by sixteen rows instead of eight).
//!
//! The layout keeps the matrix's bytes and size: rows `16g..16g + 16`
//! occupy the bytes they occupied before, rearranged; rows past the last
//! whole group of sixteen stay row-major after them. A group holds first
//! the value bytes of its blocks, block by block (`16 * values` bytes
//! each, `values` = 32 for Q8_0 and 16 for Q4_0), with byte
//! `4 (16c + r) + k` of block `b` holding row `r`'s byte `4c + k`; then the
//! blocks' scales, block by block, the sixteen rows' f16 scales (32 bytes)
//! each. So each 64-byte chunk of values a kernel loads is a whole cache
//! line when the group starts on one. Q8_0's bytes are stored with the
//! sign bit flipped (`w + 128` as unsigned, what `vpdpbusd` multiplies: no
//! XOR at run time); Q4_0's as they are (byte `j` holds value `j` in its
//! low nibble and `j + 16` in its high one).
//!
//! Each row's value is the row-major kernels' to the bit: the same exact
//! integer block sums, the same per-block `sumi * (d_w * d_x)` added into
//! lane `b mod 8` of eight lanes reduced in the same order, then the tail
//! blocks in order. On a tier without these kernels a group is put back in
//! row-major order and the tier's row-major kernel runs.

mod q4_k;
mod q6_k;
mod super_blocks;

use crate::q4_0::BlockQ4_0;
use crate::q8_0::{Activation, BlockQ8_0, QK8_0};
use crate::weights::WeightsError;
use crate::WeightType;

/// Rows per interleaved group.
pub const INTERLEAVED_ROWS: usize = 16;

/// Bytes of one row's f16 scale.
const SCALE: usize = 2;

/// How far ahead of the block being read the interleaved kernels
/// prefetch into L1, and (Q4_0 and the k-quants) into L2, in bytes.
///
/// Shorter into L1 than the row-major kernels' `PREFETCH_AHEAD` (4 KiB,
/// set on an AMD host from DRAM with no L2 prefetch): with an L2 prefetch
/// well ahead, the L1 one only has to cover the L2's latency, and a
/// shorter one holds fewer of the core's line-fill buffers. The sweep
/// behind 2048/16384 (1.03-1.07x on Q4_0 and Q6_K from the L3 and from
/// DRAM, Q8_0 level) is in docs/tuning.md, "Shorter L1 prefetch, longer
/// L2 prefetch".
#[cfg(target_arch = "x86_64")]
const L1_AHEAD: usize = 2048;

/// See [`L1_AHEAD`].
#[cfg(target_arch = "x86_64")]
const L2_AHEAD: usize = 16384;

/// Bytes of one group block's scales: the sixteen rows' f16 scales.
const GROUP_SCALES: usize = INTERLEAVED_ROWS * SCALE;

/// Whether this CPU's kernels read `ty` faster interleaved than
/// row-major: Q8_0, Q4_0, Q4_K and Q6_K on the AVX-512 tier with VNNI
/// (the tier in force, so `POOL_SIMD_TIER` lowering it turns
/// interleaving off). A
/// loader interleaves only where this holds; elsewhere the interleaved
/// layout still computes the same bits, more slowly.
pub fn interleaving_pays(ty: WeightType) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        matches!(
            ty,
            WeightType::Q8_0 | WeightType::Q4_0 | WeightType::Q4_K | WeightType::Q6_K
        ) && crate::tier::simd_tier() == crate::SimdTier::Avx512
            && crate::tier::has_avx512_vnni()
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = ty;
        false
    }
}

/// The checked shape of a `rows x cols` matrix of `ty` in `len` bytes:
/// blocks per row.
pub(crate) fn blocks_per_row(
    ty: WeightType,
    rows: usize,
    cols: usize,
    len: usize,
) -> Result<usize, WeightsError> {
    if !matches!(
        ty,
        WeightType::Q8_0 | WeightType::Q4_0 | WeightType::Q4_K | WeightType::Q6_K
    ) {
        return Err(WeightsError::NotInterleavable { ty });
    }
    let row = ty
        .row_bytes(cols)
        .ok_or(WeightsError::PartialBlock { ty, cols })?;
    let needed = row.checked_mul(rows);
    if needed != Some(len) {
        return Err(WeightsError::Size { needed, found: len });
    }
    Ok(cols / ty.block_values())
}

/// Bytes of one interleaved group of `ty` with `per_row` blocks per row:
/// sixteen rows' blocks, rearranged.
fn group_bytes(ty: WeightType, per_row: usize) -> usize {
    INTERLEAVED_ROWS * per_row * ty.block_bytes()
}

/// Value bytes of one block of `ty` and whether they are stored with the
/// sign bit flipped.
fn value_bytes(ty: WeightType) -> (usize, u8) {
    match ty {
        WeightType::Q8_0 => (QK8_0, 0x80),
        _ => (QK8_0 / 2, 0),
    }
}

/// Where things sit in one interleaved group of `ty` with `per_row`
/// blocks per row, in bytes from the group's start.
#[derive(Clone, Copy)]
struct GroupLayout {
    /// Value bytes of one row's block.
    values: usize,
    per_row: usize,
}

impl GroupLayout {
    fn of(ty: WeightType, per_row: usize) -> GroupLayout {
        GroupLayout {
            values: value_bytes(ty).0,
            per_row,
        }
    }

    /// Bytes of the whole group: sixteen rows of `per_row` blocks.
    #[inline]
    fn bytes(self) -> usize {
        self.per_row * INTERLEAVED_ROWS * (self.values + SCALE)
    }

    /// Row `r`'s value byte `j` of block `b`.
    #[inline]
    fn value(self, b: usize, r: usize, j: usize) -> usize {
        b * INTERLEAVED_ROWS * self.values + 4 * (INTERLEAVED_ROWS * (j / 4) + r) + j % 4
    }

    /// Row `r`'s f16 scale of block `b`.
    #[inline]
    fn scale(self, b: usize, r: usize) -> usize {
        self.per_row * INTERLEAVED_ROWS * self.values + b * GROUP_SCALES + SCALE * r
    }
}

/// Rearranges `bytes`, a row-major `rows x cols` Q8_0, Q4_0, Q4_K or Q6_K matrix
/// (GGUF's layout), in place into rows interleaved by sixteen (module
/// docs). The result is read with [`crate::Weights::interleaved`].
///
/// ```
/// use pool_matvec::{
///     interleave_rows, matvec_q8_0, quantize_q8_0, PreparedInput, Serial, WeightType, Weights,
/// };
///
/// let (rows, cols) = (40, 64);
/// let values: Vec<f32> = (0..rows * cols).map(|i| (i % 7) as f32 - 3.0).collect();
/// let blocks = quantize_q8_0(&values);
/// // The blocks as a file holds them: f16 scale, then 32 values.
/// let mut bytes: Vec<u8> = blocks.iter().flat_map(|b| {
///     let mut v = b.d.to_bits().to_le_bytes().to_vec();
///     v.extend(b.qs.iter().map(|&q| q as u8));
///     v
/// }).collect();
/// interleave_rows(WeightType::Q8_0, &mut bytes, rows, cols).unwrap();
///
/// let x: Vec<f32> = (0..cols).map(|i| i as f32 / 10.0).collect();
/// let (mut want, mut got) = (vec![0.0; rows], vec![0.0; rows]);
/// matvec_q8_0(Serial, &blocks, &x, &mut want);
/// let input = PreparedInput::new(&x, [WeightType::Q8_0]);
/// Weights::interleaved(WeightType::Q8_0, rows, cols, &bytes).unwrap().rows_into(&input, 0, &mut got);
/// assert_eq!(got, want);
/// ```
///
/// # Errors
///
/// If `ty` is not Q8_0, Q4_0, Q4_K or Q6_K, `cols` is not whole blocks, or
/// `bytes` is not `rows` rows of them.
pub fn interleave_rows(
    ty: WeightType,
    bytes: &mut [u8],
    rows: usize,
    cols: usize,
) -> Result<(), WeightsError> {
    let per_row = blocks_per_row(ty, rows, cols, bytes.len())?;
    match ty {
        WeightType::Q4_K => super_blocks::interleave::<q4_k::Q4K>(bytes, per_row),
        WeightType::Q6_K => super_blocks::interleave::<q6_k::Q6K>(bytes, per_row),
        _ => interleave_blocks(ty, bytes, per_row),
    }
    Ok(())
}

/// [`interleave_rows`] for Q8_0 and Q4_0 (`GroupLayout`).
fn interleave_blocks(ty: WeightType, bytes: &mut [u8], per_row: usize) {
    let block = ty.block_bytes();
    let (values, flip) = value_bytes(ty);
    let layout = GroupLayout::of(ty, per_row);
    let mut row_major = vec![0u8; layout.bytes()];
    for group in bytes.chunks_exact_mut(layout.bytes()) {
        row_major.copy_from_slice(group);
        for r in 0..INTERLEAVED_ROWS {
            for b in 0..per_row {
                let src = &row_major[(r * per_row + b) * block..][..block];
                let scale = layout.scale(b, r);
                group[scale..scale + SCALE].copy_from_slice(&src[..SCALE]);
                for (j, &q) in src[SCALE..].iter().enumerate() {
                    group[layout.value(b, r, j)] = q ^ flip;
                }
            }
        }
    }
    debug_assert_eq!(values + SCALE, block);
}

/// Row `r`'s block `b` (scale bits, value bytes as the file has them) of
/// an interleaved matrix with `rows` rows of `per_row` blocks.
fn row_block(
    ty: WeightType,
    bytes: &[u8],
    rows: usize,
    per_row: usize,
    r: usize,
    b: usize,
) -> (u16, [u8; QK8_0]) {
    let block = ty.block_bytes();
    let (values, flip) = value_bytes(ty);
    let whole = rows / INTERLEAVED_ROWS * INTERLEAVED_ROWS;
    let mut out = [0u8; QK8_0];
    if r >= whole {
        let src = &bytes[(r * per_row + b) * block..][..block];
        out[..values].copy_from_slice(&src[SCALE..]);
        return (u16::from_le_bytes([src[0], src[1]]), out);
    }
    let (g, lane) = (r / INTERLEAVED_ROWS, r % INTERLEAVED_ROWS);
    let layout = GroupLayout::of(ty, per_row);
    let group = &bytes[g * layout.bytes()..][..layout.bytes()];
    for (j, o) in out[..values].iter_mut().enumerate() {
        *o = group[layout.value(b, lane, j)] ^ flip;
    }
    let scale = layout.scale(b, lane);
    (u16::from_le_bytes([group[scale], group[scale + 1]]), out)
}

/// Rows `first..first + count` as row-major Q8_0 blocks.
fn q8_0_rows(
    bytes: &[u8],
    rows: usize,
    per_row: usize,
    first: usize,
    count: usize,
) -> Vec<BlockQ8_0> {
    (first..first + count)
        .flat_map(|r| (0..per_row).map(move |b| q8_0_block(bytes, rows, per_row, r, b)))
        .collect()
}

/// Row `r`'s block `b` of an interleaved Q8_0 matrix, as the file had it.
fn q8_0_block(bytes: &[u8], rows: usize, per_row: usize, r: usize, b: usize) -> BlockQ8_0 {
    let (d, v) = row_block(WeightType::Q8_0, bytes, rows, per_row, r, b);
    BlockQ8_0 {
        d: half::f16::from_bits(d),
        qs: v.map(|q| q as i8),
    }
}

/// Rows `first..first + count` as row-major Q4_0 blocks.
fn q4_0_rows(
    bytes: &[u8],
    rows: usize,
    per_row: usize,
    first: usize,
    count: usize,
) -> Vec<BlockQ4_0> {
    (first..first + count)
        .flat_map(|r| (0..per_row).map(move |b| q4_0_block(bytes, rows, per_row, r, b)))
        .collect()
}

/// Row `r`'s block `b` of an interleaved Q4_0 matrix, as the file had it.
fn q4_0_block(bytes: &[u8], rows: usize, per_row: usize, r: usize, b: usize) -> BlockQ4_0 {
    let (d, v) = row_block(WeightType::Q4_0, bytes, rows, per_row, r, b);
    BlockQ4_0 {
        d: half::f16::from_bits(d),
        qs: std::array::from_fn(|j| v[j]),
    }
}

/// Row `r` of an interleaved matrix as f32 values (an embedding lookup).
pub(crate) fn row_into(
    ty: WeightType,
    bytes: &[u8],
    rows: usize,
    per_row: usize,
    r: usize,
    out: &mut [f32],
) {
    match ty {
        WeightType::Q4_K => {
            return super_blocks::row_into::<q4_k::Q4K>(bytes, rows, per_row, r, out)
        }
        WeightType::Q6_K => {
            return super_blocks::row_into::<q6_k::Q6K>(bytes, rows, per_row, r, out)
        }
        _ => {}
    }
    // Block by block, straight into `out`: an embedding lookup per token
    // allocates nothing.
    for (b, out) in out.chunks_exact_mut(QK8_0).take(per_row).enumerate() {
        match ty {
            WeightType::Q8_0 => {
                let block = q8_0_block(bytes, rows, per_row, r, b);
                crate::q8_0::dequantize_q8_0_into(std::slice::from_ref(&block), out);
            }
            _ => {
                let block = q4_0_block(bytes, rows, per_row, r, b);
                crate::q4_0::dequantize_q4_0_into(std::slice::from_ref(&block), out);
            }
        }
    }
}

/// Row-major rows (already put back in order) through the tier's kernel.
fn row_major_into(
    ty: WeightType,
    bytes: &[u8],
    rows: usize,
    per_row: usize,
    x: &Activation<'_>,
    first: usize,
    out: &mut [f32],
) {
    let n = out.len();
    match ty {
        WeightType::Q8_0 => {
            let blocks = q8_0_rows(bytes, rows, per_row, first, n);
            crate::q8_0::rows_into(&crate::Serial, &blocks, per_row, x, out);
        }
        _ => {
            let blocks = q4_0_rows(bytes, rows, per_row, first, n);
            crate::q4_0::rows_into(&crate::Serial, &blocks, per_row, x, out);
        }
    }
}

/// `out[i] = row(start + i) . x` over an interleaved Q8_0 or Q4_0
/// matrix, on the calling thread.
pub(crate) fn rows_into(
    ty: WeightType,
    bytes: &[u8],
    rows: usize,
    per_row: usize,
    x: &Activation<'_>,
    start: usize,
    out: &mut [f32],
) {
    // Chosen once per call, not per group: a stories15M group is nine
    // blocks, and the tier checks and a copy through `memmove` per group
    // were 6 % of its 2-thread decode.
    let (one, streams) = (group_kernel::<1>(ty), group_kernel::<STREAMS>(ty));
    groups_into(
        group_bytes(ty, per_row),
        bytes,
        rows,
        start,
        out,
        |g, out| one(ty, g, per_row, x, out),
        |g, out| streams(ty, g, per_row, x, out),
        |from, out| row_major_into(ty, bytes, rows, per_row, x, from, out),
    );
}

/// The rows `start..start + out.len()` of an interleaved matrix whose
/// groups are `group_bytes` long, group by group: `streams` on
/// [`STREAMS`] whole groups at once, `one` on a single group, `tail` on
/// the row-major rows past the last whole group (from its first row). A
/// group cut by `start` or the end is computed whole and the rows asked
/// for copied out: each row's bits never depend on where a job's ranges
/// fall.
#[allow(clippy::too_many_arguments)]
#[inline]
fn groups_into(
    group_bytes: usize,
    bytes: &[u8],
    rows: usize,
    start: usize,
    out: &mut [f32],
    one: impl Fn([&[u8]; 1], [&mut [f32; INTERLEAVED_ROWS]; 1]),
    streams: impl Fn([&[u8]; STREAMS], [&mut [f32; INTERLEAVED_ROWS]; STREAMS]),
    tail: impl FnOnce(usize, &mut [f32]),
) {
    let end = start + out.len();
    let whole = rows / INTERLEAVED_ROWS * INTERLEAVED_ROWS;
    let group = |g: usize| &bytes[g * group_bytes..][..group_bytes];
    let (span, stop) = (STREAMS * INTERLEAVED_ROWS, end.min(whole));
    let mut r = start;
    while r < stop {
        let g = r / INTERLEAVED_ROWS;
        let first = g * INTERLEAVED_ROWS;
        if r == first && r + span <= stop {
            // `STREAMS` whole groups asked for: read together, straight
            // into the output.
            let mut outs = out[r - start..r - start + span]
                .chunks_exact_mut(INTERLEAVED_ROWS)
                .map(|rows| {
                    <&mut [f32; INTERLEAVED_ROWS]>::try_from(rows).expect("a group of rows")
                });
            let outs = std::array::from_fn(|_| outs.next().expect("STREAMS groups"));
            streams(std::array::from_fn(|k| group(g + k)), outs);
            r += span;
            continue;
        }
        let to = (first + INTERLEAVED_ROWS).min(end);
        if let Ok(rows) = <&mut [f32; INTERLEAVED_ROWS]>::try_from(&mut out[r - start..to - start])
        {
            // A whole group asked for: straight into the output.
            one([group(g)], [rows]);
        } else {
            let mut all = [0.0f32; INTERLEAVED_ROWS];
            one([group(g)], [&mut all]);
            out[r - start..to - start].copy_from_slice(&all[r - first..to - first]);
        }
        r = to;
    }
    if end > whole {
        // The rows after the last whole group, row-major in place.
        let from = start.max(whole);
        tail(from, &mut out[from - start..]);
    }
}

/// Groups read together, block by block: each group is its own stream
/// through memory. On an Intel Xeon (2 vCPUs, from DRAM) a plain read that
/// keeps four streams going in 512-byte steps moves 40-50 % more bytes a
/// second than one stream, on one thread and on two, whatever the
/// prefetch distances (one stream with software prefetch 4-16 KiB ahead
/// into L1 and 12-48 KiB into L2: 9.8-10.1 GB/s on one thread, against
/// 14-15 for four streams). In the decode (a probe process per build,
/// alternated, median of five pairs; groups of eight rows on 256-bit
/// registers then): two groups at once, stories110M
/// Q8_0 +17 % at 1 thread and +15 % at 2, Q4_0 +3 %, the cache-resident
/// stories15M level (0.96-1.04x); four groups, whose accumulators no
/// longer fit the registers, +8-12 % on stories110M and 0.87-1.0x on
/// stories15M.
const STREAMS: usize = 2;

/// `N` whole groups' rows of a `ty` matrix against `x`, group `k` into
/// `out[k]`.
type GroupsFn<const N: usize> =
    fn(WeightType, [&[u8]; N], usize, &Activation<'_>, [&mut [f32; INTERLEAVED_ROWS]; N]);

/// The kernel for `N` groups of `ty` on this CPU: the VNNI kernel where
/// interleaving pays, else each group put back in row-major order through
/// the tier's kernel.
fn group_kernel<const N: usize>(ty: WeightType) -> GroupsFn<N> {
    #[cfg(target_arch = "x86_64")]
    if interleaving_pays(ty) {
        return match ty {
            WeightType::Q8_0 => avx512::q8_0_groups_vnni::<N>,
            _ => avx512::q4_0_groups_vnni::<N>,
        };
    }
    let _ = ty;
    row_major_groups::<N>
}

fn row_major_groups<const N: usize>(
    ty: WeightType,
    groups: [&[u8]; N],
    per_row: usize,
    x: &Activation<'_>,
    out: [&mut [f32; INTERLEAVED_ROWS]; N],
) {
    for (group, out) in groups.into_iter().zip(out) {
        row_major_into(ty, group, INTERLEAVED_ROWS, per_row, x, 0, out);
    }
}

/// `out[i] = row(start + i) . x` over an interleaved Q4_K or Q6_K matrix,
/// on the calling thread.
pub(crate) fn k_quant_rows_into(
    ty: WeightType,
    bytes: &[u8],
    rows: usize,
    per_row: usize,
    x: &[crate::k_quants::BlockQ8K],
    start: usize,
    out: &mut [f32],
) {
    match ty {
        WeightType::Q4_K => {
            super_blocks::rows_into::<q4_k::Q4K>(bytes, rows, per_row, x, start, out)
        }
        _ => super_blocks::rows_into::<q6_k::Q6K>(bytes, rows, per_row, x, start, out),
    }
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use std::arch::x86_64::*;

    use super::{Activation, GroupLayout, WeightType, INTERLEAVED_ROWS, L1_AHEAD, L2_AHEAD};
    use crate::blocks::LANES;
    use crate::q8_0::avx2::{prefetch_at, Q8_0_L2_AHEAD};

    /// Safe entry: only handed out by `group_kernel` where
    /// `interleaving_pays(Q8_0)`.
    pub(super) fn q8_0_groups_vnni<const N: usize>(
        _: WeightType,
        groups: [&[u8]; N],
        per_row: usize,
        x: &Activation<'_>,
        out: [&mut [f32; INTERLEAVED_ROWS]; N],
    ) {
        debug_assert!(super::interleaving_pays(WeightType::Q8_0));
        // SAFETY: `interleaving_pays` holds only on the AVX-512 tier with
        // VNNI (the tier implies AVX2, F16C and AVX-512 F/VL/BW).
        unsafe { q8_0_group(groups, per_row, x, out) }
    }

    /// Safe entry: only handed out by `group_kernel` where
    /// `interleaving_pays(Q4_0)`.
    pub(super) fn q4_0_groups_vnni<const N: usize>(
        _: WeightType,
        groups: [&[u8]; N],
        per_row: usize,
        x: &Activation<'_>,
        out: [&mut [f32; INTERLEAVED_ROWS]; N],
    ) {
        debug_assert!(super::interleaving_pays(WeightType::Q4_0));
        // SAFETY: as for `q8_0_groups_vnni`.
        unsafe { q4_0_group(groups, per_row, x, out) }
    }

    /// The sixteen Q8_0 rows of each of `N` interleaved groups against `x`.
    ///
    /// # Safety
    ///
    /// AVX-512 F/BW/VNNI, AVX2 and F16C.
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni,avx2,f16c")]
    unsafe fn q8_0_group<const N: usize>(
        groups: [&[u8]; N],
        per_row: usize,
        x: &Activation<'_>,
        out: [&mut [f32; INTERLEAVED_ROWS]; N],
    ) {
        let layout = GroupLayout {
            values: 32,
            per_row,
        };
        for group in groups {
            assert!(group.len() >= layout.bytes());
        }
        assert!(x.q.len() >= per_row && x.d.len() >= per_row && x.sum.len() >= per_row);
        let (values, xq, xsum) = (groups.map(<[u8]>::as_ptr), x.q.as_ptr(), x.sum.as_ptr());
        // Pointers, not indexing: a bounds check per block splits the loop
        // into one basic block per check, and the compiler then sinks each
        // block's arithmetic past all of them, keeping eight blocks' loads
        // live at once (spilled: the two-group Q4_0 loop had 172 stack
        // references, 6 without the checks; docs/tuning.md).
        let block = |g: usize, b: usize| {
            let at = values[g].wrapping_add(layout.value(b, 0, 0));
            prefetch_at::<L1_AHEAD, Q8_0_L2_AHEAD>(at, INTERLEAVED_ROWS * layout.values);
            // SAFETY: `accumulate` asks for blocks `b < per_row` only, and
            // `x` has `per_row` blocks and sums (asserted).
            let (xs, sum) = unsafe { ((*xq.add(b)).qs.as_ptr().cast::<i32>(), *xsum.add(b)) };
            // Two chains of four: integer sums, exact in any order.
            let (mut s0, mut s1) = (_mm512_setzero_si512(), _mm512_setzero_si512());
            for c in (0..8).step_by(2) {
                // SAFETY: bytes 64c.. + 128 of the group block's values
                // (c + 1 < 8, b < per_row), inside `group` (asserted);
                // dwords `c`, `c + 1` of a 32-byte block.
                let (w0, w1, x0, x1) = unsafe {
                    (
                        _mm512_loadu_si512(at.add(64 * c).cast()),
                        _mm512_loadu_si512(at.add(64 * (c + 1)).cast()),
                        xs.add(c).read_unaligned(),
                        xs.add(c + 1).read_unaligned(),
                    )
                };
                s0 = _mm512_dpbusd_epi32(s0, w0, _mm512_set1_epi32(x0));
                s1 = _mm512_dpbusd_epi32(s1, w1, _mm512_set1_epi32(x1));
            }
            // `w + 128` times `x`, less `128 * sum(x)`: the exact sums.
            let biased = _mm512_add_epi32(s0, s1);
            _mm512_sub_epi32(biased, _mm512_slli_epi32::<7>(_mm512_set1_epi32(sum)))
        };
        let scales = |g: usize, b: usize| values[g].wrapping_add(layout.scale(b, 0));
        // SAFETY: the features, by this function's contract; `scales(g,
        // b)` is block `b`'s 32 bytes of scales, inside the group
        // (asserted), and `x` has `per_row` scales (asserted).
        unsafe { accumulate(per_row, |b| *x.d.get_unchecked(b), out, block, scales) }
    }

    /// The sixteen Q4_0 rows of each of `N` interleaved groups against `x`.
    ///
    /// # Safety
    ///
    /// AVX-512 F/BW/VNNI, AVX2 and F16C.
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni,avx2,f16c")]
    unsafe fn q4_0_group<const N: usize>(
        groups: [&[u8]; N],
        per_row: usize,
        x: &Activation<'_>,
        out: [&mut [f32; INTERLEAVED_ROWS]; N],
    ) {
        let layout = GroupLayout {
            values: 16,
            per_row,
        };
        for group in groups {
            assert!(group.len() >= layout.bytes());
        }
        assert!(x.q.len() >= per_row && x.d.len() >= per_row && x.sum.len() >= per_row);
        let (low, high) = (_mm512_set1_epi8(0x0f), _mm512_set1_epi8(0xf0_u8 as i8));
        let (values, xq, xsum) = (groups.map(<[u8]>::as_ptr), x.q.as_ptr(), x.sum.as_ptr());
        // Pointers, not indexing: as in `q8_0_group`.
        let block = |g: usize, b: usize| {
            let at = values[g].wrapping_add(layout.value(b, 0, 0));
            prefetch_at::<L1_AHEAD, L2_AHEAD>(at, INTERLEAVED_ROWS * layout.values);
            // SAFETY: as in `q8_0_group`.
            let (xs, sum) = unsafe { ((*xq.add(b)).qs.as_ptr().cast::<i32>(), *xsum.add(b)) };
            // Values are nibbles less 8: the low chain starts at
            // `-8 * sum(x)`. The high nibbles are multiplied in place
            // (`16 * value`, masked, not shifted): one shift a block
            // instead of one per 64 bytes, on the port the multiplies
            // use. Integer sums, exact in any order.
            let mut s0 = _mm512_set1_epi32(sum.wrapping_mul(-8));
            let mut s1 = _mm512_setzero_si512();
            for c in 0..4 {
                // SAFETY: bytes 64c.. + 64 of the group block's values
                // (c < 4, b < per_row), inside `group` (asserted); dwords
                // `c` and `c + 4` of a 32-byte block.
                let (w, x_low, x_high) = unsafe {
                    (
                        _mm512_loadu_si512(at.add(64 * c).cast()),
                        xs.add(c).read_unaligned(),
                        xs.add(c + 4).read_unaligned(),
                    )
                };
                // Byte j: value j low, value j + 16 high, each 0..=15.
                let lo = _mm512_and_si512(w, low);
                let hi16 = _mm512_and_si512(w, high);
                s0 = _mm512_dpbusd_epi32(s0, lo, _mm512_set1_epi32(x_low));
                s1 = _mm512_dpbusd_epi32(s1, hi16, _mm512_set1_epi32(x_high));
            }
            // `s1` is sixteen times the high sums, exactly (at most
            // 16 * 15 * 128 * 16 in magnitude): the shift divides.
            _mm512_add_epi32(s0, _mm512_srai_epi32::<4>(s1))
        };
        let scales = |g: usize, b: usize| values[g].wrapping_add(layout.scale(b, 0));
        // SAFETY: as for `q8_0_group`.
        unsafe { accumulate(per_row, |b| *x.d.get_unchecked(b), out, block, scales) }
    }

    /// The blocks' terms into eight lanes and the tail, as the row-major
    /// kernels add them: `block(g, b)` gives group `g`'s block `b`'s exact
    /// integer sums (lane `r`: row `r`), `scales(g, b)` where its sixteen
    /// f16 scales are. Every row is a lane, so the row-major kernels'
    /// per-row arithmetic (its lane `k` over blocks `b = k mod 8`, the
    /// lanes reduced in `lanes::reduce_ps`'s order, then the tail blocks
    /// in order) is done lane-wise on sixteen rows at once.
    ///
    /// # Safety
    ///
    /// AVX-512 F, AVX2 and F16C; `scales(g, b)` has 32 readable bytes.
    /// `block`, `scales` and `dx` are asked for blocks `b < per_row` of
    /// groups `g < N` only (what the callers' unchecked reads rely on).
    #[target_feature(enable = "avx512f,avx2,f16c")]
    #[inline]
    pub(super) unsafe fn accumulate<const N: usize>(
        per_row: usize,
        dx: impl Fn(usize) -> f32,
        out: [&mut [f32; INTERLEAVED_ROWS]; N],
        mut block: impl FnMut(usize, usize) -> __m512i,
        scales: impl Fn(usize, usize) -> *const u8,
    ) {
        // SAFETY: the features, by this function's contract.
        unsafe {
            accumulate_terms(per_row, out, |g, b| {
                let sumi = block(g, b);
                // SAFETY: 32 bytes of scales (this function's contract).
                let dw = _mm512_cvtph_ps(_mm256_loadu_si256(scales(g, b).cast()));
                _mm512_mul_ps(
                    _mm512_cvtepi32_ps(sumi),
                    _mm512_mul_ps(dw, _mm512_set1_ps(dx(b))),
                )
            })
        }
    }

    /// [`accumulate`]'s order over any float terms: `term(g, b)` is
    /// group `g`'s block `b`'s term (lane `r`: row `r`), asked for
    /// `b < per_row` and `g < N` only.
    ///
    /// # Safety
    ///
    /// AVX-512 F.
    #[target_feature(enable = "avx512f,avx2,f16c")]
    #[inline]
    pub(super) unsafe fn accumulate_terms<const N: usize>(
        per_row: usize,
        out: [&mut [f32; INTERLEAVED_ROWS]; N],
        mut term: impl FnMut(usize, usize) -> __m512,
    ) {
        let body = per_row / LANES * LANES;
        // `acc[g][k]`: group `g`'s rows' sums over blocks `b = k mod 8`,
        // as the row-major kernels' lane `k`. The groups advance block by
        // block together: each is its own stream through memory (see
        // `STREAMS`), and each row's arithmetic is as alone.
        let mut acc = [[_mm512_setzero_ps(); LANES]; N];
        for first in (0..body).step_by(LANES) {
            for k in 0..LANES {
                for (g, acc) in acc.iter_mut().enumerate() {
                    acc[k] = _mm512_add_ps(acc[k], term(g, first + k));
                }
            }
        }
        // `lanes::reduce_ps`'s order, then the tail in block order.
        let mut sums = acc.map(|l| {
            _mm512_add_ps(
                _mm512_add_ps(_mm512_add_ps(l[0], l[4]), _mm512_add_ps(l[2], l[6])),
                _mm512_add_ps(_mm512_add_ps(l[1], l[5]), _mm512_add_ps(l[3], l[7])),
            )
        });
        for b in body..per_row {
            for (g, sum) in sums.iter_mut().enumerate() {
                *sum = _mm512_add_ps(*sum, term(g, b));
            }
        }
        for (sum, out) in sums.into_iter().zip(out) {
            // SAFETY: sixteen f32 into a sixteen-f32 array.
            unsafe { _mm512_storeu_ps(out.as_mut_ptr(), sum) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::random::XorShift;
    use crate::{quantize_q4_0, quantize_q8_0, PreparedInput, Weights};

    fn row_major_bytes(ty: WeightType, values: &[f32]) -> Vec<u8> {
        let block = |d: half::f16, qs: &[u8]| {
            let mut v = d.to_bits().to_le_bytes().to_vec();
            v.extend_from_slice(qs);
            v
        };
        match ty {
            WeightType::Q8_0 => quantize_q8_0(values)
                .iter()
                .flat_map(|b| block(b.d, &b.qs.map(|q| q as u8)))
                .collect(),
            WeightType::Q4_0 => quantize_q4_0(values)
                .iter()
                .flat_map(|b| block(b.d, &b.qs))
                .collect(),
            WeightType::Q4_K => crate::quantize_q4_k(values)
                .iter()
                .flat_map(|b| {
                    let mut v = b.d.to_bits().to_le_bytes().to_vec();
                    v.extend_from_slice(&b.dmin.to_bits().to_le_bytes());
                    v.extend_from_slice(&b.scales);
                    v.extend_from_slice(&b.qs);
                    v
                })
                .collect(),
            _ => crate::quantize_q6_k(values)
                .iter()
                .flat_map(|b| {
                    let mut v = b.ql.to_vec();
                    v.extend_from_slice(&b.qh);
                    v.extend(b.scales.iter().map(|&s| s as u8));
                    v.extend_from_slice(&b.d.to_bits().to_le_bytes());
                    v
                })
                .collect(),
        }
    }

    #[test]
    fn interleaved_rows_give_the_row_major_bits_for_any_range() {
        let mut rng = XorShift(0x5eed);
        for ty in [
            WeightType::Q8_0,
            WeightType::Q4_0,
            WeightType::Q4_K,
            WeightType::Q6_K,
        ] {
            // Whole groups, a partial last group, fewer rows than a group;
            // blocks per row with and without a tail past the eights; an
            // odd number of groups (the kernels read two at once).
            let shapes: &[(usize, usize)] = if ty.block_values() == crate::QK_K {
                // Super-blocks of 256: a tail past the eights needs nine.
                if cfg!(miri) {
                    &[(17, 256)]
                } else {
                    &[
                        (16, 256),
                        (21, 512),
                        (5, 256),
                        (40, 768),
                        (48, 2304),
                        (72, 256),
                    ]
                }
            } else if cfg!(miri) {
                &[(17, 288)]
            } else {
                &[
                    (16, 256),
                    (21, 288),
                    (5, 64),
                    (40, 768),
                    (9, 32),
                    (72, 64),
                    (48, 288),
                ]
            };
            for &(rows, cols) in shapes {
                let values: Vec<f32> = (0..rows * cols).map(|_| rng.uniform()).collect();
                let bytes = row_major_bytes(ty, &values);
                // Row-major `Weights` need their blocks' 2-byte alignment,
                // which a `Vec<u8>` does not promise (Miri's does not give it).
                let mut aligned = vec![0u8; bytes.len() + 1];
                let at = aligned.as_ptr() as usize % 2;
                aligned[at..at + bytes.len()].copy_from_slice(&bytes);
                let row_major = &aligned[at..at + bytes.len()];
                let mut interleaved = bytes.clone();
                interleave_rows(ty, &mut interleaved, rows, cols).unwrap();
                let x: Vec<f32> = (0..cols).map(|_| rng.uniform() * 3.0).collect();
                let input = PreparedInput::new(&x, [ty]);
                let plain = Weights::new(ty, rows, cols, row_major).unwrap();
                let mut want = vec![0.0f32; rows];
                plain.rows_into(&input, 0, &mut want);
                let w = Weights::interleaved(ty, rows, cols, &interleaved).unwrap();
                assert!(w.is_interleaved() && !plain.is_interleaved());
                // Every range; under Miri the ranges that start or end
                // inside a group, at its edge, and past the last group.
                let ranges: Vec<(usize, usize)> = if cfg!(miri) {
                    vec![(0, rows), (3, 9), (1, 2), (15, 17)]
                } else {
                    (0..rows)
                        .flat_map(|start| (start + 1..=rows).map(move |end| (start, end)))
                        .collect()
                };
                for (start, end) in ranges {
                    let mut got = vec![0.0f32; end - start];
                    w.rows_into(&input, start, &mut got);
                    let want = &want[start..end];
                    assert!(
                        got.iter()
                            .zip(want)
                            .all(|(a, b)| a.to_bits() == b.to_bits()),
                        "{ty} {rows} x {cols}, rows {start}..{end}: {got:?} against {want:?}"
                    );
                }
                for r in 0..rows {
                    let (mut got, mut want) = (vec![0.0f32; cols], vec![0.0f32; cols]);
                    w.row_into(r, &mut got);
                    plain.row_into(r, &mut want);
                    assert_eq!(got, want, "{ty} row {r} of {rows} x {cols}");
                }
            }
        }
    }

    #[test]
    fn only_whole_matrices_of_the_interleaved_types_are_interleaved() {
        let mut bytes = vec![0u8; 34 * 3];
        let q8_0 = WeightType::Q8_0;
        assert!(matches!(
            interleave_rows(q8_0, &mut bytes, 3, 33),
            Err(WeightsError::PartialBlock { .. })
        ));
        assert!(matches!(
            interleave_rows(q8_0, &mut bytes, 4, 32),
            Err(WeightsError::Size { .. })
        ));
        assert!(interleave_rows(q8_0, &mut bytes, 3, 32).is_ok());
        let err = interleave_rows(WeightType::F16, &mut bytes, 3, 32).unwrap_err();
        assert_eq!(
            err.to_string(),
            "F16 rows are not interleaved (Q8_0, Q4_0, Q4_K and Q6_K are)"
        );
        assert!(Weights::interleaved(WeightType::F32, 1, 1, &[0; 4]).is_err());
    }
}
