#!/usr/bin/env bash
# Run HERE, not on the GPU machine (it has no network): downloads into .device-build/wheels
# (ignored by git) the wheels that tools/device/run-python.sh installs there ahead of the
# image's packages. The image already has torch 2.11, numpy, nanobind 3.1.0, onnx, onnxruntime,
# pytest (+ pytest-timeout), pandas, matplotlib, transformers, cupy and jax
# (/work/.library/device/KINDS.md); what it may lack is the build backend at the version
# pyproject.toml is tested with, scikit-build-core (pure Python, 0.2 MB; its needs, packaging
# and pathspec, are in the image). More names, as NAME==VERSION, may follow:
#   tools/device/pack-python.sh [NAME==VERSION ...]
# The device call then carries .device-build/wheels (with deps and cudnn-frontend):
#   run(command="bash tools/device/run-python.sh",
#       carry=[".device-build/deps", ".device-build/cudnn-frontend", ".device-build/wheels"])
# onnxruntime-gpu (the CUDA EP) is not packed: its wheel (~250 MB) is over the 64 MiB a call
# carries; run-python.sh reports whether the image's onnxruntime has the CUDA EP.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
dest="$root/.device-build/wheels"
rm -rf "$dest"
mkdir -p "$dest"
pin=$(grep -E '^scikit-build-core==' "$root/python/requirements.txt")
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  --platform any -d "$dest" "$pin" "$@"
ls -la "$dest"
du -sh "$dest"
# The notebook's runner (nbclient, nbformat, ipykernel at python/requirements.txt's pins) and what
# they need, into wheels/notebook/: run-python.sh installs them apart, for its notebook step only.
# Left out: packages the image has for torch/pandas (packaging, typing_extensions, dateutil,
# tzdata), so that the step cannot shadow those with other versions. ~17 MB.
nb="$dest/notebook"
mkdir -p "$nb"
python3 -m pip download -q --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  --platform any -d "$nb" $(grep -E '^(nbclient|nbformat|ipykernel)==' "$root/python/requirements.txt")
rm -f "$nb"/packaging-*.whl "$nb"/typing_extensions-*.whl "$nb"/python_dateutil-*.whl "$nb"/tzdata-*.whl
ls "$nb" | wc -l
du -sh "$dest"
