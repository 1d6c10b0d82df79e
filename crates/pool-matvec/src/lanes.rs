//! 512-bit lane reductions the AVX-512 quantized kernels share (x86_64):
//! a group of eight blocks leaves four i32 partial sums per block in two
//! 16-lane vectors, and [`block_sums`] turns them into one sum per block,
//! lane `k` block `k`, by lane permutes (AVX-512 has no horizontal add).

use std::arch::x86_64::*;

/// `blocks::reduce`'s tree on a register: `s = lanes 0..4 + lanes 4..8`,
/// then `(s0 + s2) + (s1 + s3)`: the same additions in the same order as
/// the scalar reference, without a trip through memory.
#[target_feature(enable = "avx2")]
#[inline]
pub(crate) fn reduce_ps(acc: __m256) -> f32 {
    let s = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps::<1>(acc));
    let t = _mm_add_ps(s, _mm_movehl_ps(s, s));
    _mm_cvtss_f32(_mm_add_ss(t, _mm_movehdup_ps(t)))
}

/// An f16 bit pattern as f32 by F16C (exact, as `half`'s conversion,
/// which is a call through a runtime dispatch: too slow per block).
#[target_feature(enable = "avx2,f16c")]
#[inline]
pub(crate) fn f16_to_f32(bits: u16) -> f32 {
    _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(i32::from(bits))))
}

/// A 64-byte permute table, aligned for one load.
#[repr(C, align(64))]
pub(crate) struct Table(pub(crate) [u8; 64]);

/// A table as a vector.
#[target_feature(enable = "avx512f")]
#[inline]
pub(crate) fn table(t: &Table) -> __m512i {
    // SAFETY: a table is 64 aligned bytes.
    unsafe { _mm512_load_si512(t.0.as_ptr().cast()) }
}

/// Lane pairs of two 16-lane i32 vectors, as `vpermt2d` indices:
/// lanes `0, 2, .., 30` (`first` 0) or `1, 3, .., 31` (`first` 1).
const fn lane_table(first: u32) -> Table {
    let mut t = [0u8; 64];
    let mut k = 0;
    while k < 16 {
        t[4 * k] = (2 * k as u32 + first) as u8;
        k += 1;
    }
    Table(t)
}

static EVEN_LANES: Table = lane_table(0);
static ODD_LANES: Table = lane_table(1);

/// Blocks 0..4's and 4..8's partial dots, four i32 lanes per block
/// (lanes `4k..4k + 4` of a vector: its block `k`).
pub(crate) type QuadDots = [__m512i; 2];

/// Lane pair sums of `a` then `b` (lanes `2k`, `2k + 1` of the 32):
/// two lane permutes and an add.
#[target_feature(enable = "avx512f")]
#[inline]
pub(crate) fn pair_sums(a: __m512i, b: __m512i) -> __m512i {
    _mm512_add_epi32(
        _mm512_permutex2var_epi32(a, table(&EVEN_LANES), b),
        _mm512_permutex2var_epi32(a, table(&ODD_LANES), b),
    )
}

/// A group's eight block sums (lane `k`: block `k`).
#[target_feature(enable = "avx512f")]
#[inline]
pub(crate) fn block_sums([d0, d1]: QuadDots) -> __m256i {
    // Lanes 2k and 2k + 1: block k's halves; then lane 2k its sum.
    let pairs = pair_sums(d0, d1);
    let sums = _mm512_add_epi32(pairs, _mm512_srli_epi64::<32>(pairs));
    _mm512_cvtepi64_epi32(sums)
}

/// Two rows' `block_sums`, reduced together: one permute pair and an
/// extract where two narrowings (two shuffle uops each) and two shifts
/// would run.
#[target_feature(enable = "avx512f")]
#[inline]
pub(crate) fn block_sums_of_two_rows([a0, a1]: QuadDots, [b0, b1]: QuadDots) -> (__m256i, __m256i) {
    // Lanes 0..8: row a's blocks; 8..16: row b's.
    let sums = pair_sums(pair_sums(a0, a1), pair_sums(b0, b1));
    (
        _mm512_castsi512_si256(sums),
        _mm512_extracti64x4_epi64::<1>(sums),
    )
}
