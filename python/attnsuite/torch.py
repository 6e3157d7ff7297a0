"""A drop-in for ``torch.nn.functional.scaled_dot_product_attention`` on attnsuite's kernels.

    import attnsuite.torch
    attnsuite.torch.patch()            # every F.scaled_dot_product_attention call, e.g. a
    model(**inputs)                    # transformers model with attn_implementation="sdpa"
    loss.backward()                    # the gradients from attnsuite's backward too
    attnsuite.torch.unpatch()

``patch("flash3", options={"backward_order": "head-major"})`` runs one named backend with its
kernel config and backend options, as ``attnsuite.attention`` and ``attnsuite bench
--backend-option`` take them (a key the backend does not read raises ValueError at the first
call); "auto" takes neither.

``scaled_dot_product_attention`` has F.scaled_dot_product_attention's signature. It runs
through torch custom ops (torch.library, with fake implementations, so ``torch.compile`` traces
them without a graph break into our code): ``attnsuite::sdpa`` when no input needs a gradient,
else ``attnsuite::sdpa_fwd`` (the output and the log-sum-exp), whose registered backward is
``attnsuite::sdpa_bwd`` (dq, dk, dv from the backend's backward; deterministic while
``torch.use_deterministic_algorithms(True)`` is on). In eager mode the same code runs without
the custom-op dispatch (an autograd.Function: less host time a call); under torch.compile and
other tracing, the ops. What attnsuite does not do falls back to
PyTorch's own SDPA with a one-time warning per reason: an attn_mask, dropout, inputs that need a
gradient when the backend has no backward for the problem, a causal mask with seq_q != seq_kv
(PyTorch aligns it top-left, attnsuite bottom-right), inputs that are not 3-D or 4-D, dtypes
other than float32/float16/bfloat16 or mixed, inputs on different devices, a last dim that is
not contiguous, and problems the chosen backend does not support (its reason is in the warning).
Under ``torch.compile`` the checks that ask the backend run inside the ops instead, at run time
(a compiled graph holds the ops whatever the backend then says): the ops fall back there, the
forward to PyTorch's SDPA (or, when the log-sum-exp is needed, the same attention in PyTorch
operations) and the backward to that attention's backward in PyTorch operations.
"""

import functools
import json
import threading
import warnings
from typing import Optional, Tuple

import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import _get_current_dispatch_mode as _current_dispatch_mode
from torch.utils.dlpack import to_dlpack as _to_dlpack

from . import _core
from . import _answer, _plan_arguments, _problem_key
from . import _workspace as _package_workspace

__all__ = ["scaled_dot_product_attention", "patch", "unpatch", "patched", "set_backend", "get_backend",
           "get_backend_plan"]

# PyTorch's implementation, captured before any patch: the fallback and what unpatch() restores.
_torch_sdpa = F.scaled_dot_product_attention
_backend = "auto"
# The backend's kernel config and options as the ops take them: one string ("" when there are
# none; else JSON), so that a compiled graph holds them and the backward runs with the forward's.
_plan = ""
_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
_warned = set()
_warned_lock = threading.Lock()


def set_backend(name, kernel_config=None, options=None):
    """The attnsuite backend the drop-in uses ("auto", or a name from attnsuite.backends()) and,
    for a named one, its kernel config and backend options (as ``attnsuite.attention`` takes them)."""
    global _backend, _plan
    name = str(name)
    config, option_map = _plan_arguments(kernel_config, options)
    if name == "auto" and (config or option_map):
        raise ValueError("attnsuite.torch: a kernel_config or options belong to a named backend; backend 'auto' "
                         "takes neither")
    _backend = name
    _plan = json.dumps({"kernel_config": config, "options": option_map}, sort_keys=True) if config or option_map else ""


def get_backend():
    return _backend


def get_backend_plan():
    """(backend, kernel_config or None, options dict) the drop-in runs."""
    config, options = _plan_of(_plan)
    return _backend, config or None, dict(options)


@functools.lru_cache(maxsize=32)
def _plan_of(plan):
    """(kernel_config, options) from an op's plan string, decoded once per string (every call of
    the ops asks; the options dict is shared: read it, do not change it)."""
    if not plan:
        return "", {}
    decoded = json.loads(plan)
    return decoded["kernel_config"], decoded["options"]


