#!/usr/bin/env bash
# Run HERE, not on the GPU machine (it reaches no registry): downloads the peer SageAttention
# (PyPI `sageattention` 1.0.6, its Triton implementation: a pure-Python wheel, no
# dependencies beyond the torch and triton of the GPU image) into .whl/ (ignored by git):
#   tools/device/pack-sage.sh [PYTHON_X.Y]     # the GPU machine's python3 version, default 3.12
# Then one device call with .whl carried, e.g.
#   run(carry=[".whl", ...], command="python3 -m pip install -q --no-index --no-deps --no-compile \
#       --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site && \
#       python3 tools/peers/sageattention_runner.py --suite bench/suites/sage.json --out $OUT/sage-peer.jsonl")
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
version=${1:-3.12}
dest="$root/.whl"
mkdir -p "$dest"
rm -f "$dest"/sageattention-*
if ! python3 -m pip download -q --no-deps --only-binary=:all: --python-version "$version" --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d "$dest" sageattention==1.0.6; then
  # No wheel for the target: build one here from the sdist (pure Python, so it runs there).
  python3 -m pip wheel -q --no-deps -w "$dest" sageattention==1.0.6
fi
ls -l "$dest"/sageattention-*
