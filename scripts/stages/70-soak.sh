#!/usr/bin/env bash
# The soak: SOAK_SECS (default 30) of random run/run_limited/run_rows/
# run_many/panicking/concurrent jobs on pools created and dropped, release
# build, every entry and row counted; prints jobs/s. Cost: SOAK_SECS + ~30 s.
set -euo pipefail
SOAK_SECS=${SOAK_SECS:-30} cargo test --release -p pool-matvec --test soak -- --ignored --nocapture
