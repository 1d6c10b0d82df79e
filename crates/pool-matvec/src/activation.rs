//! The SwiGLU product `silu(g) * u`, attention's softmax, and the
//! exponential under both: the same bits on every SIMD tier (and so on
//! every thread count), sixteen values per instruction on AVX-512.
//!
//! libm's `expf` is scalar: a decode's FFN takes one per hidden value
//! (24,576 a stories110M token), and in a bias-cancelled in-process A/B
//! (docs/benchmarks.md) replacing them with a multiply made stories110M
//! Q4_0 2.3 % faster at 2 threads.
//!
//! The exponential is Cephes' `expf`: Cody-Waite reduction by ln 2 in two
//! parts, then a degree-5 polynomial on the reduced argument (within 2 ulp
//! of `exp` where the result is a normal float). Every step is one IEEE
//! multiply, add or subtract, written the same way for every tier, and no
//! fused multiply-add: a target without FMA instructions computes
//! `f32::mul_add` in its C library, and Windows' (under Wine) rounded
//! twice, which showed as different bits from the AVX2 tier. The nearest
//! integer is taken by adding and subtracting 1.5 x 2^23, which rounds to
//! even in IEEE arithmetic with no library call. Below -87 the result is 0
//! and above 88 it is `e^88`, which keeps `2^n` a normal float and changes
//! nothing `silu` or a softmax can show: there `1 + e^-g` is 1 or beyond
//! 10^38, and a weight below `e^-87` of the largest is 0.

use crate::tier::{simd_tier, SimdTier};

/// `log2(e)`.
const LOG2_E: f32 = std::f32::consts::LOG2_E;
/// ln 2 in two parts (Cephes' `C1`, `C2`): `C1` has few bits, so `n * C1`
/// is exact for every `n` the clamp allows.
const LN2_HI: f32 = 0.693_359_4;
const LN2_LO: f32 = -2.121_944_4e-4;
/// The polynomial's coefficients, highest power first.
const POLY: [f32; 6] = [
    1.987_569_1e-4,
    1.398_199_9e-3,
    8.333_452e-3,
    4.166_579_6e-2,
    1.666_666_5e-1,
    0.5,
];
/// Added and subtracted, it rounds a float below 2^22 in magnitude to the
/// nearest integer, ties to even.
const ROUNDER: f32 = 12_582_912.0;
/// The clamp: `2^n` stays a normal float (`n` in -126..=127).
const LOWEST: f32 = -87.0;
const HIGHEST: f32 = 88.0;

/// `e^x` as every tier computes it: within 2 ulp of `exp` for `x` in
/// `[-87, 88]`, 0 below (`-inf` too), `e^88` above; NaN gives `e^-87`.
///
/// ```
/// let e = pool_matvec::exp_clamped(1.0);
/// assert!((e - std::f32::consts::E).abs() <= 2.0 * f32::EPSILON * e);
/// ```
pub fn exp_clamped(x: f32) -> f32 {
    // False for NaN, as the vector kernels' ordered compare.
    let below = x < LOWEST;
    // `max` first: a NaN `x` gives `LOWEST`, as `vmaxps` does with the
    // NaN as its first operand (`clamp` would keep the NaN).
    #[allow(clippy::manual_clamp)]
    let x = x.max(LOWEST).min(HIGHEST);
    let n = (x * LOG2_E + ROUNDER) - ROUNDER;
    let r = x - n * LN2_HI;
    let r = r - n * LN2_LO;
    let mut p = POLY[0];
    for c in &POLY[1..] {
        p = p * r + c;
    }
    let y = (p * (r * r) + r) + 1.0;
    let e = y * f32::from_bits(((n as i32 + 127) as u32) << 23);
    if below {
        0.0
    } else {
        e
    }
}

