#!/bin/sh
# The adaptive spin policy against fixed spin budgets, as the issue about
# busy machines asks: "within 3 % of the best fixed budget beside a busy
# process".
#
#   scripts/spin-budgets.sh MODEL [THREADS] [ROUNDS] [STEPS]
#
# Each round runs `pool decode MODEL --json` once per configuration, each
# a separate process: the adaptive default, then CMF_POOL_SPIN=4000,
# 20000 and 100000 (the order reversed every other round, so that no
# configuration always follows the same one). It prints each
# configuration's median tokens/s and the adaptive median over the best
# fixed one. Put the machine in the setting first, for example a busy
# process on the second CPU:
#
#   taskset -c 1 sh -c 'while :; do :; done' & busy=$!
#   scripts/spin-budgets.sh target/llama.cpp/models/stories110M-Q4_0.gguf
#   kill $busy
#
# Read it knowing its noise: on the 2-vCPU host of 2026-12-04 the three
# fixed budgets' medians differed by 2-6 % among themselves in one run,
# so the best of them sits above any one budget's true figure, and a run
# of twenty rounds moves by about 3 %. Each process also starts its pool
# afresh, and where its worker lands beside the busy process decides much
# of its speed. The in-process measurement is setting 7 of `pool bench
# --scenarios`, which interleaves the same budgets sample by sample with
# one pool per budget (`adaptive_vs_best_fixed`); this script is the view
# a user gets, one process per run. Not run in CI (a model file and a
# minute or more).
set -eu

if [ $# -lt 1 ]; then
    echo "usage: $0 MODEL [THREADS] [ROUNDS] [STEPS]" >&2
    exit 2
fi
model=$1
threads=${2:-2}
rounds=${3:-20}
steps=${4:-64}
root=$(git rev-parse --show-toplevel)
cargo build --release -q -p pool-cli --manifest-path "$root/Cargo.toml"
pool=$root/target/release/pool
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

configs="adaptive 4000 20000 100000"
reversed="100000 20000 4000 adaptive"
round=0
while [ "$round" -lt "$rounds" ]; do
    if [ $((round % 2)) -eq 0 ]; then order=$configs; else order=$reversed; fi
    for config in $order; do
        if [ "$config" = adaptive ]; then
            out=$(env -u CMF_POOL_SPIN "$pool" decode "$model" --steps "$steps" --threads "$threads" --json)
        else
            out=$(CMF_POOL_SPIN=$config "$pool" decode "$model" --steps "$steps" --threads "$threads" --json)
        fi
        rate=$(printf '%s\n' "$out" | sed -n 's/.*"tokens_per_s": *\([0-9.eE+-]*\).*/\1/p' | head -n 1)
        if [ -z "$rate" ]; then
            echo "no tokens_per_s in the output of pool decode ($config)" >&2
            exit 1
        fi
        echo "$rate" >>"$work/$config"
    done
    round=$((round + 1))
done

median() {
    sort -g "$1" | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}
best=0
for config in $configs; do
    m=$(median "$work/$config")
    echo "$config: median $m tokens/s over $rounds rounds"
    if [ "$config" = adaptive ]; then
        adaptive=$m
    elif awk -v a="$m" -v b="$best" 'BEGIN { exit !(a > b) }'; then
        best=$m
    fi
done
awk -v a="$adaptive" -v b="$best" 'BEGIN { printf "adaptive / best fixed budget: %.3f\n", a / b }'
