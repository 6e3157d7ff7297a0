#!/usr/bin/env bash
# Packs the sources of another commit as .device-build/baseline, for `run.sh --baseline`: the
# device call then builds that tree's CLI beside this one and times the same kernels with both
# in the same run (ncu, --kernel-times) — an A/B on one card, since figures from different calls
# can differ by more than most kernel changes (the H200's clocks are not locked): sage2's V
# quantizer, its source unchanged but for a no-op refactor, read 28.9 µs at N 4096 in the fourth
# session of 2026-12-04 and 41.5–42.0 µs in every call of the fifth.
# Usage: bash tools/device/pack-baseline.sh [REV] (default: main)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
rev=${1:-main}
commit=$(git -C "$root" rev-parse --verify --short=12 "$rev^{commit}" 2>/dev/null) ||
  { echo "pack-baseline.sh: '$rev' is not a commit of this repository" >&2; exit 2; }
dest="$root/.device-build/baseline"
rm -rf "$dest"
mkdir -p "$dest"
git -C "$root" archive "$commit" | tar x -C "$dest" --exclude=docs --exclude=examples --exclude=tests
# Only what the CLI's build reads (run.sh configures it with ATTNSUITE_TESTS=OFF): a call carries
# 64 MiB in all, and the deps and this checkout take 60 of them.
echo "$commit" >"$dest/.baseline-commit"
echo "pack-baseline.sh: $rev ($commit) in $dest; carry .device-build/baseline and pass --baseline to run.sh"
