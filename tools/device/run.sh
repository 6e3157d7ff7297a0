#!/usr/bin/env bash
# The one command for a GPU-machine call: configure + build (Release, CUDA archs 90a;80, ninja,
# -j16), the GPU tests, compute-sanitizer on small cases of our kernels, then the benchmark
# suites through the harness itself (`attnsuite bench`), logs and result files under $OUT, and a
# short table last. Installs nothing: the GPU image lacks the Debian -dev packages the host code
# builds against, so run tools/device/pack-deps.sh here once and carry them:
#   run(command="bash tools/device/run.sh", carry=[".device-build/deps", ".device-build/cudnn-frontend"])
# Options: --no-tests, --no-sanitize, --no-bench, --suites=a,b (default: headline,fa3-grid; a@label runs
#   suite a again with BENCH_ARGS_a_label),
#   --variants: also build the experimental flash2 configurations (flash2-x-*) and time them
#   against flash2 and torch-flash on part of the fa3-grid (bench-variants.md).
#   --tune (also `attnsuite tune --batch --exhaustive` on the headline suite, batches 1..64 or
#   TUNE_MAX_BATCH: every probe makes new inputs on the host, so the sweep's cost grows with the
#   sum of its batches).
#   --tune-kernels (`attnsuite tune --kernels` on the kernel-tune suite into a fresh cache, then
#   the same suite benched with that cache: rows name the configuration that ran).
#   --sage-peer: also time the peer SageAttention 1.0.6 (wheel from tools/device/pack-sage.sh,
#   carried as .whl) on the sage suite with tools/peers/sageattention_runner.py, and, when the
#   sage suite ran too, a Markdown report of both (sage-with-peer.md).
#   --notebook: the example notebook (tests/python/test_notebook.py) headless on this GPU with the
#   in-tree module of this build (<build>/python) and the runner's wheels from
#   tools/device/pack-python.sh, carried as .device-build/wheels/notebook.
#   --tune-kernels-backends=a,b (default flash2,flash3): the backends `tune --kernels` tries.
#   --py-peer-probe: which backends survive `attnsuite.bench` inside a Python process
#   (tools/device/python_peer_probe.py, each in a child interpreter) -> py-peer-probe.md.
#   --tune-sparse: times `attnsuite tune --sparse` for one 32-head d128 layer at N = 8192 (banded),
#   before the suites; with TUNE_SPARSE_BENCH_ARGS a second tune whose config the sparge suite uses.
#   --kernel-times: each CUDA kernel of a forward timed apart by Nsight Compute (ncu,
#   gpu__time_duration, clocks not locked) on `attnsuite bench $KERNEL_TIMES_ARGS` per backend of
#   KERNEL_TIMES_BACKENDS (an entry NAME:KEY=VALUE adds that backend option) and N of KERNEL_TIMES_SEQ (default: the sage suite's d128 randn dense
#   case, sage sage2 flash3 cudnn, N 4096 16384) -> kernel-times.md (tools/device/kernel_times.py:
#   per backend and N, each kernel's median µs per launch, launches per forward, share).
#   Env SAGE_PEER_SUITE: another suite file for --sage-peer (default bench/suites/sage.json).
#   --profile: Nsight Compute's full set (--set full: speed of light, warp stall reasons, pipe and
#   issue-slot use, instruction mix) on one launch of the kernel matching PROFILE_KERNEL (a regex,
#   default: our forward attention kernels; a backward wants e.g.
#   PROFILE_KERNEL='flash3_backward_kernel|flash_bprop', flash3's and cuDNN's) per backend of PROFILE_BACKENDS (default sage), N PROFILE_SEQ
#   (default 4096), the case of PROFILE_ARGS (default KERNEL_TIMES_ARGS), per head dim of
#   PROFILE_HEAD_DIMS if set; with --baseline the baseline's too ->
#   profile-<backend>[@commit][-d<dim>].txt (ncu's details page).
#   --baseline: also build the CLI of the tree tools/device/pack-baseline.sh packed (carried as
#   .device-build/baseline) and, with --kernel-times, time KERNEL_TIMES_BASELINE_BACKENDS (default:
#   KERNEL_TIMES_BACKENDS) with it too, as `<backend>@<commit>` rows of the same table and a second
#   table of this / baseline ratios (kernel_times.py): an A/B in one run on one card.
# Env SANITIZE_FILTER (a gtest filter) replaces the compute-sanitizer case list; SANITIZE_TOOLS the tools
#   (e.g. "memcheck,racecheck").
# Env ATTNSUITE_GIT_COMMIT (e.g. "$(git rev-parse --short=12 HEAD)", given on the command line
#   from the checkout that sent the call) is the commit result headers name: this copy's .git is stale.
# Env BENCH_ARGS_<suite> (dashes as underscores) adds bench flags to that suite, e.g.
#   BENCH_ARGS_sage='--seq 4096,16384 --backends sage,sage2,flash3,cudnn'.
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"
# Everything is written to a scratch folder; at the end the result files and one archive of the
# logs go to $OUT (a device call brings back at most 8 files).
final=${OUT:-$root/out/device}
out=$(mktemp -d)
mkdir -p "$final"
res="$out/results"  # result files; packed into $final/results.tar.gz (a call brings back at most 8 files)
mkdir -p "$res"
# The call's limit (600 s) kills the script without warning: every 20 s the logs and results so
# far are packed into $final/partial.tar.gz, and each step is skipped, or its timeout cut, when
# less than DEADLINE_S (default 575 s from the start) remains. Progress lines go to stdout.
t0=$(date +%s)
deadline=${DEADLINE_S:-575}
left() { echo $(( deadline - ($(date +%s) - t0) )); }
cap() { local l; l=$(( $(left) - 10 )); [ "$l" -lt "$1" ] && echo $(( l > 1 ? l : 1 )) || echo "$1"; }
step() { echo "[+$(( $(date +%s) - t0 )) s] $*"; }
( while sleep 20; do
    tar czf "$final/partial.tmp" -C "$out" --exclude='results.jsonl' . 2>/dev/null && mv -f "$final/partial.tmp" "$final/partial.tar.gz"
  done ) >/dev/null 2>&1 &
