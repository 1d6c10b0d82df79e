#!/usr/bin/env bash
# The project's full test command (README: "Run every test").
# Runs each stage under scripts/stages/ in order; each stage installs what it
# needs itself and states its cost. STAGES="fmt clippy" runs a subset.
set -euo pipefail
cd "$(dirname "$0")/.."
stages=(${STAGES:-toolchain fmt clippy package test busy aarch64 loom miri tsan wine soak})
start=$(date +%s)
for stage in "${stages[@]}"; do
    script=$(ls scripts/stages/*-"$stage".sh)
    echo "=== stage $stage ($script)"
    t0=$(date +%s)
    bash "$script"
    echo "=== stage $stage done in $(( $(date +%s) - t0 )) s"
done
echo "=== all stages passed in $(( $(date +%s) - start )) s"
