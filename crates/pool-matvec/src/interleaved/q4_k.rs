//! Q4_K matrices with their rows interleaved by sixteen, read by an
//! AVX-512 VNNI kernel with one 32-bit lane per row: Q4_K_M files hold
//! most of their matrices as Q4_K.
//!
//! Row-major, each super-block's eight sub-block scales and mins are
//! unpacked and spread over the lanes of its pair sums by shuffles, and
//! its sum reduced across lanes: measured on one Intel Xeon core from L2,
//! 11.6 GiB/s, under half the read ceiling `pool bench` reports beside it.
//! Interleaved, `vpdpbusd` leaves row `r`'s sum of four weights times four
//! activation bytes in lane `r`; each 32-weight sub-block's sums are
//! weighted by the sixteen rows' scales with one `vpmulld`, and the six-bit
//! scales and mins are unpacked lane-wise, sixteen rows at a time.
//!
//! The layout keeps the matrix's bytes (rows past the last whole group stay
//! row-major after it). A group is its super-blocks in turn, 2304 bytes
//! (36 cache lines) each: 32 lines of the weights, line `k` holding row
//! `r`'s `qs[4k..4k + 4]` at bytes `4r..4r + 4`; twelve lines' worth of
//! the packed scales, 16 bytes each (byte `j` of every row's `scales`,
//! row `r` at byte `r`); then the rows' f16 `d`, then their `dmin`.

use crate::k_quants::{dequantize_q4_k_into, q4_k_rows, BlockQ4K, BlockQ8K};
use crate::WeightType;

use super::super_blocks::{GroupsFn, SuperBlocks};
use super::INTERLEAVED_ROWS;

/// Bytes of one row's super-block.
const BLOCK: usize = std::mem::size_of::<BlockQ4K>();

/// Bytes of a group's super-block: sixteen rows'.
const GROUP_BLOCK: usize = INTERLEAVED_ROWS * BLOCK;

/// Where the packed scales, the `d` and the `dmin` start in a group's
/// super-block.
const SCALES: usize = 32 * 64;
const D: usize = SCALES + 12 * INTERLEAVED_ROWS;
const DMIN: usize = D + 2 * INTERLEAVED_ROWS;

const _: () = assert!(DMIN + 2 * INTERLEAVED_ROWS == GROUP_BLOCK);

/// Q4_K's layout (module docs).
pub(super) struct Q4K;

impl SuperBlocks for Q4K {
    const TY: WeightType = WeightType::Q4_K;
    type Block = BlockQ4K;

    fn at(_: usize, b: usize, i: usize, r: usize) -> usize {
        b * GROUP_BLOCK
            + match i {
                // `d`, `dmin`, `scales`, `qs`: the block's own order.
                0..2 => D + 2 * r + i,
                2..4 => DMIN + 2 * r + (i - 2),
                4..16 => SCALES + INTERLEAVED_ROWS * (i - 4) + r,
                _ => {
                    let q = i - 16;
                    64 * (q / 4) + 4 * r + q % 4
                }
            }
    }

    fn from_bytes(raw: &[u8]) -> BlockQ4K {
        BlockQ4K {
            d: half::f16::from_le_bytes([raw[0], raw[1]]),
            dmin: half::f16::from_le_bytes([raw[2], raw[3]]),
            scales: std::array::from_fn(|i| raw[4 + i]),
            qs: std::array::from_fn(|i| raw[16 + i]),
        }
    }

    fn dequantize_into(block: &BlockQ4K, out: &mut [f32]) {
        dequantize_q4_k_into(std::slice::from_ref(block), out);
    }

    fn rows(blocks: &[BlockQ4K], per_row: usize, x: &[BlockQ8K], out: &mut [f32]) {
        q4_k_rows(blocks, per_row, x, out);
    }

    fn kernel<const N: usize>() -> Option<GroupsFn<N>> {
        #[cfg(target_arch = "x86_64")]
        if super::interleaving_pays(WeightType::Q4_K) {
            return Some(avx512::groups_vnni::<N>);
        }
        None
    }
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use std::arch::x86_64::*;

    use super::super::{L1_AHEAD, L2_AHEAD};
    use super::{BlockQ8K, D, DMIN, GROUP_BLOCK, INTERLEAVED_ROWS, SCALES};
    use crate::q8_0::avx2::prefetch_at;

    /// Safe entry: only handed out where `interleaving_pays(Q4_K)`.
    pub(super) fn groups_vnni<const N: usize>(
        groups: [&[u8]; N],
        per_row: usize,
        x: &[BlockQ8K],
        out: [&mut [f32; INTERLEAVED_ROWS]; N],
    ) {
        debug_assert!(super::super::interleaving_pays(crate::WeightType::Q4_K));
        // SAFETY: `interleaving_pays` holds only on the AVX-512 tier with
        // VNNI (the tier implies AVX2, F16C and AVX-512 F/VL/BW).
        unsafe { group(groups, per_row, x, out) }
    }

