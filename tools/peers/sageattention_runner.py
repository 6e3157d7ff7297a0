#!/usr/bin/env python3
"""Times the peer SageAttention (PyPI `sageattention` 1.0.6, its Triton implementation) on the
cases of an attnsuite suite file and writes one attnsuite result row per case (JSONL, the keys
of src/bench/result.cpp), named as a peer, so that `attnsuite report` shows it beside ours.

Usage (on the GPU machine; the wheel comes from tools/device/pack-sage.sh):
    python3 tools/peers/sageattention_runner.py --suite bench/suites/sage.json --out sage-peer.jsonl

What it measures, and how it differs from the C++ harness (docs/kernels/sage.md, "Peer"):
  - latency of one `sageattn(q, k, v, tensor_layout="NHD", is_causal=...)` call — its own
    quantization kernels included, as ours — timed with CUDA events around each call after
    warm-up, the L2 flushed (256 MiB written) before each call as the harness does by default;
    median, mean, p05, p95, min and stddev over the repetitions;
  - inputs drawn with torch from the same distributions as the harness's named generators
    (randn, uniform, k-outliers, heavy-q, peaked; src/bench/generators.cpp), not bitwise the
    same values;
  - accuracy against an fp64 reference on the same inputs for a subset of (batch, head) slices
    (accuracy_fraction says which share): max_abs_err, rel_l2, rel_l1, cos_sim, rmse as the
    harness defines them (src/bench/runner.cpp).
"""
import argparse
import json
import math
import statistics
import sys
import time

BACKEND = "sageattention"
DISPLAY_NAME = "SageAttention 1.0.6 (Triton, PyPI)"
PEER_OF = "SageAttention (thu-ml; PyPI sageattention 1.0.6)"


def die(message, code=2):
    print(f"sageattention_runner: {message}", file=sys.stderr)
    sys.exit(code)


def as_list(value):
    return value if isinstance(value, list) else [value]


