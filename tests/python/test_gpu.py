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
# The cudnn peer crashed this interpreter on its first call on the H200 (segmentation fault,
# torch 2.11 with its own cuDNN loaded, 2026-12-02), so it runs in a child process of its own:
# test_cudnn_peer_in_a_python_process below.
IN_PROCESS_BACKENDS = [b for b in CUDA_BACKENDS if b != "cudnn"]


def qkv(dtype=torch.bfloat16, heads=8, kv_heads=2, seq=256, dim=128, layout="bshd"):
    generator = torch.Generator(device="cuda").manual_seed(0)
    shape = (2, seq, heads, dim) if layout == "bshd" else (2, heads, seq, dim)
    kv_shape = (2, seq, kv_heads, dim) if layout == "bshd" else (2, kv_heads, seq, dim)
    return (torch.randn(shape, device="cuda", dtype=dtype, generator=generator),
            torch.randn(kv_shape, device="cuda", dtype=dtype, generator=generator),
            torch.randn(kv_shape, device="cuda", dtype=dtype, generator=generator))


@pytest.mark.parametrize("backend", IN_PROCESS_BACKENDS)
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
    # 8-bit kernels round Q, K, V (and P) to 3-4 significant bits: their bound is the one the
    # C++ tests hold them to on randn (docs/kernels/flash3.md, docs/kernels/sage.md).
    assert error < {"flash3-fp8": 0.08, "sage": 0.05, "sage2": 0.08}.get(backend, 1e-2)


def test_auto_on_the_gpu_and_in_place_output():
    q, k, v = qkv()
    assert attnsuite.resolve_backend(q, k, v) in ("cudnn", "flash3", "flash2", "cuda-vanilla")
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


def test_backward_runs_in_the_callers_workspace():
    """flash3's backward in a workspace the caller hands in (the drop-in's, from PyTorch's caching
    allocator; poisoned here: the preprocess must zero its dQ sums) gives the gradients of the
    module's own workspace; one too small, or on the CPU, is a ValueError saying what it needs."""
    q, k, v = qkv(heads=8, kv_heads=2, seq=200, dim=64)
    args = (q, k, v, True, None, "bshd", -1, -1)
    _, why_not = _core.resolve_backward("flash3", *args)
    if why_not is not None:
        pytest.skip(f"flash3 has no backward here: {why_not}")
    out, lse = attnsuite.attention(q, k, v, causal=True, backend="flash3", return_lse=True)
    grad_out = torch.randn_like(out)
    nbytes = _core.workspace_bytes("flash3", *args, True)
    assert nbytes > 0

    def backward(workspace):
        grads = [torch.full_like(x, float("nan")) for x in (q, k, v)]
        _core.backward("flash3", q, k, v, out, grad_out, lse, *grads, *args[3:], False,
                       torch.cuda.current_stream().cuda_stream, workspace=workspace)
        return grads

    own = backward(None)
    given = backward(torch.full((nbytes,), 255, dtype=torch.uint8, device="cuda"))
    for got, want in zip(given, own):
        assert torch.isfinite(got).all()
        torch.testing.assert_close(got, want, rtol=2e-2, atol=2e-2)  # dQ's atomics sum in any order
    with pytest.raises(ValueError, match=f"workspace has {nbytes - 256} bytes; this call needs {nbytes}"):
        backward(torch.empty(nbytes - 256, dtype=torch.uint8, device="cuda"))
    with pytest.raises(ValueError, match="workspace is on cpu; it must be on q's device, cuda:0"):
        backward(torch.empty(nbytes, dtype=torch.uint8))


def test_drop_in_under_inductor():
    q, k, v = (x.transpose(1, 2) for x in qkv())

    def attend(a, b, c):
        return drop_in.scaled_dot_product_attention(a, b, c, is_causal=True, enable_gqa=True).float() * 2

    compiled = torch.compile(attend, fullgraph=True)
    assert torch.allclose(compiled(q, k, v), attend(q, k, v), atol=1e-2)


def _reference_of(q, k, v, **kwargs):
    """attnsuite's fp64-accumulating CPU reference on host copies (numpy float32)."""
    import numpy as np
    host = [np.asarray(x, dtype=np.float32) for x in (q, k, v)]
    return attnsuite.attention(*host, backend="reference", **kwargs)


def test_cupy_zero_copy_in_and_out():
    cupy = pytest.importorskip("cupy")
    rng = cupy.random.default_rng(0)
    q, k, v = (rng.standard_normal((2, 256, 4, 64), dtype=cupy.float32).astype(cupy.float16) for _ in range(3))
    out = cupy.empty_like(q)
    pointer = out.data.ptr
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:  # launched on cupy's current stream
        result = attnsuite.attention(q, k, v, out=out, causal=True)
    stream.synchronize()
    assert result is out and out.data.ptr == pointer
    fresh = attnsuite.attention(q, k, v, causal=True)  # a new cupy array on q's device
    assert isinstance(fresh, cupy.ndarray) and fresh.device.id == q.device.id
    expected = _reference_of(cupy.asnumpy(q), cupy.asnumpy(k), cupy.asnumpy(v), causal=True)
    got = cupy.asnumpy(out).astype("float64")
    assert float(((got - expected) ** 2).sum() ** 0.5 / (expected.astype("float64") ** 2).sum() ** 0.5) < 1e-2


