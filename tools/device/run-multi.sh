#!/usr/bin/env bash
# Issue 10 on a machine with several GPUs: builds like run.sh (same build folder), then
#   1. the ring's GPU tests on every visible GPU (CudaRing.*: a ring of 1, 2 and all GPUs);
#   2. bench --gpus all against a single-GPU run of the same cases (content must be identical);
#   3. the same sweep as 2 processes per GPU pair, as torchrun would start them (RANK,
#      WORLD_SIZE, LOCAL_RANK), merged with `attnsuite merge`;
#   4. the ring-scaling suite on 1/2/4/8 GPUs (CUDA_VISIBLE_DEVICES), each in three modes
#      (full, compute-only, comm-only), then ring-scaling.md: time, TFLOP/s per GPU, efficiency
#      against W × flash3 on one GPU, and communication hidden (docs/multi-gpu.md defines it).
# Usage: run(command="bash tools/device/run-multi.sh", kind="nvidia-h200-x8",
#            carry=[".device-build/deps", ".device-build/cudnn-frontend"])
# Options: --worlds=1,2,4,8  --seqs=131072,262144,524288,1048576  --no-tests  --no-shards
#   --budget-s=540: no new step starts after this many seconds (a device call may run 600 s);
#   the summary lists what was skipped. Inputs of N = 1M are 3 × 1 G host floats per shape and
#   mode (generation and the sampled fp64 reference take tens of seconds each), so the whole
#   table takes several calls: e.g. --worlds=1 first (the flash3 baseline), then --worlds=2,4,8
#   --no-tests --no-shards, or one N at a time with --seqs.
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"
final=${OUT:-$root/out/device}
mkdir -p "$final"
out=$(mktemp -d)
worlds=1,2,4,8 seqs="" run_tests=1 run_shards=1 budget=540
began=$(date +%s)
within_budget() { [ $(( $(date +%s) - began )) -lt "$budget" ]; }
for arg in "$@"; do
  case "$arg" in
    --worlds=*) worlds=${arg#--worlds=} ;;
    --seqs=*) seqs=${arg#--seqs=} ;;
    --no-tests) run_tests=0 ;;
    --no-shards) run_shards=0 ;;
    --budget-s=*) budget=${arg#--budget-s=} ;;
    *) echo "run-multi.sh: unknown option $arg (allowed: --worlds=1,2,4,8, --seqs=..., --no-tests, --no-shards, --budget-s=N)" >&2; exit 2 ;;
  esac
done
# NVLink multicast stays off on the shared machines (the device README).
export NCCL_NVLS_ENABLE=0
declare -a summary
visible=$(nvidia-smi -L 2>/dev/null | wc -l)
summary+=("gpus visible: $visible ($(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1))")
nvidia-smi topo -m >"$out/topology.txt" 2>&1

# Build: run.sh's configure + build only (its summary and logs go to $final/build/).
OUT="$final/build" bash "$root/tools/device/run.sh" --no-tests --no-sanitize --no-bench >"$out/build.txt" 2>&1
build="$root/.device-build/build"
cli="$build/attnsuite"
tests="$build/tests/cpp/attnsuite_tests"
if [ ! -x "$cli" ]; then
  echo "run-multi.sh: build failed; see $final/build/"; cat "$out/build.txt"; exit 1
fi
deps="$root/.device-build/deps/usr/lib/x86_64-linux-gnu"
[ -d "$deps" ] && export LD_LIBRARY_PATH="$deps:$deps/openblas-pthread${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
"$cli" list >"$out/list.txt" 2>&1
grep -q '^ *ring\b' "$out/list.txt" || summary+=("WARNING: backend ring not in 'attnsuite list' (NCCL not found at configure?)")

