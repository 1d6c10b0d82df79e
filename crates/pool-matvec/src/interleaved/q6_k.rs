//! Q6_K matrices with their rows interleaved by sixteen: the layout the
//! AVX-512 VNNI kernel reads with one 32-bit lane per row, so a
//! super-block's sixteen group scales weight whole registers and no sum
//! crosses lanes.
//!
//! Row-major, a Q6_K super-block's integer dot needs its 16-value groups
//! weighted by their own scales: `maddubs` pair sums, the scales spread
//! over the pairs by shuffles, `madd`, and a horizontal sum per
//! super-block. On Intel's one shuffle port that kernel ran at 17-21 GB/s
//! from L2 (`llvm-mca`: port 5 bound), below the read ceiling it has to
//! keep up with. Interleaved, `vpdpbusd` leaves row `r`'s sum of four
//! weights times four activation bytes in lane `r`; a group's four such
//! sums are weighted by the sixteen rows' scales with one `vpmulld`, and
//! the float part is the Q8_0 and Q4_0 kernels' (`accumulate`).
//!
//! Like the other interleaved types the layout keeps the matrix's bytes:
//! rows `16g..16g + 16` occupy the bytes they occupied before; rows past
//! the last whole group stay row-major after them. A group holds first
//! the weight bits of its super-blocks, super-block by super-block (3072
//! bytes, 48 lines, each): a line holds one dword of each row's `ql` or
//! `qh` (row `r`'s at bytes `4r..4r + 4`), in the order the kernel reads
//! them, so a super-block is one ascending stream ([`line_of`]). Then,
//! super-block by super-block (288 bytes each), the scales: sixteen
//! groups of sixteen rows' `i8` scales (group `j` at `16j`, row `r` at
//! byte `r`), then the rows' f16 `d`.

use crate::k_quants::{dequantize_q6_k_into, q6_k_rows, BlockQ6K, BlockQ8K};
use crate::WeightType;

use super::super_blocks::{GroupsFn, SuperBlocks};
use super::INTERLEAVED_ROWS;

/// Bytes of one row's super-block.
const BLOCK: usize = std::mem::size_of::<BlockQ6K>();

/// Bytes of a group's weight bits per super-block: 32 lines of `ql`, 16
/// of `qh`.
const BITS: usize = 48 * 64;

/// Bytes of a group's scales per super-block: 16 x 16 scales, 16 `d`.
const SCALES: usize = INTERLEAVED_ROWS * (16 + 2);

/// Where the rows' `d` start in a super-block's scales.
const D: usize = INTERLEAVED_ROWS * 16;

const _: () = assert!(BITS + SCALES == INTERLEAVED_ROWS * BLOCK);

/// The line of a super-block's bits that holds the rows' dword `k` of
/// their 192 bytes of `ql` (`k < 32`) and `qh` (`k - 32`): the kernel
/// takes, for each half `n` and `q < 8`, the low bits of weights `128n +
/// 4q + {0, 64}` (`ql` dword `16n + q`), of `+ {32, 96}` (`16n + 8 + q`)
/// and their high bits (`qh` dword `8n + q`), as lines `3t`, `3t + 1`,
/// `3t + 2` for `t = 8n + q`.
fn line_of(k: usize) -> usize {
    if k < 32 {
        let (n, rest) = (k / 16, k % 16);
        3 * (8 * n + rest % 8) + rest / 8
    } else {
        3 * (k - 32) + 2
    }
}

/// Super-block `b`'s bits and scales in a group of `per_row` super-blocks.
fn offsets(per_row: usize, b: usize) -> (usize, usize) {
    (b * BITS, per_row * BITS + b * SCALES)
}

/// Q6_K's layout (module docs).
pub(super) struct Q6K;

impl SuperBlocks for Q6K {
    const TY: WeightType = WeightType::Q6_K;
    type Block = BlockQ6K;

