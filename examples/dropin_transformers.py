"""attnsuite's PyTorch drop-in in a transformers model: outputs against PyTorch's SDPA, and time.

Builds a Llama from a config (random weights: nothing is downloaded, so it runs without a
network), runs it with PyTorch's scaled_dot_product_attention and with attnsuite.torch.patch(),
and compares the logits (bf16 tolerance on the GPU) and the forward time. Optionally under
torch.compile too: with patch() (where transformers passes a materialized causal mask while
compiling — before torch 2.14, or an older transformers — the drop-in falls back to PyTorch: the
calls that reach attnsuite are counted), and with the model's attention routed to the same op
through transformers' AttentionInterface (no mask without padding, also when compiled). Writes
the figures as JSON (and prints a table).

    python examples/dropin_transformers.py                       # GPU when there is one, bf16
    python examples/dropin_transformers.py --device cpu --dtype fp32 --layers 2 --hidden 256
    python examples/dropin_transformers.py --compile --out docs/results/h200/dropin-transformers.json

Needs torch, transformers and the attnsuite package (pip install . or PYTHONPATH=build/python).
"""

import argparse
import json
import platform
import statistics
import sys
import time

import torch

import attnsuite
import attnsuite.torch as drop_in

DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
# Relative L2 of the logits that passes: bf16 keeps 8 bits of mantissa and the two attention
# implementations round differently in every layer.
TOLERANCE = {"fp32": 1e-4, "fp16": 5e-3, "bf16": 3e-2}


def parse_args():
    gpu = torch.cuda.is_available()
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda" if gpu else "cpu")
    parser.add_argument("--dtype", choices=sorted(DTYPES), default="bf16" if gpu else "fp32")
    parser.add_argument("--hidden", type=int, default=2048 if gpu else 256, help="hidden size (Llama-3.2-1B: 2048)")
    parser.add_argument("--heads", type=int, default=32 if gpu else 4)
    parser.add_argument("--kv-heads", type=int, default=8 if gpu else 2)
    parser.add_argument("--layers", type=int, default=4 if gpu else 2)
    parser.add_argument("--batch", type=int, default=4 if gpu else 2)
    parser.add_argument("--seq", type=int, default=1024 if gpu else 256)
    parser.add_argument("--reps", type=int, default=10 if gpu else 3)
    parser.add_argument("--backend", default="auto", help="attnsuite backend (default auto)")
    parser.add_argument("--compile", action="store_true", help="also time both under torch.compile")
    parser.add_argument("--out", help="write the figures here as JSON")
    return parser.parse_args()


def build_model(args):
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=32000, hidden_size=args.hidden, intermediate_size=4 * args.hidden,
                         num_hidden_layers=args.layers, num_attention_heads=args.heads,
                         num_key_value_heads=args.kv_heads, max_position_embeddings=max(2048, args.seq),
                         attn_implementation="sdpa")
    torch.manual_seed(0)
    return LlamaForCausalLM(config).to(device=args.device, dtype=DTYPES[args.dtype]).eval()