if [ $run_tests = 1 ]; then
  start=$(date +%s)
  timeout 600 "$tests" --gtest_filter='CudaRing.*:RingSchedule.*:RingMerge.*:*CpuRing*' >"$out/ring-tests.log" 2>&1
  summary+=("ring tests: exit $? in $(( $(date +%s) - start )) s; $(grep -E '^\[  (PASSED|FAILED|SKIPPED) +\]' "$out/ring-tests.log" | tr '\n' ' ')")
  grep -E "^\[  FAILED|Failure|^  ring " -A3 "$out/ring-tests.log" | head -40
fi

if [ $run_shards = 1 ] && [ "$visible" -ge 2 ] && within_budget; then
  sweep=(-b flash2,flash3 --seq 1024,2048,4096,8192 --heads 16 --head-dim 128 --dtype bf16 --causal both -q)
  start=$(date +%s)
  "$cli" bench "${sweep[@]}" --out "$out/one-gpu" --force >"$out/one-gpu.txt" 2>&1
  "$cli" bench "${sweep[@]}" --gpus all --out "$out/all-gpus" --force >"$out/all-gpus.txt" 2>&1
  status_gpus=$?
  pids=()
  for r in 0 1; do
    RANK=$r WORLD_SIZE=2 LOCAL_RANK=$r "$cli" bench "${sweep[@]}" --out "$out/shards" --force >"$out/shard-$r.txt" 2>&1 &
    pids+=($!)
  done
  status_shards=0
  for pid in "${pids[@]}"; do wait "$pid" || status_shards=$?; done
  "$cli" merge "$out/shards" --out "$out/merged" --force -q >"$out/merge.txt" 2>&1
  status_merge=$?
  # Same rows, same order, same content apart from the timing columns.
  python3 - "$out/one-gpu/results.jsonl" "$out/all-gpus/results.jsonl" "$out/merged/results.jsonl" >"$out/compare.txt" 2>&1 <<'PY'
import json, sys
content = ["backend", "dtype", "batch", "heads_q", "heads_kv", "seq_q", "seq_kv", "head_dim", "causal", "generator",
           "seed", "max_abs_err", "rel_l2", "rel_l1", "cos_sim", "rmse", "status", "kernel_config"]
def rows(path):
    return [json.loads(l) for l in open(path) if l.strip() and '"header"' not in l[:12]]
base = rows(sys.argv[1])
for other in sys.argv[2:]:
    got = rows(other)
    diffs = [(i, c, base[i][c], got[i][c]) for i in range(min(len(base), len(got))) for c in content if base[i][c] != got[i][c]]
    devices = sorted({r["device"] for r in got})
    print(f"{other}: {len(got)} rows vs {len(base)}; devices {devices}; {len(diffs)} differing cells {diffs[:5]}")
PY
  summary+=("bench --gpus all: exit $status_gpus; 2 processes (RANK/WORLD_SIZE/LOCAL_RANK): exit $status_shards, merge exit $status_merge, $(( $(date +%s) - start )) s")
  while read -r line; do summary+=("  $line"); done <"$out/compare.txt"
  cp "$out/all-gpus/summary.md" "$final/gpus-all.md" 2>/dev/null
fi

# The scaling suite, three modes per world size.
suite_for() {  # mode → a suite file with that ring_mode
  python3 - "$root/bench/suites/ring-scaling.json" "$1" "$out/ring-scaling-$1.json" "$seqs" <<'PY'
import json, sys
suite = json.load(open(sys.argv[1]))
suite["backend_options"]["ring_mode"] = sys.argv[2]
suite["name"] = f"ring-scaling-{sys.argv[2]}"
if sys.argv[4]:
    suite["seq"] = [int(s) for s in sys.argv[4].split(",")]
json.dump(suite, open(sys.argv[3], "w"), indent=2)
PY
}
for mode in full compute-only comm-only; do suite_for "$mode"; done
IFS=',' read -r -a world_list <<<"$worlds"
for w in "${world_list[@]}"; do
  if [ "$w" -gt "$visible" ]; then summary+=("W=$w: skipped, $visible GPUs visible"); continue; fi
  devices=$(seq -s, 0 $((w - 1)))
  for mode in full compute-only comm-only; do
    if ! within_budget; then summary+=("ring-scaling W=$w $mode: skipped (budget of $budget s spent)"); continue; fi
    start=$(date +%s)
    backends=ring
    [ "$w" = 1 ] && [ "$mode" = full ] && backends=flash3,ring  # the single-GPU baseline
    left=$(( budget + 30 - ($(date +%s) - began) ))  # SIGTERM: the sweep writes what it finished
    CUDA_VISIBLE_DEVICES=$devices timeout "$left" "$cli" bench --suite "$out/ring-scaling-$mode.json" -b "$backends" \
      --out "$out/scaling-w$w-$mode" --force -q >"$out/scaling-w$w-$mode.txt" 2>&1
    summary+=("ring-scaling W=$w $mode: exit $? in $(( $(date +%s) - start )) s")
  done
