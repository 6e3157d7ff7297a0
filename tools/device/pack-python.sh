#!/usr/bin/env bash
# Run HERE, not on the GPU machine (it has no network): downloads the wheels the Python side
# needs there into .device-build/wheels (ignored by git), for the GPU image's Python:
#   tools/device/pack-python.sh 3.12        # the X.Y of `python3 --version` on the GPU machine
# Then one device call, with .device-build/deps and .device-build/wheels carried:
#   run(command="bash tools/device/run-python.sh", carry=[".device-build/deps", ".device-build/wheels"])
# torch is not packed: the GPU image has it (run-python.sh uses a venv that sees it).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
version=${1:?usage: tools/device/pack-python.sh PYTHON_X.Y (the GPU machine python3 version)}
dest="$root/.device-build/wheels"
rm -rf "$dest"
mkdir -p "$dest"
# Pins of python/requirements.txt, but onnxruntime-gpu (the CUDA EP) for onnxruntime, plus
# transformers for examples/dropin_transformers.py; their dependencies are resolved for the
# target Python. numpy and torch come from the image when it has them (pip takes those first).
grep -v '^#' "$root/python/requirements.txt" | grep -v '^onnxruntime==' | grep -v '^$' >"$dest/requirements.txt"
printf 'onnxruntime-gpu\ntransformers\n' >>"$dest/requirements.txt"
python3 -m pip download -q --only-binary=:all: --python-version "$version" --platform manylinux_2_28_x86_64 \
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform linux_x86_64 \
  -r "$dest/requirements.txt" -d "$dest"
# onnxruntime-gpu pulls nothing large; the CUDA libraries it loads are the image's.
du -sh "$dest"
