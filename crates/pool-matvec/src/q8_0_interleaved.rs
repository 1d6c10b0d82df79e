//! Q8_0 matrices with their rows interleaved by eight: the layout the
//! AVX-512 VNNI kernel reads without a horizontal sum per block.
//!
//! Row-major Q8_0 (GGUF's layout) gives each block of one row a 32-lane
//! integer dot that must be summed across its lanes before the block's
//! scale applies: on x86 that is a tree of `vphaddd` shuffles per eight
//! blocks, and on a CPU with few shuffle ports (Intel's, one port for
//! them) it costs more than the multiplies. Interleaved, a block of eight
//! rows keeps each row's bytes in its own 32-bit lane: eight `vpdpbusd`
//! (one per 4-byte chunk of the activation, broadcast) leave row `r`'s
//! exact block sum in lane `r`, with no shuffle at all. Measured from L2
//! on one core of an Intel Xeon (AVX-512 VNNI): 13-17 GB/s row-major,
//! 23-26 GB/s interleaved; from L3 12.6-15 against 16-18 GB/s.
//!
//! The layout keeps the matrix's bytes and size: rows `8g..8g + 8` occupy
//! the same bytes as before, rearranged; rows past the last whole group of
//! eight stay row-major after them. Within a group, block `b` is 272
//! bytes at `272 b`: the eight rows' f16 scales (16 bytes), then 256 bytes
//! in which byte `4 (8c + r) + k` is row `r`'s value `4c + k` with its sign
//! bit flipped (`w + 128` as unsigned, what `vpdpbusd` multiplies: no
//! per-block XOR at run time).
//!
//! Each row's value is the row-major kernels' to the bit: the same exact
//! integer block sums, the same per-block `sumi * (d_w * d_x)`, added
//! into lane `b mod 8` of eight lanes reduced in the same order, then the
//! tail blocks in order. On a tier without the interleaved kernel, a group
//! is put back into row-major order and the tier's row-major kernel runs.

use crate::q8_0::{Activation, BlockQ8_0, QK8_0};
use crate::weights::WeightsError;

/// Rows per interleaved group.
pub const Q8_0_INTERLEAVE: usize = 8;

/// Bytes of one Q8_0 block.
const BLOCK: usize = std::mem::size_of::<BlockQ8_0>();

/// Bytes of one block of a group (eight rows' blocks).
const GROUP_BLOCK: usize = Q8_0_INTERLEAVE * BLOCK;

/// Whether this CPU's kernels read interleaved Q8_0 faster than
/// row-major: the AVX-512 tier with VNNI (the tier in force, so
/// `POOL_SIMD_TIER` lowering it turns interleaving off). A loader
/// interleaves its Q8_0 matrices only where this holds; elsewhere the
/// interleaved layout still computes the same bits, more slowly.
pub fn q8_0_interleaving_pays() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        crate::tier::simd_tier() == crate::SimdTier::Avx512 && crate::tier::has_avx512_vnni()
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// The checked shape of a `rows x cols` Q8_0 matrix in `len` bytes:
/// blocks per row.
pub(crate) fn blocks_per_row(rows: usize, cols: usize, len: usize) -> Result<usize, WeightsError> {
    let ty = crate::WeightType::Q8_0;
    let row = ty
        .row_bytes(cols)
        .ok_or(WeightsError::PartialBlock { ty, cols })?;
    let needed = row.checked_mul(rows);
    if needed != Some(len) {
        return Err(WeightsError::Size { needed, found: len });
    }
    Ok(cols / QK8_0)
}

