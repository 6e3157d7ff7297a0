#!/usr/bin/env bash
# Installs what is needed, builds, and runs every test (GPU tests skip without a GPU).
# Usage: scripts/test.sh [extra cmake args...]   (BUILD_DIR=... to build elsewhere)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${BUILD_DIR:-"$root/build"}
# CI builds with warnings as errors.
werror=OFF
[ "${CI:-}" = "true" ] && werror=ON
"$root/scripts/setup.sh" "$build" -DATTNSUITE_WERROR=$werror "$@"
ctest --test-dir "$build" --output-on-failure -j "$(nproc)"
