#!/usr/bin/env bash
# Installs what is needed, builds, and runs the default benchmark (extra arguments go to
# `attnsuite bench`, e.g. scripts/bench.sh --suite cpu-perf).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${BUILD_DIR:-"$root/build"}
"$root/scripts/setup.sh" "$build"
cd "$root"
exec "$build/attnsuite" bench "$@"
