#!/usr/bin/env bash
# One device call for the Python side on the GPU machine (no network there):
#   run(command="bash tools/device/run-python.sh",
#       carry=[".device-build/deps", ".device-build/cudnn-frontend", ".device-build/wheels"])
# (.device-build/deps and cudnn-frontend: tools/device/pack-deps.sh; wheels: pack-python.sh.)
# Steps, each under its own time limit inside one overall limit (RUN_LIMIT_S, default 560 s, so
# that one hang does not eat the call):
#   1. `pip install .` with the image's Python (torch 2.11 there) into a folder of its own, CUDA
#      on (sm_90a), against the carried host deps; if pip fails early, CMake builds the module;
#   2. the Python tests that need the GPU or torch (test_gpu.py, test_torch.py, test_module.py);
#   3. DLPack in and out of torch, cupy and jax on the GPU; 4. ONNX Runtime's CUDA EP, if the
#      installed onnxruntime has it; 5. the drop-in on a transformers Llama (random weights),
#      eager and under torch.compile, with the time left; 6. the example notebook (nbclient);
# then a short table (printed last). Files in $OUT: summary.txt, pytest.log,
# dropin-transformers.json, dlpack.json, ort.json, logs.tar.gz (pip, demo logs, steps.tsv).
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"
final=${OUT:-$root/out/device-python}
work=$(mktemp -d)
mkdir -p "$final"
start_all=$(date +%s)
deadline=$(( start_all + ${RUN_LIMIT_S:-560} ))
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
export XLA_PYTHON_CLIENT_PREALLOCATE=false  # jax would take 75% of the GPU from torch
export CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-16}
printf 'step\texit\tseconds\tdetail\n' >"$work/steps.tsv"

# run_step NAME BUDGET_S LOG COMMAND...: runs under min(budget, time left - 20 s) and records it.
run_step() {
  local name=$1 budget=$2 log=$3
  shift 3
  local left=$(( deadline - $(date +%s) - 20 ))
  [ "$budget" -gt "$left" ] && budget=$left
  if [ "$budget" -lt 10 ]; then
    echo "[$name] not run: no time left" | tee -a "$log"
    step_seconds=0
    step_status=124
    return 124
  fi
  local t0 status
  t0=$(date +%s)
  echo "[$name] (limit ${budget} s)"
  timeout --kill-after=5 "$budget" "$@" >>"$log" 2>&1
  status=$?
  local seconds=$(( $(date +%s) - t0 ))
  [ $status -eq 124 ] && echo "[$name] TIMED OUT after $seconds s" | tee -a "$log"
  step_seconds=$seconds
  step_status=$status
  return $status
}
record() {  # record NAME STATUS SECONDS DETAIL
  printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$(echo "$4" | tr '\t\n' '  ')" >>"$work/steps.tsv"
  echo "[$1] exit $2 in $3 s: $4"
}

# The image's Python is the one with torch (/opt/torch/.venv); PYTHON overrides.
py=${PYTHON:-}
[ -z "$py" ] && { [ -x /opt/torch/.venv/bin/python3 ] && py=/opt/torch/.venv/bin/python3 || py=$(command -v python3); }
echo "python: $py ($("$py" --version 2>&1)); nvidia-smi: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)"

deps="$root/.device-build/deps"
define=(-C "cmake.define.ATTNSUITE_CUDA=${DEVICE_PY_CUDA:-ON}" -C cmake.define.CMAKE_CUDA_ARCHITECTURES=90a
        -C cmake.define.ATTNSUITE_TORCH=OFF -C build.verbose=true)
if [ -d "$deps/usr" ]; then
  arch_lib="$deps/usr/lib/x86_64-linux-gnu"
  export LD_LIBRARY_PATH="$arch_lib:$arch_lib/openblas-pthread${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export CMAKE_PREFIX_PATH="$deps/usr"
  define+=(-C "cmake.define.CMAKE_PREFIX_PATH=$deps/usr")
