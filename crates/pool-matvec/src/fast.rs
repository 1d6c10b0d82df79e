//! The fast deterministic f32 kernel: SIMD, with a fixed reduction order.
//!
//! Each row's dot product uses 32 lanes: lane `l` accumulates, with fused
//! multiply-add, the products at `j ≡ l (mod 32)` for `j` below the last
//! multiple of 32; the lanes are reduced in one fixed tree
//! (`s[k] = (a[k] + a[k+8]) + (a[k+16] + a[k+24])`, then halves of 4, 2, 1);
//! the remaining `cols % 32` products are fused into the result in `j`
//! order. Every code path (AVX-512 and AVX2+FMA on x86_64, NEON on
//! aarch64, the portable fallback; see [`SimdTier`]) computes exactly this,
//! so the result never depends on the CPU's features, the thread count or
//! the grain. It differs from the plain-order kernel [`crate::matvec_rows`]
//! by rounding only: on random data in [-1, 1), a relative difference
//! below 1e-5 (see `tests/kernels.rs`).

use crate::executor::{gated, Executor};

use crate::disjoint::DisjointRows;
use crate::shape::{check_matvec, check_strided_rows};
use crate::tier::{simd_tier, SimdTier};

const LANES: usize = 32;

/// `out = W x` with the SIMD kernel: deterministic across thread counts and
/// CPUs, not bit-identical to [`crate::matvec_rows`].
///
/// # Panics
///
/// If `w` holds fewer than `out.len() * x.len()` values.
pub fn matvec_f32_fast(exec: impl Executor, w: &[f32], x: &[f32], out: &mut [f32]) {
    let (rows, cols) = (out.len(), x.len());
    check_matvec("matvec_f32_fast", w.len(), rows, cols);
    let tier = simd_tier();
    let (dot, dot2) = kernels_for(tier);
    let short_rows = short_rows_for(tier).filter(|_| cols <= SHORT_ROW_COLS);
    let out = DisjointRows::new(out);
    gated(&exec, rows, cols).run_rows(rows, &|start, end| {
        // SAFETY: run_rows hands out each range once (DisjointRows invariant).
        let out = unsafe { out.rows(start, end) };
        if let Some(dots) = short_rows {
            dots(x, &w[start * cols..end * cols], cols, out);
            return;
        }
        let row = |r: usize| &w[r * cols..(r + 1) * cols];
        // Two rows per pass: each load of `x` serves both (x may not fit
        // in L1), and each row's arithmetic is exactly the one-row kernel's.
        let mut pairs = out.chunks_exact_mut(2);
        let mut r = start;
        for pair in &mut pairs {
            (pair[0], pair[1]) = dot2(row(r), row(r + 1), x);
            r += 2;
        }
        if let [last] = pairs.into_remainder() {
            *last = dot(row(r), x);
        }
    });
}

/// One row's dot product in the fixed order, by the portable path.
pub fn dot_fast_portable(w: &[f32], x: &[f32]) -> f32 {
    let body = w.len() / LANES * LANES;
    let mut acc = [0.0f32; LANES];
    for (w32, x32) in w[..body]
        .chunks_exact(LANES)
        .zip(x[..body].chunks_exact(LANES))
    {
        for lane in 0..LANES {
            acc[lane] = fused(w32[lane], x32[lane], acc[lane]);
        }
    }
    let mut s = [0.0f32; 8];
    for k in 0..8 {
        s[k] = (acc[k] + acc[k + 8]) + (acc[k + 16] + acc[k + 24]);
    }
    let t = [s[0] + s[4], s[1] + s[5], s[2] + s[6], s[3] + s[7]];
    let u = [t[0] + t[2], t[1] + t[3]];
    let mut result = u[0] + u[1];
    for j in body..w.len() {
        result = fused(w[j], x[j], result);
    }
    result
}

