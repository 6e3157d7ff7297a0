"""Training through the PyTorch drop-in: attnsuite's backward under autograd (the ops
attnsuite::sdpa_fwd / attnsuite::sdpa_bwd), against float64 PyTorch, gradcheck, opcheck,
torch.compile (the ops in the forward and the backward graph), a model's parameter gradients
against PyTorch's SDPA, and the fallback of a backend without a backward."""
import warnings

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (CI does not install it: 5.2 GB with its CUDA "
                                            "wheels; ATTNSUITE_TORCH=1 scripts/setup-python.sh installs it)")

import attnsuite  # noqa: E402
import attnsuite.torch as drop_in  # noqa: E402
from attnsuite import _core  # noqa: E402

CPU_BACKENDS = ("reference", "cpu-flash", "cpu-vanilla")

# (batch, heads_q, heads_kv, seq_q, seq_kv, head_dim, head_dim_v, causal): odd lengths, causal
# with seq_q != seq_kv both ways (seq_q > seq_kv: the first rows see no key), GQA and MQA.
SHAPES = [
    (1, 2, 2, 5, 7, 32, 32, False),
    (2, 4, 2, 9, 13, 32, 32, True),
    (1, 3, 1, 11, 6, 32, 32, True),
    (2, 2, 2, 17, 17, 64, 64, True),
]

# gradcheck perturbs every input element (two forwards each) and runs a backward per output
# element: small ones.
GRADCHECK_SHAPES = [
    (1, 2, 1, 5, 7, 32, 32, True),
    (1, 2, 1, 6, 3, 32, 32, True),
    (1, 1, 1, 4, 5, 32, 32, False),
]


@pytest.fixture(autouse=True)
def fresh_state():
    drop_in._warned.clear()
    drop_in.unpatch()
    drop_in.set_backend("auto")
    yield
    drop_in.unpatch()
    drop_in.set_backend("auto")


def make_inputs(batch, heads_q, heads_kv, seq_q, seq_kv, head_dim, head_dim_v, dtype=torch.float32, seed=0):
    generator = torch.Generator().manual_seed(seed)
    q = torch.randn(batch, heads_q, seq_q, head_dim, generator=generator, dtype=torch.float64)
    k = torch.randn(batch, heads_kv, seq_kv, head_dim, generator=generator, dtype=torch.float64)
    v = torch.randn(batch, heads_kv, seq_kv, head_dim_v, generator=generator, dtype=torch.float64)
    return tuple(x.to(dtype).requires_grad_() for x in (q, k, v))


def with_backward_or_skip(backend, q, k, v, causal):
    """The backend's name when this build has it and it has a backward for the problem, else skip."""
    if backend not in {entry["name"] for entry in attnsuite.backends()}:
        pytest.skip(f"backend {backend} is not in this build")
    try:
        name, why_not = _core.resolve_backward(backend, q.detach(), k.detach(), v.detach(), causal, None, "bhsd", -1,
                                               -1)
    except _core.UnsupportedError as error:
        pytest.skip(str(error))
    if why_not is not None:
        pytest.skip(f"{backend} has no backward here: {why_not}")
    return name


def float64_gradients(q, k, v, grad_out, causal, scale=None):
    """The independent side: (out, lse, dq, dk, dv) by PyTorch autograd in float64 of attention
    written out here (causal aligned bottom-right; a row that sees no key: out 0, lse -inf)."""
    inputs = [x.detach().double().requires_grad_() for x in (q, k, v)]
    query, key, value = inputs
    group = query.shape[1] // key.shape[1]
    key, value = key.repeat_interleave(group, 1), value.repeat_interleave(group, 1)
    scores = query @ key.transpose(-2, -1) * (scale or query.shape[-1] ** -0.5)
    seq_q, seq_kv = query.shape[2], key.shape[2]
    visible = torch.ones(seq_q, seq_kv, dtype=torch.bool)
    if causal:
        visible = torch.arange(seq_kv)[None, :] <= torch.arange(seq_q)[:, None] + seq_kv - seq_q
    sees_a_key = visible.any(-1, keepdim=True)
    lse = torch.logsumexp(scores.masked_fill(~visible, float("-inf")), -1)
    weights = torch.softmax(scores.masked_fill(~visible & sees_a_key, float("-inf")), -1) * sees_a_key
    out = weights @ value
    return (out.detach(), lse.detach()) + torch.autograd.grad(out, inputs, grad_out.double())


