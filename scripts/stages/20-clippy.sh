#!/usr/bin/env bash
# Lints, warnings as errors, every target; then the library crates for
# aarch64 Linux (the NEON kernel), and `cargo check` of the library crates
# for macOS, Windows and Android, warnings denied. Cost: ~1-2 min cold on 2
# cores, +20 s for aarch64, +~60 s for the three platform checks. The
# first run enables the peers suite's crates.io peers (pool-benches feature
# `peers`: candle, fork_union, chili) so their adapters are linted: about
# +40 s to check candle.
set -euo pipefail
cargo clippy --workspace --all-targets --features pool-benches/peers -- -D warnings
cargo clippy --target aarch64-unknown-linux-gnu -p pool-core -p pool-topo -p pool-matvec -- -D warnings
for target in aarch64-apple-darwin x86_64-pc-windows-gnu aarch64-linux-android; do
    RUSTFLAGS="-D warnings" CARGO_TARGET_DIR=target/platforms \
        cargo check --target "$target" -p pool-core -p pool-topo -p pool-matvec -p pool-ffi
done