/// `a * b + c` rounded once: the IEEE fused multiply-add every SIMD tier
/// computes, so the portable path gives their bits. `f32::mul_add` is that
/// wherever the C library's `fmaf` is correctly rounded; mingw-w64's is
/// not (off by one ulp in halfway cases, found running the kernel tests
/// under Wine), so on `windows-gnu` without the FMA instruction it is
/// computed here (musl's method: exact product in f64, one f64 sum, and
/// a halfway f32 result nudged toward the true value).
#[inline(always)]
pub(crate) fn fused(a: f32, b: f32, c: f32) -> f32 {
    #[cfg(all(windows, target_env = "gnu", not(target_feature = "fma")))]
    {
        soft_fma(a, b, c)
    }
    #[cfg(not(all(windows, target_env = "gnu", not(target_feature = "fma"))))]
    {
        a.mul_add(b, c)
    }
}

/// A correctly rounded `a * b + c` (round to nearest even) without the
/// FMA instruction or the C library, for normal results (a result in the
/// f32 subnormal range may round twice; a dot product of weights and
/// activations never gets there).
#[cfg_attr(not(all(windows, target_env = "gnu")), allow(dead_code))]
pub(crate) fn soft_fma(a: f32, b: f32, c: f32) -> f32 {
    let product = f64::from(a) * f64::from(b); // exact: 24 + 24 bits < 53
    let c = f64::from(c);
    let sum = product + c;
    let mut bits = sum.to_bits();
    let exponent = (bits >> 52) & 0x7ff;
    // The 29 bits below an f32's mantissa: 1 followed by zeros is exactly
    // halfway between two floats, where rounding the f64 to f32 could
    // round the wrong way after the sum's own rounding.
    let halfway = bits & 0x1fff_ffff == 0x1000_0000;
    let exact = sum - product == c && sum - c == product;
    if !halfway || exponent == 0x7ff || exact {
        return sum as f32;
    }
    // Inexact and halfway: the true value lies beyond `sum` in the
    // direction of the error; move the f64 one step that way so the final
    // rounding goes the right way.
    let negative = bits >> 63 != 0;
    let error = if negative == (c > product) {
        product - sum + c
    } else {
        c - sum + product
    };
    if negative == (error < 0.0) {
        bits += 1;
    } else {
        bits -= 1;
    }
    f64::from_bits(bits) as f32
}

/// One row's dot product by the tier the kernels use ([`simd_tier`]).
pub fn dot_fast(w: &[f32], x: &[f32]) -> f32 {
    kernels_for(simd_tier()).0(w, x)
}

/// One row's dot product by `tier`'s code path; `None` if this CPU cannot
/// run it. Every tier gives the same bits (for tests and benchmarks).
pub fn dot_fast_on(tier: SimdTier, w: &[f32], x: &[f32]) -> Option<f32> {
    tier.is_available().then(|| kernels_for(tier).0(w, x))
}

/// `out[t] = dot_fast(x, rows[t * stride..][..x.len()])` for every `t`:
/// each the bits of [`dot_fast`], one kernel selection and no call per
/// row (attention's scores: a query against every cached key, a row of
/// the cache apart; one call each was 7 % of a stories110M token).
///
/// # Panics
///
/// If `stride < x.len()`, or `rows` is too short for `out.len()` rows.
///
/// ```
/// let x = [1.0f32, 2.0];
/// let mut out = [0.0f32; 2];
/// // Rows [3, 4] and [5, 6], 3 apart.
/// pool_matvec::dot_fast_rows(&x, &[3.0, 4.0, 0.0, 5.0, 6.0], 3, &mut out);
/// assert_eq!(out, [11.0, 17.0]);
/// ```
pub fn dot_fast_rows(x: &[f32], rows: &[f32], stride: usize, out: &mut [f32]) {
    check_strided_rows("dot_fast_rows", x.len(), rows.len(), stride, out.len());
    dots_for(simd_tier())(x, rows, stride, out);
}