def relative_error(got, expected):
    return ((got.double() - expected).norm() / expected.norm().clamp_min(1e-30)).item()


@pytest.mark.parametrize("backend", CPU_BACKENDS)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "b{}h{}kv{}q{}k{}d{}dv{}{}".format(*s[:7], "c" if s[7] else ""))
def test_gradients_match_float64(backend, shape):
    causal = shape[-1]
    q, k, v = make_inputs(*shape[:-1])
    name = with_backward_or_skip(backend, q, k, v, causal)
    out, lse = drop_in._sdpa_fwd(q, k, v, causal, None, name)
    grad_out = torch.randn(out.shape, generator=torch.Generator().manual_seed(1))
    out.backward(grad_out)
    ref_out, ref_lse, ref_dq, ref_dk, ref_dv = float64_gradients(q, k, v, grad_out, causal)
    # fp32 inputs and outputs: the reference rounds once from double (~6e-8 relative); the fast
    # kernels accumulate in fp32 over at most 17 keys.
    limit = 1e-6 if name == "reference" else 2e-5
    assert relative_error(out, ref_out) < limit
    finite = torch.isfinite(ref_lse)
    assert torch.equal(torch.isfinite(lse), finite)  # rows that see no key: -inf
    assert torch.allclose(lse[finite].double(), ref_lse[finite], rtol=0, atol=1e-5)
    for got, want in ((q.grad, ref_dq), (k.grad, ref_dk), (v.grad, ref_dv)):
        assert got.shape == want.shape and got.dtype == torch.float32
        assert relative_error(got, want) < limit, (got - want).abs().max()
    if shape[3] > shape[4] and causal:  # the rows that see no key get dq = 0 exactly
        assert torch.count_nonzero(q.grad[:, :, : shape[3] - shape[4]]) == 0


@pytest.mark.parametrize("backend", CPU_BACKENDS)
@pytest.mark.parametrize("shape", GRADCHECK_SHAPES, ids=["gqa-causal-q<k", "gqa-causal-q>k", "mha"])
def test_gradcheck(backend, shape):
    """torch.autograd.gradcheck: the op's backward against finite differences of its forward.
    The library takes float32, float16 and bfloat16 only (no float64 dtype): float32 inputs, and
    a step eps = 1e-3 whose central difference resolves the gradient to ~1e-4 (fp32 outputs,
    rounded once from double by `reference`); the tolerances sit above that, far below an
    error in the gradient (a gradient that is off by one key's share fails)."""
    causal = shape[-1]
    q, k, v = make_inputs(*shape[:-1])
    name = with_backward_or_skip(backend, q, k, v, causal)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Input #")  # gradcheck's note that these are not float64
        assert torch.autograd.gradcheck(lambda a, b, c: drop_in._sdpa_fwd(a, b, c, causal, None, name)[0], (q, k, v),
                                        eps=1e-3, atol=2e-3, rtol=2e-2, nondet_tol=0.0)


def test_gradcheck_catches_a_wrong_gradient(monkeypatch):
    """The check above can fail: a backward that drops one query row's gradient is caught."""
    q, k, v = make_inputs(*GRADCHECK_SHAPES[0][:-1])
    name = with_backward_or_skip("reference", q, k, v, True)
    real_backward = _core.backward

    def wrong_backward(*args, **kwargs):
        # The drop-in hands the module DLPack capsules (read once): dq as a tensor to write after.
        args = [torch.from_dlpack(arg) if type(arg).__name__ == "PyCapsule" else arg for arg in args]
        result = real_backward(*args, **kwargs)
        args[7][:, :, 2] = 0  # dq of one query row
        return result

    monkeypatch.setattr(_core, "backward", wrong_backward)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Input #")
        assert not torch.autograd.gradcheck(lambda a, b, c: drop_in._sdpa_fwd(a, b, c, True, None, name)[0],
                                            (q, k, v), eps=1e-3, atol=2e-3, rtol=2e-2, raise_exception=False)


def test_opcheck():
    q, k, v = make_inputs(2, 4, 2, 9, 13, 32, 32)
    name = with_backward_or_skip("reference", q, k, v, True)
    torch.library.opcheck(drop_in._sdpa_fwd, (q, k, v, True, None, name))
    with warnings.catch_warnings():
        # "auto" resolves per call inside the ops; where its choice has no backward the backward
        # op computes in PyTorch (and warns): opcheck checks the op either way.
        warnings.simplefilter("ignore", RuntimeWarning)
        torch.library.opcheck(drop_in._sdpa_fwd, (q, k, v, False, 0.3, "auto"))
    out, lse = drop_in._sdpa_fwd(q, k, v, True, None, name)
    grad_out = torch.randn(out.shape)
    torch.library.opcheck(drop_in._sdpa_bwd, (grad_out, q.detach(), k.detach(), v.detach(), out.detach(), lse, True,
                                              None, name))


