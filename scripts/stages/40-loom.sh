#!/usr/bin/env bash
# loom models of the dispatch protocol and the row layer (loom-tests/),
# compiled with --cfg loom into their own target dir, preemptions bounded
# at 2. One build checks the correct protocol (protocol.rs, composition.rs,
# no_spinner_slot.rs, phased.rs, rows.rs, ...) and the seeded bugs
# (seeded_bugs.rs, phased.rs, rows_seeded.rs, yielder_leak.rs: each model runs
# a pool with one known bug reinstated and must fail with its expected
# message). Cost: ~1 min to build, ~2 min on 2 cores (the two-worker
# limited-job model is nearly all of it; every other model takes < 1 s).
set -euo pipefail
export LOOM_MAX_PREEMPTIONS=${LOOM_MAX_PREEMPTIONS:-2}
RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom \
    cargo test -p loom-tests --release
