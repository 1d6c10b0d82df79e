#!/usr/bin/env bash
# Lints, warnings as errors, every target. Cost: ~1-2 min cold on 2 cores.
set -euo pipefail
cargo clippy --workspace --all-targets -- -D warnings
