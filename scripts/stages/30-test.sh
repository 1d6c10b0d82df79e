#!/usr/bin/env bash
# Unit, integration and doc tests of the workspace (debug build), then the
# benches compiled (not run) with the peers suite's crates.io peers
# (pool-benches feature `peers`: candle, fork_union, chili, built once, in
# the release profile), and the test that every peer does the work it is
# timed on, in that same build. Cost: ~4 min cold on 2 cores, +~4 min
# for the peers (candle is most of it).
set -euo pipefail
cargo test --workspace
cargo bench --workspace --no-run --features pool-benches/peers
CANDLE_NUM_THREADS=2 cargo test --release -p pool-benches --features peers --test peers
