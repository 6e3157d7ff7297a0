"""ONNX export of an attention layer or block, validated and checked against attnsuite's reference.

    attnsuite export-onnx --model llama-3.2-1b --seq 256 --block --out onnx/
    python -m attnsuite export-onnx --help

Each model is written in two forms: the standard ``Attention`` operator (opset 23) and the
decomposed MatMul/Softmax graph (opset 17). Every file is validated by onnx.checker (full
check, with shape inference), run through ONNX Runtime on random inputs, and compared with the
fp64 ``reference`` backend (projections of a block in float64 numpy around it).
The graphs themselves are in ``attnsuite.onnx_graphs``; the ONNX Runtime peers of the harness
(``onnxruntime``, ``onnxruntime-decomposed``) run the same graphs.
"""

import argparse
import os
import sys

import numpy as np
import onnx

from . import model_presets
from .onnx_graphs import ATTENTION_OPSET, DECOMPOSED_OPSET, FORMS, attention_model, block_model, block_weights

__all__ = ["problem", "export_layer", "export_block", "check_layer", "check_block", "main"]

# Largest relative L2 error against the fp64 reference that passes: fp32 rounding leaves
# ~1e-7; fp16 inputs and output leave ~3e-4 (half an fp16 ulp of the output).
TOLERANCE = {"fp32": 1e-5, "fp16": 5e-3}


def problem(*, model=None, heads=None, kv_heads=None, head_dim=None, batch=1, seq=128, seq_kv=None, dtype="fp32",
            layout="bshd", causal=False, window=(-1, -1), scale=None):
    """The problem dict of onnx_graphs from a model preset (or heads / kv_heads / head_dim)."""
    hidden = None
    if model is not None:
        presets = {m["name"]: m for m in model_presets()}
        if model not in presets:
            raise ValueError(f"unknown model '{model}'; available: {', '.join(presets)}")
        preset = presets[model]
        heads, kv_heads, head_dim, hidden = preset["heads_q"], preset["heads_kv"], preset["head_dim"], preset["hidden"]
    heads = heads or 16
    head_dim = head_dim or 64
    p = {"batch": batch, "heads_q": heads, "heads_kv": kv_heads or heads, "seq_q": seq, "seq_kv": seq_kv or seq,
         "head_dim": head_dim, "head_dim_v": head_dim, "dtype": dtype, "layout": layout, "causal": bool(causal),
         "window_left": int(window[0]), "window_right": int(window[1]),
         "scale": float(scale) if scale else 1.0 / np.sqrt(head_dim)}
    if p["heads_q"] % p["heads_kv"]:
        raise ValueError(f"heads {p['heads_q']} is not a multiple of kv heads {p['heads_kv']}")
    if dtype not in TOLERANCE:
        raise ValueError(f"dtype '{dtype}' is not allowed for export: {', '.join(TOLERANCE)}")
    p["hidden"] = hidden or heads * head_dim
    return p


def export_layer(path, p, form, dynamic=True):
    model = attention_model(p, form, dynamic=dynamic)
    onnx.checker.check_model(model, full_check=True)
    onnx.save(model, path)
    return model


def export_block(path, p, form, seed=0, dynamic=True):
    weights = block_weights(p, p["hidden"], seed)
    model = block_model(p, form, p["hidden"], weights, dynamic=dynamic)
    onnx.checker.check_model(model, full_check=True)
    onnx.save(model, path)
    return model, weights


def _session(path):
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.log_severity_level = 3
    return onnxruntime.InferenceSession(path, options, providers=["CPUExecutionProvider"])


def _errors(got, expected):
    got, expected = np.asarray(got, np.float64), np.asarray(expected, np.float64)
    diff = got - expected
    return float(np.max(np.abs(diff))), float(np.linalg.norm(diff) / max(np.linalg.norm(expected), 1e-300))


def _reference(q, k, v, p, layout):
    """attnsuite's fp64 reference backend, on q, k, v in `layout` (4-D)."""
    from . import attention

    return attention(q, k, v, causal=p["causal"], scale=p["scale"], backend="reference", layout=layout,
                     window=(p["window_left"], p["window_right"]))


def check_layer(path, p, form, seed=0):
    """Runs the exported layer in ONNX Runtime on random inputs; (max abs error, rel L2) vs reference."""
    rng = np.random.default_rng(seed)
    dt = np.float16 if p["dtype"] == "fp16" else np.float32
    b, nq, nk, hq, hkv, d, dv = (p[key] for key in ("batch", "seq_q", "seq_kv", "heads_q", "heads_kv", "head_dim",
                                                    "head_dim_v"))
    q = rng.standard_normal((b, nq, hq, d)).astype(dt)
    k = rng.standard_normal((b, nk, hkv, d)).astype(dt)
    v = rng.standard_normal((b, nk, hkv, dv)).astype(dt)
    if p["layout"] == "bhsd":
        q, k, v = (np.ascontiguousarray(x.transpose(0, 2, 1, 3)) for x in (q, k, v))
    expected = _reference(q, k, v, p, p["layout"])
    if p["layout"] == "bshd" and form == "attention":  # the operator's 3-D form: (B, N, H*D)
        feeds = {"q": q.reshape(b, nq, -1), "k": k.reshape(b, nk, -1), "v": v.reshape(b, nk, -1)}
    else:
        feeds = {"q": q, "k": k, "v": v}
    (got,) = _session(path).run(None, feeds)
    return _errors(got.reshape(expected.shape), expected)


