"""Shared helpers of the Python tests. ctest runs them with PYTHONPATH=<build>/python (the
in-tree module); run by hand: PYTHONPATH=build/python python3 -m pytest tests/python, or after
pip install ., python3 -m pytest tests/python."""
import os
import sys

import tempfile

import numpy as np
import pytest

# backend="auto" reads the tuner's backend cache: the tests start from an empty one of their own,
# never the user's (~/.cache/attnsuite/backends.json).
os.environ["ATTNSUITE_CACHE_DIR"] = tempfile.mkdtemp(prefix="attnsuite-test-cache-")

try:
    import attnsuite  # noqa: F401
except ImportError:  # a plain `pytest` from the repo root: the default build directory
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "build", "python"))
    import attnsuite  # noqa: F401


def random_qkv(batch=2, seq_q=64, seq_kv=None, heads_q=4, heads_kv=None, head_dim=64, head_dim_v=None,
               dtype=np.float32, layout="bshd", seed=0):
    rng = np.random.default_rng(seed)
    seq_kv = seq_kv or seq_q
    heads_kv = heads_kv or heads_q
    head_dim_v = head_dim_v or head_dim
    q = rng.standard_normal((batch, seq_q, heads_q, head_dim)).astype(dtype)
    k = rng.standard_normal((batch, seq_kv, heads_kv, head_dim)).astype(dtype)
    v = rng.standard_normal((batch, seq_kv, heads_kv, head_dim_v)).astype(dtype)
    if layout == "bhsd":
        q, k, v = (np.ascontiguousarray(x.transpose(0, 2, 1, 3)) for x in (q, k, v))
    return q, k, v


def numpy_attention(q, k, v, causal=False, scale=None, window=(-1, -1)):
    """An independent float64 attention in numpy, BSHD, bottom-right causal; for small shapes."""
    q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
    batch, seq_q, heads_q, dim = q.shape
    seq_kv, heads_kv = k.shape[1], k.shape[2]
    scale = scale or 1.0 / np.sqrt(dim)
    group = heads_q // heads_kv
    kk = np.repeat(k, group, axis=2)
    vv = np.repeat(v, group, axis=2)
    scores = np.einsum("bqhd,bkhd->bhqk", q, kk) * scale
    i = np.arange(seq_q)[:, None]
    j = np.arange(seq_kv)[None, :]
    diagonal = i + seq_kv - seq_q
    visible = np.ones((seq_q, seq_kv), bool)
    if causal:
        visible &= j <= diagonal
    if window[1] >= 0:
        visible &= j <= diagonal + window[1]
    if window[0] >= 0:
        visible &= j >= diagonal - window[0]
    scores = np.where(visible, scores, -np.inf)
    scores -= scores.max(axis=-1, keepdims=True)
    weights = np.exp(scores)
    weights /= weights.sum(axis=-1, keepdims=True)
    return np.einsum("bhqk,bkhd->bqhd", weights, vv)


def rel_l2(got, expected):
    got, expected = np.asarray(got, np.float64), np.asarray(expected, np.float64)
    return float(np.linalg.norm(got - expected) / np.linalg.norm(expected))


@pytest.fixture
def cli():
    """The attnsuite CLI of this build (ctest sets ATTNSUITE_CLI)."""
    path = os.environ.get("ATTNSUITE_CLI") or os.path.join(os.path.dirname(__file__), "..", "..", "build", "attnsuite")
    if not os.path.exists(path):
        pytest.skip(f"the attnsuite CLI is not at {path} (ctest sets ATTNSUITE_CLI)")
    return path
