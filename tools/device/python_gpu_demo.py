#!/usr/bin/env python3
"""The GPU machine's checks of the Python side that pytest does not make, one step per call, each
writing its figures as JSON (tools/device/run-python.sh runs them under a time limit each):

    python_gpu_demo.py dlpack OUT.json   # torch / cupy / jax CUDA arrays in and out, no copies
    python_gpu_demo.py ort OUT.json      # ONNX Runtime's CUDA EP through the harness, if installed
    python_gpu_demo.py table DIR         # the short table of every step's JSON in DIR (printed last)

Runs on the CPU too (the dlpack and ort steps then record why they were skipped), which is how
CI-less dry runs of the script are made.
"""

import json
import os
import sys
import time


def write(path, results):
    with open(path, "w") as file:
        json.dump(results, file, indent=2, default=str)
        file.write("\n")


def rel_l2(got, expected):
    import numpy as np

    got, expected = np.asarray(got, np.float64), np.asarray(expected, np.float64)
    return float(np.linalg.norm(got - expected) / np.linalg.norm(expected))


def torch_reference(q, k, v, causal):
    """PyTorch's SDPA in float32 on BSHD torch tensors (GQA by repeating K/V heads)."""
    import torch

    q, k, v = (x.float().transpose(1, 2) for x in (q, k, v))
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal).transpose(1, 2)


def dlpack(out_path):
    """Each framework's CUDA arrays straight into attnsuite.attention and back: out= keeps the
    caller's buffer (same pointer), fresh outputs come back in the caller's framework on its
    device, and values match PyTorch's SDPA."""
    import attnsuite

    results = {"cuda_build": bool(attnsuite._core.cuda_build), "frameworks": {}}
    try:
        import torch
    except ImportError as error:
        results["skipped"] = f"torch: {error}"
        write(out_path, results)
        return 0
    if not (torch.cuda.is_available() and attnsuite._core.cuda_build):
        results["skipped"] = "no GPU or a CPU-only attnsuite build"
        write(out_path, results)
        return 0
    shape, kv_shape, causal = (2, 1024, 16, 128), (2, 1024, 4, 128), True
    generator = torch.Generator(device="cuda").manual_seed(0)
    base = [torch.randn(s, device="cuda", dtype=torch.bfloat16, generator=generator) for s in (shape, kv_shape, kv_shape)]
    expected = torch_reference(*base, causal).cpu().numpy()
    frameworks = results["frameworks"]

    def record(name, step):
        start = time.perf_counter()
        try:
            entry = step()
        except Exception as error:  # recorded, the other frameworks still run
            entry = {"ok": False, "error": f"{type(error).__name__}: {error}"}
        entry["seconds"] = round(time.perf_counter() - start, 2)
        frameworks[name] = entry
        print(f"dlpack {name}: {entry}", flush=True)

    def with_torch():
        q, k, v = base
        out = torch.empty_like(q)
        pointer = out.data_ptr()
        result = attnsuite.attention(q, k, v, causal=causal, out=out)
        torch.cuda.synchronize()
        error = rel_l2(out.float().cpu().numpy(), expected)
        return {"ok": result is out and out.data_ptr() == pointer and error < 2e-2, "rel_l2": error,
                "out_is_callers_buffer": out.data_ptr() == pointer,
                "backend": attnsuite.resolve_backend(q, k, v, causal=causal)}

    def with_cupy():
        import cupy

        # cupy has no bfloat16: fp16 copies of the same values, made on the GPU through DLPack.
        q, k, v = (cupy.from_dlpack(x.half().contiguous()) for x in base)
        out = cupy.empty_like(q)
        pointer = out.data.ptr
        result = attnsuite.attention(q, k, v, causal=causal, out=out)
        fresh = attnsuite.attention(q, k, v, causal=causal)
        cupy.cuda.runtime.deviceSynchronize()
        error = rel_l2(cupy.asnumpy(out).astype("float32"), expected)
        return {"ok": result is out and out.data.ptr == pointer and isinstance(fresh, cupy.ndarray) and error < 2e-2,
                "rel_l2": error, "out_is_callers_buffer": out.data.ptr == pointer, "cupy": cupy.__version__,
                "backend": attnsuite.resolve_backend(q, k, v, causal=causal)}

    def with_jax():
        import jax
        import numpy as np

        gpus = [d for d in jax.devices() if d.platform == "gpu"]
        if not gpus:
            return {"ok": False, "error": f"jax sees no GPU: {jax.devices()}"}
        q, k, v = (jax.dlpack.from_dlpack(x.contiguous()) for x in base)  # torch -> jax, no copy
        out = attnsuite.attention(q, k, v, causal=causal)  # library memory handed to jax by DLPack
        out.block_until_ready()
        on_gpu = list(out.devices())[0].platform == "gpu"
        error = rel_l2(np.asarray(out.astype(jax.numpy.float32)), expected)
        return {"ok": on_gpu and out.dtype == jax.numpy.bfloat16 and error < 2e-2, "rel_l2": error,
                "output_on_gpu": on_gpu, "jax": jax.__version__,
                "backend": attnsuite.resolve_backend(q, k, v, causal=causal)}

    record("torch", with_torch)
    record("cupy", with_cupy)
    record("jax", with_jax)
    results["ok"] = all(entry.get("ok") for entry in frameworks.values())
    write(out_path, results)
    return 0 if results["ok"] else 1


