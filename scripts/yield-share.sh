#!/bin/sh
# What a yield costs beside a CPU-bound process on this kernel: a thread
# spinning on the last CPU beside a busy process pinned there, with and
# without a sched_yield every 4096 spins (as the pool's idle worker does).
#
#   scripts/yield-share.sh
#
# Two always-runnable threads of equal weight split a CPU half and half,
# so without yields the spinner reads about 0.5. On Linux 6.18 (Intel
# host, 2026-12-07) it read 0.500 without and 0.037 with: a yield there
# gives up the rest of the turn and is charged for it (docs/design.md,
# "Where the worker's turns go beside a busy process"). Run it on each
# host and kernel the pool's busy-machine figures come from. Needs gcc;
# not run in CI.
set -eu
cpu=$(($(nproc) - 1))
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
gcc -O2 -pthread "$(dirname "$0")/probes/yield_share.c" -o "$out/yield_share"
taskset -c "$cpu" sh -c 'while :; do :; done' &
busy=$!
trap 'kill $busy 2>/dev/null; rm -rf "$out"' EXIT
sleep 0.3
"$out/yield_share" "$cpu" 0
"$out/yield_share" "$cpu" 1
