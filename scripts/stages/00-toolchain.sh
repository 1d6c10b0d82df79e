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
# Compile checks for the platforms engines ship on (no such hosts here):
# aarch64 Linux (the NEON kernel), macOS, Windows, Android.
rustup target add --toolchain "$stable" aarch64-unknown-linux-gnu \
    aarch64-apple-darwin x86_64-pc-windows-gnu aarch64-linux-android
rustup toolchain list | grep -q '^nightly' || rustup toolchain install nightly --profile minimal
rustup component add --toolchain nightly miri rust-src
rustc --version
rustc +nightly --version