def ort(out_path):
    """ONNX Runtime's CUDA execution provider through the harness (backends onnxruntime-cuda and
    onnxruntime-cuda-decomposed, beside cudnn and flash2), when the installed onnxruntime has it."""
    import attnsuite

    results = {}
    try:
        import onnxruntime
    except ImportError as error:
        results["skipped"] = f"onnxruntime is not installed: {error}"
        write(out_path, results)
        return 0
    providers = onnxruntime.get_available_providers()
    results.update(onnxruntime=onnxruntime.__version__, providers=providers)
    if "CUDAExecutionProvider" not in providers:
        results["skipped"] = (f"the installed onnxruntime {onnxruntime.__version__} has no CUDAExecutionProvider "
                              f"(providers: {', '.join(providers)})")
        write(out_path, results)
        print(results["skipped"], flush=True)
        return 0
    rows = attnsuite.bench(backends=["onnxruntime-cuda", "onnxruntime-cuda-decomposed", "cudnn", "flash2"],
                           batch_sizes=[8], seq_lengths=[1024, 4096], model="headline", dtype="fp16",
                           timing={"warmup": 3, "min_reps": 10, "max_time_ms": 300},
                           out=os.path.join(os.path.dirname(out_path), "ort-bench"), force=True, progress=True,
                           dataframe=False)
    results["rows"] = [{key: row.get(key) for key in ("backend", "seq_q", "status", "ms_median", "tflops", "rel_l2",
                                                       "reason")} for row in rows]
    results["ok"] = all(row["status"] == "ok" for row in rows if row["backend"].startswith("onnxruntime"))
    write(out_path, results)
    return 0 if results["ok"] else 1


def load(path):
    try:
        with open(path) as file:
            return json.load(file)
    except (OSError, ValueError):
        return None