/// `silu(g) * u = g / (1 + e^-g) * u`, into `g`, with [`exp_clamped`]:
/// the same bits on every SIMD tier.
///
/// # Panics
///
/// If `g` and `u` differ in length.
///
/// ```
/// let (mut g, u) = ([0.0f32, 2.0], [3.0f32, 1.0]);
/// pool_matvec::silu_mul(&mut g, &u);
/// assert_eq!(g[0], 0.0);
/// assert!((g[1] - 2.0 / (1.0 + (-2.0f32).exp())).abs() < 1e-6);
/// ```
pub fn silu_mul(g: &mut [f32], u: &[f32]) {
    check(g, u);
    kernel_for(simd_tier())(g, u);
}

/// [`silu_mul`] by `tier`'s code path; `None` if this CPU cannot run it
/// (for tests: every tier gives the same bits).
pub fn silu_mul_on(tier: SimdTier, g: &mut [f32], u: &[f32]) -> Option<()> {
    if !tier.is_available() {
        return None;
    }
    check(g, u);
    kernel_for(tier)(g, u);
    Some(())
}

/// Attention's softmax in place, `x_i = e^(x_i - max) / sum`, with
/// [`exp_clamped`]: the maximum, every exponential (sixteen at once on
/// AVX-512), their sum in index order, each divided by it: the same bits
/// on every SIMD tier. A value more than 87 below the maximum (`-inf`, a
/// masked position) gets 0.
///
/// ```
/// let mut x = [1.0f32, 2.0, f32::NEG_INFINITY];
/// pool_matvec::softmax(&mut x);
/// assert!((x[0] + x[1] - 1.0).abs() < 1e-6 && x[1] > x[0] && x[2] == 0.0);
/// ```
pub fn softmax(x: &mut [f32]) {
    softmax_with(simd_tier(), x);
}

/// [`softmax`] by `tier`'s code path; `None` if this CPU cannot run it
/// (for tests: every tier gives the same bits).
pub fn softmax_on(tier: SimdTier, x: &mut [f32]) -> Option<()> {
    tier.is_available().then(|| softmax_with(tier, x))
}

fn softmax_with(tier: SimdTier, x: &mut [f32]) {
    let max = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    exp_kernel_for(tier)(x, max);
    // In index order: one chain, the same on every tier.
    let sum = x.iter().fold(0.0f32, |sum, v| sum + v);
    for v in x.iter_mut() {
        *v /= sum;
    }
}

type ExpFn = fn(&mut [f32], f32);

fn exp_kernel_for(tier: SimdTier) -> ExpFn {
    match tier {
        #[cfg(target_arch = "x86_64")]
        SimdTier::Avx512 => x86::exp_avx512,
        #[cfg(target_arch = "x86_64")]
        SimdTier::Avx2 => x86::exp_avx2,
        _ => exp_shifted_portable,
    }
}

/// `x_i = e^(x_i - shift)`.
fn exp_shifted_portable(x: &mut [f32], shift: f32) {
    for v in x {
        *v = exp_clamped(*v - shift);
    }
}

#[track_caller]
fn check(g: &[f32], u: &[f32]) {
    assert_eq!(
        g.len(),
        u.len(),
        "silu_mul: {} gate values but {} up values",
        g.len(),
        u.len()
    );
}

type SiluFn = fn(&mut [f32], &[f32]);

fn kernel_for(tier: SimdTier) -> SiluFn {
    match tier {
        #[cfg(target_arch = "x86_64")]
        SimdTier::Avx512 => x86::avx512,
        #[cfg(target_arch = "x86_64")]
        SimdTier::Avx2 => x86::avx2,
        _ => silu_mul_portable,
    }
}

