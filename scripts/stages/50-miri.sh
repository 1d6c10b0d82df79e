#!/usr/bin/env bash
# Miri over pool-core's and pool-matvec's tests (scaled down under
# cfg(miri)): the fat-pointer descriptor, the disjoint row writes, the
# padding. Isolation is off so tests may read the clock, env and /proc.
# Floats are deterministic: Miri otherwise perturbs exp/powf/sin by a few
# ULP per call, and the tests compare bits across thread counts.
# Cost: see docs/testing.md (about 10 min on 2 cores).
set -euo pipefail
export MIRIFLAGS="${MIRIFLAGS:--Zmiri-disable-isolation -Zmiri-deterministic-floats}"
cargo +nightly miri setup
cargo +nightly miri test -p pool-core -p pool-matvec
