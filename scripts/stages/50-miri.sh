#!/usr/bin/env bash
# Miri over pool-core's and pool-matvec's tests (scaled down under
# cfg(miri)): the fat-pointer descriptor, the disjoint row writes, the
# padding. Isolation is off so tests may read the clock, env and /proc.
# Floats are deterministic: Miri otherwise perturbs exp/powf/sin by a few
# ULP per call, and the tests compare bits across thread counts.
# Cost: see docs/testing.md (about 10 min on 2 cores).
set -euo pipefail
# Two CPUs (-Zmiri-num-cpus=2), as the CI machine: Miri reports one by
# default, and on one CPU an adaptive pool runs every job inline (no worker
# has a CPU of its own), so the parallel paths would go unchecked.
export MIRIFLAGS="${MIRIFLAGS:--Zmiri-disable-isolation -Zmiri-deterministic-floats -Zmiri-num-cpus=2}"
cargo +nightly miri setup
cargo +nightly miri test -p pool-core -p pool-matvec