fi
frontend="$root/.device-build/cudnn-frontend/include"
[ -d "$frontend" ] && define+=(-C "cmake.define.CUDNN_FRONTEND_INCLUDE_DIR=$frontend")
# Wheels carried for what the image lacks (pack-python.sh), on PYTHONPATH ahead of the image's.
if compgen -G "$root/.device-build/wheels/*.whl" >/dev/null; then
  "$py" -m pip install -q --no-index --no-deps --no-compile --target "$work/site" "$root"/.device-build/wheels/*.whl \
    >>"$work/pip-install.log" 2>&1 && export PYTHONPATH="$work/site"
fi

# 1. pip install . into a folder of its own (--target: the image's venv stays as it is), put
#    ahead on PYTHONPATH; the CLI lands in its bin/.
site="$work/site-attnsuite"
run_step "pip install ." "${PIP_LIMIT_S:-330}" "$work/pip-install.log" \
  "$py" -m pip install -v --no-index --no-deps --no-build-isolation --target "$site" "${define[@]}" "$root"
status=$step_status
record "pip install ." $status $step_seconds "$(grep -E 'Successfully installed|error:|Error' "$work/pip-install.log" | tail -1)"
export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
cli="$site/bin/attnsuite"
if [ $status -ne 0 ] && [ "$step_seconds" -lt 120 ]; then
  # An early failure (the build backend, not the code): the same targets through CMake.
  build="$root/.device-build/pybuild"
  run_step "cmake module build" 300 "$work/pip-install.log" bash -c "cmake -S '$root' -B '$build' -G Ninja \
    -DCMAKE_BUILD_TYPE=Release -DATTNSUITE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a -DATTNSUITE_TORCH=OFF \
    -DATTNSUITE_TESTS=OFF -DATTNSUITE_PYTHON=ON -DPython_EXECUTABLE='$py' \
    ${CMAKE_PREFIX_PATH:+-DCMAKE_PREFIX_PATH=$CMAKE_PREFIX_PATH} \
    $([ -d "$frontend" ] && echo "-DCUDNN_FRONTEND_INCLUDE_DIR=$frontend") && cmake --build '$build'"
  status=$step_status
  record "cmake module build" $status $step_seconds "fallback: PYTHONPATH=$build/python"
  export PYTHONPATH="$build/python${PYTHONPATH:+:$PYTHONPATH}"
  cli="$build/attnsuite"
fi
export ATTNSUITE_CLI=$cli

cd "$work"  # import the installed package, not the source tree
run_step "import" 60 "$work/import.log" "$py" -c "import attnsuite, json
print(attnsuite.__version__, 'cuda_build', attnsuite._core.cuda_build, attnsuite.__file__)
print(json.dumps([b['name'] for b in attnsuite.backends()]))"
record "import" $step_status $step_seconds "$(tr '\n' ' ' <"$work/import.log" | cut -c1-400)"

# 2. The tests that need the GPU or torch (CI runs the rest on the CPU).
timeout_flag=()
"$py" -c "import pytest_timeout" 2>/dev/null && timeout_flag=(--timeout 100)
run_step "pytest" 180 "$work/pytest.log" "$py" -m pytest -q -rs -p no:cacheprovider "${timeout_flag[@]}" \
  "$root/tests/python/test_gpu.py" "$root/tests/python/test_torch.py" "$root/tests/python/test_module.py"
record "pytest" $step_status $step_seconds "$(grep -E '(passed|failed|error)' "$work/pytest.log" | tail -1)"

# 3, 4. DLPack across frameworks; ONNX Runtime's CUDA EP (quick).
run_step "dlpack" 60 "$work/demo.log" "$py" "$root/tools/device/python_gpu_demo.py" dlpack "$work/dlpack.json"
record "dlpack" $step_status $step_seconds ""
run_step "ort" 60 "$work/demo.log" "$py" "$root/tools/device/python_gpu_demo.py" ort "$work/ort.json"
record "ort" $step_status $step_seconds ""

# 5. The drop-in on a transformers Llama: eager, then torch.compile (JSON saved after each);
#    last, with the time that is left (three compiles of the model).
run_step "drop-in" 300 "$work/dropin.log" "$py" "$root/examples/dropin_transformers.py" --compile --layers 2 \
  --reps 5 --out "$work/dropin-transformers.json"
record "drop-in" $step_status $step_seconds "$(grep -E 'logits_rel_l2|ok:' "$work/dropin.log" | tr '\n' ' ' | tr -s ' ')"

# 6. The example notebook, headless, as CI runs it on the CPU (tests/python/test_notebook.py),
#    with its runner's wheels (pack-python.sh: wheels/notebook) ahead on PYTHONPATH for this
#    step only.
if compgen -G "$root/.device-build/wheels/notebook/*.whl" >/dev/null &&
   "$py" -m pip install -q --no-index --no-deps --no-compile --target "$work/site-notebook" \
     "$root"/.device-build/wheels/notebook/*.whl >>"$work/notebook.log" 2>&1; then
  run_step "notebook" 240 "$work/notebook.log" env PYTHONPATH="$work/site-notebook:$PYTHONPATH" \
    JUPYTER_PLATFORM_DIRS=1 "$py" -m pytest -q -rs -p no:cacheprovider "$root/tests/python/test_notebook.py"
  record "notebook" $step_status $step_seconds "$(grep -E '(passed|failed|error|skipped)' "$work/notebook.log" | tail -1)"
else
  record "notebook" 1 0 "no notebook wheels (run tools/device/pack-python.sh here) or they did not install"
fi

"$py" "$root/tools/device/python_gpu_demo.py" table "$work" >"$work/summary.txt" 2>&1
echo "total: $(( $(date +%s) - start_all )) s" >>"$work/summary.txt"
for f in summary.txt pytest.log dropin-transformers.json dlpack.json ort.json notebook.log; do
  [ -f "$work/$f" ] && cp "$work/$f" "$final/$f"
done
tar czf "$final/logs.tar.gz" -C "$work" --exclude=./site --exclude=./site-attnsuite . 2>/dev/null
echo
echo "--- pytest (last lines) ---"
tail -15 "$work/pytest.log" 2>/dev/null
cat "$work/summary.txt"
exit 0
