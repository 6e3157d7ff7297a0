"""examples/train_llama.py as CI runs it: the tiny Llama (transformers, random weights) trained a
few steps with PyTorch's SDPA and with the drop-in on every CPU backend that has a backward; the
loss curves must agree, and a wrong backward must make the example fail."""
import importlib.util
import json
import os

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (ATTNSUITE_TORCH=1 scripts/setup-python.sh installs it)")
pytest.importorskip("transformers", reason="transformers is not installed (python/requirements-torch.txt)")

import attnsuite  # noqa: E402

EXAMPLE = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "train_llama.py")
# One PyTorch thread: with two, on 2 cores shared with other tests, PyTorch's OpenMP threads
# spin-waiting against the rest made the run 24.6 s instead of 5.3 s (loaded development VM).
ARGS = ["--config", "tiny", "--device", "cpu", "--dtype", "fp32", "--steps", "6", "--warmup", "1", "--threads", "1"]


@pytest.fixture(scope="module")
def example():
    spec = importlib.util.spec_from_file_location("train_llama", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_tiny_llama_trains_alike_with_the_drop_in(example, tmp_path):
    out = tmp_path / "train.json"
    assert example.main(ARGS + ["--out", str(out)]) == 0
    document = json.loads(out.read_text())
    rows = {row["backend"]: row for row in document["results"]}
    assert document["ok"] and list(rows)[:2] == ["sdpa", "sdpa-math"] and "reference" in rows
    # The calibrating curve (PyTorch SDPA's math backend) sets the bound only where it is wider.
    assert document["tolerance"] == max(example.TOLERANCE["fp32"], 2 * rows["sdpa-math"]["max_loss_difference"])
    steps, layers = 6, example.CONFIGS["tiny"]["num_hidden_layers"]
    sdpa = rows["sdpa"]["losses"]
    assert len(sdpa) == steps and sdpa[-1] < sdpa[0]  # it learns
    for name, row in rows.items():
        assert row["tokens_per_s"] > 0 and len(row["losses"]) == steps
        assert row["attention_kernels"] == [] and row["step_profile"] is None  # a GPU profile; none on the CPU
        if name in ("sdpa", "sdpa-math"):
            continue
        # Every attention forward and backward ran in attnsuite, none fell back.
        assert row["attnsuite_forward_calls"] == row["attnsuite_backward_calls"] == steps * layers, name
        assert row["fallback_warnings"] == [], name
        assert max(abs(a - b) for a, b in zip(row["losses"], sdpa)) <= document["tolerance"], name


def test_a_wrong_backward_fails_the_example(example, monkeypatch, capsys):
    real_backward = attnsuite._core.backward

    def wrong_backward(*args, **kwargs):
        # The drop-in hands the module DLPack capsules (read once): dq as a tensor to write after.
        args = [torch.from_dlpack(arg) if type(arg).__name__ == "PyCapsule" else arg for arg in args]
        result = real_backward(*args, **kwargs)
        args[7][:, :, 10] = 0  # dq of one query row ((batch, heads, seq, dim)), in every layer
        return result

    monkeypatch.setattr(attnsuite._core, "backward", wrong_backward)
    assert example.main(ARGS + ["--backends", "sdpa-math,reference"]) == 1  # the calibrating curve hides nothing
    assert "FAILED reference: loss curve differs from PyTorch SDPA's" in capsys.readouterr().out


def test_a_calibrating_backend_pytorch_cannot_run_is_skipped(example, tmp_path):
    # cuDNN's SDPA has no CPU kernel: PyTorch raises "No available kernel"; the run goes on.
    out = tmp_path / "train.json"
    assert example.main(ARGS + ["--backends", "sdpa-cudnn,reference", "--out", str(out)]) == 0
    document = json.loads(out.read_text())
    assert [row["backend"] for row in document["results"]] == ["sdpa", "reference"]
    assert [entry["backend"] for entry in document["skipped"]] == ["sdpa-cudnn"]
    assert document["tolerance"] == example.TOLERANCE["fp32"]


def test_backend_options_are_a_run_of_their_own(example, tmp_path, capsys):
    out = tmp_path / "train.json"
    assert example.main(ARGS + ["--backends", "reference,cpu-flash:no_such_key=1,cpu-flash@q48-k96,cpu-flash@q1-k1",
                                "--out", str(out)]) == 0
    document = json.loads(out.read_text())
    assert [(row["backend"], row["kernel_config"], row["options"]) for row in document["results"]] == [
        ("sdpa", None, {}), ("reference", None, {}), ("cpu-flash@q48-k96", "q48-k96", {})]
    skipped = {entry["backend"]: entry["reason"] for entry in document["skipped"]}
    assert "no_such_key" in skipped["cpu-flash:no_such_key=1"] and "q1-k1" in skipped["cpu-flash@q1-k1"]
    with pytest.raises(SystemExit) as exit_info:
        example.main(ARGS + ["--backends", "cpu-flash:forward_order"])
    assert exit_info.value.code == 2
    assert "option 'forward_order' is not KEY=VALUE" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        example.main(ARGS + ["--backends", "sdpa@x"])
    assert "PyTorch SDPA takes no attnsuite kernel config" in capsys.readouterr().err


def test_step_profile_summary(example):
    # Two attention kernels overlapping a GEMM, a gap of 5 µs, a memset: what the GPU did.
    events = [("flash3_forward_kernel", 0.0, 100.0), ("sm90_gemm", 50.0, 150.0), ("Memset (Device)", 155.0, 160.0),
              ("flash3_forward_kernel", 160.0, 260.0), ("flash3_backward_kernel", 260.0, 560.0)]
    summary = example.summarize_kernels(events)
    assert summary["kernel_ms"] == pytest.approx(0.605)
    assert summary["attention_kernel_ms"] == pytest.approx(0.5)
    assert summary["span_ms"] == pytest.approx(0.56) and summary["idle_ms"] == pytest.approx(0.005)
    assert summary["attention_kernels"] == ["flash3_backward_kernel", "flash3_forward_kernel"]
    assert [(k["name"], k["calls"]) for k in summary["attention"]] == [("flash3_backward_kernel", 1),
                                                                      ("flash3_forward_kernel", 2)]
    assert summary["kernels"][0] == {"name": "flash3_backward_kernel", "calls": 1, "ms": pytest.approx(0.3)}
    assert summary["kernels"][1]["calls"] == 2
    assert example.summarize_kernels([])["span_ms"] == 0
