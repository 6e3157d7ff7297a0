"""The PyTorch drop-in: results against PyTorch's SDPA, the custom op under torch.compile,
patch()/unpatch(), and every fallback path (with its one-time warning)."""
import warnings

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (ATTNSUITE_TORCH=1 scripts/setup-python.sh "
                                            "installs it, as CI does)")
F = torch.nn.functional

import attnsuite.torch as drop_in  # noqa: E402


@pytest.fixture(autouse=True)
def fresh_warnings():
    drop_in._warned.clear()
    drop_in.unpatch()
    drop_in.set_backend("auto")
    yield
    drop_in.unpatch()


def inputs(batch=2, heads=4, kv_heads=None, seq_q=64, seq_kv=None, dim=64, dtype=torch.float32, seed=0):
    generator = torch.Generator().manual_seed(seed)
    q = torch.randn(batch, heads, seq_q, dim, generator=generator).to(dtype)
    k = torch.randn(batch, kv_heads or heads, seq_kv or seq_q, dim, generator=generator).to(dtype)
    v = torch.randn(batch, kv_heads or heads, seq_kv or seq_q, dim, generator=generator).to(dtype)
    return q, k, v


def expected(q, k, v, **kwargs):
    return drop_in._torch_sdpa(q.double(), k.double(), v.double(), **kwargs)


@pytest.mark.parametrize("dtype, limit", [(torch.float32, 1e-5), (torch.bfloat16, 2e-2), (torch.float16, 2e-3)])
@pytest.mark.parametrize("causal", [False, True])
def test_matches_pytorch(dtype, limit, causal):
    q, k, v = inputs(dtype=dtype)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no fallback on the supported path
        out = drop_in.scaled_dot_product_attention(q, k, v, is_causal=causal)
    assert out.dtype == dtype and out.shape == q.shape
    ref = expected(q, k, v, is_causal=causal)
    assert ((out.double() - ref).norm() / ref.norm()).item() < limit


def test_gqa_scale_and_non_contiguous_views():
    q, k, v = inputs(heads=8, kv_heads=2, seq_q=40)
    # (B, N, H, D) memory seen as (B, H, N, D): how transformers models hand q/k/v over.
    q_t = q.transpose(1, 2).contiguous().transpose(1, 2)
    assert not q_t.is_contiguous()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = drop_in.scaled_dot_product_attention(q_t, k, v, scale=0.3, enable_gqa=True)
    ref = expected(q, k, v, scale=0.3, enable_gqa=True)
    assert ((out.double() - ref).norm() / ref.norm()).item() < 1e-5


def test_three_dimensional_inputs():
    q, k, v = (x[:, 0] for x in inputs())
    out = drop_in.scaled_dot_product_attention(q, k, v)
    assert out.shape == q.shape
    assert torch.allclose(out.double(), expected(q, k, v), atol=1e-5)


def backend_without_backward(q, k, v):
    """A CPU backend of this build that runs the forward of (q, k, v) but has no backward for it."""
    import attnsuite

    for entry in attnsuite.backends():
        if entry["device"] != "cpu":
            continue
        try:
            _, why_not = drop_in._core.resolve_backward(entry["name"], q, k, v, False, None, "bhsd", -1, -1)
        except attnsuite.UnsupportedError:
            continue
        if why_not is not None:
            return entry["name"]
    pytest.skip("every CPU backend of this build has a backward for this problem")