/// Rearranges `bytes`, a row-major `rows x cols` Q8_0 matrix (GGUF's
/// layout), in place into the interleaved layout (module docs). The
/// result is read with [`crate::Weights::interleaved_q8_0`].
///
/// ```
/// use pool_matvec::{interleave_q8_0, quantize_q8_0, BlockQ8_0, PreparedInput, WeightType, Weights};
///
/// let (rows, cols) = (20, 64);
/// let values: Vec<f32> = (0..rows * cols).map(|i| (i % 7) as f32 - 3.0).collect();
/// let blocks = quantize_q8_0(&values);
/// let mut bytes: Vec<u8> = blocks.iter().flat_map(|b| {
///     let mut v = b.d.to_bits().to_le_bytes().to_vec();
///     v.extend(b.qs.iter().map(|&q| q as u8));
///     v
/// }).collect();
/// let row_major = bytes.clone();
/// interleave_q8_0(&mut bytes, rows, cols).unwrap();
///
/// let x: Vec<f32> = (0..cols).map(|i| i as f32 / 10.0).collect();
/// let input = PreparedInput::new(&x, [WeightType::Q8_0]);
/// let (mut a, mut b) = (vec![0.0; rows], vec![0.0; rows]);
/// Weights::new(WeightType::Q8_0, rows, cols, &row_major).unwrap().rows_into(&input, 0, &mut a);
/// Weights::interleaved_q8_0(rows, cols, &bytes).unwrap().rows_into(&input, 0, &mut b);
/// assert_eq!(a, b);
/// ```
///
/// # Errors
///
/// If `cols` is not whole blocks or `bytes` is not `rows` rows of them.
pub fn interleave_q8_0(bytes: &mut [u8], rows: usize, cols: usize) -> Result<(), WeightsError> {
    let per_row = blocks_per_row(rows, cols, bytes.len())?;
    let group_bytes = GROUP_BLOCK * per_row;
    let mut row_major = vec![0u8; group_bytes];
    for group in bytes.chunks_exact_mut(group_bytes) {
        row_major.copy_from_slice(group);
        for b in 0..per_row {
            let out = &mut group[b * GROUP_BLOCK..(b + 1) * GROUP_BLOCK];
            for r in 0..Q8_0_INTERLEAVE {
                let block = &row_major[(r * per_row + b) * BLOCK..][..BLOCK];
                out[2 * r..2 * r + 2].copy_from_slice(&block[..2]);
                for (j, &q) in block[2..].iter().enumerate() {
                    let (c, k) = (j / 4, j % 4);
                    out[16 + 4 * (8 * c + r) + k] = q ^ 0x80;
                }
            }
        }
    }
    Ok(())
}

/// Row `r` (of a matrix of `per_row` blocks a row, `rows` rows) read back
/// from the interleaved layout as row-major blocks.
pub(crate) fn row_blocks(bytes: &[u8], rows: usize, per_row: usize, r: usize) -> Vec<BlockQ8_0> {
    let whole = rows / Q8_0_INTERLEAVE * Q8_0_INTERLEAVE;
    if r >= whole {
        return (0..per_row)
            .map(|b| block_at(&bytes[(r * per_row + b) * BLOCK..][..BLOCK]))
            .collect();
    }
    let (g, lane) = (r / Q8_0_INTERLEAVE, r % Q8_0_INTERLEAVE);
    let group = &bytes[g * GROUP_BLOCK * per_row..][..GROUP_BLOCK * per_row];
    (0..per_row)
        .map(|b| {
            let block = &group[b * GROUP_BLOCK..][..GROUP_BLOCK];
            let d = half::f16::from_bits(u16::from_le_bytes([block[2 * lane], block[2 * lane + 1]]));
            let qs = std::array::from_fn(|j| {
                let (c, k) = (j / 4, j % 4);
                (block[16 + 4 * (8 * c + lane) + k] ^ 0x80) as i8
            });
            BlockQ8_0 { d, qs }
        })
        .collect()
}

/// A row-major block from its 34 bytes.
fn block_at(bytes: &[u8]) -> BlockQ8_0 {
    BlockQ8_0 {
        d: half::f16::from_bits(u16::from_le_bytes([bytes[0], bytes[1]])),
        qs: std::array::from_fn(|j| bytes[2 + j] as i8),
    }
}

