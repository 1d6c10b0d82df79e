#!/usr/bin/env bash
# The policy and settings tests beside two busy processes, as on a CI
# runner or a laptop that is never idle: the adaptive policy, the
# foreign-load sampling, withdrawn invitations, turn yields, barriers and
# long waits,
# fork, the spinner budget, pinned and two-pool settings, reductions, the
# row layer and pool-topo's unit tests (the CPU meter among them). Every
# assertion there must hold on a loaded machine (speed and ratios live in
# the benchmarks). Reuses the test stage's debug build. Cost: ~1.5 min on
# 2 cores (everything runs at half speed).
set -euo pipefail
sh -c 'while :; do :; done' & busy1=$!
sh -c 'while :; do :; done' & busy2=$!
trap 'kill "$busy1" "$busy2" 2>/dev/null || true' EXIT
cargo test -p pool-core \
    --test adaptive --test foreign_load --test settings --test waiting \
    --test phased --test reduce --test fork --test spinner_budget --test turn_yields
cargo test -p pool-matvec --test map_reduce --test rows
# The CPU meter that flags contaminated runs: it must not count its own
# process's work as foreign load, however busy the machine.
cargo test -p pool-topo --lib