    fn at(per_row: usize, b: usize, i: usize, r: usize) -> usize {
        let (bits, scales) = offsets(per_row, b);
        match i {
            // `ql` then `qh`: dword `i / 4` into lane `r` of its line.
            0..192 => bits + 64 * line_of(i / 4) + 4 * r + i % 4,
            192..208 => scales + 16 * (i - 192) + r,
            _ => scales + D + 2 * r + (i - 208),
        }
    }

    fn from_bytes(raw: &[u8]) -> BlockQ6K {
        BlockQ6K {
            ql: std::array::from_fn(|i| raw[i]),
            qh: std::array::from_fn(|i| raw[128 + i]),
            scales: std::array::from_fn(|i| raw[192 + i] as i8),
            d: half::f16::from_le_bytes([raw[208], raw[209]]),
        }
    }

    fn dequantize_into(block: &BlockQ6K, out: &mut [f32]) {
        dequantize_q6_k_into(std::slice::from_ref(block), out);
    }

    fn rows(blocks: &[BlockQ6K], per_row: usize, x: &[BlockQ8K], out: &mut [f32]) {
        q6_k_rows(blocks, per_row, x, out);
    }

    fn kernel<const N: usize>() -> Option<GroupsFn<N>> {
        #[cfg(target_arch = "x86_64")]
        if super::interleaving_pays(WeightType::Q6_K) {
            return Some(avx512::groups_vnni::<N>);
        }
        None
    }
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use std::arch::x86_64::*;

    use super::super::{L1_AHEAD, L2_AHEAD, STREAMS};
    use super::{offsets, BlockQ8K, BITS, D, INTERLEAVED_ROWS, SCALES};
    use crate::q8_0::avx2::prefetch_at;

    /// Safe entry: only handed out where `interleaving_pays(Q6_K)`.
    pub(super) fn groups_vnni<const N: usize>(
        groups: [&[u8]; N],
        per_row: usize,
        x: &[BlockQ8K],
        out: [&mut [f32; INTERLEAVED_ROWS]; N],
    ) {
        debug_assert!(super::super::interleaving_pays(crate::WeightType::Q6_K));
        // SAFETY: `interleaving_pays` holds only on the AVX-512 tier with
        // VNNI (the tier implies AVX2, F16C and AVX-512 F/VL/BW).
        unsafe { group(groups, per_row, x, out) }
    }

    /// `(a & b) | c`, bit by bit, as a `vpternlog` table.
    const A_AND_B_OR_C: i32 = 0xEA;