snapshot=$!
trap 'kill "$snapshot" 2>/dev/null' EXIT
build="$root/.device-build/build"
deps="$root/.device-build/deps"
run_tests=1 run_bench=1 run_sanitize=1 run_variants=0 run_tune=0 run_tune_kernels=0 run_sage_peer=0 run_notebook=0 run_py_probe=0 run_tune_sparse=0 run_kernel_times=0 run_baseline=0 run_profile=0
suites="headline,fa3-grid" tune_kernel_backends="flash2,flash3"
for arg in "$@"; do
  case "$arg" in
    --no-tests) run_tests=0 ;;
    --no-bench) run_bench=0 ;;
    --no-sanitize) run_sanitize=0 ;;
    --suites=*) suites=${arg#--suites=} ;;
    --variants) run_variants=1 ;;
    --tune) run_tune=1 ;;
    --tune-kernels) run_tune_kernels=1 ;;
    --sage-peer) run_sage_peer=1 ;;
    --notebook) run_notebook=1 ;;
    --py-peer-probe) run_py_probe=1 ;;
    --tune-sparse) run_tune_sparse=1 ;;
    --kernel-times) run_kernel_times=1 ;;
    --baseline) run_baseline=1 ;;
    --profile) run_profile=1 ;;
    --tune-kernels-backends=*) tune_kernel_backends=${arg#--tune-kernels-backends=} ;;
    *) echo "run.sh: unknown option $arg (allowed: --no-tests, --no-sanitize, --no-bench, --suites=a,b, --variants, --tune, --tune-kernels, --tune-kernels-backends=a,b, --sage-peer, --notebook, --py-peer-probe, --tune-sparse, --kernel-times, --baseline, --profile)" >&2; exit 2 ;;
  esac
done
declare -a summary
export NCCL_NVLS_ENABLE=0

{
  echo "## $(date -u)"; nvidia-smi; nvcc --version; cmake --version; ninja --version
  c++ --version; cat /etc/os-release; python3 -c 'import torch; print("torch", torch.__version__)'
} >"$out/env.txt" 2>&1
summary+=("gpu: $(nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader 2>/dev/null | head -1)")

# DEVICE_CUDA_ARCHS (default "90a;80") narrows the build, e.g. to 90a for a benchmark-only call; with
# --no-tests and --no-sanitize the tests are not built (184 s -> less on a fresh H100 machine).
cmake_args=(-DCMAKE_BUILD_TYPE=Release -DATTNSUITE_CUDA=ON "-DCMAKE_CUDA_ARCHITECTURES=${DEVICE_CUDA_ARCHS:-90a;80}"
            -DATTNSUITE_FLASH2_VARIANTS=$([ $run_variants = 1 ] && echo ON || echo OFF)
            -DATTNSUITE_FLASH3=ON)