/// `out[i] = row(start + i) . x` over an interleaved matrix, on the
/// calling thread. A group cut by `start` or the end is computed whole
/// and the rows asked for copied out: each row's bits never depend on
/// where a job's ranges fall.
pub(crate) fn rows_into(
    bytes: &[u8],
    rows: usize,
    per_row: usize,
    x: &Activation<'_>,
    start: usize,
    out: &mut [f32],
) {
    let end = start + out.len();
    let whole = rows / Q8_0_INTERLEAVE * Q8_0_INTERLEAVE;
    let group_bytes = GROUP_BLOCK * per_row;
    let mut r = start;
    while r < end.min(whole) {
        let g = r / Q8_0_INTERLEAVE;
        let first = g * Q8_0_INTERLEAVE;
        let group = &bytes[g * group_bytes..][..group_bytes];
        let to = (first + Q8_0_INTERLEAVE).min(end);
        if r == first && to == first + Q8_0_INTERLEAVE {
            let dst: &mut [f32; Q8_0_INTERLEAVE] = (&mut out[r - start..to - start])
                .try_into()
                .expect("a whole group");
            group_into(group, per_row, x, dst);
        } else {
            let mut all = [0.0f32; Q8_0_INTERLEAVE];
            group_into(group, per_row, x, &mut all);
            out[r - start..to - start].copy_from_slice(&all[r - first..to - first]);
        }
        r = to;
    }
    if end > whole {
        // The rows after the last whole group, row-major.
        let from = start.max(whole);
        let tail: Vec<BlockQ8_0> = (from..end)
            .flat_map(|r| (0..per_row).map(move |b| (r * per_row + b) * BLOCK))
            .map(|at| block_at(&bytes[at..at + BLOCK]))
            .collect();
        crate::q8_0::rows_into(&crate::Serial, &tail, per_row, x, &mut out[from - start..]);
    }
}

