"""A drop-in for ``torch.nn.functional.scaled_dot_product_attention`` on attnsuite's kernels.

    import attnsuite.torch
    attnsuite.torch.patch()            # every F.scaled_dot_product_attention call, e.g. a
    model(**inputs)                    # transformers model with attn_implementation="sdpa"
    attnsuite.torch.unpatch()

``scaled_dot_product_attention`` has F.scaled_dot_product_attention's signature. It runs
through the torch custom op ``attnsuite::sdpa`` (torch.library, with a fake implementation, so
``torch.compile`` traces it without a graph break into our code). What attnsuite does not do
falls back to PyTorch's own SDPA with a one-time warning per reason: an attn_mask, dropout,
inputs that need a gradient (the op has no backward), a causal mask with seq_q != seq_kv
(PyTorch aligns it top-left, attnsuite bottom-right), inputs that are not 3-D or 4-D, dtypes
other than float32/float16/bfloat16 or mixed, inputs on different devices, a last dim that is
not contiguous, and problems the chosen backend does not support (its reason is in the warning).
"""

import threading
import warnings
from typing import Optional

import torch
import torch.nn.functional as F

from . import _core

__all__ = ["scaled_dot_product_attention", "patch", "unpatch", "patched", "set_backend", "get_backend"]

# PyTorch's implementation, captured before any patch: the fallback and what unpatch() restores.
_torch_sdpa = F.scaled_dot_product_attention
_backend = "auto"
_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
_warned = set()
_warned_lock = threading.Lock()


def set_backend(name):
    """The attnsuite backend the drop-in uses ("auto", or a name from attnsuite.backends())."""
    global _backend
    _backend = str(name)


def get_backend():
    return _backend


def _warn_once(reason):
    with _warned_lock:
        if reason in _warned:
            return
        _warned.add(reason)
    warnings.warn(f"attnsuite.torch: falling back to PyTorch's scaled_dot_product_attention: {reason} "
                  "(this warning is shown once per reason)", RuntimeWarning, stacklevel=3)


def _stream(tensor):
    return torch.cuda.current_stream(tensor.device).cuda_stream if tensor.is_cuda else 0


@torch.library.custom_op("attnsuite::sdpa", mutates_args=())
def _sdpa(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, is_causal: bool, scale: Optional[float],
          backend: str) -> torch.Tensor:
    """4-D (batch, heads, seq, dim) inputs, PyTorch's layout; GQA when key has fewer heads."""
    # The wrapper below falls back for such inputs; a compiled graph may still hand the op other
    # strides than eager mode did, and the kernels need a contiguous last dim.
    query, key, value = (x if x.stride(-1) == 1 else x.contiguous() for x in (query, key, value))
    out = torch.empty(query.shape[:3] + (value.shape[3],), dtype=query.dtype, device=query.device)
    try:
        _core.forward(backend, query, key, value, out, None, is_causal, scale, "bhsd", -1, -1, _stream(query))
    except _core.UnsupportedError as error:
        # Inside the op, so compiled graphs fall back too.
        _warn_once(str(error))
        group = query.shape[1] // key.shape[1]
        if group > 1:
            key, value = key.repeat_interleave(group, dim=1), value.repeat_interleave(group, dim=1)
        out = _torch_sdpa(query, key, value, is_causal=is_causal, scale=scale)
    return out


@_sdpa.register_fake
def _(query, key, value, is_causal, scale, backend):
    return query.new_empty(query.shape[:3] + (value.shape[3],))


def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                                 enable_gqa=False):
    """F.scaled_dot_product_attention on attnsuite (see the module docstring for the fallbacks)."""
    reason = None
    if attn_mask is not None:
        reason = "attn_mask is not supported (only is_causal)"
    elif dropout_p > 0.0:
        reason = "dropout_p > 0 is not supported"
    elif torch.is_grad_enabled() and (query.requires_grad or key.requires_grad or value.requires_grad):
        reason = "inputs that require grad (the attnsuite op has no backward)"
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
    if reason is not None:
        _warn_once(reason)
        kwargs = {"enable_gqa": enable_gqa} if enable_gqa else {}
        return _torch_sdpa(query, key, value, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal,
                           scale=scale, **kwargs)
    if query.dim() == 3:  # (batch, seq, dim): one head
        return _sdpa(query.unsqueeze(1), key.unsqueeze(1), value.unsqueeze(1), bool(is_causal), scale,
                     _backend).squeeze(1)
    return _sdpa(query, key, value, bool(is_causal), scale, _backend)


def patch(backend=None):
    """Makes torch.nn.functional.scaled_dot_product_attention this drop-in (until unpatch())."""
    if backend is not None:
        set_backend(backend)
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

    def __init__(self, backend=None):
        self._backend = backend

    def __enter__(self):
        self._was_patched, self._previous_backend = is_patched(), get_backend()
        patch(self._backend)
        return self

    def __exit__(self, *exc):
        set_backend(self._previous_backend)
        if not self._was_patched:
            unpatch()
        return False