[ $run_tests = 0 ] && [ $run_sanitize = 0 ] && cmake_args+=(-DATTNSUITE_TESTS=OFF)
if [ -d "$deps/usr" ]; then
  arch_lib="$deps/usr/lib/x86_64-linux-gnu"
  # pack-deps.sh compresses OpenBLAS's shared library to fit the call's 64 MiB.
  for packed in "$arch_lib"/openblas-pthread/*.so.xz; do
    [ -f "$packed" ] && { xz -dc "$packed" >"${packed%.xz}" || python3 -c 'import lzma,sys; open(sys.argv[2],"wb").write(lzma.open(sys.argv[1]).read())' "$packed" "${packed%.xz}"; }
  done
  cmake_args+=("-DCMAKE_PREFIX_PATH=$deps/usr")
  # OpenBLAS's own dependencies (libgfortran, libquadmath) are not on the binaries' RUNPATH.
  export LD_LIBRARY_PATH="$arch_lib:$arch_lib/openblas-pthread${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi

[ -d "$root/.device-build/cudnn-frontend/include" ] &&
  cmake_args+=("-DCUDNN_FRONTEND_INCLUDE_DIR=$root/.device-build/cudnn-frontend/include")
step build
start=$(date +%s)
if cmake -S "$root" -B "$build" -G Ninja "${cmake_args[@]}" >"$out/configure.log" 2>&1 &&
   cmake --build "$build" -j 16 >"$out/build.log" 2>&1; then
  summary+=("build: ok in $(( $(date +%s) - start )) s (configure + build, -j16)")
else
  summary+=("build: FAILED after $(( $(date +%s) - start )) s; see configure.log / build.log")
  grep -E "error|Error|FAILED" "$out/configure.log" "$out/build.log" | head -30
  printf '%s\n' "${summary[@]}"
  tar czf "$final/logs.tar.gz" -C "$out" . 2>/dev/null
  exit 1
fi
grep -E "attnsuite: " "$out/configure.log" | while read -r line; do echo "$line"; done >"$out/features.txt"
summary+=("features: $(tr '\n' ';' <"$out/features.txt")")
tests="$build/tests/cpp/attnsuite_tests"
cli="$build/attnsuite"
# The case --kernel-times and --profile time (KERNEL_TIMES_ARGS; default the sage suite's d128
# randn dense case).
read -r -a kt_args <<<"${KERNEL_TIMES_ARGS:---suite sage --head-dim 128 --causal false --generator randn}"
baseline_cli=""
# "cli|label" for this build and, with --baseline, the baseline's (label backend@commit).
clis_for() {
  echo "$cli|$1"
  [ -n "$baseline_cli" ] && echo "$baseline_cli|$1@$base_commit"
}
if [ $run_baseline = 1 ]; then
  base_src="$root/.device-build/baseline"
  if [ -f "$base_src/.baseline-commit" ]; then
    base_commit=$(cat "$base_src/.baseline-commit")
    start=$(date +%s)
    step "build baseline $base_commit (CLI only)"
    if cmake -S "$base_src" -B "$root/.device-build/build-baseline" -G Ninja "${cmake_args[@]}" -DATTNSUITE_TESTS=OFF >"$out/configure-baseline.log" 2>&1 &&
       timeout "$(cap 400)" cmake --build "$root/.device-build/build-baseline" -j 16 --target attnsuite_cli >"$out/build-baseline.log" 2>&1; then
      baseline_cli="$root/.device-build/build-baseline/attnsuite"
      summary+=("baseline $base_commit: CLI built in $(( $(date +%s) - start )) s")
    else
      summary+=("baseline $base_commit: build FAILED; see configure-baseline.log / build-baseline.log")
    fi
  else
    summary+=("baseline: none packed (run tools/device/pack-baseline.sh REV here, carry .device-build/baseline)")
  fi
fi

if [ $run_tests = 1 ]; then
  start=$(date +%s)
  # A kernel that hangs (a pipeline barrier never completing) must not eat the whole call.
  # TEST_FILTER (a gtest filter) narrows the run, e.g. to leave out the CPU-only suites that CI
  # runs anyway when the device time is short: TEST_FILTER='-Cli.*:BadInputs.Existing*'.
  step "tests (${TEST_FILTER:-all})"
  timeout "$(cap "${TEST_TIMEOUT_S:-420}")" "$tests" --gtest_filter="${TEST_FILTER:-*}" --gtest_output="xml:$out/gtest.xml" \
    >"$out/tests.log" 2>&1
  status=$?
  summary+=("tests (${TEST_FILTER:-all}, GPU included): $(grep -E '^\[  (PASSED|FAILED|SKIPPED) +\] [0-9]+ test' "$out/tests.log" | tr '\n' ' ')exit $status, $(( $(date +%s) - start )) s")
  grep -E "^\[  FAILED|Failure" -A4 "$out/tests.log" | head -40
  # TEST_FILTER_LATE: tests of a kernel that may hang, run apart after the others, under their
  # own timeout (TEST_LATE_TIMEOUT_S, default 240 s), so a hang loses only them. (90 s until
  # 2026-12-04: CudaFlash3.EveryKernelConfigMatchesTheReference alone takes 119 s on the H200,
  # and a 90 s cut of it read as a failure, "exit 124", in the sixth session's first call.)
  if [ -n "${TEST_FILTER_LATE:-}" ]; then
    step "late tests ($TEST_FILTER_LATE)"
    timeout "$(cap "${TEST_LATE_TIMEOUT_S:-240}")" "$tests" --gtest_filter="$TEST_FILTER_LATE" >"$out/tests-late.log" 2>&1
    status=$?
    summary+=("late tests ($TEST_FILTER_LATE): $(grep -E '^\[  (PASSED|FAILED|SKIPPED) +\] [0-9]+ test' "$out/tests-late.log" | tr '\n' ' ')exit $status")
    grep -E "^\[  FAILED|Failure" -A4 "$out/tests-late.log" | head -20
  fi
fi

if [ $run_sanitize = 1 ] && command -v compute-sanitizer >/dev/null; then
  # Every kernel of ours on small shapes: flash2 and the vanilla softmax (causal, Nq != Nk,
  # odd lengths), the input generator, the poison fill; flash3-fp8's quantization pre-pass and
  # kernel (causal GQA d128/d64, 8 K/V tiles; padded strides).
  filter='Cuda/CudaBackendTest.CausalWithDifferentQueryAndKeyLengths/*:CudaContext.GeneratesInputsBitwiseEqualToTheHost'
  filter+=':CudaFlash3Fp8.Deterministic:CudaFlash3Fp8.PaddedStridesReadLikeDenseOnes'
  # sage/sage2 and their quantizers (causal, Nq != Nk); flash2's alternative configurations.
  # On the H200 SageTest runs the default (wgmma) kernels; SageBackends.EveryKernelConfig* the
  # mma ones as well.
  filter+=':Cuda/SageTest.CausalWithDifferentQueryAndKeyLengths/*:SageQuantKernels.*'
  filter+=':SageBackends.EveryKernelConfigMatchesTheReference'
  filter+=':CudaFlash2.EveryKernelConfigMatchesTheReference:CudaFlash3.Deterministic'
  # sparge's predictor and block-sparse kernel.
  filter+=':SparseGpu.*'
  # ring's merge/init/round kernels and its NCCL exchange (issue 10; one GPU: a ring of one).
  filter+=':CudaRing.OneGpuRunsARingOfOne:CudaRing.ResidentInputsRepeatTheFirstOutput'
  # flash3's m192 (d64, three consumer warpgroups) and n176 (d128, 176-key tiles) configurations.
  filter+=':CudaFlash3.M192SmallCases:CudaFlash3.N176SmallCases'
  # flash3's persistent CTAs (several work tiles per CTA, some without a key).
  filter+=':CudaFlash3.PersistentSmallCases:CudaFlash3.LongestFirstSmallCases:CudaFlash3.PairedSmallCases:CudaFlash3.N80SmallCases'
  # flash3-fp8's persistent schedules (forward_order=persistent).
  filter+=':CudaFlash3Fp8.PersistentSmallCases'
  # The backward kernels (flash2's both dQ modes, flash3's): partial key and query tiles, causal
  # with seq_q != seq_kv, GQA, a window.
  filter+=':CudaFlash2Backward.SmallCasesForSanitizers:CudaFlash3Backward.SmallCasesForSanitizers'
  filter+="${SANITIZE_EXTRA_FILTER:-}"
  # SANITIZE_FILTER replaces the whole list, e.g. with only the kernels changed since the last clean run.
  filter=${SANITIZE_FILTER:-$filter}
  # initcheck leaves out cuda-vanilla: it reports every read of the scores that cuBLAS's GEMM
  # wrote (444,344 reports on the H200, cuBLAS 13; memcheck is clean and the values match the
  # reference), i.e. it does not see cuBLAS's writes — no kernel of ours is involved.
  # memcheck runs with --report-api-errors no: NCCL's communicator set-up (ring) probes its own
  # kernels with cudaFuncGetAttributes, gets cudaErrorNoKernelImageForDevice for images it does not
  # ship and handles it (4 such reports on the H200, 2026-12-04, the test passing); an API error of
  # ours is never silent anyway — every CUDA call is checked and throws, failing the test.
  # SANITIZE_TOOLS (default all four; spaces or commas between) narrows the tools, e.g. to re-run one.
  sanitize_tools=${SANITIZE_TOOLS:-memcheck racecheck synccheck initcheck}
  for tool in ${sanitize_tools//,/ }; do
    tool_filter=$filter
    tool_args=()
    [ "$tool" = initcheck ] && tool_filter="$filter-*/vanilla"
    [ "$tool" = memcheck ] && tool_args=(--report-api-errors no)
    step "compute-sanitizer $tool"
    timeout "$(cap 120)" compute-sanitizer --tool "$tool" "${tool_args[@]}" --error-exitcode 3 "$tests" \
      --gtest_filter="$tool_filter" >"$out/sanitize-$tool.log" 2>&1
    status=$?
    summary+=("compute-sanitizer $tool (our kernels, small cases): exit $status; $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$out/sanitize-$tool.log" | tail -1)")
  done
