#!/usr/bin/env bash
# One device call for the Python side on the GPU machine (see pack-python.sh for the carry):
# a venv that sees the image's torch, the wheels from .device-build/wheels, `pip install .`
# (CUDA on, against the carried host deps), the Python tests (GPU ones included), the
# transformers drop-in demo (eager and torch.compile), and an ONNX Runtime CUDA EP sweep.
# Result files go to $OUT: pytest.log, dropin-transformers.json, onnxruntime-cuda/.
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"
final=${OUT:-$root/out/device-python}
mkdir -p "$final"
deps="$root/.device-build/deps"
wheels="$root/.device-build/wheels"
[ -d "$wheels" ] || { echo "run-python.sh: no $wheels; run tools/device/pack-python.sh X.Y here first" >&2; exit 2; }
export NCCL_NVLS_ENABLE=0
if [ -d "$deps/usr" ]; then
  arch_lib="$deps/usr/lib/x86_64-linux-gnu"
  export LD_LIBRARY_PATH="$arch_lib:$arch_lib/openblas-pthread${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export CMAKE_PREFIX_PATH="$deps/usr"
fi
venv="$root/.device-build/venv"
python3 -m venv --system-site-packages "$venv"
py="$venv/bin/python"
"$py" -m pip install -q --no-index --find-links "$wheels" -r "$wheels/requirements.txt" 2>&1 | tail -3
start=$(date +%s)
"$py" -m pip install -q --no-index --no-build-isolation . -C cmake.define.ATTNSUITE_CUDA=ON \
  -C "cmake.define.CMAKE_CUDA_ARCHITECTURES=90a;80" -C build.verbose=false >"$final/pip-install.log" 2>&1
echo "pip install .: exit $? in $(( $(date +%s) - start )) s"
cd /tmp  # import the installed package, not the source tree
"$py" -c "import attnsuite, json; print(attnsuite.__version__, 'cuda_build', attnsuite._core.cuda_build); print(json.dumps([b['name'] for b in attnsuite.backends()]))"
"$py" -m pytest -q -rs -p no:cacheprovider "$root/tests/python" >"$final/pytest.log" 2>&1
echo "pytest: exit $?; $(tail -1 "$final/pytest.log")"
"$py" "$root/examples/dropin_transformers.py" --compile --out "$final/dropin-transformers.json" 2>&1 | tail -20
"$venv/bin/attnsuite" bench -b onnxruntime-cuda,onnxruntime-cuda-decomposed,cudnn,flash2 --model headline --dtype fp16 \
  --batch 8 --seq 1024,4096 --out "$final/onnxruntime-cuda" --force -q 2>&1 | tail -15
