#!/usr/bin/env bash
# Formatting check. Cost: ~2 s.
set -euo pipefail
cargo fmt --all --check