def _warn_once(reason):
    with _warned_lock:
        if reason in _warned:
            return
        _warned.add(reason)
    warnings.warn(f"attnsuite.torch: falling back to PyTorch's scaled_dot_product_attention: {reason} "
                  "(this warning is shown once per reason)", RuntimeWarning, stacklevel=3)


def _stream(tensor):
    return torch.cuda.current_stream(tensor.device).cuda_stream if tensor.is_cuda else 0


def _workspace(backend, plan, query, key, value, is_causal, scale, backward=False):
    """The op's workspace from PyTorch's caching allocator (attnsuite._workspace): without it the
    module allocates its own and waits for the stream before freeing it, once per layer and pass of
    a training step. plan: (kernel_config, options)."""
    return _package_workspace(query, backend, query, key, value, is_causal, scale, "bhsd", -1, -1, plan,
                              backward=backward,
                              deterministic=backward and torch.are_deterministic_algorithms_enabled())


def _capsule(tensor):
    """A tensor (or None) as _core takes it: a DLPack capsule from torch.utils.dlpack.to_dlpack.
    Handing the module the tensor itself has it call Tensor.__dlpack__, whose Python checks and
    stream handshake (the current and the default stream looked up, compared) are repeated for
    each of the 5 to 10 tensors of a call; the module runs on the stream it is given
    (_stream(query)), the one the tensors were made on, so the handshake orders nothing."""
    return None if tensor is None else _to_dlpack(tensor)


def _capsules(*tensors):
    return [_to_dlpack(tensor) for tensor in tensors]


def _last_dim_dense(*tensors):
    """The tensors as the kernels take them: detached (DLPack refuses tensors that require grad)
    and with a contiguous last dim. The wrapper falls back for other inputs; a compiled graph may
    still hand an op other strides than eager mode did."""
    return tuple(x.detach() if x.stride(-1) == 1 else x.detach().contiguous() for x in tensors)


def _attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, is_causal: bool, scale: Optional[float],
               backend: str, plan: str = "") -> torch.Tensor:
    """4-D (batch, heads, seq, dim) inputs, PyTorch's layout; GQA when key has fewer heads. plan:
    the backend's kernel config and options (set_backend)."""
    query, key, value = _last_dim_dense(query, key, value)
    out = torch.empty(query.shape[:3] + (value.shape[3],), dtype=query.dtype, device=query.device)
    config = _plan_of(plan)
    try:
        _core.forward(backend, *_capsules(query, key, value, out), None, is_causal, scale, "bhsd", -1, -1,
                      _stream(query), *config,
                      workspace=_capsule(_workspace(backend, config, query, key, value, is_causal, scale)))
    except _core.UnsupportedError as error:
        # Inside the op, so compiled graphs fall back too.
        _warn_once(str(error))
        if is_causal and query.shape[2] != key.shape[2]:  # PyTorch's SDPA would align it top-left
            return _torch_attention(query, key, value, is_causal, scale)[0]
        group = query.shape[1] // key.shape[1]
        if group > 1:
            key, value = key.repeat_interleave(group, dim=1), value.repeat_interleave(group, dim=1)
        out = _torch_sdpa(query, key, value, is_causal=is_causal, scale=scale)
    return out


_sdpa = torch.library.custom_op("attnsuite::sdpa", mutates_args=())(_attention)


@_sdpa.register_fake
def _(query, key, value, is_causal, scale, backend, plan=""):
    return query.new_empty(query.shape[:3] + (value.shape[3],))


def _torch_probabilities(query, key, is_causal, scale):
    """softmax(scale * q k^T) with attnsuite's semantics (GQA: key has fewer heads; causal aligned
    bottom-right; a row that sees no key is all 0) and the natural-log LSE (-inf for such rows),
    in fp32 for 16-bit inputs: (probabilities, lse, the key with its heads repeated, the scale)."""
    group = query.shape[1] // key.shape[1]
    compute = torch.float32 if query.dtype in (torch.float16, torch.bfloat16) else query.dtype
    key = key.to(compute).repeat_interleave(group, dim=1) if group > 1 else key.to(compute)
    scale = query.shape[-1] ** -0.5 if scale is None else scale
    scores = torch.matmul(query.to(compute), key.transpose(-2, -1)) * scale
    if is_causal:
        seq_q, seq_kv = query.shape[-2], key.shape[-2]
        visible = torch.ones(seq_q, seq_kv, dtype=torch.bool, device=query.device).tril(seq_kv - seq_q)
        scores = scores.masked_fill(~visible, float("-inf"))
    lse = torch.logsumexp(scores, dim=-1)
    finite_lse = torch.where(torch.isinf(lse), torch.zeros_like(lse), lse)
    return torch.exp(scores - finite_lse.unsqueeze(-1)), lse, key, scale


