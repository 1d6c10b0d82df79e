//! Baselines the pool is measured against, shared by the criterion benches
//! and `pool bench`, so both measure the same things.
//!
//! - [`PingPong`]: two threads bouncing one cache line: the hardware floor
//!   of a fork-join;
//! - [`SpinPool`]: a minimal hand-written spin pool (one spinning worker,
//!   one epoch counter, no park): what a fork-join costs with nothing extra;
//! - [`read_ceiling`]: a plain parallel read of the same bytes a matvec
//!   streams: the bandwidth ceiling;
//! - [`RayonExecutor`]: the decode workload on rayon `par_chunks_mut`;
//! - [`openmp`]: llama2.c's forward pass in C with OpenMP, the peer that
//!   C engines are (built when a C compiler with OpenMP is found);
//! - [`cpu_clock`]: exact per-thread CPU time, for idle-burn figures;
//! - [`Stats`]: medians and spread of repeated runs;
//! - [`peers`]: the EPCC-style suite beside rayon, candle's `BarrierPool`,
//!   fork_union, chili and OpenMP (the crates.io ones with feature `peers`);
//! - [`scenarios`]: the deployment settings (pinned threads, several pools,
//!   a quota, busy neighbours, ...) built for real, for side-by-side runs.

mod baselines;
pub mod cpu_clock;
pub mod openmp;
pub mod peers;
pub mod scenarios;
mod stats;

pub use baselines::{
    random_k_quant, rayon_matvec_f32, rayon_matvec_q4_0, rayon_matvec_q8_0, read_ceiling,
    read_ceiling_bytes, read_ceiling_bytes_len, PingPong, RayonExecutor, SpinPool,
};
pub use stats::{time_per_iter, Stats};
