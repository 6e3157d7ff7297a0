"""attnsuite: attention kernels and the harness that measures them, from Python.

    import numpy as np, attnsuite
    q = k = v = np.random.randn(1, 1024, 16, 64).astype(np.float32)   # (batch, seq, heads, dim)
    o = attnsuite.attention(q, k, v, causal=True)                     # cpu-flash here
    rows = attnsuite.bench(backends=["cpu-flash", "onnxruntime"], seq_lengths=[512, 2048])
    tuned = attnsuite.tune_batch_size(backends=["cpu-flash"], seq_lengths=[1024], max_memory_gib=4)
    attnsuite.plot(rows)                                              # PNG + SVG, as `attnsuite report --plots`

Arrays cross through DLPack without copies: numpy on the CPU; torch, cupy and jax on the GPU
(and torch on the CPU). Every call goes through the C++ library's one backend registry, the
same one `attnsuite list` shows; ``bench``, ``tune_batch_size`` and ``plot`` run the CLI's
harness, tuner and plots (`attnsuite bench`, `tune --batch`, `report --plots`). PyTorch users: see
``attnsuite.torch`` (a drop-in for ``F.scaled_dot_product_attention``); ONNX: ``attnsuite.onnx``.
"""

import importlib.util as _importlib_util
import json as _json
import math as _math
import os as _os
import sys as _sys
import tempfile as _tempfile
import threading as _threading

import numpy as _np

from . import _core
from ._core import UnsupportedError

__version__ = _core.__version__
__all__ = ["attention", "attention_backward", "resolve_backend", "auto_choice", "backends", "bench", "tune_batch_size",
           "plot", "model_presets", "suites", "set_backend_cache", "backend_cache_path", "UnsupportedError"]

_DTYPE_NAMES = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16", "float8_e4m3fn": "e4m3"}


def _framework(array):
    module = type(array).__module__.split(".")[0]
    return "jax" if module in ("jaxlib", "jax") else module


def _dtype_name(array):
    name = str(array.dtype).rsplit(".", 1)[-1]
    if name not in _DTYPE_NAMES:
        raise ValueError(f"dtype {array.dtype} is not allowed: float32, float16, bfloat16")
    return _DTYPE_NAMES[name]


