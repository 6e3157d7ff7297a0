"""tools/device/kernel_times.py: the per-kernel breakdown that tools/device/run.sh --kernel-times
writes from Nsight Compute CSVs (docs/kernels/history/sage.md, "v3")."""
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tools" / "device" / "kernel_times.py"
H200_V3 = ROOT / "docs" / "results" / "h200" / "2026-12-04" / "kernel-times-csv" / "v3"
# run.sh --baseline --kernel-times: sage v4 / flash3 v4c (this build) against main fdd22c5.
H200_AB = ROOT / "docs" / "results" / "h200" / "2026-12-04" / "kernel-times-csv" / "ab-v4"

HEADER = ('"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size",'
          '"Grid Size","Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"\n')


def run(*args):
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], capture_output=True, text=True)


def launch(i, name, value, unit="nsecond"):
    return (f'"{i}","1","attnsuite","h","{name}","1","7","(384, 1, 1)","(32, 16, 4)","0","9.0",'
            f'"Command line profiler metrics","gpu__time_duration.sum","{unit}","{value}"\n')


def table_rows(markdown, index):
    """The rows (cells) of the index-th Markdown table in the output, or [] when there is none."""
    tables = markdown.strip().split("\n\n")
    if index >= len(tables):
        return []
    return [[c.strip() for c in line.strip("|").split("|")] for line in tables[index].splitlines()[2:]]


def rows_of(markdown):
    return table_rows(markdown, 0)


def ab_rows_of(markdown):
    """The A/B table's rows (run.sh --baseline)."""
    return table_rows(markdown, 1)


def test_the_h200_run_gives_the_sums_of_its_kernels():
    result = run(H200_V3)
    assert result.returncode == 0, result.stderr
    rows = rows_of(result.stdout)
    # The harness's kernels (input generator, cuBLAS of the accuracy check) are not the backend's.
    assert not [r for r in rows if r[2].startswith(("nvjet", "generate_kernel"))]
    sums = {(r[0], int(r[1])): float(r[4].strip("*")) for r in rows if "sum per forward" in r[2]}
    assert set(sums) == {("sage", 4096), ("sage", 16384), ("sage2", 4096), ("sage2", 16384)}
    # sage, N 4096: 809.4 (attention) + 2 × 54.2 (Q and K) + 23.7 (stats) µs.
    assert abs(sums[("sage", 4096)] - (809.4 + 2 * 54.2 + 23.7)) < 0.2
    attention = [r for r in rows if r[0] == "sage" and r[1] == "4096" and r[2] == "sage_wgmma_forward_kernel"]
    assert attention and attention[0][3] == "1.00"


def test_launches_are_grouped_into_forwards(tmp_path):
    csv = "==PROF== Connected to process 1\n" + HEADER
    i = 0
    for _ in range(3):  # three forwards: two passes, one attention kernel; µs given in ns and us
        csv += launch(i, "quantize_rows_kernel", "10,000") + launch(i + 1, "quantize_rows_kernel", "12000")
        csv += launch(i + 2, "attn_kernel", "0.1", unit="msecond") + launch(i + 3, "generate_kernel", "999")
        i += 4
    (tmp_path / "x-y-N512.csv").write_text(csv + "some program output\n")
    result = run(tmp_path)
    assert result.returncode == 0, result.stderr
    rows = rows_of(result.stdout)
    assert rows[0][:5] == ["x-y", "512", "attn_kernel", "1.00", "100.0"]
    assert rows[1][:5] == ["x-y", "512", "quantize_rows_kernel", "2.00", "11.0"]
    assert rows[2][2:5] == ["**sum per forward**", "", "**122.0**"]
    # --exclude replaces the harness pattern: the generator is then counted too.
    rows = rows_of(run(tmp_path, "--exclude", "^nvjet_").stdout)
    assert [r[2] for r in rows if r[2] == "generate_kernel"] == ["generate_kernel"]


def test_bad_input_is_one_clear_error(tmp_path):
    result = run(tmp_path / "missing")
    assert result.returncode != 0 and "usage: kernel_times.py DIR" in result.stderr
    result = run(tmp_path, "--exclude", "(")
    assert result.returncode != 0 and "not a regular expression" in result.stderr
    (tmp_path / "b-N1.csv").write_text(HEADER + launch(0, "k", "1", unit="furlong"))
    result = run(tmp_path)
    assert result.returncode != 0 and "unit 'furlong' unknown" in result.stderr


def test_a_baseline_run_gives_the_a_b_table():
    result = run(H200_AB)
    assert result.returncode == 0, result.stderr
    ab = {(r[0], int(r[1])): r for r in ab_rows_of(result.stdout)}
    # cudnn has no baseline run; sage, sage2 and flash3 have one at both N.
    assert set(ab) == {(b, n) for b in ("sage", "sage2", "flash3") for n in (4096, 16384)}
    assert all(r[2] == "fdd22c5686ab" for r in ab.values())
    # sage v4's attention kernel against v3's, N 16384: 3665.3 / 2962.8 µs
    # (docs/results/h200/2026-12-04/kernel-times-ab-sage-v4-flash3-v4c.md).
    sage = ab[("sage", 16384)]
    assert sage[3] == "sage_wgmma_forward_kernel" and sage[4] == "3665.3 / 2962.8" and sage[5] == "1.237"
    # Without baselines there is no second table.
    assert ab_rows_of(run(H200_V3).stdout) == []
