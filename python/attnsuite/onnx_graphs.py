"""ONNX graphs of one attention layer (or a whole block), and a runner for ONNX Runtime.

Two forms of the same computation:
  * ``attention``: the standard ``Attention`` operator (opset 23);
  * ``decomposed``: MatMul / Softmax / MatMul with the mask built in the graph (opset 17), the
    graph an exporter writes for a model without the fused operator.

This file depends on numpy and onnx only (onnxruntime for ``Runner``), never on the rest of the
package: the C++ ONNX Runtime peers (src/peers/onnxruntime) execute its text in an embedded
interpreter, and ``attnsuite.onnx`` imports it.

A problem is a dict with the keys of attnsuite's AttentionProblem: batch, heads_q, heads_kv,
seq_q, seq_kv, head_dim, head_dim_v, dtype ("fp32", "fp16"), layout ("bshd", "bhsd"), causal,
window_left, window_right (-1: unbounded), scale (> 0). Causal masks are bottom-right aligned
(FlashAttention's convention, and attnsuite's).
"""

import numpy as np
import onnx
from onnx import TensorProto, helper

ATTENTION_OPSET = 23
DECOMPOSED_OPSET = 17
FORMS = ("attention", "decomposed")

_ONNX_DTYPE = {"fp32": TensorProto.FLOAT, "fp16": TensorProto.FLOAT16}
_NUMPY_DTYPE = {"fp32": np.float32, "fp16": np.float16}


def numpy_dtype(dtype):
    if dtype not in _NUMPY_DTYPE:
        raise ValueError(f"dtype {dtype!r} cannot be run through ONNX Runtime's Python API; allowed: fp32, fp16")
    return _NUMPY_DTYPE[dtype]


def has_mask(p):
    return bool(p["causal"]) or p["window_left"] >= 0 or p["window_right"] >= 0


class _Graph:
    """Collects nodes, initializers and inputs; names are made unique by a counter."""

    def __init__(self):
        self.nodes, self.initializers, self.inputs, self.outputs = [], [], [], []
        self._count = 0

    def name(self, base):
        self._count += 1
        return f"{base}_{self._count}"

    def op(self, op_type, inputs, base=None, outputs=1, **attributes):
        names = [self.name(base or op_type.lower()) for _ in range(outputs)]
        self.nodes.append(helper.make_node(op_type, inputs, names, name=self.name(op_type), **attributes))
        return names[0] if outputs == 1 else names

    def const(self, values, dtype, base="const"):
        name = self.name(base)
        self.initializers.append(onnx.numpy_helper.from_array(np.asarray(values, dtype=dtype), name))
        return name

    def ints(self, values, base="shape"):
        return self.const(values, np.int64, base)


def _visible_mask(g, p, q_seq_axis_source, k_seq_axis_source):
    """A boolean (seq_q, seq_kv) tensor: True where query i sees key j (bottom-right aligned).

    Built from the runtime sequence lengths with Trilu, so it follows dynamic shapes:
    diag = seq_kv - seq_q; causal keeps j <= i + diag (+ window_right), a left window keeps
    j >= i + diag - window_left."""
    seq_q = g.op("Gather", [g.op("Shape", [q_seq_axis_source[0]]), g.ints([q_seq_axis_source[1]])], "seq_q")
    seq_kv = g.op("Gather", [g.op("Shape", [k_seq_axis_source[0]]), g.ints([k_seq_axis_source[1]])], "seq_kv")
    size = g.op("Concat", [seq_q, seq_kv], "mask_shape", axis=0)
    ones = g.op("ConstantOfShape", [size], "ones", value=helper.make_tensor("one", TensorProto.BOOL, [1], [True]))
    diag = g.op("Sub", [seq_kv, seq_q], "diag")  # shape [1]
    diag_scalar = g.op("Squeeze", [diag, g.ints([0])], "diag_scalar")
    visible = None
    right = p["window_right"] if p["window_right"] >= 0 else None
    if p["causal"]:
        right = 0 if right is None else min(right, 0)
    if right is not None:
        k = g.op("Add", [diag_scalar, g.ints(right)], "k_upper")
        visible = g.op("Trilu", [ones, k], "lower", upper=0)
    if p["window_left"] >= 0:
        k = g.op("Sub", [diag_scalar, g.ints(p["window_left"])], "k_lower")
        lower = g.op("Trilu", [ones, k], "upper", upper=1)
        visible = lower if visible is None else g.op("And", [visible, lower], "band")
    return visible


