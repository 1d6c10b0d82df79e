#!/usr/bin/env bash
# Installs what the stages need, if missing: the pinned stable toolchain
# (rust-toolchain.toml) with rustfmt and clippy, and a nightly with miri and
# rust-src (for Miri and ThreadSanitizer's -Zbuild-std). An existing nightly
# is kept as is, so a run never waits on a toolchain update.
# Cost: ~0 s when present; ~1-2 min to download a nightly.
set -euo pipefail
stable=$(sed -n 's/^channel = "\(.*\)"/\1/p' rust-toolchain.toml)
rustup toolchain list | grep -q "^$stable" || rustup toolchain install "$stable" --profile minimal
rustup component add --toolchain "$stable" rustfmt clippy
# The NEON kernel is compile-checked for aarch64 (no such host to run it).
rustup target add --toolchain "$stable" aarch64-unknown-linux-gnu
rustup toolchain list | grep -q '^nightly' || rustup toolchain install nightly --profile minimal
rustup component add --toolchain nightly miri rust-src
rustc --version
rustc +nightly --version