def use_attention_interface(model):
    """Routes the model's attention through attnsuite's torch op with transformers' own hooks for
    custom attention (AttentionInterface, AttentionMaskInterface): without padding the mask
    function returns no mask, also while torch.compile traces, and the attention runs causal."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    def attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None, is_causal=None, **kwargs):
        causal = getattr(module, "is_causal", True) if is_causal is None else is_causal
        out = drop_in.scaled_dot_product_attention(
            query, key, value, attn_mask=attention_mask, dropout_p=dropout, scale=scaling, enable_gqa=True,
            is_causal=bool(causal and attention_mask is None and query.shape[2] > 1))
        return out.transpose(1, 2).contiguous(), None

    def mask(*args, attention_mask=None, **kwargs):
        if attention_mask is None:  # no padding: the attention is plain causal
            return None
        return sdpa_mask(*args, attention_mask=attention_mask, **kwargs)

    AttentionInterface.register("attnsuite", attention)
    AttentionMaskInterface.register("attnsuite", mask)
    if hasattr(model, "set_attn_implementation"):
        model.set_attn_implementation("attnsuite")
    else:
        model.config._attn_implementation = "attnsuite"


def transformers_version():
    import transformers

    return transformers.__version__


def use_sdpa(model):
    if hasattr(model, "set_attn_implementation"):
        model.set_attn_implementation("sdpa")
    else:
        model.config._attn_implementation = "sdpa"


def cpu_name():
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            return next(line.split(":", 1)[1].strip() for line in cpuinfo if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.machine()


def synchronize(device):
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def time_forward(fn, device, reps):
    fn()  # warm-up (and compilation)
    synchronize(device)
    samples = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        synchronize(device)
        samples.append((time.perf_counter() - start) * 1e3)
    return statistics.median(samples)


def main():
    args = parse_args()
    model = build_model(args)
    tokens = torch.randint(0, 32000, (args.batch, args.seq), device=args.device)
    drop_in.set_backend(args.backend)

    calls = []
    real_forward = drop_in._core.forward

    def counting_forward(backend, *rest, **kwargs):
        calls.append(backend)
        return real_forward(backend, *rest, **kwargs)

    results = {"device": torch.cuda.get_device_name() if args.device.startswith("cuda") else cpu_name(),
               "torch": torch.__version__, "transformers": transformers_version(), "attnsuite": attnsuite.__version__,
               "dtype": args.dtype,
               "model": {"hidden": args.hidden, "heads": args.heads, "kv_heads": args.kv_heads, "layers": args.layers},
               "batch": args.batch, "seq": args.seq}
    with torch.no_grad():
        baseline = model(tokens).logits.float()
        drop_in._core.forward = counting_forward
        with drop_in.patched():
            patched = model(tokens).logits.float()
        drop_in._core.forward = real_forward
        q = torch.empty(args.batch, args.heads, args.seq, args.hidden // args.heads, device=args.device,
                        dtype=DTYPES[args.dtype])
        k = torch.empty(args.batch, args.kv_heads, args.seq, args.hidden // args.heads, device=args.device,
                        dtype=DTYPES[args.dtype])
        results["attnsuite_backend"] = attnsuite.resolve_backend(q, k, k, causal=True, backend=args.backend,
                                                                 layout="bhsd")
        results["attnsuite_calls"] = len(calls)
        difference = (patched - baseline).norm() / baseline.norm()
        results["logits_rel_l2"] = difference.item()
        results["logits_max_abs"] = (patched - baseline).abs().max().item()
        results["tolerance"] = TOLERANCE[args.dtype]
        results["ms_torch_sdpa"] = time_forward(lambda: model(tokens), args.device, args.reps)
        with drop_in.patched():
            results["ms_attnsuite"] = time_forward(lambda: model(tokens), args.device, args.reps)
        results["ok"] = results["attnsuite_calls"] == args.layers and results["logits_rel_l2"] <= results["tolerance"]
        save(args.out, results)  # the eager figures stand even if compiling is cut short
        if args.compile:
            compiled = torch.compile(model)
            results["ms_torch_sdpa_compiled"] = time_forward(lambda: compiled(tokens), args.device, args.reps)
            torch._dynamo.reset()
            # The model's attention routed to attnsuite's op through transformers' AttentionInterface.
            try:
                use_attention_interface(model)
            except Exception as error:  # an older or newer transformers without these hooks
                results["attention_interface"] = f"unavailable: {type(error).__name__}: {error}"
            else:
                results["attention_interface"] = "attnsuite"
                calls.clear()
                drop_in._core.forward = counting_forward
                compiled = torch.compile(model)
                compiled_logits = compiled(tokens).logits.float()
                drop_in._core.forward = real_forward
                results["compiled_attnsuite_calls"] = len(calls)
                results["compiled_logits_rel_l2"] = ((compiled_logits - baseline).norm() / baseline.norm()).item()
                results["ms_attnsuite_compiled"] = time_forward(lambda: compiled(tokens), args.device, args.reps)
                use_sdpa(model)
            save(args.out, results)
            # patch() under torch.compile: whether attnsuite runs depends on transformers and torch.
            # transformers skips the causal mask while compiling only with torch >= 2.14 (its
            # masking_utils._ignore_causal_mask_sdpa); before, the patched F.scaled_dot_product_attention
            # gets a materialized mask and falls back to PyTorch. The calls that reached attnsuite
            # are counted: 0 on the H200 with torch 2.11, 2 (every layer) with torch 2.15 and
            # transformers 5.25 on the CPU.
            torch._dynamo.reset()
            calls.clear()
            drop_in._core.forward = counting_forward
            with drop_in.patched():
                compiled = torch.compile(model)
                compiled_logits = compiled(tokens).logits.float()
            drop_in._core.forward = real_forward
            results["patched_compiled_attnsuite_calls"] = len(calls)
            results["patched_compiled_logits_rel_l2"] = ((compiled_logits - baseline).norm() / baseline.norm()).item()

    ok = results["ok"]
    if args.compile:
        ok = (ok and results.get("compiled_attnsuite_calls") == args.layers
              and results.get("compiled_logits_rel_l2", 1.0) <= results["tolerance"])
    results["ok"] = ok
    for key, value in results.items():
        print(f"{key:>26}: {value}")
    save(args.out, results)
    return 0 if ok else 1


def save(path, results):
    if path:
        with open(path, "w") as file:
            json.dump(results, file, indent=2)
            file.write("\n")


if __name__ == "__main__":
    sys.exit(main())