fn silu_mul_portable(g: &mut [f32], u: &[f32]) {
    for (g, u) in g.iter_mut().zip(u) {
        // `0 - g`, as the vector kernels negate (`-g` differs only in the
        // sign of a zero, which the exponential ignores).
        *g = *g / (1.0 + exp_clamped(0.0 - *g)) * u;
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    use super::{
        exp_shifted_portable, silu_mul_portable, HIGHEST, LN2_HI, LN2_LO, LOG2_E, LOWEST, POLY,
        ROUNDER,
    };

    /// Safe entry: only selected for an available AVX-512 tier.
    pub(super) fn avx512(g: &mut [f32], u: &[f32]) {
        // SAFETY: `kernel_for` hands this out only for an available
        // `SimdTier::Avx512`, which requires AVX-512 F.
        unsafe { silu_avx512(g, u) }
    }

    /// Safe entry: only selected for an available AVX2 tier.
    pub(super) fn avx2(g: &mut [f32], u: &[f32]) {
        // SAFETY: `kernel_for` hands this out only for an available
        // `SimdTier::Avx2` (or wider), which requires AVX2.
        unsafe { silu_avx2(g, u) }
    }

    /// Safe entry: as for `avx512`.
    pub(super) fn exp_avx512(x: &mut [f32], shift: f32) {
        // SAFETY: as for `avx512`.
        unsafe { exp_shifted_avx512(x, shift) }
    }

    /// Safe entry: as for `avx2`.
    pub(super) fn exp_avx2(x: &mut [f32], shift: f32) {
        // SAFETY: as for `avx2`.
        unsafe { exp_shifted_avx2(x, shift) }
    }

    /// # Safety
    ///
    /// AVX-512 F.
    #[target_feature(enable = "avx512f")]
    unsafe fn exp_shifted_avx512(x: &mut [f32], shift: f32) {
        let body = x.len() / 16 * 16;
        let p = x.as_mut_ptr();
        for i in (0..body).step_by(16) {
            // SAFETY: i + 16 <= body <= x.len().
            unsafe {
                let v = _mm512_sub_ps(_mm512_loadu_ps(p.add(i)), _mm512_set1_ps(shift));
                _mm512_storeu_ps(p.add(i), exp16(v));
            }
        }
        exp_shifted_portable(&mut x[body..], shift);
    }

    /// # Safety
    ///
    /// AVX2.
    #[target_feature(enable = "avx2")]
    unsafe fn exp_shifted_avx2(x: &mut [f32], shift: f32) {
        let body = x.len() / 8 * 8;
        let p = x.as_mut_ptr();
        for i in (0..body).step_by(8) {
            // SAFETY: i + 8 <= body <= x.len().
            unsafe {
                let v = _mm256_sub_ps(_mm256_loadu_ps(p.add(i)), _mm256_set1_ps(shift));
                _mm256_storeu_ps(p.add(i), exp8(v));
            }
        }
        exp_shifted_portable(&mut x[body..], shift);
    }

    /// `exp_clamped` on sixteen lanes, step for step.
    ///
    /// # Safety
    ///
    /// AVX-512 F.
    #[target_feature(enable = "avx512f")]
    #[inline]
    fn exp16(x: __m512) -> __m512 {
        // Ordered: false for NaN, as `<` is.
        let below = _mm512_cmp_ps_mask::<_CMP_LT_OQ>(x, _mm512_set1_ps(LOWEST));
        // `vmaxps` returns its second operand when the first is NaN:
        // `f32::max`'s answer.
        let x = _mm512_min_ps(
            _mm512_max_ps(x, _mm512_set1_ps(LOWEST)),
            _mm512_set1_ps(HIGHEST),
        );
        let rounder = _mm512_set1_ps(ROUNDER);
        let n = _mm512_sub_ps(
            _mm512_add_ps(_mm512_mul_ps(x, _mm512_set1_ps(LOG2_E)), rounder),
            rounder,
        );
        let r = _mm512_sub_ps(x, _mm512_mul_ps(n, _mm512_set1_ps(LN2_HI)));
        let r = _mm512_sub_ps(r, _mm512_mul_ps(n, _mm512_set1_ps(LN2_LO)));
        let mut p = _mm512_set1_ps(POLY[0]);
        for c in &POLY[1..] {
            p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(*c));
        }
        let y = _mm512_add_ps(
            _mm512_add_ps(_mm512_mul_ps(p, _mm512_mul_ps(r, r)), r),
            _mm512_set1_ps(1.0),
        );
        // `n` is a whole number in -126..=127: the conversion is exact.
        let e = _mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127));
        let e = _mm512_mul_ps(y, _mm512_castsi512_ps(_mm512_slli_epi32::<23>(e)));
        _mm512_maskz_mov_ps(!below, e)
    }

    /// # Safety
    ///
    /// AVX-512 F.
    #[target_feature(enable = "avx512f")]
    unsafe fn silu_avx512(g: &mut [f32], u: &[f32]) {
        let body = g.len() / 16 * 16;
        let (gp, up) = (g.as_mut_ptr(), u.as_ptr());
        for i in (0..body).step_by(16) {
            // SAFETY: i + 16 <= body <= g.len() == u.len() (checked by
            // `silu_mul`).
            unsafe {
                let x = _mm512_loadu_ps(gp.add(i));
                let e = exp16(_mm512_sub_ps(_mm512_setzero_ps(), x));
                let silu = _mm512_div_ps(x, _mm512_add_ps(_mm512_set1_ps(1.0), e));
                _mm512_storeu_ps(gp.add(i), _mm512_mul_ps(silu, _mm512_loadu_ps(up.add(i))));
            }
        }
        silu_mul_portable(&mut g[body..], &u[body..]);
    }

    /// `exp_clamped` on eight lanes, step for step.
    ///
    /// # Safety
    ///
    /// AVX2.
    #[target_feature(enable = "avx2")]
    #[inline]
    fn exp8(x: __m256) -> __m256 {
        let below = _mm256_cmp_ps::<_CMP_LT_OQ>(x, _mm256_set1_ps(LOWEST));
        let x = _mm256_min_ps(
            _mm256_max_ps(x, _mm256_set1_ps(LOWEST)),
            _mm256_set1_ps(HIGHEST),
        );
        let rounder = _mm256_set1_ps(ROUNDER);
        let n = _mm256_sub_ps(
            _mm256_add_ps(_mm256_mul_ps(x, _mm256_set1_ps(LOG2_E)), rounder),
            rounder,
        );
        let r = _mm256_sub_ps(x, _mm256_mul_ps(n, _mm256_set1_ps(LN2_HI)));
        let r = _mm256_sub_ps(r, _mm256_mul_ps(n, _mm256_set1_ps(LN2_LO)));
        let mut p = _mm256_set1_ps(POLY[0]);
        for c in &POLY[1..] {
            p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(*c));
        }
        let y = _mm256_add_ps(
            _mm256_add_ps(_mm256_mul_ps(p, _mm256_mul_ps(r, r)), r),
            _mm256_set1_ps(1.0),
        );
        let e = _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127));
        let e = _mm256_mul_ps(y, _mm256_castsi256_ps(_mm256_slli_epi32::<23>(e)));
        _mm256_andnot_ps(below, e)
    }

    /// # Safety
    ///
    /// AVX2.
    #[target_feature(enable = "avx2")]
    unsafe fn silu_avx2(g: &mut [f32], u: &[f32]) {
        let body = g.len() / 8 * 8;
        let (gp, up) = (g.as_mut_ptr(), u.as_ptr());
        for i in (0..body).step_by(8) {
            // SAFETY: i + 8 <= body <= g.len() == u.len() (checked by
            // `silu_mul`).
            unsafe {
                let x = _mm256_loadu_ps(gp.add(i));
                let e = exp8(_mm256_sub_ps(_mm256_setzero_ps(), x));
                let silu = _mm256_div_ps(x, _mm256_add_ps(_mm256_set1_ps(1.0), e));
                _mm256_storeu_ps(gp.add(i), _mm256_mul_ps(silu, _mm256_loadu_ps(up.add(i))));
            }
        }
        silu_mul_portable(&mut g[body..], &u[body..]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::random::XorShift;

    /// Random values at many scales, and the edges: zeros of both signs,
    /// the clamp's bounds and beyond, subnormals, infinities, NaN.
    fn gates() -> Vec<f32> {
        let mut rng = XorShift(11);
        let mut all = Vec::new();
        for scale in [1e-30f32, 1e-3, 1.0, 4.0, 30.0, 100.0, 1e30] {
            all.extend((0..if cfg!(miri) { 64 } else { 1000 }).map(|_| rng.uniform() * scale));
        }
        all.extend([
            0.0,
            -0.0,
            87.0,
            -87.0,
            88.0,
            -88.0,
            89.0,
            -89.0,
            1e-45,
            -1e-45,
            f32::MAX,
            f32::MIN,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
        ]);
        // Not a multiple of any vector width: the tails run too.
        all.push(0.5);
        all
    }

    #[test]
    fn every_tier_gives_the_portable_silu_bits() {
        let g = gates();
        let u: Vec<f32> = (0..g.len()).map(|i| 1.0 + (i % 7) as f32 * 0.25).collect();
        let mut portable = g.clone();
        silu_mul_on(SimdTier::Portable, &mut portable, &u).expect("always available");
        let tiers = SimdTier::available();
        assert!(tiers.len() > 1 || !cfg!(target_arch = "x86_64") || cfg!(miri));
        for tier in tiers {
            let mut out = g.clone();
            silu_mul_on(tier, &mut out, &u).expect("an available tier");
            for (i, (a, b)) in out.iter().zip(&portable).enumerate() {
                assert!(
                    a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan()),
                    "{tier:?}: silu({}) * {} = {a:e}, portable {b:e}",
                    g[i],
                    u[i]
                );
            }
        }
    }

    #[test]
    fn every_tier_gives_the_portable_softmax_bits() {
        let mut rng = XorShift(3);
        for len in [0usize, 1, 7, 16, 17, 100, 1024] {
            for spread in [1.0f32, 30.0, 300.0] {
                let mut scores: Vec<f32> = (0..len).map(|_| rng.uniform() * spread).collect();
                if len > 3 {
                    scores[len / 2] = f32::NEG_INFINITY;
                }
                let mut portable = scores.clone();
                softmax_on(SimdTier::Portable, &mut portable).expect("always available");
                if len > 0 {
                    let sum: f32 = portable.iter().sum();
                    assert!((sum - 1.0).abs() < 1e-5, "{len} scores sum to {sum}");
                }
                if len > 3 {
                    assert_eq!(portable[len / 2], 0.0, "a masked position's weight");
                }
                for tier in SimdTier::available() {
                    let mut out = scores.clone();
                    softmax_on(tier, &mut out).expect("an available tier");
                    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                    assert_eq!(bits(&out), bits(&portable), "{tier:?}, {len} scores");
                }
            }
        }
    }

    #[test]
    fn below_the_range_the_exponential_is_zero() {
        for x in [-87.5f32, -100.0, -1e30, f32::NEG_INFINITY] {
            assert_eq!(exp_clamped(x), 0.0, "e^{x}");
        }
        assert!(exp_clamped(-87.0) > 0.0);
    }

    #[test]
    fn the_exponential_is_within_two_ulp_of_exp_on_the_clamped_range() {
        let mut rng = XorShift(5);
        for _ in 0..if cfg!(miri) { 100 } else { 100_000 } {
            let x = rng.uniform() * 87.0;
            let exact = f64::from(x).exp();
            let got = f64::from(exp_clamped(x));
            let ulp = f64::from(f32::EPSILON) * exact;
            assert!(
                (got - exact).abs() <= 2.0 * ulp,
                "exp({x}) = {got:e}, exactly {exact:e}"
            );
        }
    }

    #[test]
    fn silu_saturates_where_the_exponential_is_clamped() {
        for (g, want) in [
            (0.0f32, 0.0f32),
            (100.0, 100.0),
            (-100.0, 0.0),
            (f32::INFINITY, f32::INFINITY),
        ] {
            let mut out = [g];
            silu_mul(&mut out, &[1.0]);
            assert!(
                (out[0] - want).abs() <= 1e-30 || out[0] == want,
                "silu({g}) = {}, want {want}",
                out[0]
            );
        }
        let mut nan = [f32::NAN];
        silu_mul(&mut nan, &[1.0]);
        assert!(nan[0].is_nan());
    }

    #[test]
    #[should_panic(expected = "silu_mul: 2 gate values but 1 up values")]
    fn mismatched_lengths_panic_naming_both() {
        silu_mul(&mut [1.0, 2.0], &[1.0]);
    }
}
