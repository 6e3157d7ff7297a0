#!/usr/bin/env bash
# One short device call for examples/train_llama.py on the GPU machine: only the Python module
# is built (sm_90a, no tests: 142 s with -j16 on the H100 machine, 2026-12-06), then the example
# with the arguments given (default: Llama-3.2-1B's shape in bf16 against PyTorch SDPA and its
# math backend as the calibrating curve, 12 steps):
#   run(command="bash tools/device/run-train.sh [train_llama.py arguments]",
#       carry=[".device-build/deps", ".device-build/cudnn-frontend"])
# Files in $OUT: train-llama.json, train-llama.log, configure.log, build.log. TRAIN_TIMEOUT_S
# (default 300) limits the example. The exit status is the example's (1: a loss curve outside the
# tolerance or no backward ran).
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"
out=${OUT:-$root/out/device-train}
mkdir -p "$out"
deps=$root/.device-build/deps
arch_lib=$deps/usr/lib/x86_64-linux-gnu
# pack-deps.sh compresses OpenBLAS's shared library to fit the call's 64 MiB.
for packed in "$arch_lib"/openblas-pthread/*.so.xz; do
  [ -f "$packed" ] && xz -dc "$packed" >"${packed%.xz}"
done
export LD_LIBRARY_PATH="$arch_lib:$arch_lib/openblas-pthread${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
build=$root/.device-build/build-py
start=$(date +%s)
if ! cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DATTNSUITE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a \
     -DATTNSUITE_FLASH3=ON -DATTNSUITE_TESTS=OFF -DATTNSUITE_FLASH2_VARIANTS=OFF -DCMAKE_PREFIX_PATH="$deps/usr" \
     -DCUDNN_FRONTEND_INCLUDE_DIR="$root/.device-build/cudnn-frontend/include" >"$out/configure.log" 2>&1; then
  tail -20 "$out/configure.log"
  exit 2
fi
if ! cmake --build "$build" -j 16 --target attnsuite_python_core >"$out/build.log" 2>&1; then
  grep -E "error" "$out/build.log" | head -20
  exit 2
fi
echo "build: $(( $(date +%s) - start )) s; $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1)"
py=/opt/torch/.venv/bin/python3
[ -x "$py" ] || py=$(command -v python3)
[ $# -gt 0 ] || set -- --config llama-3.2-1b --device cuda --dtype bf16 --steps 12
PYTHONPATH=$build/python timeout "${TRAIN_TIMEOUT_S:-300}" "$py" examples/train_llama.py "$@" \
  --out "$out/train-llama.json" >"$out/train-llama.log" 2>&1
status=$?
echo "train_llama: exit $status after $(( $(date +%s) - start )) s"
tail -16 "$out/train-llama.log"
exit $status