/// [`dot_fast_rows`] by `tier`'s code path; `None` if this CPU cannot run
/// it. Every tier gives the same bits.
pub fn dot_fast_rows_on(
    tier: SimdTier,
    x: &[f32],
    rows: &[f32],
    stride: usize,
    out: &mut [f32],
) -> Option<()> {
    check_strided_rows("dot_fast_rows", x.len(), rows.len(), stride, out.len());
    tier.is_available()
        .then(|| dots_for(tier)(x, rows, stride, out))
}

type DotsFn = fn(&[f32], &[f32], usize, &mut [f32]);

fn dots_portable(x: &[f32], rows: &[f32], stride: usize, out: &mut [f32]) {
    for (t, o) in out.iter_mut().enumerate() {
        *o = dot_fast_portable(&rows[t * stride..][..x.len()], x);
    }
}

/// The many-rows kernel of an available `tier`.
fn dots_for(tier: SimdTier) -> DotsFn {
    match tier {
        #[cfg(target_arch = "x86_64")]
        SimdTier::Avx512 => avx512::dots,
        #[cfg(target_arch = "x86_64")]
        SimdTier::Avx2 => avx2::dots,
        #[cfg(target_arch = "aarch64")]
        SimdTier::Neon => neon::dots,
        _ => dots_portable,
    }
}

type DotFn = fn(&[f32], &[f32]) -> f32;
type Dot2Fn = fn(&[f32], &[f32], &[f32]) -> (f32, f32);

fn dot2_portable(w0: &[f32], w1: &[f32], x: &[f32]) -> (f32, f32) {
    (dot_fast_portable(w0, x), dot_fast_portable(w1, x))
}

/// The one-row and two-row kernels of an available `tier`.
fn kernels_for(tier: SimdTier) -> (DotFn, Dot2Fn) {
    match tier {
        #[cfg(target_arch = "x86_64")]
        SimdTier::Avx512 => (avx512::dot, avx512::dot2),
        #[cfg(target_arch = "x86_64")]
        SimdTier::Avx2 => (avx2::dot, avx2::dot2),
        #[cfg(target_arch = "aarch64")]
        SimdTier::Neon => (neon::dot, neon::dot2),
        _ => (dot_fast_portable, dot2_portable),
    }
}

/// The longest rows [`matvec_f32_fast`] reads one at a time where the tier
/// has a short-row kernel ([`short_rows_for`]): 2 KiB.
const SHORT_ROW_COLS: usize = 512;

/// The kernel for rows of at most [`SHORT_ROW_COLS`] values, where it
/// beats the two-row kernel: one row at a time, each prefetched whole
/// eight rows ahead, without the prefetches inside a row (those cover a
/// long row's next pages; a short row's are the rows ahead). On the AMD
/// EPYC host (Zen 3, AVX2) the stories15M f32 decode (288 columns) ran
/// 12 % faster at 1 thread and 15 % at 2 (`pool decode`, medians of 7
/// interleaved runs), level with llama2.c's C where it ran 0.87x;
/// stories110M (768 columns) read the same with either kernel, so rows
/// that long keep the two-row one. AVX2 only: the AVX-512 and NEON tiers
/// were not measured this way, and their kernels stay as they were.
fn short_rows_for(tier: SimdTier) -> Option<DotsFn> {
    match tier {
        #[cfg(target_arch = "x86_64")]
        SimdTier::Avx2 => Some(avx2::dots_short_rows),
        _ => None,
    }
}

/// Bytes ahead of the current position the x86 kernels prefetch: a
/// hardware prefetcher stops at each 4 KiB page, and a mapped checkpoint
/// is in 4 KiB pages (measured: stories110M decode +5 %).
#[cfg(target_arch = "x86_64")]
const PREFETCH_AHEAD: usize = 4096;

/// How far ahead the x86 kernels also prefetch into L2 (see the quantized
/// kernels' `Q8_0_L2_AHEAD` for why): with the read ceiling prefetching
/// the same way, the f32 pool matvec on a 1 GiB matrix measured 100-107 %
/// of it in three `pool bench` runs (95-101 % before), the serial kernel
/// on decode shapes 95-102 %.
#[cfg(target_arch = "x86_64")]
const F32_L2_AHEAD: usize = 12288;