def counting(monkeypatch):
    """Counts the module's forward and backward calls (by backend name)."""
    calls = {"forward": [], "backward": []}
    for which in calls:
        real = getattr(_core, which)

        def count(backend, *args, real=real, which=which, **kwargs):
            calls[which].append(backend)
            return real(backend, *args, **kwargs)

        monkeypatch.setattr(_core, which, count)
    return calls


def test_compile_keeps_the_ops_in_forward_and_backward_graphs(monkeypatch):
    from functorch.compile import make_boxed_func
    from torch._dynamo.backends.common import aot_autograd

    graphs = {}

    def capture(kind):
        def compiler(graph_module, example_inputs):
            graphs[kind] = graph_module.code
            return make_boxed_func(graph_module.forward)
        return compiler

    q, k, v = make_inputs(2, 4, 2, 16, 16, 32, 32)
    with_backward_or_skip("reference", q, k, v, True)
    drop_in.set_backend("reference")

    def loss_of(a, b, c):
        return (drop_in.scaled_dot_product_attention(a, b, c, is_causal=True, enable_gqa=True) * 2.0).square().sum()

    torch._dynamo.reset()
    compiled = torch.compile(loss_of, backend=aot_autograd(fw_compiler=capture("forward"),
                                                           bw_compiler=capture("backward")), fullgraph=True)
    calls = counting(monkeypatch)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no fallback
        compiled(q, k, v).backward()
    assert calls == {"forward": ["reference"], "backward": ["reference"]}
    assert "attnsuite.sdpa_fwd" in graphs["forward"] and "scaled_dot_product" not in graphs["forward"]
    assert "attnsuite.sdpa_bwd" in graphs["backward"] and "scaled_dot_product" not in graphs["backward"]
    compiled_grads = [x.grad.clone() for x in (q, k, v)]
    for x in (q, k, v):
        x.grad = None
    loss_of(q, k, v).backward()  # eager
    for compiled_grad, x in zip(compiled_grads, (q, k, v)):
        assert torch.allclose(compiled_grad, x.grad, rtol=0, atol=1e-6)


class TinyCausalLM(torch.nn.Module):
    """Attention as transformers models write it (F.scaled_dot_product_attention looked up at
    call time, (batch, heads, seq, dim) views of (batch, seq, heads, dim) projections, GQA)."""

    def __init__(self, vocab=64, hidden=128, heads=4, kv_heads=2):
        super().__init__()
        self.heads, self.kv_heads, self.dim = heads, kv_heads, hidden // heads
        self.embed = torch.nn.Embedding(vocab, hidden)
        self.q = torch.nn.Linear(hidden, hidden)
        self.kv = torch.nn.Linear(hidden, 2 * kv_heads * self.dim)
        self.out = torch.nn.Linear(hidden, hidden)
        self.head = torch.nn.Linear(hidden, vocab)

    def forward(self, tokens):
        x = self.embed(tokens)
        batch, seq, hidden = x.shape
        q = self.q(x).view(batch, seq, self.heads, self.dim).transpose(1, 2)
        k, v = self.kv(x).view(batch, seq, 2, self.kv_heads, self.dim).permute(2, 0, 3, 1, 4)
        attended = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        x = x + self.out(attended.transpose(1, 2).reshape(batch, seq, hidden))
        return torch.nn.functional.cross_entropy(self.head(x)[:, :-1].flatten(0, 1), tokens[:, 1:].flatten())


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_model_gradients_match_pytorch(backend, monkeypatch):
    torch.manual_seed(0)
    model = TinyCausalLM()
    tokens = torch.randint(0, 64, (2, 33))
    probe = torch.empty(2, 4, 33, 32), torch.empty(2, 2, 33, 32)
    with_backward_or_skip(backend, probe[0], probe[1], probe[1], True)
    loss = model(tokens)
    loss.backward()
    expected = {name: p.grad.clone() for name, p in model.named_parameters()}
    model.zero_grad()
    calls = counting(monkeypatch)
    with drop_in.patched(backend=backend), warnings.catch_warnings():
        warnings.simplefilter("error")  # no fallback: attnsuite ran both passes
        patched_loss = model(tokens)
        patched_loss.backward()
    assert calls == {"forward": [backend], "backward": [backend]}
    assert abs(patched_loss.item() - loss.item()) < 1e-5
    for name, p in model.named_parameters():
        assert relative_error(p.grad, expected[name].double()) < 1e-4, name