fi

# The notebook before the benchmarks: it is short, and a call that runs out of time loses the last steps.
if [ $run_notebook = 1 ]; then
  start=$(date +%s)
  py=/opt/torch/.venv/bin/python3
  [ -x "$py" ] || py=$(command -v python3)
  if compgen -G "$root/.device-build/wheels/notebook/*.whl" >/dev/null &&
     "$py" -m pip install -q --no-index --no-deps --no-compile --target /tmp/site-notebook \
       "$root"/.device-build/wheels/notebook/*.whl >"$out/notebook.log" 2>&1; then
    (cd "$build" && PYTHONPATH="$build/python:/tmp/site-notebook" ATTNSUITE_CLI="$cli" JUPYTER_PLATFORM_DIRS=1 \
       PYTHONDONTWRITEBYTECODE=1 timeout "$(cap "${NOTEBOOK_TIMEOUT_S:-300}")" "$py" -m pytest -q -rs -p no:cacheprovider \
       "$root/tests/python/test_notebook.py") >>"$out/notebook.log" 2>&1
    status=$?
    cp "$out/notebook.log" "$res/notebook.log"
    summary+=("notebook (GPU, in-tree module): exit $status in $(( $(date +%s) - start )) s; $(grep -E '(passed|failed|error)' "$out/notebook.log" | tail -1)")
  else
    summary+=("notebook: no runner wheels (run tools/device/pack-python.sh here, carry .device-build/wheels/notebook)")
  fi
fi
if [ $run_tune_sparse = 1 ]; then
  start=$(date +%s)
  step "tune --sparse"
  timeout "$(cap 300)" "$cli" tune --sparse -b sparge --seq 8192 --heads 32 --head-dim 128 --dtype bf16 --generator banded \
    --sparse-out "$out/sparge-tuned-8k.json" --out "$out/tune-sparse" --force >"$out/tune-sparse.txt" 2>&1
  status=$?
  cp "$out/sparge-tuned-8k.json" "$res/sparge-tuned-8k.json" 2>/dev/null
  summary+=("tune --sparse (one 32-head d128 layer, N 8192, banded): exit $status in $(( $(date +%s) - start )) s wall")
  # TUNE_SPARSE_BENCH_ARGS (e.g. '--seq 16384 --generator banded,clustered,sinks'): a second
  # tune of the same layer whose config the sparge suite then runs with (--sparse-config).
  if [ -n "${TUNE_SPARSE_BENCH_ARGS:-}" ]; then
    start=$(date +%s)
    read -r -a tsb_args <<<"$TUNE_SPARSE_BENCH_ARGS"
    step "tune --sparse for the sparge suite ($TUNE_SPARSE_BENCH_ARGS)"
    timeout "$(cap 300)" "$cli" tune --sparse -b sparge --heads 32 --head-dim 128 --dtype bf16 "${tsb_args[@]}" \
      --sparse-out "$out/sparge-tuned.json" --out "$out/tune-sparse-bench" --force >"$out/tune-sparse-bench.txt" 2>&1
    status=$?
    cp "$out/sparge-tuned.json" "$res/sparge-tuned.json" 2>/dev/null
    cp "$out/tune-sparse-bench.txt" "$res/tune-sparse-bench.txt" 2>/dev/null
    summary+=("tune --sparse for the sparge suite ($TUNE_SPARSE_BENCH_ARGS): exit $status in $(( $(date +%s) - start )) s wall")
  fi
fi
if [ $run_bench = 1 ]; then
  "$cli" info >"$out/info.txt" 2>&1
  IFS=',' read -r -a suite_list <<<"$suites"
  # A suite given as NAME@LABEL runs NAME again under its own result names with the flags of
  # BENCH_ARGS_<NAME>_<LABEL> (an A/B of options on the same card, e.g. fa3-grid-bwd@tile128).
  for run_name in "${suite_list[@]}"; do
    start=$(date +%s)
    suite=${run_name%%@*}
    extra_var="BENCH_ARGS_${run_name//[-@]/_}"
    read -r -a extra_args <<<"${!extra_var:-}"
    # The sparge suite runs with the config tuned above on this GPU, where there is one.
    [ "$suite" = sparge ] && [ -f "$out/sparge-tuned.json" ] && extra_args+=(--sparse-config "$out/sparge-tuned.json")
    step "bench $run_name"
    timeout "$(cap 600)" "$cli" bench --suite "$suite" "${extra_args[@]}" --out "$out/bench-$run_name" --force >"$out/bench-$run_name.txt" 2>"$out/bench-$run_name.log"
    status=$?
    cp "$out/bench-$run_name/results.json" "$res/$run_name.json" 2>/dev/null
    cp "$out/bench-$run_name/summary.md" "$res/$run_name.md" 2>/dev/null
    # A sweep cut by the deadline (SIGTERM: it stops, keeps its finished rows in results.jsonl for
    # --resume, writes no results.json): those rows come back as <suite>.partial.jsonl and .md.
    if [ ! -f "$out/bench-$run_name/results.json" ] && [ -s "$out/bench-$run_name/results.jsonl" ]; then
      cp "$out/bench-$run_name/results.jsonl" "$res/$run_name.partial.jsonl"
      "$cli" report "$res/$run_name.partial.jsonl" --markdown "$res/$run_name.partial.md" >/dev/null 2>&1
    fi
    summary+=("bench $run_name ${!extra_var:-}: exit $status in $(( $(date +%s) - start )) s")
  done
fi
if [ $run_variants = 1 ]; then
  variants=$("$cli" list 2>/dev/null | grep -o 'flash2-x-[a-z0-9-]*' | sort -u | paste -sd, -)
  start=$(date +%s)
  "$cli" bench --suite fa3-grid --backends "torch-flash,flash2,$variants" --seq 1024,4096,16384 \
    --out "$out/bench-variants" --force >"$out/bench-variants.txt" 2>"$out/bench-variants.log"
  status=$?
  cp "$out/bench-variants/results.json" "$res/variants.json" 2>/dev/null
  cp "$out/bench-variants/summary.md" "$res/variants.md" 2>/dev/null
  summary+=("bench variants ($variants): exit $status in $(( $(date +%s) - start )) s")
fi
if [ $run_tune = 1 ]; then
  start=$(date +%s)
  step "tune --batch headline"
  timeout "$(cap 600)" "$cli" tune --batch --suite headline --exhaustive --max-batch "${TUNE_MAX_BATCH:-64}" --max-time-ms 200 \
    --out "$out/tune-headline" --force >"$out/tune-headline.txt" 2>"$out/tune-headline.log"
  status=$?
  cp "$out/tune-headline/tune.json" "$res/tune-headline.json" 2>/dev/null
  cp "$out/tune-headline/tune.md" "$res/tune-headline.md" 2>/dev/null
  summary+=("tune headline (exhaustive check): exit $status in $(( $(date +%s) - start )) s")
fi
if [ $run_tune_kernels = 1 ]; then
  start=$(date +%s)
  step "tune --kernels"
  # TUNE_KERNELS_SUITE / TUNE_KERNELS_ARGS: another suite, or bench overrides (e.g. --head-dim 64).
  read -r -a tk_args <<<"${TUNE_KERNELS_ARGS:-}"
  timeout "$(cap 600)" "$cli" tune --kernels --suite "${TUNE_KERNELS_SUITE:-kernel-tune}" "${tk_args[@]}" --backends "$tune_kernel_backends" --kernel-cache "$out/kernel-configs.json" \
    --out "$out/tune-kernels" --force >"$out/tune-kernels.txt" 2>"$out/tune-kernels.log"
  status=$?
  # Then the tuned suite benched through that cache (rows name the configuration that ran); with
  # TUNE_KERNELS_SUITE, TUNE_KERNELS_BENCH_ARGS narrows that bench (e.g. --head-dim 64 --backends cudnn,flash3).
  read -r -a tkb_args <<<"${TUNE_KERNELS_BENCH_ARGS:-}"
  step "bench ${TUNE_KERNELS_SUITE:-kernel-tune} through the tuned cache"
  ATTNSUITE_KERNEL_CACHE="$out/kernel-configs.json" timeout "$(cap 600)" "$cli" bench --suite "${TUNE_KERNELS_SUITE:-kernel-tune}" \
    "${tkb_args[@]}" --out "$out/bench-kernel-tune" --force >"$out/bench-kernel-tune.txt" 2>"$out/bench-kernel-tune.log"
  cp "$out/kernel-configs.json" "$res/kernel-configs.json" 2>/dev/null
  cp "$out/tune-kernels/tune.md" "$res/tune-kernels.md" 2>/dev/null
  cp "$out/bench-kernel-tune/results.json" "$res/kernel-tune.json" 2>/dev/null
  summary+=("tune --kernels (kernel-tune suite, $tune_kernel_backends): exit $status in $(( $(date +%s) - start )) s")
fi
if [ $run_sage_peer = 1 ]; then
  start=$(date +%s)
  if python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site-sage \
       "$root"/.whl/sageattention-*.whl >"$out/sage-peer-install.log" 2>&1; then
    PYTHONPATH=/tmp/site-sage${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 timeout "${SAGE_PEER_TIMEOUT_S:-300}" \
      python3 "$root/tools/peers/sageattention_runner.py" --suite "${SAGE_PEER_SUITE:-$root/bench/suites/sage.json}" \
      --out "$res/sage-peer.jsonl" >"$out/sage-peer.txt" 2>&1
    status=$?
    if [ -f "$out/bench-sage/results.jsonl" ] && [ -f "$res/sage-peer.jsonl" ]; then
      cat "$out/bench-sage/results.jsonl" "$res/sage-peer.jsonl" >"$out/sage-with-peer.jsonl"
      "$cli" report "$out/sage-with-peer.jsonl" --markdown "$res/sage-with-peer.md" >>"$out/sage-peer.txt" 2>&1
    fi
    summary+=("sage peer (SageAttention 1.0.6): exit $status in $(( $(date +%s) - start )) s")
  else
    summary+=("sage peer: no wheel installed (run tools/device/pack-sage.sh here, carry .whl); see sage-peer-install.log")
  fi
fi
if [ $run_py_probe = 1 ]; then
  start=$(date +%s)
  py=/opt/torch/.venv/bin/python3
  [ -x "$py" ] || py=$(command -v python3)
  step "python peer probe"
  PYTHONPATH="$build/python" timeout "$(cap 240)" "$py" "$root/tools/device/python_peer_probe.py" "$res/py-peer-probe.md" \
    >"$out/py-peer-probe.txt" 2>&1
  summary+=("python peer probe: exit $? in $(( $(date +%s) - start )) s (py-peer-probe.md)")
fi
if [ $run_kernel_times = 1 ]; then
  start=$(date +%s)
  if command -v ncu >/dev/null; then
    step "kernel times (ncu)"
    # One ncu process per backend and sequence length (KERNEL_TIMES_BACKENDS, KERNEL_TIMES_SEQ;
    # the rest of the case from KERNEL_TIMES_ARGS), one warm-up and two measured forwards each;
    # ncu times every kernel launch on its own (caches flushed before each, clocks as the card
    # sets them). kernel_times.py turns the launches into a per-forward breakdown.
    mkdir -p "$out/kernel-times"
    kt_backends=${KERNEL_TIMES_BACKENDS:-sage sage2 flash3 cudnn}
    # With --baseline: the two CLIs alternate per backend and N, so that a drift of the card's
    # clocks during the step falls on both alike.
    # An entry may carry backend options, NAME:KEY=VALUE[:KEY=VALUE...] (e.g.
    # flash3:backward_preprocess=vector): an A/B of a backend's options in one build; its rows are
    # labelled NAME+KEY=VALUE.
    for kt_entry in $kt_backends; do
      kt_backend=${kt_entry%%:*} kt_options=()
      if [[ $kt_entry == *:* ]]; then
        IFS=: read -r -a kt_pairs <<<"${kt_entry#*:}"
        for kt_pair in "${kt_pairs[@]}"; do kt_options+=(--backend-option "$kt_pair"); done
      fi
      for kt_seq in ${KERNEL_TIMES_SEQ:-4096 16384}; do
        mapfile -t runs < <(clis_for "${kt_entry//:/+}")
        [[ " ${KERNEL_TIMES_BASELINE_BACKENDS:-$kt_backends} " == *" $kt_entry "* ]] || runs=("${runs[0]}")
        for run_spec in "${runs[@]}"; do
          kt_cli=${run_spec%%|*} label=${run_spec#*|}
          timeout "$(cap 120)" ncu --clock-control none --cache-control all --metrics gpu__time_duration.sum --csv \
            --print-kernel-base function "$kt_cli" bench "${kt_args[@]}" --backends "$kt_backend" "${kt_options[@]}" --seq "$kt_seq" \
            --warmup 1 --min-reps 2 --max-reps 2 --out "$out/kernel-times/bench-$label-$kt_seq" --force -q \
            >"$out/kernel-times/$label-N$kt_seq.csv" 2>>"$out/kernel-times.err"
        done
      done
    done
    python3 "$root/tools/device/kernel_times.py" "$out/kernel-times" >"$res/kernel-times.md" 2>>"$out/kernel-times.err"
    summary+=("kernel times (ncu; ${KERNEL_TIMES_ARGS:-sage suite d128 randn dense}): report exit $? in $(( $(date +%s) - start )) s")
  else
    summary+=("kernel times: no ncu on this machine")
  fi
fi
if [ $run_profile = 1 ]; then
  start=$(date +%s)
  if command -v ncu >/dev/null; then
    step "profile (ncu --set full)"
    # PROFILE_ARGS: the case instead of KERNEL_TIMES_ARGS (e.g. a backward: --suite fa3-grid-bwd
    # --backend-option experimental_backward=1 --causal false); PROFILE_HEAD_DIMS (e.g. "64 128"):
    # one profile per head dim, files profile-<backend>-d<dim>.txt; PROFILE_ARGS_<backend> (dashes
    # as underscores) adds flags for that backend alone (e.g. PROFILE_ARGS_flash3='--backend-option
    # experimental_backward=1', which a run of a peer would refuse).
    read -r -a pf_args <<<"${PROFILE_ARGS:-${KERNEL_TIMES_ARGS:---suite sage --head-dim 128 --causal false --generator randn}}"
    for pf_backend in ${PROFILE_BACKENDS:-sage}; do
      mapfile -t runs < <(clis_for "$pf_backend")
      backend_var="PROFILE_ARGS_${pf_backend//-/_}"
      read -r -a backend_args <<<"${!backend_var:-}"
      for pf_dim in ${PROFILE_HEAD_DIMS:-case}; do
        dim_args=() dim_label=""
        [ "$pf_dim" != case ] && dim_args=(--head-dim "$pf_dim") dim_label="-d$pf_dim"
        for run_spec in "${runs[@]}"; do
          pf_cli=${run_spec%%|*} label=${run_spec#*|}
          # -c 1 after one warm-up launch (-s 1): the second launch of the kernel, clocks as the card
          # sets them. --print-details all: each section's body too (the warp stall reasons of
          # WarpStateStats, the pipe utilizations), not only its headline metrics.
          timeout "$(cap 150)" ncu --set full --clock-control none -k "regex:${PROFILE_KERNEL:-sage_wgmma_forward_kernel|flash3_forward_kernel}" \
            -s 1 -c 1 --page details --print-details all "$pf_cli" bench "${pf_args[@]}" "${backend_args[@]}" "${dim_args[@]}" --backends "$pf_backend" --seq "${PROFILE_SEQ:-4096}" \
            --warmup 1 --min-reps 1 --max-reps 1 --out "$out/profile-bench-$label$dim_label" --force -q \
            >"$res/profile-$label$dim_label.txt" 2>>"$out/profile.err"
        done
      done
    done
    summary+=("profile (ncu --set full; ${PROFILE_BACKENDS:-sage}, N ${PROFILE_SEQ:-4096}): $(( $(date +%s) - start )) s")
  else
    summary+=("profile: no ncu on this machine")
  fi
fi
printf '%s\n' "${summary[@]}" >"$out/summary.txt"
kill "$snapshot" 2>/dev/null; wait "$snapshot" 2>/dev/null
tar czf "$final/results.tar.gz" -C "$res" . 2>/dev/null
tar czf "$final/logs.tar.gz" -C "$out" --exclude='results.jsonl' --exclude='./results' . 2>/dev/null
rm -f "$final/partial.tar.gz" "$final/partial.tmp"

echo
echo "=== attnsuite device run ==="
printf '%s\n' "${summary[@]}"
for suite in ${suites//,/ }; do
  [ $run_bench = 1 ] && [ -f "$out/bench-$suite.txt" ] && { echo; echo "## $suite"; cat "$out/bench-$suite.txt"; }
done
[ $run_variants = 1 ] && [ -f "$res/variants.md" ] && { echo; echo "## variants (TFLOP/s)"; cut -d'|' -f2,3,7 "$res/variants.md"; }
[ $run_tune_kernels = 1 ] && [ -f "$out/tune-kernels.txt" ] && { echo; echo "## tune --kernels"; cat "$out/tune-kernels.txt"; }
[ $run_tune_kernels = 1 ] && [ -f "$out/bench-kernel-tune.txt" ] && { echo; echo "## bench through the tuned cache"; cat "$out/bench-kernel-tune.txt"; }
[ $run_tune = 1 ] && [ -f "$out/tune-headline.txt" ] && { echo; echo "## tune headline"; cat "$out/tune-headline.txt"; }
[ $run_tune_sparse = 1 ] && [ -f "$out/tune-sparse.txt" ] && { echo; echo "## tune --sparse"; tail -20 "$out/tune-sparse.txt"; }
[ $run_profile = 1 ] && for f in "$res"/profile-*.txt; do [ -f "$f" ] && { echo; echo "## $(basename "$f") (excerpt)"; grep -E "Duration|Compute \(SM\) Throughput|Issue Slots Busy|No Eligible|Warp Cycles Per Issued|Executed Ipc Active|Registers Per|Stall|Pipe" "$f" | head -30; }; done
[ $run_kernel_times = 1 ] && [ -f "$res/kernel-times.md" ] && { echo; echo "## kernel times (ncu)"; cat "$res/kernel-times.md"; }
[ $run_py_probe = 1 ] && [ -f "$res/py-peer-probe.md" ] && { echo; echo "## python peer probe"; cat "$res/py-peer-probe.md"; }
exit 0
