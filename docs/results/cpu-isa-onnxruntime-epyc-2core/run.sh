#!/usr/bin/env bash
# Rotating official runs: cpu-flash and ONNX Runtime in one bench each; variants avx512 and avx2
# (built-in tiles: q384-k96 here) and avx2-q192 (AVX2 with the former default tiles, via a cache).
set -u
cli=${CLI:-build/attnsuite}
out=${OUT:-results/cpu-isa}
rounds=${ROUNDS:-10}
mkdir -p $out
variants=(avx512 avx2 avx2-q192)
for r in $(seq 1 $rounds); do
  for k in 0 1 2; do
    v=${variants[$(( (r + k) % 3 ))]}
    dir=$out/$v-$r
    isa=${v%%-*}
    cache=off
    [ "$v" = avx2-q192 ] && cache=docs/results/cpu-isa-onnxruntime-epyc-2core/kernel-configs-q192.json
    echo "round $r $v load $(cut -d' ' -f1-3 /proc/loadavg)" >> $out/log.txt
    ATTNSUITE_CPU_ISA=$isa ATTNSUITE_KERNEL_CACHE=$cache $cli bench --backends cpu-flash,onnxruntime --dtype fp32 --seq 2048 \
      --heads 16 --head-dim 64 --batch 1 --causal false --warmup 1 --min-reps 5 --max-time-ms 3000 --noise 0.02 \
      --out $dir --force -q > $dir.log 2>&1
  done
done
echo done >> $out/log.txt
