"""tune_batch_size and plot from Python (the CLI's tuner and plots), and backend="auto" reading
the backend cache that the tuner writes (a fabricated cache file here, on the CPU)."""
import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

import attnsuite
from attnsuite import _core
from conftest import numpy_attention, random_qkv, rel_l2

FAST = {"warmup": 0, "min_reps": 2, "max_reps": 3, "max_time_ms": 20, "cold": False}
SHAPE = dict(seq_lengths=64, heads=2, head_dim=32, dtype="fp32")


def test_tune_batch_size_runs_the_cli_tuner_and_writes_the_cache(tmp_path, cli):
    seen = []
    cache = tmp_path / "cache" / "backends.json"
    tuning = attnsuite.tune_batch_size(backends=["cpu-vanilla", "cpu-flash"], max_batch=8, exhaustive=True,
                                       timing=FAST, out=tmp_path / "tune", cache=cache,
                                       progress=lambda kind, text: seen.append((kind, text)), dataframe=False,
                                       **SHAPE)
    assert isinstance(tuning, attnsuite.Tuning) and [t["backend"] for t in tuning] == ["cpu-vanilla", "cpu-flash"]
    for case in tuning:
        assert 1 <= case["best_batch"] <= 8 and case["tokens_per_s"] > 0, case
        assert case["sweep_evaluations"] == 8 and case["seq_q"] == 64
    assert [kind for kind, _ in seen].count("case") == 2 and ("sweep", "exhaustive sweep") in seen
    assert len(tuning.rows) == 16  # batches 1..8 per backend, each measured once
    assert "best batch" in tuning.table
    document = json.loads((tmp_path / "tune" / "tune.json").read_text())
    assert len(document["tuning"]) == 2 and (tmp_path / "tune" / "tune.md").exists()
    # The CLI reads the same file back.
    report = subprocess.run([cli, "report", str(tmp_path / "tune" / "tune.json")], capture_output=True, text=True)
    assert report.returncode == 0 and "Batch tuning" in report.stdout, report.stderr

    # The cache: this CPU, the tuned class, both backends ranked by measured tokens/s.
    assert tuning.cache_path == str(cache)
    saved = json.loads(cache.read_text())
    machine = _core.machine(1, 0)
    assert [(m["device"], m["driver"]) for m in saved["machines"]] == [(machine["device"], "")]
    entry = saved["machines"][0]["classes"]["fp32 bshd d32 full mha q64 k64"]
    speeds = entry["tokens_per_s"]
    assert sorted(entry["order"]) == ["cpu-flash", "cpu-vanilla"]
    assert speeds[entry["order"][0]] >= speeds[entry["order"][1]]
    # ... and "auto" follows it for that class.
    attnsuite.set_backend_cache(cache)
    try:
        q, k, v = random_qkv(batch=1, seq_q=64, heads_q=2, head_dim=32)
        choice = attnsuite.auto_choice(q, k, v)
        assert choice["backend"] == entry["order"][0] and str(cache) in choice["source"]
    finally:
        attnsuite.set_backend_cache(None)

    # Again into the same directory: refused without force, as the CLI.
    with pytest.raises(ValueError, match="already exists; use --force"):
        attnsuite.tune_batch_size(backends="cpu-flash", max_batch=2, timing=FAST, out=tmp_path / "tune", cache=False,
                                  progress=False, **SHAPE)


def test_tune_batch_size_dataframe_and_bad_limits(tmp_path):
    pandas = pytest.importorskip("pandas")
    frame = attnsuite.tune_batch_size(backends="cpu-flash", max_batch=4, timing=FAST, out=tmp_path / "df", cache=False,
                                      progress=False, **SHAPE)
    assert isinstance(frame, pandas.DataFrame) and list(frame["backend"]) == ["cpu-flash"]
    assert frame.attrs["cache_path"] is None and frame.attrs["out_dir"] == str(tmp_path / "df")
    for kwargs, message in ((dict(min_batch=0), "--min-batch 0 is not allowed"),
                            (dict(min_batch=8, max_batch=4), "--max-batch 4 is not allowed"),
                            (dict(p95_ms=-1), "--p95-ms -1 is not allowed"),
                            (dict(backends="nope"), "unknown backend 'nope'")):
        args = dict(backends="cpu-flash", out=tmp_path / "bad", cache=False, progress=False)
        args.update(kwargs)
        with pytest.raises(ValueError, match=message):
            attnsuite.tune_batch_size(**args)