    /// The sixteen rows of each of `N` interleaved groups against `x`.
    ///
    /// Per super-block and 64 weights `c`, lines `8c..8c + 8` hold the
    /// nibbles of weights `64c + 4k'` (low, sub-block `2c`) and `64c + 32
    /// + 4k'` (high, sub-block `2c + 1`) for `k' < 8`. The six-bit scales
    /// and mins are ggml's `get_scale_min_k4`, lane by lane. `sdot` and
    /// `smin` are the row-major kernels' exact integers, and the term
    /// `sdot * (d * dx) - smin * (dmin * dx)` theirs, lane by lane.
    ///
    /// # Safety
    ///
    /// AVX-512 F/BW/VNNI, AVX2 and F16C.
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni,avx2,f16c")]
    unsafe fn group<const N: usize>(
        groups: [&[u8]; N],
        per_row: usize,
        x: &[BlockQ8K],
        out: [&mut [f32; INTERLEAVED_ROWS]; N],
    ) {
        for group in groups {
            assert!(group.len() >= per_row * GROUP_BLOCK);
        }
        assert!(x.len() >= per_row);
        let nibble = _mm512_set1_epi8(0x0F);
        let term = |g: usize, b: usize| {
            let at = groups[g][b * GROUP_BLOCK..].as_ptr();
            let xb = &x[b];
            let xs = xb.qs.as_ptr().cast::<i32>();
            // SAFETY: dword `k < 64` of the 256 activation bytes.
            let x4 = |k: usize| _mm512_set1_epi32(unsafe { xs.add(k).read_unaligned() });
            // Byte `j` of the sixteen rows' packed scales, one per lane.
            let packed = |j: usize| {
                // SAFETY: `j < 12`: inside the super-block (asserted).
                let bytes = unsafe { _mm_loadu_si128(at.add(SCALES + 16 * j).cast()) };
                _mm512_cvtepu8_epi32(bytes)
            };
            let six = _mm512_set1_epi32(63);
            let four = _mm512_set1_epi32(0x0F);
            let top = |v: __m512i| _mm512_slli_epi32::<4>(_mm512_srli_epi32::<6>(v));
            let scale = |j: usize| {
                if j < 4 {
                    _mm512_and_si512(packed(j), six)
                } else {
                    _mm512_or_si512(_mm512_and_si512(packed(j + 4), four), top(packed(j - 4)))
                }
            };
            let min = |j: usize| {
                if j < 4 {
                    _mm512_and_si512(packed(j + 4), six)
                } else {
                    _mm512_or_si512(_mm512_srli_epi32::<4>(packed(j + 4)), top(packed(j)))
                }
            };
            let mut sdot = _mm512_setzero_si512();
            let mut smin = _mm512_setzero_si512();
            for c in 0..4 {
                let (mut low, mut high) = (_mm512_setzero_si512(), _mm512_setzero_si512());
                for k in 0..8 {
                    let line = 64 * (8 * c + k);
                    prefetch_at::<L1_AHEAD, L2_AHEAD>(at.wrapping_add(line), 64);
                    // SAFETY: line `8c + k < 32`, inside the super-block.
                    let w = unsafe { _mm512_loadu_si512(at.add(line).cast()) };
                    let lo = _mm512_and_si512(w, nibble);
                    let hi = _mm512_and_si512(_mm512_srli_epi16::<4>(w), nibble);
                    low = _mm512_dpbusd_epi32(low, lo, x4(16 * c + k));
                    high = _mm512_dpbusd_epi32(high, hi, x4(16 * c + 8 + k));
                }
                sdot = _mm512_add_epi32(sdot, _mm512_mullo_epi32(low, scale(2 * c)));
                sdot = _mm512_add_epi32(sdot, _mm512_mullo_epi32(high, scale(2 * c + 1)));
            }
            for j in 0..8 {
                let bsum = i32::from(xb.bsums[2 * j]) + i32::from(xb.bsums[2 * j + 1]);
                smin = _mm512_add_epi32(smin, _mm512_mullo_epi32(min(j), _mm512_set1_epi32(bsum)));
            }
            // The scales' lines and the `d`s, prefetched with the weights'.
            prefetch_at::<L1_AHEAD, L2_AHEAD>(at.wrapping_add(SCALES), GROUP_BLOCK - SCALES);
            // SAFETY: 32 bytes each of `d` and `dmin`, inside the block.
            let (dw, dmin) = unsafe {
                (
                    _mm512_cvtph_ps(_mm256_loadu_si256(at.add(D).cast())),
                    _mm512_cvtph_ps(_mm256_loadu_si256(at.add(DMIN).cast())),
                )
            };
            let dx = _mm512_set1_ps(xb.d);
            _mm512_sub_ps(
                _mm512_mul_ps(_mm512_cvtepi32_ps(sdot), _mm512_mul_ps(dw, dx)),
                _mm512_mul_ps(_mm512_cvtepi32_ps(smin), _mm512_mul_ps(dmin, dx)),
            )
        };
        // SAFETY: the features, by this function's contract.
        unsafe { super::super::avx512::accumulate_terms(per_row, out, term) }
    }
}
