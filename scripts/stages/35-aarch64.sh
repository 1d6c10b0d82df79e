#!/usr/bin/env bash
# The NEON kernels run for real: pool-matvec's kernel tests built for
# aarch64 Linux and run under qemu-user, twice: on qemu's default CPU (the
# dot-product extension: the `sdot` kernels) and on a Cortex-A57 (ARMv8.0,
# none: the widening-multiply kernels). Every tier is checked bit for bit
# against the scalar reference, as on x86_64. Installs qemu-user and the
# aarch64 cross linker from Debian's packages when missing.
# Cost: ~40 s to install, ~50 s to build, ~10 s to run, on 2 cores.
set -euo pipefail
if ! command -v qemu-aarch64 >/dev/null || ! command -v aarch64-linux-gnu-gcc >/dev/null; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q
    apt-get install -y -q qemu-user gcc-aarch64-linux-gnu libc6-dev-arm64-cross
fi
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER="qemu-aarch64 -L /usr/aarch64-linux-gnu"
export CARGO_TARGET_DIR=target/aarch64
run() {
    cargo test --release --target aarch64-unknown-linux-gnu -p pool-matvec --lib --test kernels "$@"
}
echo "--- qemu's default CPU (dotprod: the sdot kernels)"
run
echo "--- Cortex-A57 (no dotprod: the widening-multiply kernels)"
QEMU_CPU=cortex-a57 run