/// Prefetches the two cache lines `PREFETCH_AHEAD` bytes past `at` (one
/// step's 128 bytes). A prefetch never faults; `wrapping_add` keeps
/// the address computation defined past a row's end.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn prefetch_ahead(at: *const f32) {
    let ahead = at.cast::<i8>().wrapping_add(PREFETCH_AHEAD);
    // SAFETY: prefetching is a hint with no preconditions.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(ahead);
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(
            ahead.wrapping_add(64),
        );
        let l2 = ahead.wrapping_add(F32_L2_AHEAD - PREFETCH_AHEAD);
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T1 }>(l2);
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T1 }>(l2.wrapping_add(64));
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    use super::LANES;
    use crate::shape::{prefetch_values, ROWS_AHEAD};

    /// Safe entry: only selected after AVX2 and FMA were detected.
    pub(super) fn dot(w: &[f32], x: &[f32]) -> f32 {
        // SAFETY: `kernels_for` hands this out only for an available
        // `SimdTier::Avx2` (or wider), which requires AVX2 and FMA.
        unsafe { dot_avx2::<true>(w, x) }
    }

    /// Safe entry: as for `dot`. `dot_fast_rows` checked the bounds.
    pub(super) fn dots(x: &[f32], rows: &[f32], stride: usize, out: &mut [f32]) {
        // SAFETY: as for `dot`.
        unsafe { dots_avx2::<true>(x, rows, stride, out) }
    }

    /// [`dots`] without the prefetches inside a row (`super::short_rows_for`).
    /// Safe entry: as for `dot`; the caller passes `out.len()` rows of
    /// `x.len()` values, `stride` apart.
    pub(super) fn dots_short_rows(x: &[f32], rows: &[f32], stride: usize, out: &mut [f32]) {
        // SAFETY: as for `dot`.
        unsafe { dots_avx2::<false>(x, rows, stride, out) }
    }

    /// `dot_avx2` for each row, inlined.
    ///
    /// # Safety
    ///
    /// AVX2 and FMA.
    #[target_feature(enable = "avx2,fma")]
    unsafe fn dots_avx2<const AHEAD: bool>(
        x: &[f32],
        rows: &[f32],
        stride: usize,
        out: &mut [f32],
    ) {
        for (t, o) in out.iter_mut().enumerate() {
            let ahead = rows.as_ptr().wrapping_add((t + ROWS_AHEAD) * stride);
            prefetch_values(ahead, x.len());
            // SAFETY: the features, by this function's contract.
            *o = unsafe { dot_avx2::<AHEAD>(&rows[t * stride..][..x.len()], x) };
        }
    }

    /// Safe entry: only selected after AVX2 and FMA were detected.
    pub(super) fn dot2(w0: &[f32], w1: &[f32], x: &[f32]) -> (f32, f32) {
        // SAFETY: as for `dot`.
        unsafe { dot2_avx2(w0, w1, x) }
    }

    /// Four 8-lane FMA accumulators over `j < body`, lane `l` of
    /// accumulator `a` holding `j ≡ 8a + l (mod 32)`; with `AHEAD`, the
    /// row's lines a page and more ahead prefetched too.
    ///
    /// # Safety
    ///
    /// AVX2 and FMA; `j + 32 <= w.len()` and `<= x.len()`.
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    unsafe fn step<const AHEAD: bool>(acc: &mut [__m256; 4], w: *const f32, x: &[__m256; 4]) {
        if AHEAD {
            super::prefetch_ahead(w);
        }
        for (k, a) in acc.iter_mut().enumerate() {
            // SAFETY: the caller guarantees 32 readable values at `w`.
            *a = _mm256_fmadd_ps(unsafe { _mm256_loadu_ps(w.add(8 * k)) }, x[k], *a);
        }
    }

    /// The fixed reduction tree, then the tail fused in `j` order.
    ///
    /// # Safety
    ///
    /// AVX2 and FMA.
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    unsafe fn finish(acc: [__m256; 4], w: &[f32], x: &[f32], body: usize) -> f32 {
        // s[k] = (a0[k] + a1[k]) + (a2[k] + a3[k])
        let s = _mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3]));
        // t[k] = s[k] + s[k + 4]
        let t = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps::<1>(s));
        // u[k] = t[k] + t[k + 2]
        let u = _mm_add_ps(t, _mm_movehl_ps(t, t));
        // u[0] + u[1]
        let mut result = _mm_cvtss_f32(_mm_add_ss(u, _mm_shuffle_ps::<0b01>(u, u)));
        for k in body..w.len() {
            // SAFETY: this function's target features include FMA.
            result = unsafe { super::fma_ss(w[k], x[k], result) };
        }
        result
    }

    /// # Safety
    ///
    /// Loads 32 values of `x` at `j`: `j + 32 <= x.len()`; AVX.
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    unsafe fn load_x(x: *const f32) -> [__m256; 4] {
        // SAFETY: the caller guarantees 32 readable values at `x`.
        unsafe { [0, 8, 16, 24].map(|k| _mm256_loadu_ps(x.add(k))) }
    }

    /// # Safety
    ///
    /// The CPU must support AVX2 and FMA.
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    unsafe fn dot_avx2<const AHEAD: bool>(w: &[f32], x: &[f32]) -> f32 {
        assert_eq!(w.len(), x.len());
        let body = w.len() / LANES * LANES;
        let mut acc = [_mm256_setzero_ps(); 4];
        let mut j = 0;
        while j < body {
            // SAFETY: j + 32 <= body <= len of both slices.
            unsafe { step::<AHEAD>(&mut acc, w.as_ptr().add(j), &load_x(x.as_ptr().add(j))) };
            j += LANES;
        }
        // SAFETY: AVX2 and FMA, by this function's contract.
        unsafe { finish(acc, w, x, body) }
    }

    /// Two rows, one pass over `x`; each row's operations are exactly
    /// `dot_avx2`'s.
    ///
    /// # Safety
    ///
    /// The CPU must support AVX2 and FMA.
    #[target_feature(enable = "avx2,fma")]
    unsafe fn dot2_avx2(w0: &[f32], w1: &[f32], x: &[f32]) -> (f32, f32) {
        assert!(w0.len() == x.len() && w1.len() == x.len());
        let body = x.len() / LANES * LANES;
        let (mut a, mut b) = ([_mm256_setzero_ps(); 4], [_mm256_setzero_ps(); 4]);
        let mut j = 0;
        while j < body {
            // SAFETY: j + 32 <= body <= len of all three slices.
            unsafe {
                let xs = load_x(x.as_ptr().add(j));
                step::<true>(&mut a, w0.as_ptr().add(j), &xs);
                step::<true>(&mut b, w1.as_ptr().add(j), &xs);
            }
            j += LANES;
        }
        // SAFETY: AVX2 and FMA, by this function's contract.
        unsafe { (finish(a, w0, x, body), finish(b, w1, x, body)) }
    }
}