def _torch_attention(query, key, value, is_causal, scale):
    """(out, lse float32) in PyTorch operations with attnsuite's semantics: the forward op's
    fallback where a log-sum-exp is needed (PyTorch's SDPA returns none). O(seq_q * seq_kv) memory."""
    probabilities, lse, _, _ = _torch_probabilities(query, key, is_causal, scale)
    group = query.shape[1] // key.shape[1]
    value = value.to(probabilities.dtype)
    out = torch.matmul(probabilities, value.repeat_interleave(group, dim=1) if group > 1 else value)
    return out.to(query.dtype), lse.float()


def _torch_attention_backward(grad_out, query, key, value, is_causal, scale):
    """(dq, dk, dv) of _torch_attention in PyTorch operations (the backward op's fallback; no
    autograd inside an op): dV = P^T dO, dS = P * (dO V^T - rowsum(dO * O)), dQ = scale dS K,
    dK = scale dS^T Q, dK and dV summed over each GQA group."""
    probabilities, _, repeated_key, scale = _torch_probabilities(query, key, is_causal, scale)
    group = query.shape[1] // key.shape[1]
    compute = probabilities.dtype
    repeated_value = value.to(compute).repeat_interleave(group, dim=1) if group > 1 else value.to(compute)
    grad_out = grad_out.to(compute)
    out = torch.matmul(probabilities, repeated_value)
    grad_probabilities = torch.matmul(grad_out, repeated_value.transpose(-2, -1))
    grad_scores = probabilities * (grad_probabilities - (grad_out * out).sum(-1, keepdim=True))
    dq = torch.matmul(grad_scores, repeated_key) * scale
    dk = torch.matmul(grad_scores.transpose(-2, -1), query.to(compute)) * scale
    dv = torch.matmul(probabilities.transpose(-2, -1), grad_out)
    if group > 1:
        dk = dk.unflatten(1, (key.shape[1], group)).sum(2)
        dv = dv.unflatten(1, (key.shape[1], group)).sum(2)
    return dq.to(query.dtype), dk.to(key.dtype), dv.to(value.dtype)


def _empty_grad(like):
    """dq / dk / dv for `like` (the op and its fake alike): like's strides where its last dim is
    contiguous (transformers' (batch, heads, seq, dim) views of (batch, seq, heads, dim)
    projections then take their gradient without a copy), else dense."""
    return torch.empty_like(like) if like.stride(-1) == 1 else torch.empty(like.shape, dtype=like.dtype,
                                                                            device=like.device)


def _attention_fwd(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, is_causal: bool,
                   scale: Optional[float], backend: str, plan: str = "") -> Tuple[torch.Tensor, torch.Tensor]:
    """The training forward: (out, lse), lse float32 (batch, heads_q, seq_q). Its backward is
    attnsuite::sdpa_bwd through the same backend (a name, or "auto": resolved per call) and plan."""
    query, key, value = _last_dim_dense(query, key, value)
    out = torch.empty(query.shape[:3] + (value.shape[3],), dtype=query.dtype, device=query.device)
    lse = torch.empty(query.shape[:3], dtype=torch.float32, device=query.device)
    config = _plan_of(plan)
    try:
        _core.forward(backend, *_capsules(query, key, value, out, lse), is_causal, scale, "bhsd", -1, -1,
                      _stream(query), *config,
                      workspace=_capsule(_workspace(backend, config, query, key, value, is_causal, scale)))
    except _core.UnsupportedError as error:
        _warn_once(str(error))
        out, lse = _torch_attention(query, key, value, is_causal, scale)
    return out, lse


_sdpa_fwd = torch.library.custom_op("attnsuite::sdpa_fwd", mutates_args=())(_attention_fwd)


@_sdpa_fwd.register_fake
def _(query, key, value, is_causal, scale, backend, plan=""):
    return (query.new_empty(query.shape[:3] + (value.shape[3],)),
            query.new_empty(query.shape[:3], dtype=torch.float32))