def test_jax_arrays_on_the_gpu():
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp
    import numpy as np
    gpus = [d for d in jax.devices() if d.platform == "gpu"]
    if not gpus:
        pytest.skip("jax sees no GPU")
    keys = jax.random.split(jax.random.PRNGKey(0), 3)
    q, k, v = (jax.device_put(jax.random.normal(key, (2, 128, 4, 64), dtype=jnp.bfloat16), gpus[0]) for key in keys)
    out = attnsuite.attention(q, k, v)
    assert isinstance(out, jax.Array) and out.shape == q.shape and out.dtype == jnp.bfloat16
    assert list(out.devices())[0].platform == "gpu"
    expected = _reference_of(np.asarray(q.astype(jnp.float32)), np.asarray(k.astype(jnp.float32)),
                             np.asarray(v.astype(jnp.float32)))
    got = np.asarray(out.astype(jnp.float32)).astype(np.float64)
    assert float(np.linalg.norm(got - expected) / np.linalg.norm(expected)) < 2e-2


def test_torch_zero_copy_of_strided_views():
    # BHSD tensors read as BSHD views, as the drop-in passes them: no copy, the right result.
    q, k, v = qkv(layout="bhsd")
    views = [x.transpose(1, 2) for x in (q, k, v)]
    assert not views[0].is_contiguous()
    out = attnsuite.attention(*views)
    expected = _reference_of(*(x.float().cpu().numpy() for x in views))
    got = out.float().cpu().double().numpy()
    import numpy as np
    assert float(np.linalg.norm(got - expected) / np.linalg.norm(expected)) < 2e-2


def test_mismatched_devices_are_one_clear_error():
    q, k, v = qkv()
    with pytest.raises(ValueError, match=r"q, k and v must be on one device; got cuda:0, cpu, cuda:0"):
        attnsuite.attention(q, k.cpu(), v)
    with pytest.raises(ValueError, match=r"out is on cpu; it must be on q's device, cuda:0"):
        attnsuite.attention(q, k, v, out=torch.empty(q.shape, dtype=q.dtype))
    with pytest.raises(attnsuite.UnsupportedError, match="backend 'cpu-flash' runs on the cpu, the arrays are on the cuda"):
        attnsuite.attention(q, k, v, backend="cpu-flash")
    with pytest.raises(ValueError, match="q, k and v must have one dtype; got bf16, fp16, bf16"):
        attnsuite.attention(q, k.half(), v)


def test_auto_follows_a_backend_cache_for_this_gpu(tmp_path):
    import json
    q, k, v = qkv()
    machine = _core.machine(2, 0)
    assert machine["device"] and machine["driver"]
    default = attnsuite.auto_choice(q, k, v)
    assert default["source"] == "default order"
    path = tmp_path / "backends.json"
    attnsuite.set_backend_cache(path)
    try:
        def runs(name):
            try:
                return attnsuite.resolve_backend(q, k, v, backend=name) == name
            except (ValueError, attnsuite.UnsupportedError):
                return False

        others = [b for b in ("cuda-vanilla", "flash2", "flash3") if b != default["backend"] and runs(b)]
        assert others, "no second CUDA backend runs the problem"
        for fastest in others:
            path.write_text(json.dumps({"version": 1, "machines": [{
                "device": machine["device"], "driver": machine["driver"],
                "classes": {default["shape_class"]: {"order": [fastest, default["backend"]]}}}]}))
            attnsuite.set_backend_cache(path)  # read it now (else within a second)
            choice = attnsuite.auto_choice(q, k, v)
            assert choice["backend"] == fastest and default["shape_class"] in choice["source"], choice
            expected = attnsuite.attention(q, k, v, backend=default["backend"]).float()
            assert ((attnsuite.attention(q, k, v).float() - expected).norm() / expected.norm()).item() < 1e-2
    finally:
        attnsuite.set_backend_cache(None)


def test_tune_batch_size_on_the_gpu_feeds_auto(tmp_path):
    cache = tmp_path / "backends.json"
    backends = [b for b in ("flash2", "cuda-vanilla") if b in CUDA_BACKENDS]
    tuning = attnsuite.tune_batch_size(backends=backends, seq_lengths=[1024], heads=8, kv_heads=8, head_dim=128,
                                       dtype="bf16", causal=True, layout="bshd", max_batch=8,
                                       timing={"warmup": 1, "min_reps": 3, "max_reps": 10, "max_time_ms": 50},
                                       out=tmp_path / "tune", cache=cache, progress=False, dataframe=False)
    assert all(case["best_batch"] for case in tuning), tuning.table
    attnsuite.set_backend_cache(cache)
    try:
        q = torch.randn(1, 1024, 8, 128, device="cuda", dtype=torch.bfloat16)
        choice = attnsuite.auto_choice(q, q, q, causal=True)
        fastest = max(tuning, key=lambda case: case["tokens_per_s"])["backend"]
        assert choice["backend"] == fastest and str(cache) in choice["source"], (choice, tuning.table)
    finally:
        attnsuite.set_backend_cache(None)


CUDNN_CHILD = """
import torch, attnsuite
q, k, v = (torch.randn(2, 256, 8, 128, device="cuda", dtype=torch.bfloat16) for _ in range(3))
out = attnsuite.attention(q, k, v, backend="cudnn")
ref = attnsuite.attention(q, k, v, backend="flash2")
torch.cuda.synchronize()
print(((out.float() - ref.float()).norm() / ref.float().norm()).item())
"""


@pytest.mark.xfail(reason="known: the cudnn peer segfaulted in a Python process with torch loaded (H200, 2026-12-02)",
                   strict=False)
def test_cudnn_peer_in_a_python_process():
    import subprocess
    import sys
    if "cudnn" not in CUDA_BACKENDS:
        pytest.skip("this build has no cudnn peer")
    child = subprocess.run([sys.executable, "-c", CUDNN_CHILD], capture_output=True, text=True, timeout=120)
    assert child.returncode == 0, f"exit {child.returncode}: {child.stderr[-500:]}"
    assert float(child.stdout.strip().splitlines()[-1]) < 1e-2
