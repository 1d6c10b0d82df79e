#!/usr/bin/env bash
# loom models of the dispatch protocol (loom-tests/), compiled with
# --cfg loom into their own target dir, preemptions bounded at 2; then the
# deliberately broken variant (--cfg pool_broken_baseline), whose model
# must FAIL (a #[should_panic] test). Cost: ~4-5 min on 2 cores (the
# two-worker limited-job model is most of it), plus ~1 min to build.
set -euo pipefail
export LOOM_MAX_PREEMPTIONS=${LOOM_MAX_PREEMPTIONS:-2}
RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom \
    cargo test -p loom-tests --release
RUSTFLAGS="--cfg loom --cfg pool_broken_baseline" CARGO_TARGET_DIR=target/loom-broken \
    cargo test -p loom-tests --release --test broken_baseline