def test_tune_batch_size_stops_on_a_flat_curve_and_at_the_time_budget(tmp_path):
    # A CPU's throughput stops growing with the batch once the heads keep the cores busy: the
    # search stops growing at the first x4 step that gains less than 5% (or twice the noise),
    # far below max_batch (the README's example grew to batch 256 before this rule).
    shape = dict(seq_lengths=512, heads=8, head_dim=64, dtype="fp32")
    tuning = attnsuite.tune_batch_size(backends="cpu-flash", max_batch=1024, timing=FAST, out=tmp_path / "flat",
                                       cache=False, progress=False, dataframe=False, **shape)
    search = tuning.entries[0]["search"]
    assert search["flat_from"] is not None and search["flat_from"] <= 256, search["probes"]
    assert search["largest_feasible"] == search["flat_from"] and tuning[0]["best_batch"] <= search["flat_from"]
    assert search["seconds"] > 0 and not search["time_budget_reached"]
    assert tuning.entries[0]["limits"]["flat_gain"] == 0.05 and tuning.entries[0]["limits"]["time_budget_s"] == 60
    assert "search stopped" in tuning.table and f"flat from {search['flat_from']}" in tuning.table
    # The time budget: the first probe always runs (an answer needs one), then no other starts.
    tuning = attnsuite.tune_batch_size(backends="cpu-flash", max_batch=1024, flat_gain=0, time_budget_s=1e-6,
                                       timing=FAST, out=tmp_path / "budget", cache=False, progress=False,
                                       dataframe=False, **shape)
    search = tuning.entries[0]["search"]
    assert search["evaluations"] == 1 and search["time_budget_reached"] and tuning[0]["best_batch"] == 1
    with pytest.raises(ValueError, match="--flat-gain 1.5 is not allowed"):
        attnsuite.tune_batch_size(backends="cpu-flash", flat_gain=1.5, out=tmp_path / "bad", cache=False,
                                  progress=False)
    with pytest.raises(ValueError, match="--time-budget -1 is not allowed"):
        attnsuite.tune_batch_size(backends="cpu-flash", time_budget_s=-1, out=tmp_path / "bad", cache=False,
                                  progress=False)


TUNE_CHILD = """
import sys, attnsuite
attnsuite.tune_batch_size(backends="cpu-flash", seq_lengths=2048, heads=4, head_dim=64, dtype="fp32", max_batch=64,
                          flat_gain=0, time_budget_s=0, cache=False, out=sys.argv[1], dataframe=False,
                          timing={"warmup": 0, "min_reps": 12, "max_reps": 12, "noise": 1e-6, "max_time_ms": 600000,
                                  "cold": False},
                          progress=lambda kind, text: print(kind, text, flush=True))
print("finished", flush=True)
"""


