#!/usr/bin/env bash
# Lints, warnings as errors, every target; then the library crates for
# aarch64 (the NEON kernel). Cost: ~1-2 min cold on 2 cores, +20 s.
set -euo pipefail
cargo clippy --workspace --all-targets -- -D warnings
cargo clippy --target aarch64-unknown-linux-gnu -p pool-core -p pool-topo -p pool-matvec -- -D warnings
