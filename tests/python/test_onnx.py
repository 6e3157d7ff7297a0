"""ONNX: export (both forms, layer and block) -> onnx.checker -> ONNX Runtime -> compared with
the reference; the ONNX Runtime peers through attention() and the harness."""
import subprocess

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
onnxruntime = pytest.importorskip("onnxruntime")

import attnsuite  # noqa: E402
from attnsuite import onnx as attnsuite_onnx  # noqa: E402
from conftest import random_qkv, rel_l2  # noqa: E402


@pytest.mark.parametrize("form", ["attention", "decomposed"])
@pytest.mark.parametrize("layout", ["bshd", "bhsd"])
@pytest.mark.parametrize("dtype", ["fp32", "fp16"])
@pytest.mark.parametrize("shape", [dict(model="llama-3.2-1b", seq=48),
                                   dict(heads=4, head_dim=64, seq=40, seq_kv=72, causal=True),
                                   dict(heads=4, kv_heads=2, head_dim=32, seq=33, window=(6, 0))])
def test_layer_export_runs_and_matches_reference(tmp_path, form, layout, dtype, shape):
    p = attnsuite_onnx.problem(dtype=dtype, layout=layout, **shape)
    path = str(tmp_path / f"{form}.onnx")
    model = attnsuite_onnx.export_layer(path, p, form)
    onnx.checker.check_model(path, full_check=True)
    expected_opset = 23 if form == "attention" else 17
    assert model.opset_import[0].version == expected_opset
    ops = {node.op_type for node in model.graph.node}
    assert ("Attention" in ops) == (form == "attention")
    _, error = attnsuite_onnx.check_layer(path, p, form)
    assert error < attnsuite_onnx.TOLERANCE[dtype]


@pytest.mark.parametrize("form", ["attention", "decomposed"])
def test_block_export_runs_and_matches_reference(tmp_path, form):
    p = attnsuite_onnx.problem(model="llama-3.2-1b", seq=32, causal=True)
    path = str(tmp_path / f"block-{form}.onnx")
    model, weights = attnsuite_onnx.export_block(path, p, form)
    assert [i.name for i in model.graph.input] == ["x"]
    assert {n.op_type for n in model.graph.node} >= {"MatMul"}
    _, error = attnsuite_onnx.check_block(path, p, weights)
    assert error < 1e-5
    # A wrong weight must be caught: the check is not a tautology.
    broken = dict(weights, wo=weights["wo"] * 1.01)
    _, error = attnsuite_onnx.check_block(path, p, broken)
    assert error > 1e-3


def test_export_cli(tmp_path, cli):
    out = tmp_path / "models"
    result = subprocess.run([cli, "export-onnx", "--model", "llama-3.2-1b", "--seq", "40", "--causal", "--block",
                             "--out", str(out)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.count(" ok ") == 4, result.stdout
    for name in ("attention-layer-attention", "attention-layer-decomposed", "attention-block-attention",
                 "attention-block-decomposed"):
        onnx.checker.check_model(str(out / f"{name}.onnx"), full_check=True)
    bad = subprocess.run([cli, "export-onnx", "--model", "gpt-9"], capture_output=True, text=True)
    assert bad.returncode == 2 and "unknown model 'gpt-9'" in bad.stderr
    usage = subprocess.run([cli, "export-onnx", "--help"], capture_output=True, text=True)
    assert usage.returncode == 0 and "--block" in usage.stdout


@pytest.mark.parametrize("backend", ["onnxruntime", "onnxruntime-decomposed"])
def test_onnxruntime_peers_from_python(backend):
    names = [b["name"] for b in attnsuite.backends()]
    if backend not in names:
        pytest.skip("this build has no ONNX Runtime peers (no libpython found)")
    entry = next(b for b in attnsuite.backends() if b["name"] == backend)
    assert entry["peer_of"] == "ONNX Runtime" and entry["display_name"].startswith("ONNX Runtime (CPU EP")
    q, k, v = random_qkv(heads_q=8, heads_kv=2, seq_q=50, seq_kv=64)
    expected = attnsuite.attention(q, k, v, causal=True, backend="reference")
    assert rel_l2(attnsuite.attention(q, k, v, causal=True, backend=backend), expected) < 1e-5
    with pytest.raises(ValueError, match="computes no log-sum-exp"):
        attnsuite.attention(q, k, v, backend=backend, return_lse=True)
    empty_rows = np.zeros((1, 8, 2, 64), np.float32)
    with pytest.raises(attnsuite.UnsupportedError):  # a query row that sees no key
        attnsuite.attention(empty_rows, empty_rows[:, :4], empty_rows[:, :4], causal=True, backend=backend)


def test_onnxruntime_peers_in_the_harness(tmp_path):
    if "onnxruntime" not in [b["name"] for b in attnsuite.backends()]:
        pytest.skip("this build has no ONNX Runtime peers")
    rows = attnsuite.bench(backends=["cpu-vanilla", "cpu-flash", "onnxruntime", "onnxruntime-decomposed"],
                           batch_sizes=[1], seq_lengths=[96], heads=4, dtype=["fp32", "fp16", "bf16"], causal="both",
                           timing={"warmup": 0, "min_reps": 2, "max_time_ms": 50}, out=tmp_path / "ort",
                           progress=False, dataframe=False)
    ort = [r for r in rows if r["backend"].startswith("onnxruntime")]
    assert len(ort) == 2 * 3 * 2
    for row in ort:
        assert row["peer_of"] == "ONNX Runtime"
        if row["dtype"] == "bf16":
            assert row["status"] == "skipped" and "bfloat16" in row["reason"]
            continue
        assert row["status"] == "ok", row["reason"]
        assert row["rel_l2"] < (1e-5 if row["dtype"] == "fp32" else 2e-3)
        assert row["ms_median"] > 0 and row["peak_mem_mib"] >= 0


def test_listing_the_backends_imports_neither_onnx_nor_onnxruntime():
    """attnsuite.backends() names the installed onnxruntime's version (the peers' capabilities)
    from its package metadata: importing onnx in a process that had imported torch ended the
    interpreter on the H100 image (2026-12-06), and every listing would have imported it."""
    import sys

    script = ("import sys, attnsuite\n"
              "entries = {b['name']: b for b in attnsuite.backends()}\n"
              "print(entries.get('onnxruntime', {}).get('capabilities', ''))\n"
              "print('onnx' in sys.modules, 'onnxruntime' in sys.modules)\n")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    capabilities, imported = result.stdout.strip().splitlines()[-2:]
    assert imported == "False False"
    if "onnxruntime" in {b["name"] for b in attnsuite.backends()}:
        assert f"onnxruntime {onnxruntime.__version__} through its Python API" in capabilities
