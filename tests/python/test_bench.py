"""attnsuite.bench: the CLI's harness from Python (same rows, same files)."""
import json
import os
import subprocess

import pytest

import attnsuite

FAST = {"warmup": 0, "min_reps": 2, "max_reps": 3, "max_time_ms": 50, "cold": False}


def test_bench_returns_rows_and_writes_the_cli_files(tmp_path, cli):
    seen = []
    rows = attnsuite.bench(backends=["cpu-vanilla", "cpu-flash"], batch_sizes=[1, 2], seq_lengths=[64],
                           model="llama-3.2-1b", dtype="fp32", causal="both", timing=FAST, out=tmp_path / "run",
                           progress=lambda done, total, text: seen.append((done, total, text)), dataframe=False)
    assert isinstance(rows, list) and len(rows) == 2 * 2 * 2
    assert len(seen) == 8 and seen[-1][:2] == (8, 8) and "cpu-flash" in seen[-1][2]
    for row in rows:
        assert row["status"] == "ok", row["reason"]
        assert (row["heads_q"], row["heads_kv"], row["head_dim"]) == (32, 8, 64)
        assert row["ms_median"] > 0 and row["rel_l2"] < 1e-5
    flash = [r for r in rows if r["backend"] == "cpu-flash"]
    assert all(r["speedup_vs_vanilla"] > 0 for r in flash)
    # Arguments over the default suite are not the default suite: titled "custom" (issue 27).
    assert rows.header["suite"] == "custom" and rows.header["cpu_threads"] >= 1
    assert "cpu-flash" in rows.summary
    for name in ("results.jsonl", "results.csv", "results.json", "summary.md", "suite.json"):
        assert (tmp_path / "run" / name).exists(), name
    # The CLI reads what Python wrote: one engine, one format.
    report = subprocess.run([cli, "report", str(tmp_path / "run" / "results.json")], capture_output=True, text=True)
    assert report.returncode == 0 and "cpu-flash" in report.stdout and "suite 'custom'" in report.stdout
    saved = json.loads((tmp_path / "run" / "suite.json").read_text())
    assert saved["name"] == "custom" and saved["description"].startswith("arguments over the ")
    assert saved["model"] == ["llama-3.2-1b"] and saved["causal"] == [False, True]


def test_bench_dataframe(tmp_path):
    pandas = pytest.importorskip("pandas")
    frame = attnsuite.bench(backends="cpu-flash", seq_lengths=64, batch_sizes=1, heads=2, head_dim=32,
                            timing=FAST, out=tmp_path / "df", progress=False)
    assert isinstance(frame, pandas.DataFrame) and list(frame["backend"]) == ["cpu-flash"]
    assert frame.attrs["out_dir"] == str(tmp_path / "df")


def test_bench_errors_are_value_errors(tmp_path):
    with pytest.raises(ValueError, match="unknown backend 'nope'"):
        attnsuite.bench(backends=["nope"], out=tmp_path / "a", progress=False)
    with pytest.raises(ValueError, match="unknown model 'gpt-9'"):
        attnsuite.bench(backends=["cpu-flash"], model="gpt-9", out=tmp_path / "b", progress=False)
    attnsuite.bench(backends="cpu-flash", seq_lengths=64, heads=2, timing=FAST, out=tmp_path / "c", progress=False)
    with pytest.raises(ValueError, match="already holds results"):
        attnsuite.bench(backends="cpu-flash", seq_lengths=64, heads=2, timing=FAST, out=tmp_path / "c",
                        progress=False)
    assert os.path.exists(tmp_path / "c" / "results.jsonl")
