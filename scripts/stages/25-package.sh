#!/usr/bin/env bash
# What a crates.io user gets: the library crates' docs with warnings denied
# (broken intra-doc links fail), then `cargo package` of every publishable
# crate, each built from its packaged files against the others through
# cargo's local overlay (so a file missing from a package, or a path
# dependency without a version, fails here). Every crate is publishable
# but the loom models, the docs' doctests (pool-docs) and the test support
# (pool-testkit, a path-only dev-dependency that cargo drops from the
# published manifests). pool-topo, first in dependency order, is packaged
# alone as well: it must build with nothing of this workspace published.
# Cost: ~1.5-2.5 min (the verification builds start from an empty target
# dir).
set -euo pipefail
# Cargo extracts the packaged crates of its temporary local registry
# (target/package/tmp-registry) into $CARGO_HOME/registry/src/-<hash>/ and
# never re-extracts a name and version it has seen: a second run from the
# same checkout path would verify against the first run's sources. Drop
# those copies of this workspace's crates (nothing to drop on a fresh
# machine).
# The same for the verification builds: cargo does not re-check a registry
# crate's sources, so a second run would link the first run's builds of
# this workspace's crates; they get a target dir of their own, emptied
# first. Both only matter for a second run from one path.
rm -rf "${CARGO_HOME:-$HOME/.cargo}"/registry/src/-*/pool-{core,topo,matvec,llama,ffi,cli,benches}-[0-9]*
export CARGO_TARGET_DIR=target/package-verify
rm -rf "$CARGO_TARGET_DIR"
RUSTDOCFLAGS="-D warnings" cargo doc --no-deps -p pool-core -p pool-topo -p pool-matvec -p pool-llama -p pool-ffi
cargo package -p pool-topo --allow-dirty
cargo package --workspace --exclude loom-tests --exclude pool-docs --exclude pool-testkit --allow-dirty