@pytest.mark.parametrize("signal_number", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_tune_batch_size_saves_the_partial_tune_on_sigint_and_sigterm(tmp_path, signal_number):
    # Batch 1 is probed (12 forwards of about 50 ms), then the signal lands in batch 4's probe.
    # Both signals stop it within the probe and save tune.json with batch 1's row; SIGINT raises
    # KeyboardInterrupt, SIGTERM ends the process by SIGTERM (as without attnsuite), after saving.
    out = tmp_path / "tune"
    child = subprocess.Popen([sys.executable, "-c", TUNE_CHILD, str(out)], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    try:
        for line in child.stdout:
            if line.startswith("probe batch 1:"):
                break
        else:
            pytest.fail(f"the child ended before a probe: {child.wait()} {child.stderr.read()}")
        time.sleep(0.5)
        signalled = time.monotonic()
        child.send_signal(signal_number)
        child.wait(timeout=60)
        seconds = time.monotonic() - signalled
    finally:
        child.kill()
    stderr = child.stderr.read()
    print(f"{signal.Signals(signal_number).name}: exit {child.returncode} {seconds:.2f} s after the signal")
    assert "finished" not in child.stdout.read()
    if signal_number == signal.SIGINT:
        assert child.returncode != 0 and "KeyboardInterrupt: tune interrupted" in stderr, stderr
    else:
        assert child.returncode == -signal.SIGTERM, (child.returncode, stderr)
    assert seconds < 5, seconds  # within the probe, not after it (the forwards are cancellation points)
    document = json.loads((out / "tune.json").read_text())
    assert document["header"]["interrupted"] is True
    assert [row["batch"] for row in document["rows"]] == [1]
    assert document["tuning"][0]["search"]["interrupted"] is True


def test_plots_ring_the_points_whose_median_missed_its_noise_target(tmp_path):
    # The table's status column flags a row whose median missed the noise target ("median
    # ±20.3%"); the plots of timings ring that point in red and say so in the caption (memory is
    # not a timing: no ring there).
    pytest.importorskip("matplotlib")
    source = os.path.join(os.path.dirname(__file__), "..", "data", "report", "cpu-small.json")
    with open(source) as file:
        document = json.load(file)
    flagged = 0
    for row in document["rows"]:
        noisy = row["backend"] == "cpu-flash" and row["seq_q"] == 512 and row["batch"] == 1
        row["reason"] = "noise target 2.0% not reached in the time budget (median ±20.3%)" if noisy else ""
        flagged += noisy
    assert flagged == 1
    path = tmp_path / "results.json"
    path.write_text(json.dumps(document))
    plots = {p["name"]: p for p in attnsuite.plot(path, out=tmp_path / "plots")}
    for name in ("speedup_vs_seq", "latency_vs_seq", "tflops_vs_seq"):
        assert "Ringed in red (1)" in plots[name]["caption"], plots[name]["caption"]
    assert "Ringed" not in plots["memory_vs_seq"]["caption"]
    assert "noise target not reached" in (tmp_path / "plots" / "speedup_vs_seq.svg").read_text()  # the legend


def test_plot_of_bench_rows_of_a_tune_and_of_a_file(tmp_path):
    pytest.importorskip("matplotlib")
    rows = attnsuite.bench(backends=["cpu-vanilla", "cpu-flash"], seq_lengths=[64, 128], heads=2, head_dim=32,
                           timing=FAST, out=tmp_path / "run", progress=False, dataframe=False)
    plots = attnsuite.plot(rows)
    names = {p["name"] for p in plots}
    assert {"latency_vs_seq", "tflops_vs_seq"} <= names, names
    for p in plots:
        assert os.path.getsize(p["png"]) > 1000 and os.path.exists(p["svg"])
        assert os.path.dirname(p["png"]) == str(tmp_path / "run" / "plots")
    # The same plots as the CLI's report --plots on the same file.
    from_file = attnsuite.plot(tmp_path / "run" / "results.json", out=tmp_path / "file-plots")
    assert [p["name"] for p in from_file] == [p["name"] for p in plots]
    # A filtered DataFrame plots what is left.
    pandas = pytest.importorskip("pandas")
    frame = attnsuite.bench(backends=["cpu-vanilla", "cpu-flash"], seq_lengths=[64, 128], heads=2, head_dim=32,
                            timing=FAST, out=tmp_path / "df", progress=False)
    assert isinstance(frame, pandas.DataFrame)
    assert attnsuite.plot(frame[frame["backend"] == "cpu-flash"], out=tmp_path / "flash-only")
    # A tune: the tuner's throughput-vs-batch plot.
    tuning = attnsuite.tune_batch_size(backends="cpu-flash", max_batch=4, timing=FAST, out=tmp_path / "tune",
                                       cache=False, progress=False, dataframe=False, **SHAPE)
    assert "tuner_throughput_vs_batch" in {p["name"] for p in attnsuite.plot(tuning)}
    assert "tuner_throughput_vs_batch" in {p["name"] for p in attnsuite.plot(tmp_path / "tune")}
    with pytest.raises(ValueError, match="does not exist"):
        attnsuite.plot(tmp_path / "missing.json")
    with pytest.raises(TypeError, match="plot takes"):
        attnsuite.plot([1, 2, 3])


def fabricate_cache(path, device, driver, classes, reread=True):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"version": 1, "machines": [
        {"device": device, "driver": driver,
         "classes": {name: {"order": order, "tokens_per_s": {}} for name, order in classes.items()}}]}))
    if reread:  # at once, instead of within the second that "auto" waits between looks at the file
        attnsuite.set_backend_cache(path)