/// AVX-512: the same 32 lanes as two 16-lane accumulators (`a0` holds lanes
/// 0..16, `a1` lanes 16..32), the same fused multiply-adds and the same
/// reduction tree: `s[k] = (a[k] + a[k+8]) + (a[k+16] + a[k+24])` is
/// `(a0.lo + a0.hi) + (a1.lo + a1.hi)` on 256-bit halves. Fewer
/// instructions per byte keep more loads in flight.
#[cfg(target_arch = "x86_64")]
mod avx512 {
    use std::arch::x86_64::*;

    use super::LANES;
    use crate::shape::{prefetch_values, ROWS_AHEAD};

    /// Safe entry: only selected after the AVX-512 tier was detected.
    pub(super) fn dot(w: &[f32], x: &[f32]) -> f32 {
        // SAFETY: `kernels_for` hands this out only for an available
        // `SimdTier::Avx512`, which requires AVX-512 F/DQ, AVX2 and FMA.
        unsafe { dot_avx512(w, x) }
    }

    /// Safe entry: as for `dot`.
    pub(super) fn dot2(w0: &[f32], w1: &[f32], x: &[f32]) -> (f32, f32) {
        // SAFETY: as for `dot`.
        unsafe { dot2_avx512(w0, w1, x) }
    }

