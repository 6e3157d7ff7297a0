"""attnsuite.attention_backward: the gradients from what attention returned (out, lse, the
backend's name), against an independent float64 backward written in numpy."""
import numpy as np
import pytest

import attnsuite
from conftest import random_qkv


def numpy_backward(q, k, v, grad_out, causal=False, scale=None):
    """dq, dk, dv in float64, BSHD, bottom-right causal: P = softmax(S), dV = Pᵀ dO,
    dS = P ∘ (dO Vᵀ − rowsum(dO ∘ O)), dQ = scale dS K, dK = scale dSᵀ Q (summed over GQA groups)."""
    q, k, v, grad_out = (np.asarray(x, np.float64) for x in (q, k, v, grad_out))
    seq_q, heads_q, dim = q.shape[1:]
    seq_kv, heads_kv = k.shape[1:3]
    scale = scale or 1.0 / np.sqrt(dim)
    group = heads_q // heads_kv
    kk, vv = np.repeat(k, group, axis=2), np.repeat(v, group, axis=2)
    scores = np.einsum("bqhd,bkhd->bhqk", q, kk) * scale
    if causal:
        visible = np.arange(seq_kv)[None, :] <= np.arange(seq_q)[:, None] + seq_kv - seq_q
        scores = np.where(visible, scores, -np.inf)
    row_max = scores.max(axis=-1, keepdims=True)
    weights = np.exp(scores - np.where(np.isfinite(row_max), row_max, 0.0))
    total = weights.sum(axis=-1, keepdims=True)
    weights = np.divide(weights, total, out=np.zeros_like(weights), where=total > 0)
    out = np.einsum("bhqk,bkhd->bqhd", weights, vv)
    d_weights = np.einsum("bqhd,bkhd->bhqk", grad_out, vv)
    row_dot = np.einsum("bqhd,bqhd->bhq", grad_out, out)[..., None]
    d_scores = weights * (d_weights - row_dot)
    dq = np.einsum("bhqk,bkhd->bqhd", d_scores, kk) * scale
    dk = np.einsum("bhqk,bqhd->bkhd", d_scores, q) * scale
    dv = np.einsum("bhqk,bqhd->bkhd", weights, grad_out)
    shape_k = dk.shape[:2] + (heads_kv, group) + dk.shape[3:]
    return dq, dk.reshape(shape_k).sum(axis=3), dv.reshape(shape_k[:3] + (group, dv.shape[3])).sum(axis=3)


def backend_with_backward(name, q, k, v, causal, layout="bshd"):
    if name not in {entry["name"] for entry in attnsuite.backends()}:
        pytest.skip(f"backend {name} is not in this build")
    try:
        _, why_not = attnsuite._core.resolve_backward(name, q, k, v, causal, None, layout, -1, -1)
    except attnsuite.UnsupportedError as error:
        pytest.skip(str(error))
    if why_not is not None:
        pytest.skip(f"{name} has no backward here: {why_not}")


@pytest.mark.parametrize("backend", ["reference", "cpu-flash", "cpu-vanilla"])
@pytest.mark.parametrize("layout", ["bshd", "bhsd"])
@pytest.mark.parametrize("causal, seq_q, seq_kv, heads_kv", [(False, 7, 11, 2), (True, 13, 9, 1), (True, 16, 16, 4)])
def test_attention_backward_matches_numpy(backend, layout, causal, seq_q, seq_kv, heads_kv):
    q, k, v = random_qkv(batch=2, seq_q=seq_q, seq_kv=seq_kv, heads_q=4, heads_kv=heads_kv, head_dim=32, seed=3)
    if layout == "bhsd":
        q, k, v = (np.ascontiguousarray(x.transpose(0, 2, 1, 3)) for x in (q, k, v))
    backend_with_backward(backend, q, k, v, causal, layout)
    out, lse, name = attnsuite.attention(q, k, v, causal=causal, backend=backend, layout=layout, return_lse=True,
                                         return_backend=True)
    assert name == backend and lse.dtype == np.float32
    grad_out = np.random.default_rng(4).standard_normal(out.shape).astype(np.float32)
    dq, dk, dv = attnsuite.attention_backward(q, k, v, out, lse, grad_out, causal=causal, backend=name, layout=layout)
    as_bshd = (lambda x: x) if layout == "bshd" else (lambda x: np.asarray(x).transpose(0, 2, 1, 3))
    want = numpy_backward(*(as_bshd(x) for x in (q, k, v, grad_out)), causal=causal)
    limit = 1e-6 if backend == "reference" else 2e-5
    for got, expected, like in zip((dq, dk, dv), want, (q, k, v)):
        assert got.shape == like.shape and got.dtype == np.float32
        got = as_bshd(got)
        error = np.linalg.norm(got - expected) / np.linalg.norm(expected)
        assert error < limit


def test_attention_backward_auto_writes_into_given_arrays():
    q, k, v = random_qkv(batch=1, seq_q=9, heads_q=2, head_dim=32, seed=5)
    backend_with_backward("reference", q, k, v, True)
    out, lse = attnsuite.attention(q, k, v, causal=True, backend="reference", return_lse=True)
    grad_out = np.ones_like(out)
    dq, dk, dv = (np.full_like(x, np.nan) for x in (q, k, v))
    got = attnsuite.attention_backward(q, k, v, out, lse, grad_out, causal=True, backend="reference", dq=dq, dk=dk,
                                       dv=dv)
    assert got[0] is dq and got[1] is dk and got[2] is dv
    want = numpy_backward(q, k, v, grad_out, causal=True)
    for array, expected in zip((dq, dk, dv), want):
        assert np.allclose(array, expected, atol=1e-5)