def _attention_bwd(grad_out: torch.Tensor, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                   out: torch.Tensor, lse: torch.Tensor, is_causal: bool, scale: Optional[float], backend: str,
                   plan: str = "") -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """dq, dk, dv of attnsuite::sdpa_fwd from its inputs, outputs and the gradient of out."""
    dq, dk, dv = _empty_grad(query), _empty_grad(key), _empty_grad(value)
    # grad_out of out.sum() is an expanded tensor (stride 0 everywhere): _last_dim_dense copies it.
    grad_out, query, key, value, out = _last_dim_dense(grad_out, query, key, value, out)
    config = _plan_of(plan)
    try:
        name = backend if backend != "auto" else _core.resolve(backend, query, key, value, is_causal, scale, "bhsd",
                                                               -1, -1)
        _core.backward(name, *_capsules(query, key, value, out, grad_out, lse.detach().contiguous(), dq, dk, dv),
                       is_causal, scale, "bhsd", -1, -1, torch.are_deterministic_algorithms_enabled(), _stream(query),
                       *config,
                       workspace=_capsule(_workspace(name, config, query, key, value, is_causal, scale, backward=True)))
    except _core.UnsupportedError as error:
        _warn_once(str(error))
        for into, grad in zip((dq, dk, dv), _torch_attention_backward(grad_out, query, key, value, is_causal, scale)):
            into.copy_(grad)
    return dq, dk, dv


_sdpa_bwd = torch.library.custom_op("attnsuite::sdpa_bwd", mutates_args=())(_attention_bwd)


@_sdpa_bwd.register_fake
def _(grad_out, query, key, value, out, lse, is_causal, scale, backend, plan=""):
    return _empty_grad(query), _empty_grad(key), _empty_grad(value)


def _setup_context(ctx, inputs, output):
    query, key, value, is_causal, scale, backend, plan = inputs
    out, lse = output
    ctx.save_for_backward(query, key, value, out, lse)
    ctx.is_causal, ctx.scale, ctx.backend, ctx.plan = is_causal, scale, backend, plan
    # The backward takes the gradient of out only; the drop-in hands out no lse.
    ctx.mark_non_differentiable(lse)


def _backward(ctx, grad_out, grad_lse):
    query, key, value, out, lse = ctx.saved_tensors
    dq, dk, dv = _sdpa_bwd(grad_out, query, key, value, out, lse, ctx.is_causal, ctx.scale, ctx.backend, ctx.plan)
    return dq, dk, dv, None, None, None, None


_sdpa_fwd.register_autograd(_backward, setup_context=_setup_context)


class _Attention(torch.autograd.Function):
    """Eager mode's training call: the bodies of sdpa_fwd and sdpa_bwd under autograd, without the
    custom-op dispatch, which cost 40 us more per forward and 80 more per forward + backward on
    the 2-core development VM (CPU, tiny inputs, 2026-12-07): host time a training step spends
    once per layer. Under torch.compile (and any tracing) the ops run instead."""

    @staticmethod
    def forward(ctx, query, key, value, is_causal, scale, backend, plan):
        out, lse = _attention_fwd(query, key, value, is_causal, scale, backend, plan)
        ctx.save_for_backward(query, key, value, out, lse)
        ctx.arguments = (is_causal, scale, backend, plan)
        return out

    @staticmethod
    def backward(ctx, grad_out):
        query, key, value, out, lse = ctx.saved_tensors
        dq, dk, dv = _attention_bwd(grad_out, query, key, value, out, lse, *ctx.arguments)
        return dq, dk, dv, None, None, None, None


def _eager(*tensors):
    """Plain tensors outside any tracing: the bodies may run without the custom ops."""
    return (not torch.compiler.is_compiling() and _current_dispatch_mode() is None
            and all(type(x) is torch.Tensor for x in tensors))


def _training_backend(query, key, value, is_causal, scale):
    """(the backend's name, None) when the backend runs this training call's forward and
    backward, else (None, why not): asked of the module with the 4-D tensors the op would get.
    The op then gets the name, so that its backward runs where its forward did."""

    def ask():
        try:
            return _core.resolve_backward(_backend, query.detach(), key.detach(), value.detach(), is_causal, scale,
                                          "bhsd", -1, -1, *_plan_of(_plan))
        except _core.UnsupportedError as error:
            return None, str(error)

    if _backend == "auto":
        name, why_not = ask()
    else:
        name, why_not = _answer(("backward", _backend, _plan, *_problem_key(query, key, value, is_causal, scale)), ask)
    if name is None:
        return None, why_not
    if why_not is not None:
        return None, f"inputs that require grad: backend '{name}' has no backward for them ({why_not})"
    return name, None


