"""The example notebook executes headless (nbclient) and shows its table and plots."""
import pathlib

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("matplotlib")
pytest.importorskip("pandas")

NOTEBOOK = pathlib.Path(__file__).resolve().parents[2] / "examples" / "attention_optimization.ipynb"


def test_notebook_runs(tmp_path, monkeypatch):
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    monkeypatch.delenv("MPLBACKEND", raising=False)  # the kernel's inline backend renders the figures
    # The kernel is a child process: it finds the package through PYTHONPATH like this test.
    client = nbclient.NotebookClient(notebook, timeout=900, kernel_name="python3",
                                     resources={"metadata": {"path": str(tmp_path)}})
    client.execute()
    outputs = [output for cell in notebook.cells if cell.cell_type == "code" for output in cell.get("outputs", [])]
    assert not [o for o in outputs if o.output_type == "error"]
    text = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
    # The default suite: the CPU backends without a GPU, the headline's (flash2, flash3, ...) with one.
    assert "median latency (ms)" in text and any(name in text for name in ("cpu-flash", "flash3", "flash2"))
    assert any("image/png" in o.get("data", {}) for o in outputs), "the plots cell shows no figure"
    assert (tmp_path / "results" / "notebook-default" / "results.json").exists()
    # The tuner's section: its table, the backend cache it wrote, "auto" reading it, the plots.
    assert "best batch" in text and "after the tune:" in text and "Batch tuner: throughput vs batch" in text
    assert (tmp_path / "results" / "notebook-tune" / "tune.json").exists()
    assert (tmp_path / "results" / "notebook-backends.json").exists()
