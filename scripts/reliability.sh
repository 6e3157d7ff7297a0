#!/usr/bin/env bash
# The reliability checks that CI runs after scripts/test.sh (docs/reliability.md):
#   1. every C++ test built with AddressSanitizer + UndefinedBehaviorSanitizer (clang, CPU
#      backends, build-asan/); a sanitizer report aborts the test that caused it, so any
#      report fails the run;
#   2. a short run of each libFuzzer target (tests/fuzz) over its seed corpus.
# The Python module and the ONNX Runtime peers (which embed the interpreter) stay out of this
# build: an ASan-instrumented extension cannot be loaded by the uninstrumented python3; they are
# tested in scripts/test.sh's build. One clang build serves both: the fuzz targets need clang, and a second compiler for the
# sanitizers catches what GCC's build in scripts/test.sh does not warn about.
# Usage: scripts/reliability.sh   (BUILD_DIR=... to build elsewhere, FUZZ_SECONDS=... per target)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${BUILD_DIR:-"$root/build-asan"}
fuzz_seconds=${FUZZ_SECONDS:-15}
werror=OFF
[ "${CI:-}" = "true" ] && werror=ON

# -O1 -g1: the level the sanitizers' documentation recommends (reports keep their frames and
# lines) and a faster compile than the -O3 of the normal build.
ATTNSUITE_EXTRA_PACKAGES="clang libclang-rt-dev" "$root/scripts/setup.sh" "$build" \
  -DCMAKE_CXX_COMPILER=clang++ "-DCMAKE_CXX_FLAGS_RELEASE=-O1 -g1" -DATTNSUITE_CUDA=OFF \
  -DATTNSUITE_SANITIZE=address,undefined -DATTNSUITE_FUZZ=ON -DATTNSUITE_WERROR=$werror \
  -DATTNSUITE_PYTHON=OFF -DATTNSUITE_ONNXRUNTIME=OFF

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1}
echo "reliability: sanitizer tests (ASan + UBSan)" >&2
ctest --test-dir "$build" --output-on-failure -j "$(nproc)"

# New inputs go to a scratch directory (the first one named), never into the committed corpus.
for target in suite cli problem; do
  work=$(mktemp -d)
  log="$work/log"
  echo "reliability: fuzz_$target for ${fuzz_seconds}s" >&2
  if ! "$build/fuzz/fuzz_$target" -max_total_time="$fuzz_seconds" -print_final_stats=1 -artifact_prefix="$work/" \
      "$work" "$root/tests/fuzz/corpus/$target" >"$log" 2>&1; then
    tail -n 60 "$log" >&2
    echo "reliability: fuzz_$target found a failure; the input is in $work" >&2
    exit 1
  fi
  grep -E "stat::(number_of_executed_units|average_exec_per_sec)" "$log" | sed "s/^/fuzz_$target /" >&2
  rm -rf "$work"
done
