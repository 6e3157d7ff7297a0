"""attnsuite: attention kernels and the harness that measures them, from Python.

    import numpy as np, attnsuite
    q = k = v = np.random.randn(1, 1024, 16, 64).astype(np.float32)   # (batch, seq, heads, dim)
    o = attnsuite.attention(q, k, v, causal=True)                     # cpu-flash here
    rows = attnsuite.bench(backends=["cpu-flash", "onnxruntime"], seq_lengths=[512, 2048])

Arrays cross through DLPack without copies: numpy on the CPU; torch, cupy and jax on the GPU
(and torch on the CPU). Every call goes through the C++ library's one backend registry, the
same one `attnsuite list` shows; ``bench`` runs the CLI's harness. PyTorch users: see
``attnsuite.torch`` (a drop-in for ``F.scaled_dot_product_attention``); ONNX: ``attnsuite.onnx``.
"""

import json as _json

import numpy as _np

from . import _core
from ._core import UnsupportedError

__version__ = _core.__version__
__all__ = ["attention", "resolve_backend", "backends", "bench", "model_presets", "suites", "UnsupportedError"]

_DTYPE_NAMES = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16"}


def _framework(array):
    module = type(array).__module__.split(".")[0]
    return "jax" if module in ("jaxlib", "jax") else module


def _dtype_name(array):
    name = str(array.dtype).rsplit(".", 1)[-1]
    if name not in _DTYPE_NAMES:
        raise ValueError(f"dtype {array.dtype} is not allowed: float32, float16, bfloat16")
    return _DTYPE_NAMES[name]


def _empty(like, shape, dtype=None):
    """An uninitialized array for `like`'s framework and device (dtype: like's, or "float32"),
    as (what the library writes into, a function that returns the caller's array from it).
    Frameworks whose arrays cannot be written (jax) get memory owned by the library, handed
    over through DLPack after the write."""
    framework = _framework(like)
    if framework == "numpy":
        return _np.empty(shape, dtype=dtype or like.dtype), _same
    if framework == "torch":
        import torch

        return torch.empty(shape, dtype=getattr(torch, dtype) if dtype else like.dtype, device=like.device), _same
    if framework == "cupy":
        import cupy

        return cupy.empty(shape, dtype=dtype or like.dtype), _same
    device_type, device_id = like.__dlpack_device__()
    buffer = _core.empty(list(shape), "fp32" if dtype == "float32" else _dtype_name(like), int(device_type),
                         int(device_id))
    if framework == "jax":
        import jax.dlpack

        return buffer, jax.dlpack.from_dlpack
    return buffer, _same


def _same(array):
    return array


def _stream(array):
    """The framework's current CUDA stream for `array`'s device (0: the CPU, or the default stream)."""
    framework = _framework(array)
    if framework == "torch" and array.is_cuda:
        import torch

        return torch.cuda.current_stream(array.device).cuda_stream
    if framework == "cupy":
        import cupy

        return cupy.cuda.get_current_stream().ptr
    return 0


def _window(window):
    if window is None:
        return -1, -1
    left, right = window
    return int(left), int(right)


def attention(q, k, v, *, causal=False, scale=None, backend="auto", layout="bshd", return_lse=False, window=None,
              out=None):
    """Scaled dot-product attention, softmax(q·kᵀ·scale)·v, through a backend of the registry.

    q: (batch, seq_q, heads_q, dim) for layout "bshd" (FlashAttention's), or (batch, heads_q,
    seq_q, dim) for "bhsd" (PyTorch SDPA's); k, v likewise with seq_kv and heads_kv (heads_q a
    multiple of heads_kv: GQA / MQA); v's dim may differ. Any strides with a contiguous last dim
    (layout "bshd" views of BHSD memory are fine), float32 / float16 / bfloat16 as the backend
    supports. causal: bottom-right aligned when seq_q != seq_kv (FlashAttention >= 2.1).
    scale: default 1/sqrt(dim). window: (left, right) sliding window, -1 unbounded.

    backend: a registry name (``attnsuite.backends()``) or "auto": on the CPU cpu-flash, then
    cpu-vanilla, then reference; on a GPU cudnn, then flash2, then cuda-vanilla — the first
    that supports the problem (that order is the measured one: docs/results). ``resolve_backend``
    says which one runs.

    Returns o in the layout and framework of q (and the float32 log-sum-exp, shape (batch,
    heads_q, seq_q), natural log, when return_lse). Raises UnsupportedError (a ValueError)
    when the backend cannot run the problem, ValueError on bad arguments.
    """
    shape = tuple(q.shape)
    if len(shape) != 4 or len(v.shape) != 4:
        raise ValueError(f"q, k, v must be 4-D ({'batch, seq, heads, dim' if layout == 'bshd' else 'batch, heads, seq, dim'}); "
                         f"got q with shape {shape}")
    out_shape = shape[:3] + (v.shape[3],)
    # numpy, the common CPU case, skips the framework lookups (~2 us of the call).
    is_numpy = type(q) is _np.ndarray
    if out is not None:
        o, finish = out, _same
    elif is_numpy:
        o, finish = _np.empty(out_shape, q.dtype), _same
    else:
        o, finish = _empty(q, out_shape)
    lse = None
    if return_lse:
        heads, seq = (shape[2], shape[1]) if layout == "bshd" else (shape[1], shape[2])
        lse, finish_lse = _empty(q, (shape[0], heads, seq), "float32")
    left, right = _window(window) if window is not None else (-1, -1)
    _core.forward(backend, q, k, v, o, lse, causal, scale, layout, left, right, 0 if is_numpy else _stream(q))
    return (finish(o), finish_lse(lse)) if return_lse else finish(o)