def cases_of(suite):
    """The (batch, heads, seq, head_dim, causal, generator) cases of a suite file: seq list,
    tokens_per_batch (batch = tokens / seq) or batch, hidden (heads = hidden / head_dim) or heads."""
    dtype = suite.get("dtype", "bf16")
    if dtype not in ("bf16", "fp16"):
        die(f"dtype {dtype!r} not supported by the runner; allowed: bf16, fp16")
    seqs = as_list(suite.get("seq", [1024]))
    head_dims = as_list(suite.get("head_dim", [128]))
    out = []
    for seq in seqs:
        if "tokens_per_batch" in suite:
            batch = max(1, int(suite["tokens_per_batch"]) // int(seq))
        else:
            batch = int(as_list(suite.get("batch", [1]))[0])
        for head_dim in head_dims:
            if "hidden" in suite:
                heads = int(suite["hidden"]) // int(head_dim)
            else:
                heads = int(as_list(suite.get("heads", [16]))[0])
            kv_heads = int(as_list(suite.get("kv_heads", [heads]))[0])
            for causal in as_list(suite.get("causal", [False])):
                for generator in as_list(suite.get("generator", ["randn"])):
                    out.append(dict(dtype=dtype, batch=batch, heads_q=heads, heads_kv=kv_heads, seq=int(seq),
                                    head_dim=int(head_dim), causal=bool(causal), generator=generator))
    return out


def make_inputs(torch, case, seed, device):
    """Q, K, V (batch, seq, heads, dim) fp32 on the device, drawn as the named generator does."""
    b, n, hq, hkv, d = case["batch"], case["seq"], case["heads_q"], case["heads_kv"], case["head_dim"]
    g = torch.Generator(device=device)
    g.manual_seed(seed)
    randn = lambda *shape: torch.randn(*shape, generator=g, device=device, dtype=torch.float32)
    q, k, v = randn(b, n, hq, d), randn(b, n, hkv, d), randn(b, n, hkv, d)
    name = case["generator"]
    if name == "randn":
        pass
    elif name == "uniform":
        q, k, v = (torch.rand(t.shape, generator=g, device=device) * 2 - 1 for t in (q, k, v))
    elif name == "k-outliers":
        for c in (1, d // 4 + 3, d // 2 + 5, d - 2):
            k[..., c] += 24.0
    elif name == "heavy-q":
        chi2 = randn(b, n, hq, d) ** 2 + randn(b, n, hq, d) ** 2 + randn(b, n, hq, d) ** 2
        q = q / torch.sqrt(chi2 / 3.0) / math.sqrt(3.0)
    elif name == "peaked":
        i = torch.arange(n, device=device).view(1, n, 1).expand(b, n, hq)
        back = torch.randint(0, 32, (b, n, hq), generator=g, device=device)
        j = (i - back).clamp(0, n - 1)  # seq_q == seq_kv here: the diagonal is i
        kv_head = (torch.arange(hq, device=device) // (hq // hkv)).view(1, 1, hq).expand(b, n, hq)
        batch = torch.arange(b, device=device).view(b, 1, 1).expand(b, n, hq)
        q = q + 1.5 * k[batch, j, kv_head]
    else:
        die(f"unknown input generator {name!r}; allowed: randn, uniform, k-outliers, heavy-q, peaked")
    return q, k, v


def reference_rows(torch, q, k, v, causal, rows_per_chunk=2048):
    """fp64 attention of one (seq, dim) slice, bottom-right causal when asked."""
    n, d = q.shape
    q64, k64, v64 = q.double(), k.double(), v.double()
    out = torch.empty_like(q64)
    scale = 1.0 / math.sqrt(d)
    for begin in range(0, n, rows_per_chunk):
        end = min(n, begin + rows_per_chunk)
        s = (q64[begin:end] @ k64.T) * scale
        if causal:
            rows = torch.arange(begin, end, device=q.device).view(-1, 1)
            keys = torch.arange(k.shape[0], device=q.device).view(1, -1)
            s = s.masked_fill(keys > rows + (k.shape[0] - n), float("-inf"))
        out[begin:end] = torch.softmax(s, dim=-1) @ v64
    return out


def run_case(torch, sageattn, case, seed, timing, gpu_name):
    row = dict(backend=BACKEND, display_name=DISPLAY_NAME, peer_of=PEER_OF, device="cuda:0", gpu=gpu_name,
               dtype=case["dtype"], layout="bshd", batch=case["batch"], heads_q=case["heads_q"],
               heads_kv=case["heads_kv"], seq_q=case["seq"], seq_kv=case["seq"], head_dim=case["head_dim"],
               causal=case["causal"], window_left=-1, window_right=-1, generator=case["generator"], seed=seed,
               status="ok", reason="")
    device = torch.device("cuda:0")
    dtype = torch.bfloat16 if case["dtype"] == "bf16" else torch.float16
    try:
        q32, k32, v32 = make_inputs(torch, case, seed, device)
        q, k, v = (t.to(dtype).contiguous() for t in (q32, k32, v32))
        del q32, k32, v32
        call = lambda: sageattn(q, k, v, tensor_layout="NHD", is_causal=case["causal"])

        # Accuracy run, with the peak memory of one call beyond the inputs.
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
        out = call()
        torch.cuda.synchronize()
        row["peak_mem_mib"] = (torch.cuda.max_memory_allocated() - before) / 1048576.0
        b, n, hq, d = out.shape
        slices = [(0, 0)] if b * hq == 1 else [(0, 0), (b - 1, hq - 1)]
        diff_abs_max = diff_sq = diff_abs = ref_abs = ref_sq = out_sq = dot = 0.0
        count = 0
        for bi, hi in slices:
            ref = reference_rows(torch, q[bi, :, hi].float(), k[bi, :, hi // (hq // case["heads_kv"])].float(),
                                 v[bi, :, hi // (hq // case["heads_kv"])].float(), case["causal"])
            got = out[bi, :, hi].double()
            if not torch.isfinite(got).all():
                row["status"] = "failed"
                row["reason"] = f"output has {int((~torch.isfinite(got)).sum())} NaN/Inf values among the compared elements"
            diff = got - ref
            diff_abs_max = max(diff_abs_max, float(diff.abs().max()))
            diff_sq += float((diff * diff).sum())
            diff_abs += float(diff.abs().sum())
            ref_abs += float(ref.abs().sum())
            ref_sq += float((ref * ref).sum())
            out_sq += float((got * got).sum())
            dot += float((got * ref).sum())
            count += ref.numel()
        row["max_abs_err"] = diff_abs_max
        row["rel_l2"] = math.sqrt(diff_sq / ref_sq) if ref_sq > 0 else math.sqrt(diff_sq)
        row["rel_l1"] = diff_abs / ref_abs if ref_abs > 0 else diff_abs
        row["cos_sim"] = dot / math.sqrt(out_sq * ref_sq) if out_sq > 0 and ref_sq > 0 else 0.0
        row["rmse"] = math.sqrt(diff_sq / count)
        row["accuracy_fraction"] = len(slices) / (b * hq)
        del out
        if row["status"] != "ok":
            return row

        # Timing: warm-up, then event-timed calls until min_reps and (noise or max_time) are met.
        for _ in range(int(timing.get("warmup", 5))):
            call()
        min_reps = int(timing.get("min_reps", 15))
        max_time_ms = float(timing.get("max_time_ms", 800))
        noise = float(timing.get("noise", 0.005))
        # Cold cache, as the harness times by default (settings.cold_cache): the L2 is flushed
        # before every timed call by writing a buffer larger than it, outside the events.
        cold = bool(timing.get("cold", True))
        flush = torch.empty(64 << 20, dtype=torch.int32, device=device) if cold else None
        samples = []
        start_wall = time.perf_counter()
        while True:
            if flush is not None:
                flush.zero_()
            start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            call()
            stop.record()
            stop.synchronize()
            samples.append(start.elapsed_time(stop))
            if len(samples) >= min_reps:
                median = statistics.median(samples)
                spread = statistics.stdev(samples) / math.sqrt(len(samples)) / median if median > 0 else 0.0
                if spread <= noise or (time.perf_counter() - start_wall) * 1e3 >= max_time_ms or len(samples) >= 1000:
                    break
        samples.sort()
        pick = lambda f: samples[min(len(samples) - 1, max(0, int(round(f * (len(samples) - 1)))))]
        ms = statistics.median(samples)
        row.update(ms_median=ms, ms_mean=statistics.fmean(samples), ms_p05=pick(0.05), ms_p95=pick(0.95),
                   ms_min=samples[0], ms_stddev=statistics.stdev(samples) if len(samples) > 1 else 0.0,
                   reps=len(samples))
        seconds = ms * 1e-3
        dense = 2.0 * b * hq * n * n * (2 * d)
        flops = dense / 2.0 if case["causal"] else dense
        element = 2.0
        min_bytes = element * (b * n * hq * d * 2 + 2 * b * n * case["heads_kv"] * d)
        row.update(tokens_per_s=b * n / seconds, tflops=flops / seconds * 1e-12, gbps=min_bytes / seconds * 1e-9)
    except Exception as error:  # one failed case is a row, not the end of the run
        row["status"] = "failed"
        row["reason"] = f"{type(error).__name__}: {error}".splitlines()[0]
    finally:
        torch.cuda.empty_cache()
    return row


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suite", required=True, help="an attnsuite suite file (bench/suites/*.json)")
    parser.add_argument("--out", required=True, help="JSONL file of result rows to write")
    parser.add_argument("--seed", type=int, default=None, help="input seed (default: the suite's, else 0)")
    args = parser.parse_args()
    try:
        with open(args.suite) as f:
            suite = json.load(f)
    except (OSError, ValueError) as error:
        die(f"cannot read suite {args.suite}: {error}")
    try:
        import torch
        from sageattention import sageattn
        import sageattention
    except ImportError as error:
        die(f"{error}; install the wheel of tools/device/pack-sage.sh first", code=1)
    if not torch.cuda.is_available():
        die("no CUDA device visible to torch", code=1)
    version = getattr(sageattention, "__version__", None)
    gpu_name = torch.cuda.get_device_name(0)
    seed = args.seed if args.seed is not None else int(suite.get("seed", 0))
    timing = suite.get("timing", {})
    failed = 0
    with open(args.out, "w") as out:
        for case in cases_of(suite):
            row = run_case(torch, sageattn, case, seed, timing, gpu_name)
            failed += row["status"] != "ok"
            out.write(json.dumps(row) + "\n")
            out.flush()
            print(f"{row['backend']} B={case['batch']} H={case['heads_q']} N={case['seq']} D={case['head_dim']} "
                  f"causal={case['causal']} {case['generator']}: {row['status']} "
                  f"{row.get('ms_median', float('nan')):.3f} ms {row.get('tflops', float('nan')):.1f} TFLOP/s "
                  f"cos {row.get('cos_sim', float('nan')):.6f} rel-L1 {row.get('rel_l1', float('nan')):.4f} "
                  f"{row['reason']}", flush=True)
    if version is not None and version != "1.0.6":
        print(f"sageattention_runner: warning: sageattention {version} installed, rows say 1.0.6", file=sys.stderr)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