def test_attention_returns_what_was_asked():
    q, k, v = random_qkv(batch=1, seq_q=8, heads_q=2, head_dim=32)
    assert isinstance(attnsuite.attention(q, k, v, backend="reference"), np.ndarray)
    out, name = attnsuite.attention(q, k, v, backend="reference", return_backend=True)
    assert out.shape == q.shape and name == "reference"
    out, lse = attnsuite.attention(q, k, v, backend="reference", return_lse=True)
    assert lse.shape == (1, 2, 8)


def test_attention_backward_of_a_backend_without_one_says_so():
    q, k, v = random_qkv(batch=1, seq_q=8, heads_q=2, head_dim=64)
    for entry in attnsuite.backends():
        if entry["device"] != "cpu":
            continue
        try:
            name, why_not = attnsuite._core.resolve_backward(entry["name"], q, k, v, False, None, "bshd", -1, -1)
        except attnsuite.UnsupportedError:
            continue
        if why_not is not None:
            break
    else:
        pytest.skip("every CPU backend of this build has a backward for this problem")
    out, lse = attnsuite.attention(q, k, v, backend="reference", return_lse=True)
    with pytest.raises(attnsuite.UnsupportedError, match=name):
        attnsuite.attention_backward(q, k, v, out, lse, np.ones_like(out), backend=name)


def test_kernel_config_and_options_reach_the_plan():
    """attention(kernel_config=...) runs that configuration (the same numbers as the backend's own
    choice: cpu-flash's tile configs sum in one order); a name or an option key the backend does
    not have is a ValueError naming what it has."""
    q, k, v = random_qkv(batch=1, seq_q=40, heads_q=2, head_dim=64)
    chosen = attnsuite.attention(q, k, v, backend="cpu-flash")
    for config in ("q96-k96", "q48-k96"):
        out, lse = attnsuite.attention(q, k, v, backend="cpu-flash", kernel_config=config, return_lse=True)
        np.testing.assert_allclose(out, chosen, rtol=1e-6, atol=1e-6)
        dq, dk, dv = attnsuite.attention_backward(q, k, v, out, lse, np.ones_like(out), backend="cpu-flash",
                                                  kernel_config=config)
        assert np.isfinite(dq).all() and np.isfinite(dk).all() and np.isfinite(dv).all()
    with pytest.raises(ValueError, match="kernel config 'q7' unknown for this problem; allowed: q"):
        attnsuite.attention(q, k, v, backend="cpu-flash", kernel_config="q7")
    with pytest.raises(ValueError, match="backend 'cpu-flash' takes no option 'block_mask'; it takes: none"):
        attnsuite.attention(q, k, v, backend="cpu-flash", options={"block_mask": "band:2"})
    with pytest.raises(ValueError, match="options must be a dict"):
        attnsuite.attention(q, k, v, backend="cpu-flash", options=["block_mask"])
    if "cpu-block-sparse" in {entry["name"] for entry in attnsuite.backends()}:
        with pytest.raises(ValueError, match="bad block mask 'band:0'"):
            attnsuite.attention(q, k, v, backend="cpu-block-sparse", options={"block_mask": "band:0"})


def test_a_given_workspace_is_checked_and_used():
    """forward() and backward() take the caller's workspace (what the PyTorch drop-in hands in from
    its caching allocator): a 1-D contiguous array, 256-byte aligned, on q's device, of at least
    workspace_bytes() bytes; anything else is one clear ValueError. The CPU backends need none."""
    q, k, v = random_qkv(batch=1, seq_q=9, heads_q=2, head_dim=32, seed=5)
    args = ("cpu-flash", q, k, v, True, None, "bshd", -1, -1)
    assert _core_workspace_bytes(*args) == 0 and _core_workspace_bytes(*args, backward=True) == 0
    out, lse = attnsuite.attention(q, k, v, causal=True, backend="cpu-flash", return_lse=True)
    grad_out = np.random.default_rng(6).standard_normal(out.shape).astype(np.float32)
    expected = attnsuite.attention_backward(q, k, v, out, lse, grad_out, causal=True, backend="cpu-flash")
    given = [np.full_like(x, np.nan) for x in (q, k, v)]
    aligned = _aligned_bytes(1024)
    attnsuite._core.backward("cpu-flash", q, k, v, out, grad_out, lse, *given, True, None, "bshd", -1, -1, False, 0,
                             workspace=aligned)
    for got, want in zip(given, expected):
        np.testing.assert_array_equal(got, want)
    o = np.full_like(out, np.nan)
    attnsuite._core.forward("cpu-flash", q, k, v, o, None, True, None, "bshd", -1, -1, 0, workspace=aligned)
    np.testing.assert_array_equal(o, out)
    bad = [(np.zeros((4, 256), np.uint8), "workspace has 2 dims; it must be a 1-D contiguous array"),
           (aligned[::2], "workspace has 1 dims and stride 2; it must be a 1-D contiguous array"),
           (aligned[1:], "workspace starts at an address 1 bytes past a 256-byte boundary")]
    for workspace, message in bad:
        with pytest.raises(ValueError, match=message):
            attnsuite._core.forward("cpu-flash", q, k, v, o, None, True, None, "bshd", -1, -1, 0, workspace=workspace)
        with pytest.raises(ValueError, match=message):
            attnsuite._core.backward("cpu-flash", q, k, v, out, grad_out, lse, *given, True, None, "bshd", -1, -1,
                                     False, 0, workspace=workspace)


def _core_workspace_bytes(*args, backward=False):
    return attnsuite._core.workspace_bytes(*args, backward)


def _aligned_bytes(count):
    """`count` bytes of a numpy array that start on a 256-byte boundary."""
    raw = np.zeros(count + 256, np.uint8)
    start = (-raw.ctypes.data) % 256
    return raw[start:start + count]
