#!/usr/bin/env bash
# What a crates.io user gets: the library crates' docs with warnings denied
# (broken intra-doc links fail), then `cargo package` of every publishable
# crate, each built from its packaged files against the others through
# cargo's local overlay (so a file missing from a package, or a path
# dependency without a version, fails here). Every crate but the loom
# models is publishable: pool-cli's baselines come from pool-benches, whose
# tests use pool-testkit. Cost: ~30-60 s.
set -euo pipefail
RUSTDOCFLAGS="-D warnings" cargo doc --no-deps -p pool-core -p pool-topo -p pool-matvec -p pool-ffi
cargo package --workspace --exclude loom-tests --allow-dirty
