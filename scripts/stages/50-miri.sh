#!/usr/bin/env bash
# Miri over pool-core's and pool-matvec's tests (scaled down under
# cfg(miri)): the fat-pointer descriptor, the disjoint row writes, the
# padding. Isolation is off so tests may read the clock, env and /proc.
# Floats are deterministic: Miri otherwise perturbs exp/powf/sin by a few
# ULP per call, and the tests compare bits across thread counts.
#
# Miri interprets a whole test binary on one host thread, so the two
# crates run as two Miri processes side by side, each in its own target
# dir (cargo holds a target dir's lock while its tests run): on the 2-core
# CI machine the stage takes the longer half instead of the sum.
# Cost: see docs/testing.md.
set -euo pipefail
# Two CPUs (-Zmiri-num-cpus=2), as the CI machine: Miri reports one by
# default, and on one CPU an adaptive pool runs every job inline (no worker
# has a CPU of its own), so the parallel paths would go unchecked.
export MIRIFLAGS="${MIRIFLAGS:--Zmiri-disable-isolation -Zmiri-deterministic-floats -Zmiri-num-cpus=2}"
cargo +nightly miri setup
logs=$(mktemp -d)
pids=()
for crate in pool-core pool-matvec; do
    CARGO_TARGET_DIR="target/miri-$crate" \
        cargo +nightly miri test -p "$crate" >"$logs/$crate.log" 2>&1 &
    pids+=($!)
done
status=0
crates=(pool-core pool-matvec)
for i in 0 1; do
    if ! wait "${pids[$i]}"; then
        status=1
        echo "--- miri: ${crates[$i]} FAILED"
    fi
    echo "--- miri: ${crates[$i]} (log follows)"
    cat "$logs/${crates[$i]}.log"
done
rm -rf "$logs"
exit "$status"
