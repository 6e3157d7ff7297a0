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
    torch = pytest.importorskip("torch", reason="torch is not installed (CI does not install it; "
                                                "ATTNSUITE_TORCH=1 scripts/setup-python.sh does)")
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