def _to_bhsd(g, x, kind, heads, dim):
    """(B, N, H*D) '3d', (B, N, H, D) 'bshd' or (B, H, N, D) 'bhsd' -> (B, H, N, D)."""
    if kind == "bhsd":
        return x
    if kind == "3d":
        x = g.op("Reshape", [x, g.ints([0, 0, heads, dim])], "split_heads")
    return g.op("Transpose", [x], "to_bhsd", perm=[0, 2, 1, 3])


def _from_bhsd(g, x, kind, heads, dim):
    if kind == "bhsd":
        return x
    x = g.op("Transpose", [x], "to_bshd", perm=[0, 2, 1, 3])
    if kind == "3d":
        x = g.op("Reshape", [x, g.ints([0, 0, heads * dim])], "merge_heads")
    return x


def _attention_core(g, p, form, q, k, v, kind):
    """Emits attention over q, k, v laid out as `kind`; returns the output name in the same kind."""
    hq, hkv, d, dv = p["heads_q"], p["heads_kv"], p["head_dim"], p["head_dim_v"]
    dtype = p["dtype"]
    seq_axis = 2 if kind == "bhsd" else 1
    mask_needed = has_mask(p)
    if form == "attention":
        attributes = {"scale": float(p["scale"])}
        inputs = [q, k, v]
        if kind == "3d":
            attributes.update(q_num_heads=hq, kv_num_heads=hkv)
        elif kind == "bshd":
            raise ValueError("the Attention operator takes (B, N, H*D) or (B, H, N, D) inputs, not 4-D BSHD")
        # is_causal aligns top-left without past keys, so only square causal problems use it;
        # every other mask is a boolean attn_mask built in the graph.
        if mask_needed and p["causal"] and p["window_left"] < 0 and p["window_right"] < 0 and p["seq_q"] == p["seq_kv"]:
            attributes["is_causal"] = 1
        elif mask_needed:
            inputs.append(_visible_mask(g, p, (q, seq_axis), (k, seq_axis)))
        return g.op("Attention", inputs, "attention", **attributes)
    if form != "decomposed":
        raise ValueError(f"form {form!r} is not allowed: one of {', '.join(FORMS)}")
    qh = _to_bhsd(g, q, kind, hq, d)
    kh = _to_bhsd(g, k, kind, hkv, d)
    vh = _to_bhsd(g, v, kind, hkv, dv)
    group = hq // hkv
    kt = g.op("Transpose", [kh], "k_t", perm=[0, 1, 3, 2])  # (B, Hkv, D, Nk)
    if group > 1:
        # Query heads of one kv head side by side: (B, Hkv, G, Nq, D) against (B, Hkv, 1, D, Nk).
        qh = g.op("Reshape", [qh, g.ints([0, hkv, group, -1, d])], "q_groups")
        kt = g.op("Unsqueeze", [kt, g.ints([2])], "k_t_groups")
        vh = g.op("Unsqueeze", [vh, g.ints([2])], "v_groups")
    scores = g.op("MatMul", [qh, kt], "scores")
    if dtype != "fp32":
        scores = g.op("Cast", [scores], "scores_fp32", to=TensorProto.FLOAT)  # softmax in fp32
    scores = g.op("Mul", [scores, g.const(p["scale"], np.float32, "scale")], "scaled")
    if mask_needed:
        visible = _visible_mask(g, p, (q, seq_axis), (k, seq_axis))
        scores = g.op("Where", [visible, scores, g.const(-np.inf, np.float32, "minus_inf")], "masked")
    probs = g.op("Softmax", [scores], "probs", axis=-1)
    if dtype != "fp32":
        probs = g.op("Cast", [probs], "probs_cast", to=_ONNX_DTYPE[dtype])
    out = g.op("MatMul", [probs, vh], "out")
    if group > 1:
        out = g.op("Reshape", [out, g.ints([0, hq, -1, dv])], "out_heads")
    return _from_bhsd(g, out, kind, hq, dv)


def _input_kind(p, form):
    if p["layout"] == "bhsd":
        return "bhsd"
    return "3d" if form == "attention" else "bshd"


def _shape(kind, batch, seq, heads, dim):
    return {"3d": [batch, seq, heads * dim], "bshd": [batch, seq, heads, dim], "bhsd": [batch, heads, seq, dim]}[kind]


def _model(g, opset, doc):
    graph = helper.make_graph(g.nodes, "attnsuite", g.inputs, g.outputs, g.initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                              producer_name="attnsuite", doc_string=doc)
    # The lowest IR version that carries the opset (8 for opset 17, 11 for 23), not the newest
    # the onnx package writes, so older runtimes read the decomposed form.
    model.ir_version = helper.find_min_ir_version_for(list(model.opset_import))
    return model