def table(directory):
    """One line per step: what it checked and what came out."""
    lines = []

    def add(step, status, detail):
        lines.append((step, status, detail))

    steps = {}
    try:
        with open(os.path.join(directory, "steps.tsv")) as file:
            for line in file.read().splitlines()[1:]:
                name, status, seconds, detail = (line.split("\t") + ["", "", ""])[:4]
                steps[name] = {"exit": int(status) if status.lstrip("-").isdigit() else -1, "seconds": seconds,
                               "detail": detail.strip()}
    except OSError:
        pass

    def status_of(step):
        return "ok" if step["exit"] == 0 else ("TIMED OUT" if step["exit"] in (124, 137) else f"exit {step['exit']}")

    for name, label in (("pip install .", "pip install ."), ("cmake module build", "cmake build (fallback)"),
                        ("import", "import"), ("pytest", "pytest (GPU, torch)")):
        step = steps.get(name)
        if step:
            add(label, status_of(step), f"{step['seconds']} s; {step['detail']}"[:300])
    dropin = load(os.path.join(directory, "dropin-transformers.json"))
    if dropin:
        eager = (f"logits rel L2 {dropin.get('logits_rel_l2', float('nan')):.2e} (tolerance {dropin.get('tolerance')}), "
                 f"{dropin.get('attnsuite_calls')} attnsuite calls, backend {dropin.get('attnsuite_backend')}, "
                 f"forward {dropin.get('ms_torch_sdpa', 0):.2f} ms torch SDPA vs {dropin.get('ms_attnsuite', 0):.2f} ms")
        ok = dropin.get("logits_rel_l2", 1) <= dropin.get("tolerance", 0) and dropin.get("attnsuite_calls")
        add("drop-in, Llama eager", "ok" if ok else "FAILED", eager)
        layers = (dropin.get("model") or {}).get("layers")
        if "compiled_logits_rel_l2" in dropin:
            ok = (dropin["compiled_logits_rel_l2"] <= dropin.get("tolerance", 0)
                  and dropin.get("compiled_attnsuite_calls") == layers)
            add("drop-in, compiled (AttentionInterface)", "ok" if ok else "FAILED",
                f"logits rel L2 {dropin['compiled_logits_rel_l2']:.2e}, {dropin.get('compiled_attnsuite_calls')} "
                f"attnsuite calls, forward {dropin.get('ms_torch_sdpa_compiled', 0):.2f} ms torch SDPA vs "
                f"{dropin.get('ms_attnsuite_compiled', 0):.2f} ms")
        elif "attention_interface" in dropin:
            add("drop-in, compiled (AttentionInterface)", "FAILED", dropin["attention_interface"])
        else:
            add("drop-in, compiled (AttentionInterface)", "not run",
                "timed out or failed before it; see dropin.log in logs.tar.gz")
        if "patched_compiled_logits_rel_l2" in dropin:
            reached = dropin.get("patched_compiled_attnsuite_calls")
            add("drop-in, compiled (patch())", "info",
                f"logits rel L2 {dropin['patched_compiled_logits_rel_l2']:.2e}, {reached} attnsuite calls"
                + ("" if reached == layers else " (transformers passes a materialized causal mask while tracing: "
                                                "the drop-in falls back to PyTorch)"))
    elif "drop-in" in steps:
        add("drop-in, Llama", status_of(steps["drop-in"]), "no results; see dropin.log in logs.tar.gz")
    dl = load(os.path.join(directory, "dlpack.json"))
    if dl:
        if "skipped" in dl:
            add("DLPack", "skipped", dl["skipped"])
        for name, entry in dl.get("frameworks", {}).items():
            detail = entry.get("error") or f"rel L2 {entry.get('rel_l2', float('nan')):.2e}, backend {entry.get('backend')}"
            if "out_is_callers_buffer" in entry:
                detail += f", out= kept the caller's buffer: {entry['out_is_callers_buffer']}"
            add(f"DLPack {name}", "ok" if entry.get("ok") else "FAILED", detail)
    elif "dlpack" in steps:
        add("DLPack", status_of(steps["dlpack"]), "no results; see demo.log in logs.tar.gz")
    ort_results = load(os.path.join(directory, "ort.json"))
    if ort_results:
        if "skipped" in ort_results:
            add("ONNX Runtime CUDA EP", "not available", ort_results["skipped"])
        else:
            cells = [f"{r['backend']} N={r['seq_q']}: " + (f"{r['ms_median']:.3f} ms" if r["status"] == "ok"
                                                            else f"{r['status']} ({r['reason']})")
                     for r in ort_results.get("rows", [])]
            add("ONNX Runtime CUDA EP", "ok" if ort_results.get("ok") else "FAILED", "; ".join(cells))
    elif "ort" in steps:
        add("ONNX Runtime CUDA EP", status_of(steps["ort"]), "no results; see demo.log in logs.tar.gz")
    if "notebook" in steps:
        step = steps["notebook"]
        add("notebook (nbclient)", status_of(step), f"{step['seconds']} s; {step['detail']}"[:300])
    width = max((len(step) for step, _, _ in lines), default=4)
    status_width = max((len(status) for _, status, _ in lines), default=6)
    print("\n=== attnsuite Python side on the GPU machine ===")
    for step, status, detail in lines:
        print(f"{step:<{width}}  {status:<{status_width}}  {detail}")
    return 0


def main(argv):
    if len(argv) != 3 or argv[1] not in ("dlpack", "ort", "table"):
        sys.stderr.write(__doc__)
        return 2
    return {"dlpack": dlpack, "ort": ort, "table": table}[argv[1]](argv[2])


if __name__ == "__main__":
    sys.exit(main(sys.argv))