def _check_arrays(named):
    """What DLPack cannot take, said once and clearly (nanobind's own message lists overloads)."""
    for name, array in named:
        if not hasattr(array, "__dlpack__"):
            raise TypeError(f"{name} is a {type(array).__module__}.{type(array).__qualname__}; attention takes arrays "
                            "with DLPack: numpy (CPU), torch (CPU or CUDA), cupy or jax (CUDA)")


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
    buffer = _core.empty(list(shape), _DTYPE_NAMES[dtype] if dtype else _dtype_name(like), int(device_type),
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


# What the module answered about a named backend and a problem (its workspace size; the drop-in:
# whether it has a backward), by the question: a training step asks the same of every layer, each
# time ~8 us of host time (2-core development VM). "auto" is asked every time (its choice can change
# with the backend cache).
_answers = {}
_ANSWERS_LIMIT = 4096


def _answer(question, ask):
    try:
        return _answers[question]
    except KeyError:
        pass
    answer = ask()
    if len(_answers) >= _ANSWERS_LIMIT:
        _answers.clear()
    _answers[question] = answer
    return answer


def _problem_key(q, k, v, causal, scale):
    """A torch call's problem as a question's part: shapes, strides, dtype, device, mask, scale."""
    return (q.shape, q.stride(), k.shape, k.stride(), v.shape, v.stride(), q.dtype, q.device, causal, scale)


def _workspace(like, backend, q, k, v, causal, scale, layout, left, right, plan, backward=False,
               deterministic=False, dtype="", descale=None):
    """A torch tensor's call gets its workspace from PyTorch's caching allocator (ordered on the
    stream like any tensor), so the module allocates nothing and does not wait for the stream;
    None for other frameworks (the module allocates its own) and backends that need none."""
    if _framework(like) != "torch":
        return None
    import torch

    def ask():
        return _core.workspace_bytes(backend, q, k, v, causal, scale, layout, left, right, backward, deterministic,
                                     *plan, dtype, descale)

    if backend == "auto":
        nbytes = ask()
    else:
        question = ("workspace", backend, plan[0], tuple(sorted(plan[1].items())), layout, left, right, backward,
                    deterministic, dtype, None if descale is None else tuple(descale),
                    *_problem_key(q, k, v, causal, scale))
        nbytes = _answer(question, ask)
    return torch.empty(nbytes, dtype=torch.uint8, device=like.device) if nbytes else None


def _window(window):
    if window is None:
        return -1, -1
    left, right = window
    return int(left), int(right)


def _plan_arguments(kernel_config, options):
    """(kernel_config, options) as _core takes them: a string ("" = the backend's choice) and a
    dict of strings."""
    if kernel_config is not None and not isinstance(kernel_config, str):
        raise ValueError(f"kernel_config must be a string (a backend's kernel config name) or None, got {kernel_config!r}")
    if options is None:
        options = {}
    if not isinstance(options, dict) or not all(isinstance(key, str) for key in options):
        raise ValueError(f"options must be a dict of option names to strings, got {options!r}")
    return kernel_config or "", {key: str(value) for key, value in options.items()}


def _descale(descale):
    """(dq, dk, dv) as _core takes it: a list of floats, or None."""
    return None if descale is None else [float(x) for x in descale]


def _is_e4m3(array, dtype):
    return dtype == "e4m3" or str(getattr(array, "dtype", "")).rsplit(".", 1)[-1] == "float8_e4m3fn"


def attention(q, k, v, *, causal=False, scale=None, backend="auto", layout="bshd", return_lse=False,
              return_backend=False, window=None, out=None, kernel_config=None, options=None, descale=None, dtype=None):
    """Scaled dot-product attention, softmax(q·kᵀ·scale)·v, through a backend of the registry.

    q: (batch, seq_q, heads_q, dim) for layout "bshd" (FlashAttention's), or (batch, heads_q,
    seq_q, dim) for "bhsd" (PyTorch SDPA's); k, v likewise with seq_kv and heads_kv (heads_q a
    multiple of heads_kv: GQA / MQA); v's dim may differ. Any strides with a contiguous last dim
    (layout "bshd" views of BHSD memory are fine), float32 / float16 / bfloat16 as the backend
    supports. causal: bottom-right aligned when seq_q != seq_kv (FlashAttention >= 2.1).
    scale: default 1/sqrt(dim). window: (left, right) sliding window, -1 unbounded.

    FP8 inputs: torch.float8_e4m3fn tensors, or uint8 arrays of e4m3 bytes with dtype="e4m3"
    (numpy has no float8 type), with descale=(dq, dk, dv): the per-tensor factors, real value =
    e4m3 x descale. The output is bfloat16 (float32 for numpy, which has no bfloat16: the bf16
    result widened exactly). Backends: reference, cpu-vanilla, cpu-flash; on a GPU flash3-fp8 and
    the cudnn peer (experimental). No backward.

    backend: a registry name (``attnsuite.backends()``) or "auto": the fastest correct backend
    for this problem on this device according to the backend cache that ``tune_batch_size`` and
    ``attnsuite tune --batch`` write (keyed by GPU name and driver, or CPU model, and shape
    class: ``backend_cache_path()``), then the default order — on the CPU cpu-flash,
    cpu-vanilla, reference; on a GPU cudnn, flash3, flash2, cuda-vanilla (measured:
    docs/results) — the first that supports the problem. ``resolve_backend`` says which one
    runs, ``auto_choice`` also why.

    kernel_config: the backend's kernel configuration to run (e.g. flash3's "m192"); None: its own
    choice (the kernel-config cache, else its built-in rule). A name it does not have raises
    ValueError listing the ones it has. options: backend options as a dict of strings (e.g.
    {"block_mask": "band:8"}, {"sparse_config": PATH}); a key the backend does not read raises
    ValueError naming the keys it reads.

    Returns o in the layout and framework of q; with return_lse also the float32 log-sum-exp,
    shape (batch, heads_q, seq_q), natural log (what ``attention_backward`` takes); with
    return_backend also the name of the backend that ran: (o, lse, name), (o, name) or (o, lse).
    Raises UnsupportedError (a ValueError) when the backend cannot run the problem, ValueError
    on bad arguments.
    """
    if type(q) is not _np.ndarray or type(k) is not _np.ndarray or type(v) is not _np.ndarray:
        _check_arrays((("q", q), ("k", k), ("v", v), ("out", out if out is not None else q)))
    shape = tuple(q.shape)
    if len(shape) != 4 or len(v.shape) != 4:
        raise ValueError(f"q, k, v must be 4-D ({'batch, seq, heads, dim' if layout == 'bshd' else 'batch, heads, seq, dim'}); "
                         f"got q with shape {shape}")
    out_shape = shape[:3] + (v.shape[3],)
    # numpy, the common CPU case, skips the framework lookups (~2 us of the call).
    is_numpy = type(q) is _np.ndarray
    if out is not None:
        if isinstance(out, _np.ndarray) and not out.flags.writeable:
            raise ValueError("out is a read-only numpy array; it must be writable")
        o, finish = out, _same
    elif _is_e4m3(q, dtype):
        o, finish = (_np.empty(out_shape, _np.float32), _same) if is_numpy else _empty(q, out_shape, "bfloat16")
    elif is_numpy:
        o, finish = _np.empty(out_shape, q.dtype), _same
    else:
        o, finish = _empty(q, out_shape)
    lse = None
    if return_lse:
        heads, seq = (shape[2], shape[1]) if layout == "bshd" else (shape[1], shape[2])
        lse, finish_lse = _empty(q, (shape[0], heads, seq), "float32")
    left, right = _window(window) if window is not None else (-1, -1)
    plan = _plan_arguments(kernel_config, options)
    workspace = None if is_numpy else _workspace(q, backend, q, k, v, causal, scale, layout, left, right, plan,
                                                 dtype=dtype or "", descale=_descale(descale))
    name = _core.forward(backend, q, k, v, o, lse, causal, scale, layout, left, right, 0 if is_numpy else _stream(q),
                         *plan, dtype or "", _descale(descale), workspace)
    if not return_lse and not return_backend:
        return finish(o)
    return (finish(o),) + ((finish_lse(lse),) if return_lse else ()) + ((name,) if return_backend else ())


def attention_backward(q, k, v, out, lse, grad_out, *, causal=False, scale=None, backend="auto", layout="bshd",
                       window=None, deterministic=False, dq=None, dk=None, dv=None, kernel_config=None, options=None):
    """The gradients dq, dk, dv of ``attention``: from its inputs q, k, v, what it returned (out,
    and the lse of return_lse=True) and grad_out, the gradient of the loss with respect to out
    (shaped like out). causal, scale, layout and window must be the forward's.

    backend: the one the forward ran (``attention(..., return_backend=True)`` names it), or
    "auto": the backend ``attention`` picks for these arrays. The log-sum-exp means the same for
    every backend, so a forward on one and the backward on another also agree. A backend without
    a backward for the problem raises UnsupportedError saying so.
    deterministic: ask for a run-to-run bitwise-equal result where the backend would otherwise
    accumulate in a varying order. dq, dk, dv: arrays to write into (like q, k, v), else new
    ones in q's framework and device. kernel_config, options: as for ``attention`` (e.g.
    options={"experimental_backward": "1"} opts in to flash2's backward, which is correct on the
    GPU but slower than FlashAttention-2's).

    Returns (dq, dk, dv); with GQA / MQA dk and dv are summed over each group's query heads.
    """
    if type(q) is not _np.ndarray:
        _check_arrays((("q", q), ("k", k), ("v", v), ("out", out), ("lse", lse), ("grad_out", grad_out)))
    left, right = _window(window)
    if backend == "auto":
        backend = _core.resolve(backend, q, k, v, causal, scale, layout, left, right)
    grads = []
    for given, like in ((dq, q), (dk, k), (dv, v)):
        if given is not None:
            grads.append((given, _same))
        elif type(like) is _np.ndarray:
            grads.append((_np.empty(like.shape, like.dtype), _same))
        else:
            grads.append(_empty(like, tuple(like.shape)))
    (dq, finish_dq), (dk, finish_dk), (dv, finish_dv) = grads
    plan = _plan_arguments(kernel_config, options)
    workspace = _workspace(q, backend, q, k, v, causal, scale, layout, left, right, plan, backward=True,
                           deterministic=bool(deterministic))
    _core.backward(backend, q, k, v, out, grad_out, lse, dq, dk, dv, causal, scale, layout, left, right,
                   bool(deterministic), _stream(q), *plan, workspace)
    return finish_dq(dq), finish_dk(dk), finish_dv(dv)


def resolve_backend(q, k, v, *, causal=False, scale=None, backend="auto", layout="bshd", window=None, descale=None,
                    dtype=None):
    """The registry name of the backend ``attention`` would run for these arguments."""
    left, right = _window(window)
    return _core.resolve(backend, q, k, v, causal, scale, layout, left, right, dtype or "", _descale(descale))


def auto_choice(q, k, v, *, causal=False, scale=None, backend="auto", layout="bshd", window=None, descale=None,
                dtype=None):
    """What ``attention(..., backend="auto")`` runs and why: a dict with backend, source ("backend
    cache PATH (CLASS)" or "default order"), shape_class (the cache's key for this problem) and
    passed_over (the candidates before it, each with its reason)."""
    left, right = _window(window)
    return _core.auto_choice(backend, q, k, v, causal, scale, layout, left, right, dtype or "", _descale(descale))


def set_backend_cache(path=None):
    """The backend cache file that backend="auto" reads: a path; None: the default
    ($ATTNSUITE_CACHE_DIR/backends.json, else $XDG_CACHE_HOME/attnsuite/, else
    ~/.cache/attnsuite/); False or "": none (the default order alone)."""
    _core.set_backend_cache("" if path is False or path == "" else (None if path is None else _os.fspath(path)))


def backend_cache_path():
    """The backend cache file "auto" reads (it need not exist yet), or None when disabled."""
    return _core.backend_cache_path()


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


def _on_main_thread():
    """Whether signals can be handled here: bench and tune_batch_size stop on SIGINT and SIGTERM
    (saving what they finished) only on the main thread, where Python delivers signals."""
    return _threading.current_thread() is _threading.main_thread()


def _as_list(value):
    if value is None:
        return None
    return list(value) if isinstance(value, (list, tuple, set, range)) else [value]


def _suite_overrides(backends=None, batch_sizes=None, seq_lengths=None, model=None, dtype=None, causal=None,
                     heads=None, kv_heads=None, head_dim=None, seq_kv=None, tokens=None, generator=None, layout=None,
                     window=None, seed=None, timing=None, reference_gflop=None):
    """The suite keys that the arguments of bench / tune_batch_size set (the CLI's flags)."""
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
    return overrides


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
    Ctrl-C stops the case in progress within a fraction of a second (KeyboardInterrupt once the
    finished cases are saved; resume=True finishes the sweep); SIGTERM saves them the same way,
    then ends the process by SIGTERM.
    """
    overrides = _suite_overrides(backends, batch_sizes, seq_lengths, model, dtype, causal, heads, kv_heads, head_dim,
                                 seq_kv, tokens, generator, layout, window, seed, timing, reference_gflop)
    if progress is True:
        def progress(done, total, text):
            print(f"[{done}/{total}] {text}", flush=True)
    result = _json.loads(_core.run_sweep(suite or "", _json.dumps(overrides), str(out or ""), bool(resume),
                                         bool(force), progress or None, _on_main_thread()))
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


class Tuning(list):
    """The result of ``tune_batch_size``: one dict per tuned case (backend × shape) with the best
    batch and its figures (best_batch None, and ``reason``, when no batch was feasible); its
    ``entries`` (tune.json's "tuning": every probe), ``rows`` (every probe's results row),
    ``header``, ``out_dir``, ``table`` (the CLI's table), ``cache_path`` (the backend cache
    updated, or None) and ``document`` (all of tune.json)."""

    entries: list
    rows: list
    header: dict
    out_dir: str
    table: str
    cache_path: str
    document: dict


def _tuning_summary(entry):
    best = entry["search"]["best"] or {}
    row = {key: entry.get(key) for key in ("backend", "display_name", "device", "dtype", "layout", "heads_q",
                                           "heads_kv", "head_dim", "seq_q", "seq_kv", "causal")}
    row.update(best_batch=best.get("batch"), tokens_per_s=best.get("tokens_per_s"), p95_ms=best.get("p95_ms"),
               median_ms=best.get("median_ms"), memory_gib=best.get("memory_gib"),
               largest_feasible=entry["search"]["largest_feasible"], evaluations=entry["search"]["evaluations"],
               reason=entry["search"]["reason"])
    sweep = entry.get("exhaustive")
    if sweep is not None:
        sweep_best = sweep["best"] or {}
        row.update(sweep_best_batch=sweep_best.get("batch"), sweep_tokens_per_s=sweep_best.get("tokens_per_s"),
                   sweep_evaluations=sweep["evaluations"], agrees=sweep.get("agrees"))
    return row


def tune_batch_size(backends=None, seq_lengths=None, model=None, *, suite=None, dtype=None, causal=None, heads=None,
                    kv_heads=None, head_dim=None, seq_kv=None, generator=None, layout=None, window=None, seed=None,
                    max_memory_gib=None, p95_ms=None, min_batch=1, max_batch=1024, tolerance=0.0, flat_gain=0.05,
                    time_budget_s=60.0, exhaustive=False, timing=None, reference_gflop=None, out=None, force=False,
                    cache=True, progress=True, dataframe=True):
    """The batch size of highest throughput (tokens/s) per backend and shape whose memory stays
    under `max_memory_gib` (inputs plus the backend's peak extra memory; default: what the device
    has) and whose p95 latency stays under `p95_ms` — ``attnsuite tune --batch``, the same
    tuner and runner (docs/methodology.md, "Batch tuning").

    The cases are the suite's (default: "headline" with a GPU, else "default") with the axes
    given here overridden, as in ``bench``; the suite's batch axis is the tuner's to choose
    (min_batch..max_batch). tolerance > 0: a side of the peak whose throughput is within this
    (relative), or twice its noise, of the best is not split finer (``--tolerance``; fewer
    probes, may miss a wave-quantization peak). flat_gain: the search stops growing the batch at a
    step (×4) that gains less throughput than this (relative, default 5%) or than twice the noise
    (a flat curve, as on a CPU); 0 grows to the limits. time_budget_s: per case, no probe starts
    once the probes took this long (default 60 s; 0: none); the answer is the best batch measured
    by then (``--flat-gain``, ``--time-budget``). exhaustive:
    also measure every batch, to check the search (not bound by the time budget). timing,
    reference_gflop: per probe, as in ``bench``. Writes tune.json and tune.md into `out`
    (default results/tune-<suite>-<time>; an existing tune.json needs force=True) and, unless
    cache is False, updates the backend cache that backend="auto" reads (cache=True: the one
    ``backend_cache_path()`` names; or a path). progress: print each case and probe (or a
    callable(kind, text), kind "case", "probe" or "sweep").

    Returns a pandas DataFrame (one row per case; ``.attrs`` holds the rest) when pandas is
    installed and dataframe=True, else a ``Tuning`` list. Ctrl-C stops the probe in progress
    within a fraction of a second (KeyboardInterrupt once the cases tuned so far are saved);
    SIGTERM saves them the same way, then ends the process by SIGTERM.
    """
    overrides = _suite_overrides(backends, None, seq_lengths, model, dtype, causal, heads, kv_heads, head_dim, seq_kv,
                                 None, generator, layout, window, seed, timing, None)
    if cache is True:
        cache_path = _core.backend_cache_path() or _core.default_backend_cache_path()
    elif cache is False or cache is None:
        cache_path = None
    else:
        cache_path = _os.fspath(cache)
    if progress is True:
        def progress(kind, text):
            print(("  " if kind != "case" else "tune ") + text, flush=True)
    result = _json.loads(_core.tune_batch(
        suite or "", _json.dumps(overrides), int(min_batch), int(max_batch),
        None if max_memory_gib is None else float(max_memory_gib), None if p95_ms is None else float(p95_ms),
        float(tolerance), float(flat_gain), float(time_budget_s), bool(exhaustive),
        None if reference_gflop is None else float(reference_gflop), str(out or ""), bool(force), cache_path,
        progress or None, _on_main_thread()))
    for warning in result["warnings"]:
        print(f"attnsuite: warning: {warning}")
    document = result["document"]
    tuning = Tuning(_tuning_summary(entry) for entry in document["tuning"])
    tuning.entries, tuning.rows, tuning.header = document["tuning"], document["rows"], document["header"]
    tuning.out_dir, tuning.table, tuning.cache_path = result["out_dir"], result["table"], result["cache_path"]
    tuning.document = document
    if dataframe:
        try:
            import pandas
        except ImportError:
            return tuning
        frame = pandas.DataFrame(list(tuning))
        frame.attrs.update(entries=tuning.entries, rows=tuning.rows, header=tuning.header, out_dir=tuning.out_dir,
                           table=tuning.table, cache_path=tuning.cache_path, document=document)
        return frame
    return tuning


def _finite(value):
    """JSON has no NaN: a DataFrame's missing numbers become null."""
    if isinstance(value, float) and not _math.isfinite(value):
        return None
    if isinstance(value, (_np.floating,)):
        return _finite(float(value))
    if isinstance(value, (_np.integer,)):
        return int(value)
    if isinstance(value, (_np.bool_,)):
        return bool(value)
    return value


def _results_document(source):
    """(header, rows, tuning, out_dir) of what bench / tune_batch_size returned."""
    attrs = getattr(source, "attrs", None)
    if isinstance(source, Tuning):
        return source.document["header"], source.rows, source.entries, source.out_dir
    if attrs is not None and "document" in attrs:  # a tune_batch_size DataFrame
        document = attrs["document"]
        return document["header"], document["rows"], document["tuning"], attrs.get("out_dir")
    if attrs is not None and "header" in attrs:  # a bench DataFrame (perhaps filtered)
        records = [{key: _finite(value) for key, value in record.items()} for record in source.to_dict("records")]
        return attrs["header"], records, [], attrs.get("out_dir")
    if isinstance(source, Rows):
        return source.header, list(source), [], source.out_dir
    raise TypeError(f"plot takes a results file or directory, or what bench / tune_batch_size returned; "
                    f"got a {type(source).__module__}.{type(source).__qualname__}")


def plot(source, out=None):
    """The report's plots (``attnsuite report FILE --plots DIR``: src/report/plots.py with
    matplotlib) of `source`: what ``bench`` or ``tune_batch_size`` returned (a DataFrame may be
    filtered first), or a results file (.json, .jsonl, .csv, tune.json) or a directory holding
    one. PNG and SVG files go to `out` (default: <the results directory>/plots).

    Returns a list of dicts, one per plot: name, title, caption, png, svg (paths). Raises
    OSError when no Python with matplotlib can be found (this interpreter is tried first).
    """
    python = _sys.executable if _importlib_util.find_spec("matplotlib") is not None else ""
    if isinstance(source, (str, bytes, _os.PathLike)):
        path = _os.fspath(source)
        if _os.path.isdir(path):
            found = [name for name in ("tune.json", "results.json", "results.jsonl", "results.csv")
                     if _os.path.exists(_os.path.join(path, name))]
            if not found:
                raise ValueError(f"'{path}' holds no tune.json, results.json, results.jsonl or results.csv")
            path = _os.path.join(path, found[0])
        out = _os.fspath(out) if out is not None else _os.path.join(_os.path.dirname(_os.path.abspath(path)), "plots")
        return _core.plot(path, out, python)
    header, rows, tuning, out_dir = _results_document(source)
    if out is None:
        if not out_dir:
            raise ValueError("plot: say where the plots go (out=...): these results have no directory")
        out = _os.path.join(out_dir, "plots")
    with _tempfile.TemporaryDirectory(prefix="attnsuite-plot-") as scratch:
        path = _os.path.join(scratch, "results.json")
        with open(path, "w") as file:
            _json.dump({"header": header, "rows": rows, "tuning": tuning}, file, allow_nan=False)
        return _core.plot(path, _os.fspath(out), python)