def attention_model(p, form, dynamic=False):
    """One attention layer: inputs q, k, v, output o, in the problem's layout (BSHD as
    (B, N, H*D) for the Attention operator, (B, N, H, D) for the decomposed graph)."""
    kind = _input_kind(p, form)
    g = _Graph()
    elem = _ONNX_DTYPE.get(p["dtype"])
    if elem is None:
        numpy_dtype(p["dtype"])
    b = "batch" if dynamic else p["batch"]
    # Self-attention (seq_q == seq_kv) declares one symbolic length for q and k: the Attention
    # operator's is_causal (top-left aligned without past keys) is only right when they are equal.
    self_attention = p["seq_q"] == p["seq_kv"]
    nq = ("seq" if self_attention else "seq_q") if dynamic else p["seq_q"]
    nk = ("seq" if self_attention else "seq_kv") if dynamic else p["seq_kv"]
    for name, seq, heads, dim in (("q", nq, p["heads_q"], p["head_dim"]), ("k", nk, p["heads_kv"], p["head_dim"]),
                                  ("v", nk, p["heads_kv"], p["head_dim_v"])):
        g.inputs.append(helper.make_tensor_value_info(name, elem, _shape(kind, b, seq, heads, dim)))
    out = _attention_core(g, p, form, "q", "k", "v", kind)
    g.nodes.append(helper.make_node("Identity", [out], ["o"], name="output"))
    g.outputs.append(helper.make_tensor_value_info("o", elem, _shape(kind, b, nq, p["heads_q"], p["head_dim_v"])))
    opset = ATTENTION_OPSET if form == "attention" else DECOMPOSED_OPSET
    return _model(g, opset, f"attention layer ({form}): {describe(p)}")


def block_weights(p, hidden, seed=0):
    """Q/K/V/O projection weights of a block, as float32 (scaled 1/sqrt(fan in))."""
    rng = np.random.default_rng(seed)
    hq, hkv, d, dv = p["heads_q"], p["heads_kv"], p["head_dim"], p["head_dim_v"]
    shapes = {"wq": (hidden, hq * d), "wk": (hidden, hkv * d), "wv": (hidden, hkv * dv), "wo": (hq * dv, hidden)}
    return {name: (rng.standard_normal(shape) / np.sqrt(shape[0])).astype(np.float32) for name, shape in shapes.items()}


def block_model(p, form, hidden, weights, dynamic=True):
    """A whole attention block: x (B, N, hidden) -> Q/K/V projections -> attention -> O
    projection -> y (B, N, hidden). Self-attention: seq_kv = seq_q."""
    g = _Graph()
    elem = _ONNX_DTYPE[p["dtype"]] if p["dtype"] in _ONNX_DTYPE else numpy_dtype(p["dtype"])
    dt = numpy_dtype(p["dtype"])
    b = "batch" if dynamic else p["batch"]
    n = "seq" if dynamic else p["seq_q"]
    g.inputs.append(helper.make_tensor_value_info("x", elem, [b, n, hidden]))
    q = g.op("MatMul", ["x", g.const(weights["wq"], dt, "wq")], "q_proj")
    k = g.op("MatMul", ["x", g.const(weights["wk"], dt, "wk")], "k_proj")
    v = g.op("MatMul", ["x", g.const(weights["wv"], dt, "wv")], "v_proj")
    block = dict(p, layout="bshd")
    if form == "attention":
        out = _attention_core(g, block, form, q, k, v, "3d")
    else:
        hq, hkv, d, dv = p["heads_q"], p["heads_kv"], p["head_dim"], p["head_dim_v"]
        qs = g.op("Reshape", [q, g.ints([0, 0, hq, d])], "q_bshd")
        ks = g.op("Reshape", [k, g.ints([0, 0, hkv, d])], "k_bshd")
        vs = g.op("Reshape", [v, g.ints([0, 0, hkv, dv])], "v_bshd")
        out = _attention_core(g, block, form, qs, ks, vs, "bshd")
        out = g.op("Reshape", [out, g.ints([0, 0, hq * dv])], "attn_flat")
    y = g.op("MatMul", [out, g.const(weights["wo"], dt, "wo")], "o_proj")
    g.nodes.append(helper.make_node("Identity", [y], ["y"], name="output"))
    g.outputs.append(helper.make_tensor_value_info("y", elem, [b, n, hidden]))
    opset = ATTENTION_OPSET if form == "attention" else DECOMPOSED_OPSET
    return _model(g, opset, f"attention block ({form}), hidden {hidden}: {describe(p)}")


