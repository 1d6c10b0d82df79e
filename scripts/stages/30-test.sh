#!/usr/bin/env bash
# Unit, integration and doc tests of the workspace (debug build), then the
# benches compiled (not run). Cost: ~2-3 min cold on 2 cores.
set -euo pipefail
cargo test --workspace
cargo bench --workspace --no-run