@pytest.mark.parametrize("case, reason", [
    ("mask", "attn_mask"),
    ("dropout", "dropout_p"),
    ("grad", "require grad: backend .* has no backward"),
    ("causal_cross", "top-left"),
    ("head_dim", "head dim"),
    ("gqa_without_flag", "enable_gqa"),
    ("float64", "dtypes torch.float64"),
    ("mixed_dtypes", "dtypes torch.float32, torch.float16"),
    ("strided_last_dim", "last dim is not contiguous"),
])
def test_fallbacks_warn_once_and_match_pytorch(case, reason):
    q, k, v = inputs(dim=16 if case == "head_dim" else 64, kv_heads=2 if case == "gqa_without_flag" else None,
                     seq_kv=96 if case == "causal_cross" else None)
    kwargs = {}
    if case == "mask":
        kwargs["attn_mask"] = torch.rand(64, 64) > 0.2
    if case == "causal_cross":
        kwargs["is_causal"] = True
    if case == "grad":  # a backend without a backward for the problem (the others train: test_autograd.py)
        drop_in.set_backend(backend_without_backward(q, k, v))
        q.requires_grad_(True)
    if case == "float64":
        q, k, v = (x.double() for x in (q, k, v))
    if case == "mixed_dtypes":
        k = k.half()
    if case == "strided_last_dim":
        q, k, v = (torch.cat([x, x], dim=-1)[..., ::2] for x in (q, k, v))
    if case == "dropout":
        kwargs["dropout_p"] = 0.5
        torch.manual_seed(0)
    call = (lambda: drop_in.scaled_dot_product_attention(q, k, v, **kwargs))
    if case in ("gqa_without_flag", "mixed_dtypes"):  # PyTorch itself refuses it: the same error reaches the caller
        with pytest.warns(RuntimeWarning, match=reason), pytest.raises(RuntimeError):
            call()
        return
    with pytest.warns(RuntimeWarning, match=reason):
        out = call()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once per reason
        call()
    if case == "dropout":
        torch.manual_seed(0)
        ref = drop_in._torch_sdpa(q, k, v, **kwargs)
        assert torch.equal(out, ref)
        return
    ref = drop_in._torch_sdpa(q, k, v, **kwargs)
    assert torch.allclose(out, ref, atol=1e-5)
    if case == "grad":
        out.sum().backward()
        assert q.grad is not None


def test_patch_unpatch_and_context():
    original = F.scaled_dot_product_attention
    drop_in.patch()
    assert F.scaled_dot_product_attention is drop_in.scaled_dot_product_attention
    assert torch.nn.functional.scaled_dot_product_attention is drop_in.scaled_dot_product_attention
    drop_in.unpatch()
    assert F.scaled_dot_product_attention is original
    with drop_in.patched(backend="cpu-vanilla"):
        assert drop_in.get_backend() == "cpu-vanilla" and drop_in.is_patched()
    assert drop_in.get_backend() == "auto" and not drop_in.is_patched()


