#!/usr/bin/env bash
# ThreadSanitizer over pool-core's and pool-matvec's tests, std rebuilt
# with -Zbuild-std so its atomics are instrumented too. The fork tests
# (every test whose name says "fork") are skipped: TSan cannot start
# threads in the child of a multi-threaded fork ("starting new threads
# after multi-threaded fork is not supported", exit code 66); they run in
# the test stage. Cost: ~4-5 min cold.
set -euo pipefail
target=$(rustc +nightly -vV | sed -n 's/^host: //p')
RUSTFLAGS="-Zsanitizer=thread" RUSTDOCFLAGS="-Zsanitizer=thread" \
TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" \
CARGO_TARGET_DIR=target/tsan \
    cargo +nightly test -Zbuild-std --target "$target" -p pool-core -p pool-matvec --lib --tests \
    -- --skip fork