    /// Safe entry: as for `dot`. `dot_fast_rows` checked the bounds.
    pub(super) fn dots(x: &[f32], rows: &[f32], stride: usize, out: &mut [f32]) {
        // SAFETY: as for `dot`.
        unsafe { dots_avx512(x, rows, stride, out) }
    }

    /// `dot_avx512` for each row, inlined.
    ///
    /// # Safety
    ///
    /// AVX-512 F/DQ, AVX2 and FMA.
    #[target_feature(enable = "avx512f,avx512dq,avx2,fma")]
    unsafe fn dots_avx512(x: &[f32], rows: &[f32], stride: usize, out: &mut [f32]) {
        for (t, o) in out.iter_mut().enumerate() {
            let ahead = rows.as_ptr().wrapping_add((t + ROWS_AHEAD) * stride);
            prefetch_values(ahead, x.len());
            // SAFETY: the features, by this function's contract.
            *o = unsafe { dot_avx512(&rows[t * stride..][..x.len()], x) };
        }
    }

    /// The fixed reduction tree, then the tail fused in `j` order.
    ///
    /// # Safety
    ///
    /// AVX-512 F/DQ, AVX2 and FMA.
    #[target_feature(enable = "avx512f,avx512dq,avx2,fma")]
    #[inline]
    unsafe fn finish(a0: __m512, a1: __m512, w: &[f32], x: &[f32], body: usize) -> f32 {
        // (a[k] + a[k+8]) and (a[k+16] + a[k+24]), k in 0..8
        let lo = _mm256_add_ps(_mm512_castps512_ps256(a0), _mm512_extractf32x8_ps::<1>(a0));
        let hi = _mm256_add_ps(_mm512_castps512_ps256(a1), _mm512_extractf32x8_ps::<1>(a1));
        let s = _mm256_add_ps(lo, hi);
        // t[k] = s[k] + s[k + 4]
        let t = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps::<1>(s));
        // u[k] = t[k] + t[k + 2]
        let u = _mm_add_ps(t, _mm_movehl_ps(t, t));
        // u[0] + u[1]
        let mut result = _mm_cvtss_f32(_mm_add_ss(u, _mm_shuffle_ps::<0b01>(u, u)));
        for k in body..w.len() {
            // SAFETY: this function's target features include FMA.
            result = unsafe { super::fma_ss(w[k], x[k], result) };
        }
        result
    }

    /// # Safety
    ///
    /// AVX-512 F/DQ, AVX2 and FMA.
    #[target_feature(enable = "avx512f,avx512dq,avx2,fma")]
    #[inline]
    unsafe fn dot_avx512(w: &[f32], x: &[f32]) -> f32 {
        assert_eq!(w.len(), x.len());
        let body = w.len() / LANES * LANES;
        let (mut a0, mut a1) = (_mm512_setzero_ps(), _mm512_setzero_ps());
        let mut j = 0;
        while j < body {
            // SAFETY: j + 32 <= body <= len of both slices.
            unsafe {
                let (w, x) = (w.as_ptr().add(j), x.as_ptr().add(j));
                super::prefetch_ahead(w);
                a0 = _mm512_fmadd_ps(_mm512_loadu_ps(w), _mm512_loadu_ps(x), a0);
                a1 = _mm512_fmadd_ps(_mm512_loadu_ps(w.add(16)), _mm512_loadu_ps(x.add(16)), a1);
            }
            j += LANES;
        }
        // SAFETY: the features, by this function's contract.
        unsafe { finish(a0, a1, w, x, body) }
    }

    /// Two rows, one pass over `x`; each row's operations are exactly
    /// `dot_avx512`'s.
    ///
    /// # Safety
    ///
    /// AVX-512 F/DQ, AVX2 and FMA.
    #[target_feature(enable = "avx512f,avx512dq,avx2,fma")]
    unsafe fn dot2_avx512(w0: &[f32], w1: &[f32], x: &[f32]) -> (f32, f32) {
        assert!(w0.len() == x.len() && w1.len() == x.len());
        let body = x.len() / LANES * LANES;
        let (mut a0, mut a1) = (_mm512_setzero_ps(), _mm512_setzero_ps());
        let (mut b0, mut b1) = (_mm512_setzero_ps(), _mm512_setzero_ps());
        let mut j = 0;
        while j < body {
            // SAFETY: j + 32 <= body <= len of all three slices.
            unsafe {
                let xp = x.as_ptr().add(j);
                let (x0, x1) = (_mm512_loadu_ps(xp), _mm512_loadu_ps(xp.add(16)));
                let (p, q) = (w0.as_ptr().add(j), w1.as_ptr().add(j));
                super::prefetch_ahead(p);
                super::prefetch_ahead(q);
                a0 = _mm512_fmadd_ps(_mm512_loadu_ps(p), x0, a0);
                a1 = _mm512_fmadd_ps(_mm512_loadu_ps(p.add(16)), x1, a1);
                b0 = _mm512_fmadd_ps(_mm512_loadu_ps(q), x0, b0);
                b1 = _mm512_fmadd_ps(_mm512_loadu_ps(q.add(16)), x1, b1);
            }
            j += LANES;
        }
        // SAFETY: the features, by this function's contract.
        unsafe { (finish(a0, a1, w0, x, body), finish(b0, b1, w1, x, body)) }
    }
}

