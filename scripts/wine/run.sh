#!/usr/bin/env bash
# Cargo's runner for the Windows test executables: runs one under Wine.
# A run that exits non-zero having printed nothing at all never reached the
# test harness (libtest prints "running N tests" first): Wine failed to
# start it. That failed one CI run (a test executable, exit status 1,
# no output). Such a run is retried once, saying so, with Wine's own message;
# a run that printed anything keeps its result, so a failing test still fails.
set -uo pipefail
wine=/usr/lib/wine/wine64
out=$(mktemp) err=$(mktemp)
trap 'rm -f "$out" "$err"' EXIT
for attempt in 1 2; do
    "$wine" "$@" >"$out" 2>"$err"
    rc=$?
    cat "$out"
    cat "$err" >&2
    if [[ $rc -eq 0 || -s $out || $attempt -eq 2 ]]; then
        exit $rc
    fi
    echo "wine: $1 exited with status $rc before its harness printed a line (Wine did not start it); retrying once" >&2
done
