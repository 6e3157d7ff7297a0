#!/usr/bin/env python3
"""Per-kernel breakdown of one forward from Nsight Compute CSV files (tools/device/run.sh
--kernel-times): DIR holds one `<backend>-N<seq>.csv` per ncu process (`ncu --csv --metrics
gpu__time_duration.sum --print-kernel-base function attnsuite bench ...`).

For each file: the harness's own kernels are left out — the input generator, and the cuBLAS
GEMMs (nvjet_*) of its accuracy check, 13 launches per file whatever the backend (H200,
2026-12-04); --exclude REGEX replaces that pattern (e.g. --exclude '^generate_kernel$' for a
backend that calls cuBLAS itself, cuda-vanilla). The forwards are
counted as the launches of the kernel with the largest total time (the attention kernel, once
per forward); every other kernel is given as its median µs per launch × launches per forward.
Prints a Markdown table: backend, N, kernel, launches per forward, median µs, share of the
forward. Times are single launches with flushed caches and unlocked clocks (ncu serializes
launches), so the sum is close to, not equal to, the harness's end-to-end latency.

With run.sh --baseline, files named `<backend>@<commit>-N<seq>.csv` hold the baseline build's
launches; for each backend and N that has both, a second table gives the A/B: the attention
kernel's and the forward's µs, this build against the baseline, and their ratio.

Usage: kernel_times.py DIR [--exclude REGEX]
"""
import csv
import os
import re
import statistics
import sys

# Kernels of the harness, not of the backend under test (see the docstring).
DEFAULT_EXCLUDE = r"^(generate_kernel$|nvjet_)"
UNIT_TO_US = {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3, "ms": 1e3, "second": 1e6, "s": 1e6}


def launches_of(path):
    """[(kernel name, µs)] in launch order, from ncu's CSV (other lines of the file ignored)."""
    rows = [line for line in open(path, errors="replace") if line.startswith('"')]
    out = []
    header = None
    for record in csv.reader(rows):
        if "Kernel Name" in record and "Metric Value" in record:
            header = record
            continue
        if header is None or len(record) != len(header):
            continue
        row = dict(zip(header, record))
        if row.get("Metric Name") != "gpu__time_duration.sum":
            continue
        scale = UNIT_TO_US.get(row.get("Metric Unit", "").strip())
        if scale is None:
            raise SystemExit(f"kernel_times.py: {path}: unit {row.get('Metric Unit')!r} unknown; allowed: "
                             + ", ".join(UNIT_TO_US))
        value = float(row["Metric Value"].replace(",", ""))
        out.append((row["Kernel Name"], value * scale))
    return out


def short(name):
    name = re.sub(r"^(void )?(attnsuite::)?", "", name)
    return name[:70] + ("…" if len(name) > 70 else "")


def main():
    args = sys.argv[1:]
    exclude = DEFAULT_EXCLUDE
    if len(args) == 3 and args[1] == "--exclude":
        exclude = args[2]
        args = args[:1]
    if len(args) != 1 or not os.path.isdir(args[0]):
        raise SystemExit("usage: kernel_times.py DIR [--exclude REGEX] (DIR: a folder of <backend>-N<seq>.csv files from ncu)")
    folder = args[0]
    try:
        harness = re.compile(exclude)
    except re.error as error:
        raise SystemExit(f"kernel_times.py: --exclude {exclude!r} is not a regular expression: {error}")
    print("| backend | N | kernel | launches / forward | median µs | share |")
    print("|---|---|---|---|---|---|")
    summaries = {}  # (label, N) -> (main kernel, its median µs, µs per forward)
    for file in sorted(os.listdir(folder)):
        match = re.fullmatch(r"(.+)-N(\d+)\.csv", file)
        if not match:
            continue
        backend, seq = match.group(1), int(match.group(2))
        launches = [(k, t) for k, t in launches_of(os.path.join(folder, file)) if not harness.search(k)]
        if not launches:
            print(f"| {backend} | {seq} | (no kernel timed: see kernel-times.err) | | | |")
            continue
        by_kernel = {}
        for kernel, us in launches:
            by_kernel.setdefault(kernel, []).append(us)
        main_kernel = max(by_kernel, key=lambda k: sum(by_kernel[k]))
        forwards = len(by_kernel[main_kernel])
        parts = []
        for kernel, times in by_kernel.items():
            per_forward = len(times) / forwards
            parts.append((kernel, per_forward, statistics.median(times)))
        total = sum(per * med for _, per, med in parts)
        for kernel, per, med in sorted(parts, key=lambda p: -p[1] * p[2]):
            print(f"| {backend} | {seq} | {short(kernel)} | {per:.2f} | {med:.1f} | {100 * per * med / total:.1f}% |")
        print(f"| {backend} | {seq} | **sum per forward** | | **{total:.1f}** | {forwards} forwards |")
        summaries[(backend, seq)] = (main_kernel, next(med for k, _, med in parts if k == main_kernel), total)
    pairs = []  # (backend, baseline commit, N) where both builds were timed
    for label, seq in summaries:
        backend, _, commit = label.partition("@")
        if commit and (backend, seq) in summaries:
            pairs.append((backend, commit, seq))
    pairs.sort()
    if pairs:
        print()
        print("| backend | N | baseline | kernel | µs (this / baseline) | ratio | forward µs (this / baseline) | ratio |")
        print("|---|---|---|---|---|---|---|---|")
        for backend, commit, seq in pairs:
            kernel, this_us, this_total = summaries[(backend, seq)]
            base_kernel, base_us, base_total = summaries[(f"{backend}@{commit}", seq)]
            # The kernels of the two builds are compared by role (each build's heaviest kernel).
            name = short(kernel) if kernel == base_kernel else f"{short(kernel)} / {short(base_kernel)}"
            print(f"| {backend} | {seq} | {commit} | {name} | {this_us:.1f} / {base_us:.1f} | {this_us / base_us:.3f} "
                  f"| {this_total:.1f} / {base_total:.1f} | {this_total / base_total:.3f} |")


if __name__ == "__main__":
    main()