def test_no_grad_and_inference_use_the_forward_only_op(monkeypatch):
    q, k, v = make_inputs(1, 2, 2, 16, 16, 32, 32)
    calls = counting(monkeypatch)
    with torch.no_grad():
        drop_in.scaled_dot_product_attention(q, k, v, is_causal=True)
    drop_in.scaled_dot_product_attention(q.detach(), k.detach(), v.detach())
    assert len(calls["forward"]) == 2 and calls["backward"] == []


def test_three_dimensional_inputs_train():
    q, k, v = (x[:, 0].detach().requires_grad_() for x in make_inputs(2, 1, 1, 12, 12, 32, 32))
    with_backward_or_skip("reference", q.unsqueeze(1), k.unsqueeze(1), v.unsqueeze(1), True)
    drop_in.set_backend("reference")
    out = drop_in.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert out.shape == q.shape
    out.sum().backward()
    grads = [x.grad.clone() for x in (q, k, v)]
    for x in (q, k, v):
        x.grad = None
    drop_in._torch_sdpa(q, k, v, is_causal=True).sum().backward()
    for got, x in zip(grads, (q, k, v)):
        assert torch.allclose(got, x.grad, atol=1e-5)


def test_backend_without_backward_falls_back_with_a_warning(monkeypatch):
    """A backend that has no backward for the problem: the forward and backward run in PyTorch,
    with the one-time warning that says why (asked of the module before the op)."""
    q, k, v = make_inputs(1, 2, 2, 16, 16, 64, 64)
    without = []
    for entry in attnsuite.backends():
        if entry["device"] != "cpu":
            continue
        try:
            _, why_not = _core.resolve_backward(entry["name"], q.detach(), k.detach(), v.detach(), True, None, "bhsd",
                                                -1, -1)
        except _core.UnsupportedError:
            continue
        if why_not is not None:
            without.append(entry["name"])
    if not without:
        pytest.skip("every CPU backend of this build has a backward for this problem")
    drop_in.set_backend(without[0])
    calls = counting(monkeypatch)
    with pytest.warns(RuntimeWarning, match="require grad: backend .* has no backward"):
        out = drop_in.scaled_dot_product_attention(q, k, v, is_causal=True)
    out.sum().backward()
    assert calls == {"forward": [], "backward": []}
    expected = [x.grad.clone() for x in (q, k, v)]
    for x in (q, k, v):
        x.grad = None
    drop_in._torch_sdpa(q, k, v, is_causal=True).sum().backward()
    for got, x in zip(expected, (q, k, v)):
        assert torch.allclose(got, x.grad, atol=1e-6)


def test_ops_fall_back_inside_when_the_backend_cannot(monkeypatch):
    """What a compiled graph meets at run time: the forward op's backend cannot run the problem
    (UnsupportedError), or the backward op's has no backward. The ops then compute in PyTorch
    (attnsuite's semantics: bottom-right causal) and warn once."""
    q, k, v = make_inputs(1, 3, 1, 11, 6, 32, 32)
    real_forward, real_backward = _core.forward, _core.backward

    def unsupported(*args, **kwargs):
        raise _core.UnsupportedError("backend 'test': not this one")

    monkeypatch.setattr(_core, "forward", unsupported)
    monkeypatch.setattr(_core, "backward", unsupported)
    with pytest.warns(RuntimeWarning, match="not this one"):
        out, lse = drop_in._sdpa_fwd(q, k, v, True, None, "reference")
        grad_out = torch.randn(out.shape)
        out.backward(grad_out)
        inference_out = drop_in._sdpa(q.detach(), k.detach(), v.detach(), True, None, "reference")
    monkeypatch.setattr(_core, "forward", real_forward)
    monkeypatch.setattr(_core, "backward", real_backward)
    ref_out, ref_lse, ref_dq, ref_dk, ref_dv = float64_gradients(q, k, v, grad_out, True)
    assert relative_error(out, ref_out) < 1e-6 and relative_error(inference_out, ref_out) < 1e-6
    assert torch.equal(torch.isinf(lse), torch.isinf(ref_lse))
    for got, want in ((q.grad, ref_dq), (k.grad, ref_dk), (v.grad, ref_dv)):
        assert relative_error(got, want) < 1e-6


