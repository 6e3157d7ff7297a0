"""What README.md and docs/ promise a user, checked against the package metadata, the code and the
results it produces: the extras `pip install` names, what bench() returns, what peak memory counts."""
import json
import os
import re

import numpy as np
import pytest

import attnsuite

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")


def read(*parts):
    with open(os.path.join(ROOT, *parts), encoding="utf-8") as file:
        return file.read()


def test_the_extras_the_readme_names_exist():
    tomllib = pytest.importorskip("tomllib")
    extras = tomllib.loads(read("pyproject.toml"))["project"]["optional-dependencies"]
    readme = read("README.md")
    named = set()
    for group in re.findall(r'pip install "\.\[([a-z,]+)\]"', readme):
        named.update(group.split(","))
    sentence = readme[readme.index("The extras:"):]
    sentence = sentence[:sentence.index("\n\n")]
    listed = re.findall(r"`([a-z]+)` \(", sentence)
    named.update(listed)
    assert {"onnx", "pandas", "notebook", "torch"} <= set(listed), listed
    assert named <= set(extras), named - set(extras)
    assert "onnxruntime" in " ".join(extras["onnx"]) and extras["pandas"] == ["pandas"]


def test_bench_returns_what_the_readme_says(tmp_path):
    # "a DataFrame (with pandas)", else a list of dicts (Rows).
    assert "# a DataFrame (with pandas)" in read("README.md")
    timing = {"warmup": 0, "min_reps": 2, "max_reps": 2, "max_time_ms": 5, "cold": False}
    args = dict(backends="cpu-flash", seq_lengths=64, heads=2, head_dim=32, dtype="fp32", timing=timing,
                progress=False)
    rows = attnsuite.bench(out=tmp_path / "rows", dataframe=False, **args)
    assert isinstance(rows, attnsuite.Rows) and isinstance(rows[0], dict)
    try:
        import pandas
    except ImportError:
        assert isinstance(attnsuite.bench(out=tmp_path / "no-pandas", **args), attnsuite.Rows)
    else:
        assert isinstance(attnsuite.bench(out=tmp_path / "frame", **args), pandas.DataFrame)


def test_peak_memory_counts_the_output_not_the_inputs(tmp_path):
    # README: "the inputs Q, K, V excluded, the output and LSE included"; the report's memory plot
    # caption: "output included, inputs excluded". The reference backend allocates a few fp64
    # rows of its own on top: the peak is at least O + LSE and far below Q + K + V + O.
    readme = read("README.md")
    assert "the inputs Q, K, V excluded, the output and LSE included" in " ".join(readme.split())
    assert "output included, inputs excluded" in read("src", "report", "plots.py")
    batch, seq, heads, dim = 1, 2048, 4, 64
    timing = {"warmup": 0, "min_reps": 1, "max_reps": 1, "max_time_ms": 1, "cold": False}
    rows = attnsuite.bench(backends="cpu-flash", batch_sizes=batch, seq_lengths=seq, heads=heads, head_dim=dim,
                           dtype="fp32", timing=timing, out=tmp_path / "mem", progress=False, dataframe=False)
    output = batch * seq * heads * dim * 4 + batch * heads * seq * 4  # O (fp32) and LSE
    inputs = 3 * batch * seq * heads * dim * 4
    peak = rows[0]["peak_mem_mib"] * 1048576
    assert output <= peak < output + inputs, (peak, output, inputs)
