#!/usr/bin/env bash
# What a crates.io user gets: the library crates' docs with warnings denied
# (broken intra-doc links fail), then `cargo package` of every publishable
# crate, each built from its packaged files against the others through
# cargo's local overlay (so a file missing from a package, or a path
# dependency without a version, fails here). pool-cli is not published
# yet (it depends on the unpublished pool-benches). Cost: ~30-60 s.
set -euo pipefail
RUSTDOCFLAGS="-D warnings" cargo doc --no-deps -p pool-core -p pool-topo -p pool-matvec -p pool-ffi
cargo package --workspace --exclude pool-cli --exclude pool-benches --exclude loom-tests \
    --exclude testkit --allow-dirty
