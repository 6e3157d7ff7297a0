"""Every CPU backend of the registry, called from Python, against the fp64 `reference` backend
(itself checked against an independent numpy attention)."""
import numpy as np
import pytest

import attnsuite
from conftest import numpy_attention, random_qkv, rel_l2

CPU_BACKENDS = [b["name"] for b in attnsuite.backends() if b["device"] == "cpu" and b["name"] != "reference"]

# (kwargs of random_qkv, causal, window): GQA, MQA, cross lengths, odd sizes, head dims.
PROBLEMS = [
    (dict(), False, None),
    (dict(), True, None),
    (dict(heads_q=8, heads_kv=2, seq_q=33, seq_kv=70), True, None),
    (dict(heads_q=6, heads_kv=1, seq_q=17), False, (8, 0)),
    (dict(head_dim=128, head_dim_v=64, seq_q=40, seq_kv=40), False, None),
    (dict(seq_q=1, seq_kv=97), False, None),
]


@pytest.mark.parametrize("shape, causal, window", PROBLEMS)
def test_reference_matches_numpy(shape, causal, window):
    q, k, v = random_qkv(**shape)
    expected = numpy_attention(q, k, v, causal=causal, window=window or (-1, -1))
    got = attnsuite.attention(q, k, v, causal=causal, window=window, backend="reference")
    assert rel_l2(got, expected) < 1e-6


@pytest.mark.parametrize("backend", CPU_BACKENDS)
@pytest.mark.parametrize("layout", ["bshd", "bhsd"])
@pytest.mark.parametrize("dtype, limit", [(np.float32, 1e-5), (np.float16, 2e-3)])
@pytest.mark.parametrize("shape, causal, window", PROBLEMS)
def test_backend_matches_reference(backend, layout, dtype, limit, shape, causal, window):
    q, k, v = random_qkv(dtype=dtype, layout=layout, **shape)
    try:
        got = attnsuite.attention(q, k, v, causal=causal, window=window, backend=backend, layout=layout)
    except attnsuite.UnsupportedError as error:
        pytest.skip(str(error))
    expected = attnsuite.attention(q, k, v, causal=causal, window=window, backend="reference", layout=layout)
    assert got.shape == expected.shape and got.dtype == dtype
    assert np.all(np.isfinite(got))
    assert rel_l2(got, expected) < limit


def test_every_cpu_backend_runs_fp32():
    # The skips above must not hide a backend that runs nothing: each takes the plain fp32 case.
    q, k, v = random_qkv()
    expected = attnsuite.attention(q, k, v, backend="reference")
    for backend in CPU_BACKENDS:
        assert rel_l2(attnsuite.attention(q, k, v, backend=backend), expected) < 1e-5, backend