    /// The sixteen rows of each of `N` interleaved groups against `x`.
    ///
    /// Per super-block, half `n` of 128 weights and `q < 8`, the rows'
    /// `qh` dword `8n + q` holds bits `0-1`, `2-3`, `4-5` and `6-7` of
    /// weights `128n + 4q` plus 0, 32, 64 and 96 (four at a time), and
    /// their `ql` dwords `16n + q` and `16n + 8 + q` the nibbles of those
    /// plus 0 and 64, and plus 32 and 96 ([`super::line_of`] places the
    /// three lines in turn). Each weight's six bits are its nibble with its two high bits
    /// moved to bits 4-5: shifts within 16-bit lanes carry bits across the
    /// byte, but only into bits the masks clear. A group of 16 weights is
    /// four such dwords; its sum starts at `-32 * bsum` (the weights are
    /// the six-bit values less 32), then its rows' scales weight it: the
    /// exact `sdot` of the row-major kernels, lane by lane.
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
            assert!(group.len() >= per_row * (BITS + SCALES));
        }
        assert!(x.len() >= per_row);
        let (nibble, high) = (_mm512_set1_epi8(0x0F), _mm512_set1_epi8(0x30));
        let group_bytes = per_row * (BITS + SCALES);
        // Pointers, not indexing: a bounds check per super-block splits the
        // loop, and the compiler then keeps loads live across the checks
        // (spilled), as in the Q8_0 and Q4_0 kernels.
        let starts = groups.map(<[u8]>::as_ptr);
        let block = |g: usize, b: usize| {
            let (bits, scales) = offsets(per_row, b);
            let (bits, scales) = (starts[g].wrapping_add(bits), starts[g].wrapping_add(scales));
            // The scales are a stream of their own, a group long: the same
            // super-block's, `STREAMS` groups on (the next call's), where
            // they are next read.
            let next = scales.wrapping_add(STREAMS * group_bytes);
            for line in (0..SCALES).step_by(64) {
                _mm_prefetch::<_MM_HINT_T0>(next.wrapping_add(line).cast());
            }
            let line = |at: usize| {
                prefetch_at::<L1_AHEAD, L2_AHEAD>(bits.wrapping_add(at), 64);
                // SAFETY: `at + 64 <= BITS`: inside super-block `b`'s
                // bits, inside the group (asserted).
                unsafe { _mm512_loadu_si512(bits.add(at).cast()) }
            };
            // SAFETY: `accumulate` asks for super-blocks `b < per_row`
            // only, and `x` has `per_row` (asserted).
            let xb = unsafe { x.get_unchecked(b) };
            let xs = xb.qs.as_ptr().cast::<i32>();
            // SAFETY: dword `k < 64` of the 256 activation bytes.
            let x4 = |k: usize| _mm512_set1_epi32(unsafe { xs.add(k).read_unaligned() });
            let mut sum = _mm512_setzero_si512();
            for n in 0..2 {
                for h in 0..2 {
                    // The groups of the weights `v0..v3` below.
                    let of = [8 * n + h, 8 * n + 4 + h, 8 * n + 2 + h, 8 * n + 6 + h];
                    let mut s = of.map(|j| _mm512_set1_epi32(-32 * i32::from(xb.bsums[j])));
                    for q in 4 * h..4 * h + 4 {
                        // Lines `3t..3t + 3` ([`super::line_of`]).
                        let t = 192 * (8 * n + q);
                        let (a, c, top) = (line(t), line(t + 64), line(t + 128));
                        let v0 = _mm512_ternarylogic_epi32::<A_AND_B_OR_C>(
                            a,
                            nibble,
                            _mm512_and_si512(_mm512_slli_epi16::<4>(top), high),
                        );
                        let v1 = _mm512_ternarylogic_epi32::<A_AND_B_OR_C>(
                            _mm512_srli_epi16::<4>(a),
                            nibble,
                            _mm512_and_si512(top, high),
                        );
                        let v2 = _mm512_ternarylogic_epi32::<A_AND_B_OR_C>(
                            c,
                            nibble,
                            _mm512_and_si512(_mm512_slli_epi16::<2>(top), high),
                        );
                        let v3 = _mm512_ternarylogic_epi32::<A_AND_B_OR_C>(
                            _mm512_srli_epi16::<4>(c),
                            nibble,
                            _mm512_and_si512(_mm512_srli_epi16::<2>(top), high),
                        );
                        let k = 32 * n + q;
                        s[0] = _mm512_dpbusd_epi32(s[0], v0, x4(k));
                        s[1] = _mm512_dpbusd_epi32(s[1], v1, x4(k + 16));
                        s[2] = _mm512_dpbusd_epi32(s[2], v2, x4(k + 8));
                        s[3] = _mm512_dpbusd_epi32(s[3], v3, x4(k + 24));
                    }
                    for (s, j) in s.into_iter().zip(of) {
                        // SAFETY: group `j`'s 16 scales, inside super-block
                        // `b`'s scales, inside the group (asserted).
                        let sc = unsafe { _mm_loadu_si128(scales.add(16 * j).cast()) };
                        sum =
                            _mm512_add_epi32(sum, _mm512_mullo_epi32(s, _mm512_cvtepi8_epi32(sc)));
                    }
                }
            }
            sum
        };
        let d = |g: usize, b: usize| starts[g].wrapping_add(offsets(per_row, b).1 + D);
        // SAFETY: the features, by this function's contract; `d(g, b)` is
        // super-block `b`'s 32 bytes of `d`, inside the group (asserted),
        // and `x` has `per_row` super-blocks (asserted).
        unsafe {
            super::super::avx512::accumulate(per_row, |b| x.get_unchecked(b).d, out, block, d)
        }
    }
}
