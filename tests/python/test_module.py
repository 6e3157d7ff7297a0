"""The module: import, the registry seen from Python, DLPack in/out without copies, errors."""
import numpy as np
import pytest

import attnsuite
from attnsuite import _core
from conftest import numpy_attention, random_qkv, rel_l2


def test_import_and_registry():
    assert attnsuite.__version__ == _core.__version__
    names = [b["name"] for b in attnsuite.backends()]
    assert names[:3] == ["reference", "cpu-vanilla", "cpu-flash"]
    for entry in attnsuite.backends():
        assert set(entry) == {"name", "display_name", "peer_of", "device", "capabilities"}
    assert "default" in attnsuite.suites()
    assert any(m["name"] == "llama-3.2-1b" and m["heads_kv"] == 8 for m in attnsuite.model_presets())


def test_output_is_written_in_place_without_copies():
    q, k, v = random_qkv()
    out = np.full(q.shape, np.nan, np.float32)
    pointer = out.ctypes.data
    result = attnsuite.attention(q, k, v, out=out, backend="cpu-flash")
    assert result is out and out.ctypes.data == pointer
    assert rel_l2(out, numpy_attention(q, k, v)) < 1e-6


def test_strided_views_are_read_in_place():
    # BHSD memory read as a BSHD view (and the reverse): strides cross, no copy is made.
    q, k, v = random_qkv(layout="bhsd")
    views = [x.transpose(0, 2, 1, 3) for x in (q, k, v)]
    assert not views[0].flags.c_contiguous
    expected = numpy_attention(*views)
    for backend in ("reference", "cpu-flash", "cpu-vanilla"):
        assert rel_l2(attnsuite.attention(*views, backend=backend), expected) < 1e-6, backend
        got = attnsuite.attention(q, k, v, backend=backend, layout="bhsd")
        assert got.shape == q.shape
        assert rel_l2(got.transpose(0, 2, 1, 3), expected) < 1e-6, backend


def test_lse():
    q, k, v = random_qkv(seq_q=32, seq_kv=48)
    o, lse = attnsuite.attention(q, k, v, causal=True, return_lse=True, backend="reference")
    assert lse.shape == (2, 4, 32) and lse.dtype == np.float32
    scores = np.einsum("bqhd,bkhd->bhqk", q.astype(np.float64), k.astype(np.float64)) / np.sqrt(64)
    visible = np.arange(48)[None, :] <= np.arange(32)[:, None] + 16
    expected = np.log(np.where(visible, np.exp(scores), 0.0).sum(-1))
    np.testing.assert_allclose(lse, expected, rtol=1e-5, atol=1e-5)


def test_auto_picks_the_fastest_supporting_backend():
    q, k, v = random_qkv()
    assert attnsuite.resolve_backend(q, k, v) == "cpu-flash"
    # head dim 16 is outside every CPU kernel's range (32..256): nothing runs it, and says why
    small = random_qkv(head_dim=16)
    with pytest.raises(attnsuite.UnsupportedError, match="cpu-flash: .*head dim"):
        attnsuite.resolve_backend(*small)


@pytest.mark.parametrize("kwargs, message", [
    (dict(layout="bsdh"), "layout 'bsdh' is not allowed"),
    (dict(backend="no-such-backend"), "unknown backend 'no-such-backend'; available: reference"),
    (dict(scale=-1.0), "scale = -1 is not allowed"),
])
def test_bad_arguments_are_one_clear_value_error(kwargs, message):
    q, k, v = random_qkv()
    with pytest.raises(ValueError, match=message):
        attnsuite.attention(q, k, v, **kwargs)


def test_mismatched_arrays():
    q, k, v = random_qkv()
    with pytest.raises(ValueError, match="batch sizes differ"):
        attnsuite.attention(q, k[:1], v[:1])
    with pytest.raises(ValueError, match="one dtype"):
        attnsuite.attention(q, k.astype(np.float16), v)
    with pytest.raises(ValueError, match="allowed: float32, float16, bfloat16"):
        attnsuite.attention(q.astype(np.float64), k.astype(np.float64), v.astype(np.float64))
    with pytest.raises(ValueError, match="4-D"):
        attnsuite.attention(q[0], k[0], v[0])
    with pytest.raises(ValueError, match="heads_q .* multiple|GQA|heads"):
        attnsuite.attention(*random_qkv(heads_q=4, heads_kv=3))


def test_unsupported_problem_names_the_reason():
    q, k, v = random_qkv(dtype=np.float16)
    with pytest.raises(attnsuite.UnsupportedError, match="cpu-vanilla.*fp16 not supported"):
        attnsuite.attention(q, k, v, backend="cpu-vanilla")


def test_torch_cpu_tensors_cross_without_copies():
    torch = pytest.importorskip("torch", reason="torch is not installed (ATTNSUITE_TORCH=1 "
                                                "scripts/setup-python.sh installs it, as CI does)")
    q, k, v = (torch.from_numpy(x) for x in random_qkv())
    out = torch.empty_like(q)
    pointer = out.data_ptr()
    result = attnsuite.attention(q, k, v, out=out)
    assert result is out and out.data_ptr() == pointer
    fresh = attnsuite.attention(q, k, v)
    assert isinstance(fresh, torch.Tensor) and torch.equal(fresh, out)
    for dtype in (torch.bfloat16, torch.float16):
        low = [x.to(dtype) for x in (q, k, v)]
        got = attnsuite.attention(*low, backend="cpu-flash")
        assert got.dtype == dtype
        assert rel_l2(got.float().numpy(), numpy_attention(*(x.float().numpy() for x in low))) < 1e-2