/// One whole group's eight rows: the VNNI kernel where the tier has it,
/// else the group put back in row-major order through the tier's kernel.
fn group_into(group: &[u8], per_row: usize, x: &Activation<'_>, out: &mut [f32; 8]) {
    #[cfg(target_arch = "x86_64")]
    if q8_0_interleaving_pays() {
        // SAFETY: `q8_0_interleaving_pays` holds only on the AVX-512 tier
        // with VNNI (the tier implies AVX2, F16C and AVX-512 F/VL).
        unsafe { avx512::group_into(group, per_row, x, out) };
        return;
    }
    let blocks: Vec<BlockQ8_0> = (0..Q8_0_INTERLEAVE)
        .flat_map(|r| row_blocks(group, Q8_0_INTERLEAVE, per_row, r))
        .collect();
    crate::q8_0::rows_into(&crate::Serial, &blocks, per_row, x, out);
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use std::arch::x86_64::*;

    use crate::q8_0::avx2::{prefetch_ahead, Q8_0_L2_AHEAD};
    use super::{Activation, GROUP_BLOCK, Q8_0_INTERLEAVE};
    use crate::blocks::LANES;

    /// The eight rows of one interleaved group against `x`.
    ///
    /// # Safety
    ///
    /// AVX-512 F/VL/VNNI, AVX2 and F16C.
    #[target_feature(enable = "avx512f,avx512vl,avx512vnni,avx2,f16c")]
    pub(super) unsafe fn group_into(
        group: &[u8],
        per_row: usize,
        x: &Activation<'_>,
        out: &mut [f32; Q8_0_INTERLEAVE],
    ) {
        assert!(group.len() >= per_row * GROUP_BLOCK && x.q.len() >= per_row);
        assert!(x.d.len() >= per_row && x.sum.len() >= per_row);
        let body = per_row / LANES * LANES;
        // Lane `r` of `acc[k]`: row `r`'s sum over blocks `b = k mod 8`,
        // as the row-major kernels' lane `k`.
        let mut acc = [_mm256_setzero_ps(); LANES];
        let mut tail = [_mm256_setzero_ps(); LANES];
        for b in 0..per_row {
            let at = group[b * GROUP_BLOCK..].as_ptr();
            prefetch_ahead::<Q8_0_L2_AHEAD>(at, GROUP_BLOCK);
            let xs = x.q[b].qs.as_ptr().cast::<i32>();
            // Two chains of four: integer sums, exact in any order.
            let (mut s0, mut s1) = (_mm256_setzero_si256(), _mm256_setzero_si256());
            for c in (0..8).step_by(2) {
                // SAFETY: 32 bytes at 16 + 32c (c < 8) and the 4-byte
                // chunks `c`, `c + 1` of a 32-byte block, all inside the
                // slices asserted above.
                unsafe {
                    let w0 = _mm256_loadu_si256(at.add(16 + 32 * c).cast());
                    let w1 = _mm256_loadu_si256(at.add(16 + 32 * (c + 1)).cast());
                    s0 = _mm256_dpbusd_epi32(s0, w0, _mm256_set1_epi32(xs.add(c).read_unaligned()));
                    s1 = _mm256_dpbusd_epi32(
                        s1,
                        w1,
                        _mm256_set1_epi32(xs.add(c + 1).read_unaligned()),
                    );
                }
            }
            // `w + 128` times `x`, less `128 * sum(x)`: the exact sums.
            let biased = _mm256_add_epi32(s0, s1);
            let sumi = _mm256_sub_epi32(biased, _mm256_set1_epi32(x.sum[b] << 7));
            // SAFETY: the group block's first 16 bytes: eight f16 scales.
            let dw = _mm256_cvtph_ps(unsafe { _mm_loadu_si128(at.cast()) });
            let term = _mm256_mul_ps(
                _mm256_cvtepi32_ps(sumi),
                _mm256_mul_ps(dw, _mm256_set1_ps(x.d[b])),
            );
            if b < body {
                acc[b % LANES] = _mm256_add_ps(acc[b % LANES], term);
            } else {
                tail[b - body] = term;
            }
        }
        let lanes = acc.map(|v| {
            let mut a = [0.0f32; LANES];
            // SAFETY: eight f32 into an eight-f32 array.
            unsafe { _mm256_storeu_ps(a.as_mut_ptr(), v) };
            a
        });
        let tails = tail.map(|v| {
            let mut a = [0.0f32; LANES];
            // SAFETY: as above.
            unsafe { _mm256_storeu_ps(a.as_mut_ptr(), v) };
            a
        });
        for (r, o) in out.iter_mut().enumerate() {
            let l: [f32; LANES] = std::array::from_fn(|k| lanes[k][r]);
            // `lanes::reduce_ps`'s order.
            let mut result = ((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7]));
            for t in &tails[..per_row - body] {
                result += t[r];
            }
            *o = result;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::random::XorShift;
    use crate::{quantize_q8_0, PreparedInput, WeightType, Weights};

    fn bytes_of(blocks: &[BlockQ8_0]) -> Vec<u8> {
        blocks
            .iter()
            .flat_map(|b| {
                let mut v = b.d.to_bits().to_le_bytes().to_vec();
                v.extend(b.qs.iter().map(|&q| q as u8));
                v
            })
            .collect()
    }

    #[test]
    fn interleaved_rows_give_the_row_major_bits_for_any_range() {
        let mut rng = XorShift(0x5eed);
        // Whole groups, a partial last group, fewer rows than a group;
        // blocks per row with and without a tail past the eights.
        for (rows, cols) in [(16, 256), (21, 288), (5, 64), (40, 768), (9, 32)] {
            let values: Vec<f32> = (0..rows * cols).map(|_| rng.uniform()).collect();
            let row_major = bytes_of(&quantize_q8_0(&values));
            let mut interleaved = row_major.clone();
            interleave_q8_0(&mut interleaved, rows, cols).unwrap();
            let x: Vec<f32> = (0..cols).map(|_| rng.uniform() * 3.0).collect();
            let input = PreparedInput::new(&x, [WeightType::Q8_0]);
            let mut want = vec![0.0f32; rows];
            Weights::new(WeightType::Q8_0, rows, cols, &row_major)
                .unwrap()
                .rows_into(&input, 0, &mut want);
            let w = Weights::interleaved_q8_0(rows, cols, &interleaved).unwrap();
            for start in 0..rows {
                for end in start + 1..=rows {
                    let mut got = vec![0.0f32; end - start];
                    w.rows_into(&input, start, &mut got);
                    let want = &want[start..end];
                    assert!(
                        got.iter().zip(want).all(|(a, b)| a.to_bits() == b.to_bits()),
                        "{rows} x {cols}, rows {start}..{end}: {got:?} against {want:?}"
                    );
                }
            }
            for r in 0..rows {
                let mut got = vec![0.0f32; cols];
                let mut want = vec![0.0f32; cols];
                w.row_into(r, &mut got);
                Weights::new(WeightType::Q8_0, rows, cols, &row_major)
                    .unwrap()
                    .row_into(r, &mut want);
                assert_eq!(got, want, "row {r} of {rows} x {cols}");
            }
        }
    }

    #[test]
    fn a_matrix_that_is_not_whole_blocks_is_not_interleaved() {
        let mut bytes = vec![0u8; 34 * 3];
        assert!(interleave_q8_0(&mut bytes, 3, 33).is_err());
        assert!(interleave_q8_0(&mut bytes, 4, 32).is_err());
        assert!(interleave_q8_0(&mut bytes, 3, 32).is_ok());
    }
}
