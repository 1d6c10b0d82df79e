//! The fast deterministic f32 kernel: SIMD, with a fixed reduction order.
//!
//! Each row's dot product uses 32 lanes: lane `l` accumulates, with fused
//! multiply-add, the products at `j ≡ l (mod 32)` for `j` below the last
//! multiple of 32; the lanes are reduced in one fixed tree
//! (`s[k] = (a[k] + a[k+8]) + (a[k+16] + a[k+24])`, then halves of 4, 2, 1);
//! the remaining `cols % 32` products are fused into the result in `j`
//! order. Every code path (AVX2+FMA on x86_64, the portable fallback, which
//! LLVM vectorises where FMA is native, e.g. aarch64) computes exactly this,
//! so the result never depends on the CPU's features, the thread count or
//! the grain. It differs from the plain-order kernel [`crate::matvec_rows`]
//! by rounding only: on random data in [-1, 1), a relative difference
//! below 1e-5 (see `tests/kernels.rs`).

use pool_core::Pool;

use crate::each::for_each_row;
use crate::shape::{check_matvec, should_parallelize};

const LANES: usize = 32;

/// `out = W x` with the SIMD kernel: deterministic across thread counts and
/// CPUs, not bit-identical to [`crate::matvec_rows`].
///
/// # Panics
///
/// If `w` holds fewer than `out.len() * x.len()` values.
pub fn matvec_f32_fast(pool: Option<&Pool>, w: &[f32], x: &[f32], out: &mut [f32]) {
    let (rows, cols) = (out.len(), x.len());
    check_matvec("matvec_f32_fast", w.len(), rows, cols);
    let pool = pool.filter(|_| should_parallelize(rows, cols));
    let dot = select_dot();
    for_each_row(pool, out, &|row, value| {
        *value = dot(&w[row * cols..(row + 1) * cols], x);
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
            acc[lane] = w32[lane].mul_add(x32[lane], acc[lane]);
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
        result = w[j].mul_add(x[j], result);
    }
    result
}

/// One row's dot product by the best path this CPU has.
pub fn dot_fast(w: &[f32], x: &[f32]) -> f32 {
    select_dot()(w, x)
}

type DotFn = fn(&[f32], &[f32]) -> f32;

fn select_dot() -> DotFn {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma") {
        return avx2::dot;
    }
    dot_fast_portable
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    use super::LANES;

    /// Safe entry: only selected after AVX2 and FMA were detected.
    pub(super) fn dot(w: &[f32], x: &[f32]) -> f32 {
        // SAFETY: `select_dot` returns this function only when the CPU
        // reports AVX2 and FMA.
        unsafe { dot_avx2(w, x) }
    }

    /// # Safety
    ///
    /// The CPU must support AVX2 and FMA; `w` and `x` have equal lengths.
    #[target_feature(enable = "avx2,fma")]
    unsafe fn dot_avx2(w: &[f32], x: &[f32]) -> f32 {
        assert_eq!(w.len(), x.len());
        let body = w.len() / LANES * LANES;
        let (mut a0, mut a1, mut a2, mut a3) = (
            _mm256_setzero_ps(),
            _mm256_setzero_ps(),
            _mm256_setzero_ps(),
            _mm256_setzero_ps(),
        );
        let (wp, xp) = (w.as_ptr(), x.as_ptr());
        let mut j = 0;
        while j < body {
            // SAFETY: j + 32 <= body <= len for both slices.
            unsafe {
                a0 = _mm256_fmadd_ps(_mm256_loadu_ps(wp.add(j)), _mm256_loadu_ps(xp.add(j)), a0);
                a1 = _mm256_fmadd_ps(
                    _mm256_loadu_ps(wp.add(j + 8)),
                    _mm256_loadu_ps(xp.add(j + 8)),
                    a1,
                );
                a2 = _mm256_fmadd_ps(
                    _mm256_loadu_ps(wp.add(j + 16)),
                    _mm256_loadu_ps(xp.add(j + 16)),
                    a2,
                );
                a3 = _mm256_fmadd_ps(
                    _mm256_loadu_ps(wp.add(j + 24)),
                    _mm256_loadu_ps(xp.add(j + 24)),
                    a3,
                );
            }
            j += LANES;
        }
        // s[k] = (a0[k] + a1[k]) + (a2[k] + a3[k])
        let s = _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3));
        // t[k] = s[k] + s[k + 4]
        let t = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps::<1>(s));
        // u[k] = t[k] + t[k + 2]
        let u = _mm_add_ps(t, _mm_movehl_ps(t, t));
        // u[0] + u[1]
        let mut result = _mm_cvtss_f32(_mm_add_ss(u, _mm_shuffle_ps::<0b01>(u, u)));
        for k in body..w.len() {
            result = w[k].mul_add(x[k], result);
        }
        result
    }
}