/// NEON: the same 32 lanes as eight 4-lane accumulators (`q[k]` holds lanes
/// `4k..4k+4`), the same fused multiply-adds and the same reduction tree.
/// Compile-checked in CI for `aarch64-unknown-linux-gnu` (no aarch64 host to
/// run it on here); the portable path it must equal is tested everywhere.
#[cfg(target_arch = "aarch64")]
mod neon {
    use std::arch::aarch64::*;

    use super::LANES;

    /// Safe entry: only selected after NEON was detected.
    pub(super) fn dot(w: &[f32], x: &[f32]) -> f32 {
        // SAFETY: `kernels_for` hands this out only for an available
        // `SimdTier::Neon`, which requires NEON.
        unsafe { dot_neon(w, x) }
    }

    /// Safe entry: as for `dot`. `dot_fast_rows` checked the bounds.
    pub(super) fn dots(x: &[f32], rows: &[f32], stride: usize, out: &mut [f32]) {
        for (t, o) in out.iter_mut().enumerate() {
            // SAFETY: as for `dot`.
            *o = unsafe { dot_neon(&rows[t * stride..][..x.len()], x) };
        }
    }

    /// Safe entry: only selected after NEON was detected.
    pub(super) fn dot2(w0: &[f32], w1: &[f32], x: &[f32]) -> (f32, f32) {
        // SAFETY: as for `dot`.
        unsafe { (dot_neon(w0, x), dot_neon(w1, x)) }
    }

