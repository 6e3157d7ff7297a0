"""On a GPU (skipped without one): the CUDA backends from Python on torch CUDA tensors (DLPack,
no copies, the caller's stream), the drop-in in bf16 against PyTorch's SDPA, and under
torch.compile with inductor. cupy / jax round trips where those are installed."""
import pytest

import attnsuite
from attnsuite import _core

torch = pytest.importorskip("torch", reason="torch is not installed")
if not (_core.cuda_build and torch.cuda.is_available()):
    pytest.skip("needs a CUDA build of attnsuite and a GPU", allow_module_level=True)

import attnsuite.torch as drop_in  # noqa: E402

CUDA_BACKENDS = [b["name"] for b in attnsuite.backends() if b["device"] == "cuda"]


def qkv(dtype=torch.bfloat16, heads=8, kv_heads=2, seq=256, dim=128, layout="bshd"):
    generator = torch.Generator(device="cuda").manual_seed(0)
    shape = (2, seq, heads, dim) if layout == "bshd" else (2, heads, seq, dim)
    kv_shape = (2, seq, kv_heads, dim) if layout == "bshd" else (2, kv_heads, seq, dim)
    return (torch.randn(shape, device="cuda", dtype=dtype, generator=generator),
            torch.randn(kv_shape, device="cuda", dtype=dtype, generator=generator),
            torch.randn(kv_shape, device="cuda", dtype=dtype, generator=generator))


@pytest.mark.parametrize("backend", CUDA_BACKENDS)
@pytest.mark.parametrize("layout", ["bshd", "bhsd"])
@pytest.mark.parametrize("causal", [False, True])
def test_cuda_backends_against_the_reference(backend, layout, causal):
    q, k, v = qkv(layout=layout)
    try:
        out = attnsuite.attention(q, k, v, causal=causal, backend=backend, layout=layout)
    except attnsuite.UnsupportedError as error:
        pytest.skip(str(error))
    assert out.is_cuda and out.dtype == q.dtype and out.shape == q.shape
    expected = attnsuite.attention(q.cpu(), k.cpu(), v.cpu(), causal=causal, backend="reference", layout=layout)
    error = ((out.cpu().double() - expected.double()).norm() / expected.double().norm()).item()
    assert error < 1e-2


def test_auto_on_the_gpu_and_in_place_output():
    q, k, v = qkv()
    assert attnsuite.resolve_backend(q, k, v) in ("cudnn", "flash2", "cuda-vanilla")
    out = torch.empty_like(q)
    pointer = out.data_ptr()
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):  # launched on the caller's current stream
        result = attnsuite.attention(q, k, v, out=out)
    stream.synchronize()
    assert result is out and out.data_ptr() == pointer and torch.isfinite(out).all()


@pytest.mark.parametrize("causal", [False, True])
def test_drop_in_bf16_matches_pytorch(causal):
    q, k, v = (x.transpose(1, 2) for x in qkv())  # (B, H, N, D) views, as models pass them
    out = drop_in.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)
    ref = drop_in._torch_sdpa(q.float(), k.float(), v.float(), is_causal=causal, enable_gqa=True)
    assert ((out.float() - ref).norm() / ref.norm()).item() < 1e-2


def test_drop_in_under_inductor():
    q, k, v = (x.transpose(1, 2) for x in qkv())

    def attend(a, b, c):
        return drop_in.scaled_dot_product_attention(a, b, c, is_causal=True, enable_gqa=True).float() * 2

    compiled = torch.compile(attend, fullgraph=True)
    assert torch.allclose(compiled(q, k, v), attend(q, k, v), atol=1e-2)


def test_cupy_and_jax_round_trips():
    tested = 0
    try:
        import cupy
    except ImportError:
        cupy = None
    if cupy is not None:
        q = cupy.random.standard_normal((1, 128, 4, 64), dtype=cupy.float32).astype(cupy.float16)
        out = attnsuite.attention(q, q, q)
        assert isinstance(out, cupy.ndarray) and out.shape == q.shape
        tested += 1
    try:
        import jax.numpy as jnp
    except ImportError:
        jnp = None
    if jnp is not None:
        q = jnp.ones((1, 128, 4, 64), dtype=jnp.float16)
        out = attnsuite.attention(q, q, q)
        assert out.shape == q.shape and float(jnp.abs(out - 1).max()) < 1e-3
        tested += 1
    if not tested:
        pytest.skip("neither cupy nor jax is installed")