def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                                 enable_gqa=False):
    """F.scaled_dot_product_attention on attnsuite (see the module docstring for the fallbacks)."""
    reason = None
    if attn_mask is not None:
        reason = "attn_mask is not supported (only is_causal)"
    elif dropout_p > 0.0:
        reason = "dropout_p > 0 is not supported"
    elif query.dim() not in (3, 4) or key.dim() != query.dim() or value.dim() != query.dim():
        reason = f"inputs of {query.dim()} dims (attnsuite takes 3-D or 4-D)"
    elif is_causal and query.shape[-2] != key.shape[-2]:
        reason = "is_causal with seq_q != seq_kv (PyTorch aligns it top-left, attnsuite bottom-right)"
    elif query.dim() == 4 and query.shape[1] != key.shape[1] and not enable_gqa:
        reason = "query and key head counts differ without enable_gqa=True"
    elif query.dtype not in _DTYPES or key.dtype != query.dtype or value.dtype != query.dtype:
        reason = f"dtypes {query.dtype}, {key.dtype}, {value.dtype} (attnsuite takes one of float32, float16, bfloat16)"
    elif query.device != key.device or query.device != value.device:
        reason = f"inputs on different devices ({query.device}, {key.device}, {value.device})"
    elif query.stride(-1) != 1 or key.stride(-1) != 1 or value.stride(-1) != 1:
        reason = "inputs whose last dim is not contiguous (stride != 1)"
    needs_grad = torch.is_grad_enabled() and (query.requires_grad or key.requires_grad or value.requires_grad)
    backend = _backend
    if reason is None and needs_grad and not torch.compiler.is_compiling():
        backend, reason = _training_backend(*_four_dims(query, key, value), bool(is_causal), scale)
    if reason is not None:
        _warn_once(reason)
        kwargs = {"enable_gqa": enable_gqa} if enable_gqa else {}
        return _torch_sdpa(query, key, value, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal,
                           scale=scale, **kwargs)
    arguments = (*_four_dims(query, key, value), bool(is_causal), scale)
    if needs_grad:
        out = (_Attention.apply(*arguments, backend, _plan) if _eager(query, key, value)
               else _sdpa_fwd(*arguments, backend, _plan)[0])
    else:
        out = (_attention if _eager(query, key, value) else _sdpa)(*arguments, _backend, _plan)
    return out.squeeze(1) if query.dim() == 3 else out


def _four_dims(query, key, value):
    """(batch, seq, dim) inputs as one head of (batch, heads, seq, dim)."""
    if query.dim() == 3:
        return query.unsqueeze(1), key.unsqueeze(1), value.unsqueeze(1)
    return query, key, value


def patch(backend=None, kernel_config=None, options=None):
    """Makes torch.nn.functional.scaled_dot_product_attention this drop-in (until unpatch()); with
    a backend (and its kernel config and options: set_backend), that one."""
    if backend is not None or kernel_config is not None or options is not None:
        set_backend(_backend if backend is None else backend, kernel_config, options)
    F.scaled_dot_product_attention = scaled_dot_product_attention
    torch.nn.functional.scaled_dot_product_attention = scaled_dot_product_attention


def unpatch():
    """Restores PyTorch's scaled_dot_product_attention."""
    F.scaled_dot_product_attention = _torch_sdpa
    torch.nn.functional.scaled_dot_product_attention = _torch_sdpa


def is_patched():
    return F.scaled_dot_product_attention is scaled_dot_product_attention


class patched:
    """``with attnsuite.torch.patched(): ...`` patches for the block, restores what was there."""

    def __init__(self, backend=None, kernel_config=None, options=None):
        self._choice = (backend, kernel_config, options)

    def __enter__(self):
        self._was_patched, self._previous = is_patched(), get_backend_plan()
        patch(*self._choice)
        return self

    def __exit__(self, *exc):
        name, config, options = self._previous
        set_backend(name, config, options)
        if not self._was_patched:
            unpatch()
        return False