def describe(p):
    mask = "causal" if p["causal"] else "full"
    if p["window_left"] >= 0 or p["window_right"] >= 0:
        mask += f" window ({p['window_left']}, {p['window_right']})"
    return (f"B={p['batch']} Hq={p['heads_q']} Hkv={p['heads_kv']} Nq={p['seq_q']} Nk={p['seq_kv']} "
            f"D={p['head_dim']} Dv={p['head_dim_v']} {p['dtype']} {p['layout']} {mask}")


def onnxruntime_info():
    """(version, available providers) of the importable onnxruntime."""
    import onnxruntime

    return onnxruntime.__version__, list(onnxruntime.get_available_providers())


_PROVIDERS = {"cpu": "CPUExecutionProvider", "cuda": "CUDAExecutionProvider"}


class Runner:
    """One problem's model in an InferenceSession, with its inputs and output bound to caller
    memory by pointer (IOBinding): run() reads and writes those buffers in place, no copies."""

    def __init__(self, p, form, device="cpu", threads=0, stream=0):
        import onnxruntime

        self.problem = dict(p)
        self.device = device
        self.kind = _input_kind(p, form)
        options = onnxruntime.SessionOptions()
        options.log_severity_level = 3
        if threads > 0:
            options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        provider = _PROVIDERS[device]
        if provider not in onnxruntime.get_available_providers():
            raise RuntimeError(f"the installed onnxruntime {onnxruntime.__version__} has no {provider}")
        provider_options = {}
        if device == "cuda" and stream:
            # ORT's kernels go on the harness's stream, so its event timer brackets them.
            provider_options = {"user_compute_stream": str(stream), "has_user_compute_stream": "1"}
        model = attention_model(p, form)
        self.session = onnxruntime.InferenceSession(model.SerializeToString(), options,
                                                    providers=[(provider, provider_options)])
        self.binding = self.session.io_binding()
        self.dtype = numpy_dtype(p["dtype"])
        b, nq, nk = p["batch"], p["seq_q"], p["seq_kv"]
        self.shapes = {"q": _shape(self.kind, b, nq, p["heads_q"], p["head_dim"]),
                       "k": _shape(self.kind, b, nk, p["heads_kv"], p["head_dim"]),
                       "v": _shape(self.kind, b, nk, p["heads_kv"], p["head_dim_v"]),
                       "o": _shape(self.kind, b, nq, p["heads_q"], p["head_dim_v"])}

    def bind(self, q, k, v, o, device_id=0):
        """Binds raw pointers (ints) of dense buffers in the problem's layout."""
        self.binding.clear_binding_inputs()
        self.binding.clear_binding_outputs()
        for name, pointer in (("q", q), ("k", k), ("v", v)):
            self.binding.bind_input(name, self.device, device_id, self.dtype, self.shapes[name], pointer)
        self.binding.bind_output("o", self.device, device_id, self.dtype, self.shapes["o"], o)

    def run(self):
        self.session.run_with_iobinding(self.binding)


def probe(p, form, device="cpu"):
    """Runs a small problem of the same structure (dtype, layout, GQA, mask, head dims) once:
    '' when ONNX Runtime runs it, else its error, first line."""
    small = dict(p, batch=1, heads_kv=min(p["heads_kv"], 2))
    small["heads_q"] = small["heads_kv"] * (p["heads_q"] // p["heads_kv"])
    # The same relation of seq_q to seq_kv: it decides how the mask is expressed.
    small["seq_q"], small["seq_kv"] = {-1: (16, 24), 0: (24, 24), 1: (24, 16)}[(p["seq_q"] > p["seq_kv"]) - (p["seq_q"] < p["seq_kv"])]
    if device != "cpu":
        return ""  # device buffers are needed to run it; the first forward reports errors
    try:
        runner = Runner(small, form, device, threads=1)
        dt = runner.dtype
        rng = np.random.default_rng(0)
        q, k, v = (rng.standard_normal(runner.shapes[n]).astype(dt) for n in ("q", "k", "v"))
        o = np.empty(runner.shapes["o"], dtype=dt)
        runner.bind(q.ctypes.data, k.ctypes.data, v.ctypes.data, o.ctypes.data)
        runner.run()
        if not np.all(np.isfinite(o)):
            return "ONNX Runtime produced non-finite values on a small probe problem"
    except Exception as error:  # the reason becomes Support::no's text
        return str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    return ""
