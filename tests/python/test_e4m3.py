"""FP8 (e4m3) inputs from Python: uint8 arrays of e4m3 bytes with dtype="e4m3" (numpy), or
torch.float8_e4m3fn tensors, with per-tensor descales; bf16 output (float32 for numpy)."""
import numpy as np
import pytest

import attnsuite
from conftest import numpy_attention, rel_l2

CPU_BACKENDS = ("reference", "cpu-vanilla", "cpu-flash")


def decode_e4m3(codes):
    """The values of e4m3 (E4M3FN) codes, as float64."""
    codes = codes.astype(np.int64)
    sign = np.where(codes & 0x80, -1.0, 1.0)
    exponent, mantissa = (codes >> 3) & 0xF, codes & 0x7
    magnitude = np.where(exponent == 0, mantissa * 2.0**-9, (1 + mantissa / 8.0) * 2.0 ** (exponent - 7))
    return sign * magnitude


def random_e4m3(shape, rng):
    """Codes of magnitude up to 4 (exponent <= 9, no NaN), random signs."""
    return (rng.integers(0, 0x48, size=shape) | (rng.integers(0, 2, size=shape) << 7)).astype(np.uint8)


def e4m3_inputs(layout="bshd", seed=0):
    rng = np.random.default_rng(seed)
    shape_q = (2, 40, 4, 64) if layout == "bshd" else (2, 4, 40, 64)
    shape_kv = (2, 56, 2, 64) if layout == "bshd" else (2, 2, 56, 64)
    q, k, v = random_e4m3(shape_q, rng), random_e4m3(shape_kv, rng), random_e4m3(shape_kv, rng)
    descale = (0.5, 0.25, 3.0)
    # The real values: e4m3 x descale, as float32 (as the library forms them).
    real = [(decode_e4m3(x) * np.float32(d)).astype(np.float32) for x, d in zip((q, k, v), descale)]
    return (q, k, v), descale, real


def gqa_repeat(x, heads, axis):
    return np.repeat(x, heads // x.shape[axis], axis=axis)


@pytest.mark.parametrize("layout", ["bshd", "bhsd"])
def test_numpy_uint8_with_dtype_e4m3(layout):
    (q, k, v), descale, (rq, rk, rv) = e4m3_inputs(layout)
    head_axis = 2 if layout == "bshd" else 1
    rk, rv = gqa_repeat(rk, 4, head_axis), gqa_repeat(rv, 4, head_axis)
    if layout == "bhsd":
        rq, rk, rv = (x.transpose(0, 2, 1, 3) for x in (rq, rk, rv))
    expected = numpy_attention(rq.astype(np.float64), rk.astype(np.float64), rv.astype(np.float64), causal=True)
    if layout == "bhsd":
        expected = expected.transpose(0, 2, 1, 3)
    for backend in CPU_BACKENDS:
        out, lse = attnsuite.attention(q, k, v, dtype="e4m3", descale=descale, backend=backend, causal=True,
                                       layout=layout, return_lse=True)
        # numpy has no bfloat16: the bf16 output widened to float32, so every value is a bf16.
        assert out.dtype == np.float32 and out.shape == q.shape
        assert np.array_equal(out.view(np.uint32) & 0xFFFF, np.zeros(out.shape, np.uint32)), backend
        assert rel_l2(out, expected) < 4e-3, backend
        assert np.all(np.isfinite(lse)), backend
    # Without the descales the result is another one: they are applied.
    wrong = attnsuite.attention(q, k, v, dtype="e4m3", descale=(1.0, 1.0, 1.0), backend="cpu-flash", causal=True,
                                layout=layout)
    assert rel_l2(wrong, expected) > 0.1


def test_e4m3_arguments_are_checked():
    (q, k, v), descale, _ = e4m3_inputs()
    with pytest.raises(ValueError, match=r"e4m3 inputs need descale=\(dq, dk, dv\)"):
        attnsuite.attention(q, k, v, dtype="e4m3", backend="reference")
    with pytest.raises(ValueError, match="descale has 2 values; it must be 3"):
        attnsuite.attention(q, k, v, dtype="e4m3", descale=(1.0, 2.0), backend="reference")
    with pytest.raises(ValueError, match="descale -1 is not allowed: each must be finite and > 0"):
        attnsuite.attention(q, k, v, dtype="e4m3", descale=(1.0, -1.0, 1.0), backend="reference")
    with pytest.raises(ValueError, match=r'q has dtype uint8; allowed: .*float8_e4m3fn \(or uint8 with dtype="e4m3"\)'):
        attnsuite.attention(q, k, v, backend="reference")
    with pytest.raises(ValueError, match="dtype 'e5m2' is not allowed"):
        attnsuite.attention(q, k, v, dtype="e5m2", descale=descale, backend="reference")
    f32 = [x.astype(np.float32) for x in (q, k, v)]
    with pytest.raises(ValueError, match="descale is for e4m3 inputs; q, k, v are fp32"):
        attnsuite.attention(*f32, descale=descale, backend="reference")
    with pytest.raises(attnsuite.UnsupportedError, match="dtype e4m3 not supported"):
        attnsuite.attention(q, k, v, dtype="e4m3", descale=descale, backend="cpu-sparge")
    # "auto" picks a CPU backend that takes e4m3.
    assert attnsuite.resolve_backend(q, k, v, dtype="e4m3", descale=descale) in CPU_BACKENDS


def test_torch_float8_e4m3fn_tensors():
    torch = pytest.importorskip("torch", reason="torch is not installed (ATTNSUITE_TORCH=1 "
                                                "python/scripts/setup_torch.sh sets up a venv with it)")
    if not hasattr(torch, "float8_e4m3fn"):
        pytest.skip(f"torch {torch.__version__} has no float8_e4m3fn")
    (q, k, v), descale, _ = e4m3_inputs()
    want = attnsuite.attention(q, k, v, dtype="e4m3", descale=descale, backend="cpu-flash")
    tq, tk, tv = (torch.from_numpy(x).view(torch.float8_e4m3fn) for x in (q, k, v))
    out = attnsuite.attention(tq, tk, tv, descale=descale, backend="cpu-flash")
    assert isinstance(out, torch.Tensor) and out.dtype == torch.bfloat16
    assert np.array_equal(out.float().numpy(), want)
    # torch's own dequantization agrees with the descales' meaning (value = e4m3 x descale).
    assert torch.equal(tq.float() * descale[0], torch.from_numpy(decode_e4m3(q).astype(np.float32)) * descale[0])
    # A uint8 view with dtype="e4m3" is the same input.
    out_u8 = attnsuite.attention(*(torch.from_numpy(x) for x in (q, k, v)), dtype="e4m3", descale=descale,
                                 backend="cpu-flash")
    assert out_u8.dtype == torch.bfloat16 and torch.equal(out_u8, out)
