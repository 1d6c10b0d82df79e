#!/usr/bin/env bash
# Unit, integration and doc tests of the workspace (debug build; with the
# gguf Python package installed first when pip can), then the test that
# every peer of the peers suite does the work it is timed on, with the
# crates.io peers (pool-benches feature `peers`: candle, fork_union,
# chili) in a debug build. The benches themselves are compiled by the
# clippy stage (`--all-targets --features pool-benches/peers`). Cost: ~6
# min cold on 2 cores, ~1.5 of it the peers' build.
set -euo pipefail
# llama.cpp's Python package, for the test that reads files it writes
# (pool-llama's gguf_py.rs; it says it skipped where gguf cannot be had).
python3 -c "import gguf, numpy" 2>/dev/null ||
    python3 -m pip install -q gguf 2>/dev/null ||
    echo "gguf-py could not be installed: pool-llama's gguf_py tests will skip"
cargo test --workspace
CANDLE_NUM_THREADS=2 cargo test -p pool-benches --features peers --test peers