    /// # Safety
    ///
    /// The CPU must support NEON.
    #[target_feature(enable = "neon")]
    unsafe fn dot_neon(w: &[f32], x: &[f32]) -> f32 {
        assert_eq!(w.len(), x.len());
        let body = w.len() / LANES * LANES;
        let mut q = [vdupq_n_f32(0.0); 8];
        let mut j = 0;
        while j < body {
            for (k, acc) in q.iter_mut().enumerate() {
                // SAFETY: j + 4k + 4 <= j + 32 <= body <= len of both.
                let (wv, xv) = unsafe {
                    (
                        vld1q_f32(w.as_ptr().add(j + 4 * k)),
                        vld1q_f32(x.as_ptr().add(j + 4 * k)),
                    )
                };
                // acc + wv * xv, fused, as `mul_add` in the portable path.
                *acc = vfmaq_f32(*acc, wv, xv);
            }
            j += LANES;
        }
        // s[k] = (a[k] + a[k+8]) + (a[k+16] + a[k+24]), k in 0..8:
        // lanes 0..4 from q0, q2, q4, q6; lanes 4..8 from q1, q3, q5, q7.
        let s_lo = vaddq_f32(vaddq_f32(q[0], q[2]), vaddq_f32(q[4], q[6]));
        let s_hi = vaddq_f32(vaddq_f32(q[1], q[3]), vaddq_f32(q[5], q[7]));
        // t[k] = s[k] + s[k + 4]
        let t = vaddq_f32(s_lo, s_hi);
        // u[k] = t[k] + t[k + 2], then u[0] + u[1]
        let u0 = vgetq_lane_f32::<0>(t) + vgetq_lane_f32::<2>(t);
        let u1 = vgetq_lane_f32::<1>(t) + vgetq_lane_f32::<3>(t);
        let mut result = u0 + u1;
        for k in body..w.len() {
            result = super::fused(w[k], x[k], result);
        }
        result
    }
}

/// `a * b + c` by the FMA instruction itself (`vfmadd231ss`): for the
/// x86 kernels' tails. `f32::mul_add` there is only the instruction when
/// inlined into the `#[target_feature]` function; a debug build calls the
/// C library's `fmaf` instead, which mingw-w64 gets wrong.
///
/// # Safety
///
/// The CPU has FMA (the callers are `#[target_feature(enable = "fma")]`).
#[cfg(target_arch = "x86_64")]
#[inline]
#[target_feature(enable = "fma")]
unsafe fn fma_ss(a: f32, b: f32, c: f32) -> f32 {
    use std::arch::x86_64::{_mm_cvtss_f32, _mm_fmadd_ss, _mm_set_ss};
    _mm_cvtss_f32(_mm_fmadd_ss(_mm_set_ss(a), _mm_set_ss(b), _mm_set_ss(c)))
}

#[cfg(test)]
mod fused_tests {
    use super::{fused, soft_fma};

    /// 1 + 2^-12 squared is 1 + 2^-11 + 2^-24: exactly halfway between two
    /// floats. A tiny addend decides the rounding, and an f64 sum loses it
    /// (rounding twice would give 1 + 2^-11 both ways).
    #[test]
    fn halfway_products_round_toward_the_addend() {
        let a = 1.0 + f32::powi(2.0, -12);
        let tiny = f32::powi(2.0, -70);
        let up = 1.0 + f32::powi(2.0, -11) + f32::powi(2.0, -23);
        let down = 1.0 + f32::powi(2.0, -11);
        assert_eq!(soft_fma(a, a, tiny), up);
        assert_eq!(soft_fma(a, a, -tiny), down);
        assert_eq!(fused(a, a, tiny), up);
        assert_eq!(fused(a, a, -tiny), down);
    }

    /// Against the C library's `fmaf` where it is correctly rounded.
    #[test]
    #[cfg(not(all(windows, target_env = "gnu")))]
    fn the_soft_fma_matches_fmaf_on_random_normal_inputs() {
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            // Normal floats with small exponents, either sign.
            let mantissa = (state >> 40) as u32 & 0x7f_ffff;
            let exponent = 100 + (state >> 20) as u32 % 54;
            f32::from_bits((state as u32 & 0x8000_0000) | exponent << 23 | mantissa)
        };
        for _ in 0..if cfg!(miri) { 1_000 } else { 200_000 } {
            let (a, b, c) = (next(), next(), next());
            assert_eq!(
                soft_fma(a, b, c).to_bits(),
                a.mul_add(b, c).to_bits(),
                "{a:e} * {b:e} + {c:e}"
            );
        }
    }
}
