#!/usr/bin/env bash
# Unit, integration and doc tests of the workspace (debug build; with the
# gguf Python package installed first when pip can), then the
# benches compiled (not run) with the peers suite's crates.io peers
# (pool-benches feature `peers`: candle, fork_union, chili, built once, in
# the release profile), and the test that every peer does the work it is
# timed on, in that same build. Cost: ~4 min cold on 2 cores, +~4 min
# for the peers (candle is most of it).
set -euo pipefail
# llama.cpp's Python package, for the test that reads files it writes
# (pool-llama's gguf_py.rs; it says it skipped where gguf cannot be had).
python3 -c "import gguf, numpy" 2>/dev/null ||
    python3 -m pip install -q gguf 2>/dev/null ||
    echo "gguf-py could not be installed: pool-llama's gguf_py tests will skip"
cargo test --workspace
cargo bench --workspace --no-run --features pool-benches/peers
CANDLE_NUM_THREADS=2 cargo test --release -p pool-benches --features peers --test peers