def resolve_backend(q, k, v, *, causal=False, scale=None, backend="auto", layout="bshd", window=None):
    """The registry name of the backend ``attention`` would run for these arguments."""
    left, right = _window(window)
    return _core.resolve(backend, q, k, v, causal, scale, layout, left, right)


def backends():
    """Every backend in this build: name, display_name, peer_of, device, capabilities."""
    return _core.backends()


def model_presets():
    """The model presets ``bench(model=...)`` takes: name, hidden, heads_q, heads_kv, head_dim."""
    return _core.model_presets()


def suites():
    """Names of the built-in suites (bench/suites)."""
    return _core.suite_names()


class Rows(list):
    """The rows of a sweep (one dict per case, the CSV columns), with the run's ``header``
    (machine, versions, git commit, settings), its ``out_dir`` and the terminal ``summary``."""

    header: dict
    out_dir: str
    summary: str


def _as_list(value):
    if value is None:
        return None
    return list(value) if isinstance(value, (list, tuple, set, range)) else [value]


def bench(backends=None, batch_sizes=None, seq_lengths=None, model=None, *, suite=None, dtype=None, causal=None,
          heads=None, kv_heads=None, head_dim=None, seq_kv=None, tokens=None, generator=None, layout=None, window=None,
          seed=None, timing=None, reference_gflop=None, out=None, resume=False, force=False, progress=True,
          dataframe=True):
    """Runs a benchmark sweep with the CLI's harness (``attnsuite bench``) and returns its rows.

    Starts from `suite` (a built-in name or a .json/.toml path; default: "headline" with a GPU,
    else "default") and overrides its axes with the arguments given: backends (names),
    batch_sizes, seq_lengths, model (a preset name or list: sets heads/kv_heads/head_dim),
    dtype ("fp32"/"fp16"/"bf16" or a list), causal (bool, list, or "both"), heads, kv_heads,
    head_dim, seq_kv, tokens (tokens per batch: batch = tokens / seq), generator, layout, window
    ((left, right)), seed, timing (dict: warmup, min_reps, max_reps, noise, min_time_ms,
    max_time_ms, cold), reference_gflop. Results files (JSONL, CSV, JSON, Markdown) go to `out`
    (default results/<suite>-<time>); resume / force as in the CLI. progress: print one line
    per finished case (or a callable(done, total, text)).

    Returns a pandas DataFrame when pandas is installed (and dataframe=True), else a ``Rows``
    list of dicts; both carry the header, out_dir and summary (DataFrame: in ``.attrs``).
    """
    overrides = {}
    for key, value in (("backends", _as_list(backends)), ("batch", _as_list(batch_sizes)),
                       ("seq", _as_list(seq_lengths)), ("model", _as_list(model)), ("dtype", _as_list(dtype)),
                       ("heads", _as_list(heads)), ("kv_heads", _as_list(kv_heads)),
                       ("head_dim", _as_list(head_dim)), ("seq_kv", _as_list(seq_kv)),
                       ("generator", _as_list(generator))):
        if value is not None:
            overrides[key] = value
    if causal is not None:
        overrides["causal"] = [False, True] if causal == "both" else _as_list(causal)
    if tokens is not None:
        overrides["tokens_per_batch"] = int(tokens)
    if layout is not None:
        overrides["layout"] = layout
    if window is not None:
        overrides["window"] = list(window)
    if seed is not None:
        overrides["seed"] = int(seed)
    if timing:
        overrides["timing"] = dict(timing)
    if reference_gflop is not None:
        overrides["accuracy"] = {"reference_gflop": float(reference_gflop)}
    if progress is True:
        def progress(done, total, text):
            print(f"[{done}/{total}] {text}", flush=True)
    result = _json.loads(_core.run_sweep(suite or "", _json.dumps(overrides), str(out or ""), bool(resume),
                                         bool(force), progress or None))
    for warning in result["warnings"]:
        print(f"attnsuite: warning: {warning}")
    rows = Rows(result["rows"])
    rows.header, rows.out_dir, rows.summary = result["header"], result["out_dir"], result["summary"]
    if dataframe:
        try:
            import pandas
        except ImportError:
            return rows
        frame = pandas.DataFrame(list(rows))
        frame.attrs.update(header=rows.header, out_dir=rows.out_dir, summary=rows.summary)
        return frame
    return rows
