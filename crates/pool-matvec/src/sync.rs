//! The atomics the row layer hands rows out with, behind a facade: under
//! `--cfg loom` they are loom's, so the models in `loom-tests/tests/rows.rs`
//! check the shipped home ranges, cursor and `DisjointRows`, not a copy.

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// The seeded bug of the row layer's loom models: rows claimed with a load
/// and a store instead of a compare-exchange (by a home range's owner, or
/// from the shared cursor), so two participants can take the same rows.
/// Only in `--cfg loom` builds, set for the whole process by the models'
/// own test binary.
#[cfg(loom)]
pub(crate) static CLAIM_BY_LOAD_AND_STORE: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(false);

/// Whether the seeded claim bug is on (always false outside loom builds).
#[inline(always)]
pub(crate) fn claim_bug() -> bool {
    #[cfg(loom)]
    {
        CLAIM_BY_LOAD_AND_STORE.load(std::sync::atomic::Ordering::Relaxed)
    }
    #[cfg(not(loom))]
    {
        false
    }
}
