//! The float half of every quantized dot product, in one fixed order.
//!
//! A quantized row's dot product is `sum_b sumi[b] * (d_w[b] * d_x[b])`,
//! with `sumi[b]` the exact integer dot of block `b`. Every path (scalar,
//! AVX2, AVX-512, NEON) adds the terms in this order, so all agree bit for
//! bit: eight lanes, lane `k` accumulating `acc[k] = acc[k] + term[b]` for
//! `b ≡ k (mod 8)` below the last multiple of 8 blocks, each term computed
//! as `(sumi as f32) * (d_w * d_x)` (a product of two f16-exact scales,
//! then a product with an integer below 2^24: no fused multiply-add); the
//! lanes reduced as `((a0 + a4) + (a2 + a6)) + ((a1 + a5) + (a3 + a7))`;
//! then the remaining `blocks % 8` terms added in block order. Eight
//! independent lanes let SIMD paths keep eight blocks in flight instead of
//! a chain of dependent adds.

/// Blocks per lane group.
pub(crate) const LANES: usize = 8;

/// One block's term: `sumi * (d_w * d_x)`.
#[inline(always)]
pub(crate) fn term(sumi: i32, d_w: f32, d_x: f32) -> f32 {
    sumi as f32 * (d_w * d_x)
}

/// The first `blocks` items of `s` (rounded down to whole groups) as
/// groups of eight: the SIMD kernels index a group with constants, so one
/// bounds check per row instead of one per block (measured: the Q4_0 pair
/// kernel ~10 % faster from L2).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(crate) fn eights<T>(s: &[T], blocks: usize) -> &[[T; LANES]] {
    s[..blocks].as_chunks::<LANES>().0
}

/// The lanes' fixed reduction tree.
#[inline(always)]
pub(crate) fn reduce(acc: [f32; LANES]) -> f32 {
    let s = [
        acc[0] + acc[4],
        acc[1] + acc[5],
        acc[2] + acc[6],
        acc[3] + acc[7],
    ];
    (s[0] + s[2]) + (s[1] + s[3])
}

/// The order spelled out for `blocks` blocks whose term `b` is
/// `term_of(b)`: the scalar reference of every quantized kernel.
#[inline(always)]
pub(crate) fn accumulate(blocks: usize, mut term_of: impl FnMut(usize) -> f32) -> f32 {
    let body = blocks / LANES * LANES;
    let mut acc = [0.0f32; LANES];
    for group in (0..body).step_by(LANES) {
        for (k, lane) in acc.iter_mut().enumerate() {
            *lane += term_of(group + k);
        }
    }
    let mut result = reduce(acc);
    for b in body..blocks {
        result += term_of(b);
    }
    result
}