@pytest.fixture
def cache_file(tmp_path):
    path = tmp_path / "cache" / "backends.json"
    attnsuite.set_backend_cache(path)
    yield path
    attnsuite.set_backend_cache(None)


def test_auto_follows_the_cache_for_this_machine_and_class(cache_file):
    q, k, v = random_qkv(batch=1, seq_q=100, heads_q=4, head_dim=64)
    this_cpu = _core.machine(1, 0)["device"]
    assert attnsuite.backend_cache_path() == str(cache_file)
    # No file yet: the default order.
    assert attnsuite.auto_choice(q, k, v) == {"backend": "cpu-flash", "source": "default order",
                                              "shape_class": "fp32 bshd d64 full mha q128 k128", "passed_over": []}
    # The cache says cpu-vanilla is fastest for this class on this CPU: auto runs it, correctly.
    fabricate_cache(cache_file, this_cpu, "", {"fp32 bshd d64 full mha q128 k128": ["cpu-vanilla", "cpu-flash"]})
    choice = attnsuite.auto_choice(q, k, v)
    assert choice["backend"] == "cpu-vanilla" and "(fp32 bshd d64 full mha q128 k128)" in choice["source"]
    assert attnsuite.resolve_backend(q, k, v) == "cpu-vanilla"
    assert rel_l2(attnsuite.attention(q, k, v), numpy_attention(q, k, v)) < 1e-5
    # Another class (causal): not in the cache, the default order.
    assert attnsuite.resolve_backend(q, k, v, causal=True) == "cpu-flash"
    # Another length of the same class: the nearest tuned length.
    long = random_qkv(batch=1, seq_q=1000, heads_q=4, head_dim=64)
    assert attnsuite.resolve_backend(*long) == "cpu-vanilla"
    # Another machine's entries are not ours.
    fabricate_cache(cache_file, "Some Other CPU", "", {"fp32 bshd d64 full mha q128 k128": ["cpu-vanilla"]})
    assert attnsuite.resolve_backend(q, k, v) == "cpu-flash"


def test_auto_skips_cached_backends_that_cannot_run_the_problem(cache_file):
    this_cpu = _core.machine(1, 0)["device"]
    q, k, v = random_qkv(batch=1, seq_q=64, heads_q=4, head_dim=64, dtype=np.float16)
    fabricate_cache(cache_file, this_cpu, "", {"fp16 bshd d64 full mha q64 k64": ["no-such-backend", "cpu-vanilla",
                                                                                  "reference"]})
    choice = attnsuite.auto_choice(q, k, v)
    # cpu-vanilla has no fp16: passed over with its reason; reference runs it.
    assert choice["backend"] == "reference", choice
    assert choice["passed_over"][0] == "no-such-backend: not in this build"
    assert choice["passed_over"][1].startswith("cpu-vanilla: ") and "fp16" in choice["passed_over"][1]
    # The cache file changes (another process's tune): "auto" sees it within a second.
    fabricate_cache(cache_file, this_cpu, "", {"fp16 bshd d64 full mha q64 k64": ["cpu-flash"]}, reread=False)
    seen = attnsuite.resolve_backend(q, k, v)
    assert seen in ("reference", "cpu-flash")
    time.sleep(1.1)
    assert attnsuite.resolve_backend(q, k, v) == "cpu-flash"


def test_a_broken_cache_is_one_clear_error_and_can_be_turned_off(cache_file):
    cache_file.parent.mkdir(parents=True, exist_ok=True)
    cache_file.write_text("[1, 2, 3]")
    attnsuite.set_backend_cache(cache_file)
    q, k, v = random_qkv()
    for _ in range(2):  # every call, until it is fixed
        with pytest.raises(OSError, match=f"backend cache '{cache_file}' is not a JSON object"):
            attnsuite.attention(q, k, v)
    assert attnsuite.attention(q, k, v, backend="cpu-flash").shape == q.shape  # a named backend reads no cache
    attnsuite.set_backend_cache(False)
    assert attnsuite.backend_cache_path() is None
    assert attnsuite.resolve_backend(q, k, v) == "cpu-flash"
