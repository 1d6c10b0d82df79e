//! loom models of pool-core's dispatch protocol live in `tests/`; this
//! library holds what they share. They compile pool-core itself with
//! `--cfg loom`, so the models check the shipped protocol through its
//! `sync` facade, not a copy.
#![cfg(loom)]

/// Checks `f` over every interleaving within the preemption bound
/// (`LOOM_MAX_PREEMPTIONS`, default 2).
pub fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut builder = loom::model::Builder::new();
    if builder.preemption_bound.is_none() {
        builder.preemption_bound = Some(2);
    }
    builder.check(f);
}

/// Like [`model`], with a small branch limit: for seeded bugs whose failure
/// is a caller spinning for ever, which loom reports as too many branches.
pub fn model_of_a_hang(f: impl Fn() + Sync + Send + 'static) {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(2);
    builder.max_branches = 10_000;
    builder.check(f);
}