def test_deterministic_algorithms_reach_the_backward(monkeypatch):
    q, k, v = make_inputs(1, 2, 2, 8, 8, 32, 32)
    name = with_backward_or_skip("reference", q, k, v, False)
    seen = []
    real_backward = _core.backward

    def record(*args, **kwargs):
        seen.append(args[15])  # deterministic
        return real_backward(*args, **kwargs)

    monkeypatch.setattr(_core, "backward", record)
    previous = torch.are_deterministic_algorithms_enabled()
    try:
        for flag in (False, True):
            torch.use_deterministic_algorithms(flag)
            drop_in._sdpa_fwd(q, k, v, False, None, name)[0].sum().backward()
    finally:
        torch.use_deterministic_algorithms(previous)
    assert seen == [False, True]


def test_eager_calls_skip_the_custom_ops_and_match_them(monkeypatch):
    """Eager mode runs the ops' bodies under an autograd.Function (less host time a call): the
    same gradients, bit for bit, as the ops themselves; the ops themselves are not called."""
    q, k, v = make_inputs(2, 4, 2, 13, 13, 32, 32)
    grad_out = torch.randn(2, 4, 13, 32, generator=torch.Generator().manual_seed(3))
    out, _ = drop_in._sdpa_fwd(q, k, v, True, None, "cpu-flash")
    out.backward(grad_out)
    through_ops = [out.detach().clone()] + [x.grad.clone() for x in (q, k, v)]
    for x in (q, k, v):
        x.grad = None

    def not_in_eager_mode(*args, **kwargs):
        raise AssertionError("the custom op ran in eager mode")

    monkeypatch.setattr(drop_in, "_sdpa_fwd", not_in_eager_mode)
    monkeypatch.setattr(drop_in, "_sdpa", not_in_eager_mode)
    drop_in.set_backend("cpu-flash")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no fallback
        out = drop_in.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        out.backward(grad_out)
        with torch.no_grad():
            inference = drop_in.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    eager = [out.detach()] + [x.grad for x in (q, k, v)]
    for got, expected in zip(eager, through_ops):
        assert torch.equal(got, expected)
    assert torch.equal(inference, through_ops[0])


def test_answers_are_kept_per_problem_for_named_backends_only(monkeypatch):
    """The module's answers (workspace size, a backward or not) are asked once per named backend
    and problem; a new shape is asked again, and 'auto' every time."""
    asked = []
    real_resolve, real_workspace = _core.resolve_backward, _core.workspace_bytes

    def resolve_backward(*args, **kwargs):
        asked.append(("backward", args[0], tuple(args[1].shape)))
        return real_resolve(*args, **kwargs)

    def workspace_bytes(*args, **kwargs):
        asked.append(("workspace", args[0], tuple(args[1].shape), args[9]))
        return real_workspace(*args, **kwargs)

    monkeypatch.setattr(_core, "resolve_backward", resolve_backward)
    monkeypatch.setattr(_core, "workspace_bytes", workspace_bytes)
    small, large = make_inputs(1, 2, 2, 5, 5, 32, 32), make_inputs(1, 2, 2, 7, 7, 32, 32)
    for backend in ("cpu-flash", "auto"):
        monkeypatch.setattr(attnsuite, "_answers", {})
        drop_in.set_backend(backend)
        asked.clear()
        for inputs in (small, small, large):
            drop_in.scaled_dot_product_attention(*inputs, is_causal=True).sum().backward()
        # Whether there is a backward: once per shape for cpu-flash, every call for "auto"; the
        # workspaces (forward, backward) of the backend "auto" resolved to: once per shape.
        backward = [entry for entry in asked if entry[0] == "backward"]
        assert [entry[2] for entry in backward] == ([(1, 2, 5, 32), (1, 2, 7, 32)] if backend == "cpu-flash" else
                                                    [(1, 2, 5, 32), (1, 2, 5, 32), (1, 2, 7, 32)])
        assert all(entry[1] == backend for entry in backward)
        workspaces = [entry for entry in asked if entry[0] == "workspace"]
        assert sorted(entry[2:] for entry in workspaces) == [((1, 2, 5, 32), False), ((1, 2, 5, 32), True),
                                                             ((1, 2, 7, 32), False), ((1, 2, 7, 32), True)]
