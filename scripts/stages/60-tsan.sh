#!/usr/bin/env bash
# ThreadSanitizer over pool-core's and pool-matvec's tests, std rebuilt
# with -Zbuild-std so its atomics are instrumented too. Cost: ~4 min cold.
set -euo pipefail
target=$(rustc +nightly -vV | sed -n 's/^host: //p')
RUSTFLAGS="-Zsanitizer=thread" RUSTDOCFLAGS="-Zsanitizer=thread" \
TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" \
CARGO_TARGET_DIR=target/tsan \
    cargo +nightly test -Zbuild-std --target "$target" -p pool-core -p pool-matvec --lib --tests