done
python3 - "$out" "$final/ring-scaling.md" "$worlds" <<'PY' >"$out/scaling-summary.txt" 2>&1
import json, os, sys
out, target, worlds = sys.argv[1], sys.argv[2], [int(w) for w in sys.argv[3].split(",")]
def rows(path):
    if not os.path.exists(path): return []
    return [json.loads(l) for l in open(path) if l.strip() and not l.startswith('{"header"')]
def ms(rows, backend):
    return {r["seq_q"]: r for r in rows if r["backend"] == backend and r["status"] == "ok"}
base = ms(rows(f"{out}/scaling-w1-full/results.jsonl"), "flash3")
lines = ["# ring-scaling: ring attention over W GPUs (bf16, d128, 8 heads, causal, batch 1)", "",
         "Efficiency = ring TFLOP/s per GPU / flash3 TFLOP/s on one GPU at the same N. Communication hidden = "
         "(T_compute + T_comm - T_full) / T_comm, clamped to 0..100%, where T_compute is the ring with the exchange "
         "skipped (ring_mode=compute-only) and T_comm the ring with the local kernel skipped (comm-only); "
         "docs/multi-gpu.md.", "",
         "| W | N | ring ms | TFLOP/s per GPU | flash3 1-GPU TFLOP/s | efficiency | T_compute ms | T_comm ms | comm hidden | rel-L1 |",
         "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
for w in worlds:
    full = ms(rows(f"{out}/scaling-w{w}-full/results.jsonl"), "ring")
    comp = ms(rows(f"{out}/scaling-w{w}-compute-only/results.jsonl"), "ring")
    comm = ms(rows(f"{out}/scaling-w{w}-comm-only/results.jsonl"), "ring")
    for n in sorted(full):
        r = full[n]
        per_gpu = r["tflops"] / w
        b = base.get(n)
        eff = f"{100 * per_gpu / b['tflops']:.1f}%" if b else "–"
        b_tflops = f"{b['tflops']:.0f}" if b else "–"
        tc = comp.get(n, {}).get("ms_median")
        tm = comm.get(n, {}).get("ms_median")
        hidden = "–"
        if tc is not None and tm is not None and tm > 0 and w > 1:
            hidden = f"{100 * min(1.0, max(0.0, (tc + tm - r['ms_median']) / tm)):.0f}%"
        fmt = lambda v: "–" if v is None else f"{v:.1f}"
        lines.append(f"| {w} | {n} | {r['ms_median']:.1f} | {per_gpu:.0f} | {b_tflops} | {eff} | {fmt(tc)} | "
                     f"{fmt(tm)} | {hidden} | {r['rel_l1']:.2e} |")
open(target, "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
PY
cat "$out/scaling-summary.txt"
for w in "${world_list[@]}"; do cp "$out/scaling-w$w-full/results.json" "$final/ring-scaling-w$w.json" 2>/dev/null; done
printf '%s\n' "${summary[@]}" | tee "$out/summary.txt"
tar czf "$final/multi-logs.tar.gz" -C "$out" . 2>/dev/null
