//! Row parallelism and bit-exact decode kernels on `pool-core`.
//!
//! - [`RowParallel::run_rows`] / [`RowParallel::run_many`]: one dispatch per
//!   job (or per group of matrices sharing an input), participants pulling
//!   [`grain_for`]-sized row ranges from a shared cursor;
//! - [`matvec_rows`], [`matvec_rows2`]: f32 matvec bit-identical to the
//!   naive loop for any thread count;
//! - [`matvec_f32_fast`]: SIMD f32 with a fixed reduction order, the same
//!   bits on every [`SimdTier`] (portable, NEON, AVX2, AVX-512; chosen once
//!   by [`simd_tier`], lowered with `POOL_SIMD_TIER`);
//! - [`matvec_q8_0`], [`matvec_q4_0`]: GGUF Q8_0 and Q4_0 weights with a
//!   Q8_0 activation, exact integer block dots and one fixed float order
//!   (every tier bit-identical to the scalar reference; the quantized
//!   paths are scalar, NEON with or without `sdot`, AVX2 `maddubs`,
//!   AVX-512 VNNI, and for Q4_0 full 512-bit registers with VBMI:
//!   [`quantized_kernel_name`] says which runs, and
//!   `docs/tuning.md` has the measured table);
//! - [`interleave_rows`], [`Weights::interleaved`]: Q8_0, Q4_0, Q4_K and Q6_K
//!   rows interleaved by sixteen in place, read by AVX-512 VNNI kernels with
//!   no shuffle per block (where [`interleaving_pays`]), the same bits;
//! - [`Weights`], [`PreparedInput`]: any GGUF type's rows in place and an
//!   input quantized once for every matrix that reads it, in reused
//!   [`InputBuffers`] so that a decode token allocates nothing;
//! - [`silu_mul`], [`softmax`]: SwiGLU and attention's weights on an
//!   exponential of their own ([`exp_clamped`]), the same bits on every
//!   tier, sixteen values per instruction on AVX-512;
//! - [`decode`]: a synthetic decode step to measure all of it;
//!
//! ```
//! use pool_matvec::RowParallel;
//! let pool = pool_core::Pool::new(1);
//! let rows = std::sync::atomic::AtomicUsize::new(0);
//! pool.run_rows(1000, &|start, end| {
//!     rows.fetch_add(end - start, std::sync::atomic::Ordering::Relaxed);
//! });
//! assert_eq!(rows.into_inner(), 1000);
//! ```

#![cfg_attr(docsrs, feature(doc_cfg))]
mod activation;
mod blocks;
pub mod decode;
mod disjoint;
mod each;
mod exact;
mod executor;
mod fast;
mod home_ranges;
mod interleaved;
mod k_quants;
#[cfg(target_arch = "x86_64")]
mod lanes;
mod map_reduce;
pub mod prelude;
mod q4_0;
mod q8_0;
#[cfg(target_arch = "x86_64")]
mod quantize_avx512;
mod random;
mod rows;
mod serial;
mod shape;
mod sync;
mod tier;
mod weighted;
mod weights;

pub use activation::{exp_clamped, silu_mul, silu_mul_on, softmax, softmax_on};
pub use each::{for_each_chunk_init, for_each_row};
pub use exact::{matvec_naive, matvec_rows, matvec_rows2};
pub use executor::Executor;
pub use fast::{
    dot_fast, dot_fast_on, dot_fast_portable, dot_fast_rows, dot_fast_rows_on, matvec_f32_fast,
};
pub use interleaved::{interleave_rows, interleaving_pays, INTERLEAVED_ROWS};
pub use k_quants::{
    dequantize_q4_k, dequantize_q6_k, dot_q4_k, dot_q4_k_on, dot_q4_k_scalar, dot_q6_k,
    dot_q6_k_on, dot_q6_k_scalar, quantize_q4_k, quantize_q6_k, quantize_q8_k, BlockQ4K, BlockQ6K,
    BlockQ8K, QK_K,
};
pub use map_reduce::{map_reduce, MAP_REDUCE_CHUNKS};
pub use q4_0::{
    dequantize_q4_0, dot_q4_0, dot_q4_0_on, dot_q4_0_scalar, matvec_q4_0, matvec_q4_0_prepared,
    quantize_q4_0, BlockQ4_0, QK4_0,
};
pub use q8_0::{
    dequantize_q8_0, dot_q8_0, dot_q8_0_on, dot_q8_0_scalar, matvec_q8_0, matvec_q8_0_prepared,
    quantize_q8_0, BlockQ8_0, QK8_0,
};
pub use random::XorShift;
pub use rows::{
    grain_for, Broadcast, RowFn, RowParallel, RowsInto, RowsIntoFn, GRAINS_PER_PARTICIPANT,
    MIN_GRAIN,
};
pub use serial::Serial;
pub use shape::{should_parallelize, PARALLEL_THRESHOLD};
pub use tier::{quantized_kernel_name, simd_tier, SimdTier, SIMD_TIER_ENV};
pub use weighted::{add_weighted_rows, add_weighted_rows_on};
pub use weights::{InputBuffers, PreparedInput, WeightType, Weights, WeightsError};

/// For the loom models only (`--cfg loom` builds).
#[cfg(loom)]
#[doc(hidden)]
pub mod __loom {
    /// Reinstates the seeded claim bug for the rest of the process: rows
    /// claimed by a load and a store (the home ranges' owner claim and
    /// the shared cursor's), which two participants can both make. The
    /// model's test binary holds those models alone.
    pub fn seed_claim_bug() {
        crate::sync::CLAIM_BY_LOAD_AND_STORE.store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// A row job through the shared cursor (`pull_chunks`), as
    /// [`crate::Broadcast`] executors and the phased decode run theirs, on
    /// `pool`'s workers: the pool's own row jobs use home ranges.
    pub fn cursor_rows(pool: &pool_core::Pool, rows: usize, f: &crate::RowFn<'_>) {
        let cursor = crate::sync::AtomicUsize::new(0);
        let n = pool.n_workers() + 1;
        pool.run(|_, _| crate::rows::pull_chunks(&cursor, rows, n, f));
    }
}