class TinyAttention(torch.nn.Module):
    """Attention as transformers models write it: F.scaled_dot_product_attention looked up at call time."""

    def __init__(self, hidden=128, heads=2):
        super().__init__()
        self.heads = heads
        self.qkv = torch.nn.Linear(hidden, 3 * hidden)
        self.out = torch.nn.Linear(hidden, hidden)

    def forward(self, x):
        batch, seq, hidden = x.shape
        q, k, v = self.qkv(x).view(batch, seq, 3, self.heads, hidden // self.heads).permute(2, 0, 3, 1, 4)
        attended = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.out(attended.transpose(1, 2).reshape(batch, seq, hidden))


def test_patched_module_runs_attnsuite(monkeypatch):
    calls = []
    real_forward = drop_in._core.forward

    def counting_forward(backend, *args, **kwargs):
        calls.append(backend)
        return real_forward(backend, *args, **kwargs)

    monkeypatch.setattr(drop_in._core, "forward", counting_forward)
    layer = TinyAttention().eval()
    x = torch.randn(2, 32, 128)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("error")  # no fallback: attnsuite ran it
        baseline = layer(x)
        with drop_in.patched(backend="cpu-flash"):
            out = layer(x)
    assert calls == ["cpu-flash"]
    assert torch.allclose(out, baseline, atol=1e-5)


def test_custom_op_fake_implementation_and_compile():
    q, k, v = inputs(seq_q=32)
    torch.library.opcheck(drop_in._sdpa, (q, k, v, True, None, "auto"))

    def attend(a, b, c):
        return drop_in.scaled_dot_product_attention(a, b, c, is_causal=True) * 2.0

    compiled = torch.compile(attend, backend="aot_eager", fullgraph=True)
    out = compiled(q, k, v)
    assert torch.allclose(out, attend(q, k, v), atol=1e-6)
    # The traced graph holds the custom op, not PyTorch's SDPA.
    graph = torch._dynamo.export(attend)(q, k, v).graph_module.code
    assert "attnsuite.sdpa" in graph and "scaled_dot_product_attention" not in graph


def recording(monkeypatch, name):
    """Records the (backend, kernel_config, options) of every _core.<name> call, then runs it."""
    calls = []
    real = getattr(drop_in._core, name)

    def record(backend, *args, **kwargs):
        # forward: ... stream, kernel_config, options; backward: ... deterministic, stream, kernel_config, options
        calls.append((backend, args[-2], args[-1]))
        return real(backend, *args, **kwargs)

    monkeypatch.setattr(drop_in._core, name, record)
    return calls


def test_backend_kernel_config_and_options_reach_the_module(monkeypatch):
    forwards, backwards = recording(monkeypatch, "forward"), recording(monkeypatch, "backward")
    q, k, v = inputs(seq_q=33, dim=32)
    reference = expected(q, k, v, is_causal=True)
    with drop_in.patched("cpu-flash", kernel_config="q48-k96"):
        assert drop_in.get_backend_plan() == ("cpu-flash", "q48-k96", {})
        with torch.no_grad():
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        assert ((out.double() - reference).norm() / reference.norm()).item() < 1e-5
        leaves = [x.clone().requires_grad_() for x in (q, k, v)]
        F.scaled_dot_product_attention(*leaves, is_causal=True).sum().backward()
    assert drop_in.get_backend_plan() == ("auto", None, {})
    assert forwards == [("cpu-flash", "q48-k96", {})] * 2
    assert backwards == [("cpu-flash", "q48-k96", {})]
    q_ref, k_ref, v_ref = (x.double().requires_grad_() for x in (q, k, v))
    drop_in._torch_sdpa(q_ref, k_ref, v_ref, is_causal=True).sum().backward()
    for leaf, ref in zip(leaves, (q_ref, k_ref, v_ref)):
        assert torch.isfinite(leaf.grad).all()
        assert ((leaf.grad.double() - ref.grad).norm() / ref.grad.norm()).item() < 1e-4


def test_backend_options_change_what_runs():
    # cpu-block-sparse with a band of one key block: each query sees only its own block of keys.
    q, k, v = inputs(batch=1, heads=1, seq_q=512, dim=64)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("error")  # no fallback: the backend ran both
        with drop_in.patched("cpu-block-sparse", options={"block_mask": "band:1"}):
            banded = F.scaled_dot_product_attention(q, k, v)
        with drop_in.patched("cpu-block-sparse"):
            dense = F.scaled_dot_product_attention(q, k, v)
    assert torch.allclose(dense, expected(q, k, v).float(), atol=1e-5)
    assert not torch.allclose(banded, dense, atol=1e-3)


def test_backend_plan_refusals():
    with pytest.raises(ValueError, match="'auto' takes neither"):
        drop_in.set_backend("auto", options={"forward_order": "longest-first"})
    with pytest.raises(ValueError, match="options must be a dict"):
        drop_in.set_backend("cpu-flash", options=["a"])
    with pytest.raises(ValueError, match="kernel_config must be a string"):
        drop_in.patch("cpu-flash", kernel_config=96)
    drop_in.set_backend("cpu-flash", options={"no_such_key": "1"})
    q, k, v = inputs(seq_q=8)
    with pytest.raises(ValueError, match="no_such_key"):
        drop_in.scaled_dot_product_attention(q, k, v)
    drop_in.set_backend("cpu-flash", kernel_config="q1-k1")
    with pytest.raises(ValueError, match="q1-k1"):
        drop_in.scaled_dot_product_attention(q, k, v)