def test_library_owned_buffers_export_through_dlpack():
    buffer = _core.empty([2, 3, 4, 5], "fp32", 1, 0)
    array = np.from_dlpack(buffer)
    assert array.shape == (2, 3, 4, 5) and array.dtype == np.float32
    array[...] = 1.5
    assert np.from_dlpack(buffer).sum() == 1.5 * 120  # the same memory


def _strided_last_dim(x):
    return np.repeat(x, 2, axis=-1)[..., ::2]  # x itself, read with stride 2


# Issue 9's bad-input matrix, the Python rows (docs/reliability.md): each bad call is one error
# of the right type whose message names the value and what is allowed.
BAD_INPUTS = [
    ("float64", lambda q, k, v: dict(q=q.astype(np.float64), k=k.astype(np.float64), v=v.astype(np.float64)),
     ValueError, "q has dtype float64; allowed: float32, float16, bfloat16"),
    ("int32", lambda q, k, v: dict(q=q.astype(np.int32), k=k.astype(np.int32), v=v.astype(np.int32)),
     ValueError, "q has dtype int32; allowed: float32, float16, bfloat16"),
    ("bool", lambda q, k, v: dict(q=q > 0, k=k > 0, v=v > 0), ValueError, "q has dtype bool; allowed"),
    ("mixed dtypes", lambda q, k, v: dict(k=k.astype(np.float16)), ValueError,
     "q, k and v must have one dtype; got fp32, fp16, fp32"),
    ("out dtype", lambda q, k, v: dict(out=np.empty(q.shape, np.float16)), ValueError,
     "out has dtype fp16; it must be q's, fp32"),
    ("not an array", lambda q, k, v: dict(q=q.tolist()), TypeError,
     "q is a builtins.list; attention takes arrays with DLPack"),
    ("3-D q", lambda q, k, v: dict(q=q[0]), ValueError, r"must be 4-D \(batch, seq, heads, dim\); got q with shape"),
    ("3-D k", lambda q, k, v: dict(k=k[0]), ValueError, r"k has 3 dims; attention takes 4-D arrays"),
    ("layout name", lambda q, k, v: dict(layout="sbhd"), ValueError, "layout 'sbhd' is not allowed: bshd or bhsd"),
    ("k in the other layout", lambda q, k, v: dict(k=np.ascontiguousarray(k.transpose(0, 2, 1, 3))), ValueError,
     r"k and v must have the same seq and heads; got k \(4, 64\), v \(64, 4\)"),
    ("out shape", lambda q, k, v: dict(out=np.empty(q.shape[:3] + (32,), np.float32)), ValueError,
     r"out has \(batch, seq, heads, dim\) \(2, 64, 4, 32\); it must be \(2, 64, 4, 64\)"),
    ("out read-only", lambda q, k, v: dict(out=np.broadcast_to(np.empty((1, 1, 4, 64), np.float32), q.shape)),
     ValueError, "out is a read-only numpy array; it must be writable"),
    ("strided last dim, auto", lambda q, k, v: dict(q=_strided_last_dim(q), k=_strided_last_dim(k),
                                                    v=_strided_last_dim(v)),
     ValueError, "q has stride 2 in its last dim; backend \"auto\" needs 1"),
    ("strided last dim, cpu-flash", lambda q, k, v: dict(q=_strided_last_dim(q), k=_strided_last_dim(k),
                                                         v=_strided_last_dim(v), backend="cpu-flash"),
     attnsuite.UnsupportedError, "cpu-flash: q has stride 2 in its last dim; this backend needs 1"),
    ("out strided last dim", lambda q, k, v: dict(out=np.empty(q.shape[:3] + (128,), np.float32)[..., ::2]),
     ValueError, "out has stride 2 in its last dim; it must be 1"),
    ("CUDA backend on CPU arrays", lambda q, k, v: dict(backend="flash2"), ValueError,
     "backend 'flash2' runs on the cuda, the arrays are on the cpu|unknown backend 'flash2'"),
]


@pytest.mark.parametrize("case, change, error, message", BAD_INPUTS, ids=[row[0] for row in BAD_INPUTS])
def test_bad_input_matrix(case, change, error, message):
    q, k, v = random_qkv()
    args = dict(q=q, k=k, v=v)
    args.update(change(q, k, v))
    with pytest.raises(error, match=message) as raised:
        attnsuite.attention(**args)
    assert "\n" not in str(raised.value)  # one line


def test_odd_strides_that_are_allowed_give_the_right_result():
    q, k, v = random_qkv()
    # negative strides (reversed sequence), zero strides (a broadcast key head), only "reference"
    # for a strided last dim
    reversed_q = q[:, ::-1]
    broadcast_k = np.broadcast_to(k[:, :, :1], k.shape)
    assert rel_l2(attnsuite.attention(reversed_q, k, v), numpy_attention(reversed_q, k, v)) < 1e-5
    assert rel_l2(attnsuite.attention(q, broadcast_k, v), numpy_attention(q, broadcast_k, v)) < 1e-5
    strided = [_strided_last_dim(x) for x in (q, k, v)]
    assert rel_l2(attnsuite.attention(*strided, backend="reference"), numpy_attention(q, k, v)) < 1e-6