def check_block(path, p, weights, seed=0):
    """Runs the exported block; (max abs error, rel L2) vs float64 projections around the reference."""
    rng = np.random.default_rng(seed)
    dt = np.float16 if p["dtype"] == "fp16" else np.float32
    b, n, hidden = p["batch"], p["seq_q"], p["hidden"]
    x = rng.standard_normal((b, n, hidden)).astype(dt)
    w = {name: value.astype(dt).astype(np.float64) for name, value in weights.items()}
    x64 = x.astype(np.float64)
    # Q, K, V rounded to the model's dtype, as the model's MatMuls produce them.
    q = (x64 @ w["wq"]).astype(dt).reshape(b, n, p["heads_q"], p["head_dim"])
    k = (x64 @ w["wk"]).astype(dt).reshape(b, n, p["heads_kv"], p["head_dim"])
    v = (x64 @ w["wv"]).astype(dt).reshape(b, n, p["heads_kv"], p["head_dim_v"])
    attended = np.asarray(_reference(q, k, v, dict(p, seq_kv=n), "bshd"), np.float64).reshape(b, n, -1)
    expected = attended @ w["wo"]
    (got,) = _session(path).run(None, {"x": x})
    return _errors(got, expected)


def _parser(prog):
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0])
    shape = parser.add_argument_group("shape (a model preset, or heads / kv heads / head dim)")
    shape.add_argument("--model", help="model preset (attnsuite list), e.g. llama-3.2-1b; default: 16 heads x d64")
    shape.add_argument("--heads", type=int)
    shape.add_argument("--kv-heads", type=int)
    shape.add_argument("--head-dim", type=int)
    shape.add_argument("--batch", type=int, default=1, help="batch of the check inputs (the models take any)")
    shape.add_argument("--seq", type=int, default=128, help="sequence length of the check inputs (default 128)")
    shape.add_argument("--seq-kv", type=int, help="key/value length (layer only; default: --seq)")
    parser.add_argument("--dtype", choices=sorted(TOLERANCE), default="fp32")
    parser.add_argument("--causal", action="store_true", help="causal mask (bottom-right aligned)")
    parser.add_argument("--window", type=int, nargs=2, metavar=("LEFT", "RIGHT"), default=(-1, -1),
                        help="sliding window (-1: unbounded)")
    parser.add_argument("--layout", choices=["bshd", "bhsd"], default="bshd", help="layer inputs' layout")
    parser.add_argument("--form", choices=[*FORMS, "both"], default="both",
                        help=f"attention: the Attention operator (opset {ATTENTION_OPSET}); decomposed: "
                             f"MatMul/Softmax (opset {DECOMPOSED_OPSET}); default both")
    parser.add_argument("--block", action="store_true",
                        help="also write the whole block: Q/K/V projections, attention, O projection")
    parser.add_argument("--static", action="store_true", help="fixed batch and sequence dims (default: symbolic)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the block's weights and the check inputs")
    parser.add_argument("--no-check", action="store_true", help="write and validate only; skip the ONNX Runtime run")
    parser.add_argument("-o", "--out", default="onnx", help="output directory (default ./onnx)")
    return parser


def main(argv=None, prog="attnsuite export-onnx"):
    args = _parser(prog).parse_args(argv)
    try:
        p = problem(model=args.model, heads=args.heads, kv_heads=args.kv_heads, head_dim=args.head_dim,
                    batch=args.batch, seq=args.seq, seq_kv=args.seq_kv, dtype=args.dtype, layout=args.layout,
                    causal=args.causal, window=args.window)
    except ValueError as error:
        print(f"attnsuite: error: {error}", file=sys.stderr)
        return 2
    if args.block and p["seq_kv"] != p["seq_q"]:
        print("attnsuite: error: --block is self-attention: --seq-kv must equal --seq", file=sys.stderr)
        return 2
    os.makedirs(args.out, exist_ok=True)
    forms = FORMS if args.form == "both" else (args.form,)
    failed = 0
    print(f"{'file':<44} {'opset':>5} {'nodes':>5}  {'max abs err':>11} {'rel L2':>9}  result")
    for form in forms:
        outputs = []
        path = os.path.join(args.out, f"attention-layer-{form}.onnx")
        model = export_layer(path, p, form, dynamic=not args.static)
        outputs.append((path, model, lambda path=path, form=form: check_layer(path, p, form, args.seed)))
        if args.block:
            path = os.path.join(args.out, f"attention-block-{form}.onnx")
            model, weights = export_block(path, dict(p, layout="bshd"), form, args.seed, dynamic=not args.static)
            outputs.append((path, model, lambda path=path, weights=weights: check_block(path, p, weights, args.seed)))
        for path, model, check in outputs:
            opset = model.opset_import[0].version
            if args.no_check:
                print(f"{path:<44} {opset:>5} {len(model.graph.node):>5}  {'':>11} {'':>9}  valid (not run)")
                continue
            max_abs, rel_l2 = check()
            ok = rel_l2 <= TOLERANCE[p["dtype"]]
            failed += not ok
            print(f"{path:<44} {opset:>5} {len(model.graph.node):>5}  {max_abs:>11.3e} {rel_l2:>9.2e}  "
                  f"{'ok' if ok else 'FAILED'} (rel L2 limit {TOLERANCE[p['dtype']]:.0e})")
    print(f"shape: {'block hidden ' + str(p['hidden']) + ', ' if args.block else ''}"
          f"B={p['batch']} Hq={p['heads_q']} Hkv={p['heads_kv']} Nq={p['seq_q']} Nk={p['seq_kv']} D={p['head_dim']} "
          f"{p['dtype']} {p['layout']}{' causal' if p['causal'] else ''}; checked against the fp64 reference backend")
    return 1 if failed else 0
