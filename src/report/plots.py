#!/usr/bin/env python3
"""Plots of an attnsuite results file, as PNG and SVG, with matplotlib.

`attnsuite report FILE --plots DIR` runs this script (embedded in the binary) on the rows it
loaded, with the vanilla ratios and the roofline profile filled in and the roofs of each device.
It also runs on its own on a results.json or tune.json that a sweep or a tune wrote:

    python3 src/report/plots.py results/mine/results.json --out plots/

Writes DIR/<name>.png and DIR/<name>.svg for each plot the data allows, and DIR/plots.json, the
list of plots made (name, title, caption, file names) that the HTML report embeds.
"""

import argparse
import json
import math
import os
import sys

try:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker
except ImportError as error:  # the CLI checks first; this is for standalone use
    sys.stderr.write(f"plots.py: matplotlib is not available: {error}\n")
    sys.exit(3)

# Text stays text in the SVG (smaller, searchable); a fixed salt and no date make the files
# the same from one run to the next.
matplotlib.rcParams.update(
    {
        "svg.fonttype": "none",
        "svg.hashsalt": "attnsuite",
        "font.size": 9,
        "axes.titlesize": 9,
        "legend.fontsize": 7.5,
        "figure.dpi": 110,
        "axes.grid": True,
        "grid.alpha": 0.3,
    }
)

MARKERS = "osD^v<>phX*"


def label_of(row):
    """Ours by registry name, peers by their own project's name (as the tables do)."""
    if row.get("peer_of") and row.get("display_name"):
        return row["display_name"]
    return row["backend"]


def ok_rows(rows):
    return [r for r in rows if r.get("status") == "ok" and isinstance(r.get("ms_median"), (int, float))]


def number(row, key):
    value = row.get(key)
    return value if isinstance(value, (int, float)) and math.isfinite(value) else None


def panel_key(row):
    return (
        row.get("dtype", ""),
        row.get("heads_q", 0),
        row.get("heads_kv", 0),
        row.get("head_dim", 0),
        bool(row.get("causal")),
        row.get("window_left", -1),
        row.get("window_right", -1),
        row.get("generator", ""),
    )


def panel_title(key):
    dtype, hq, hkv, dim, causal, left, right, generator = key
    title = f"H{hq}/{hkv} d{dim} {dtype}"
    if causal:
        title += " causal"
    if left >= 0 or right >= 0:
        side = lambda w: str(w) if w >= 0 else "∞"  # noqa: E731
        title += f" window {side(left)},{side(right)}"
    if generator and generator != "randn":
        title += f" {generator}"
    return title


class Styles:
    """One colour and marker per backend label, the same in every plot."""

    def __init__(self, labels):
        cycle = plt.rcParams["axes.prop_cycle"].by_key()["color"]
        self.colors = {}
        self.markers = {}
        for i, label in enumerate(sorted(set(labels))):
            self.colors[label] = cycle[i % len(cycle)]
            self.markers[label] = MARKERS[i % len(MARKERS)]

    def of(self, label):
        return {"color": self.colors.get(label, "black"), "marker": self.markers.get(label, "o")}


def tokens_label(value, _position=None):
    """512, 1k, 16k: sequence lengths and batches as people write them."""
    if value >= 1024 and value % 1024 == 0:
        return f"{int(value // 1024)}k"
    return f"{value:g}"


def si_label(value, _position=None):
    """450k, 1.2M: throughputs as the tables print them."""
    for scale, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= scale:
            return f"{value / scale:g}{prefix}"
    return f"{value:g}"


NOISY_LABEL = "noise target not reached"


def noise_not_reached(row):
    """The runner's note on a row whose median missed the noise target (bench/runner.cpp), which
    the table's status column shows."""
    return "noise target" in (row.get("reason") or "")


def power_of_two_axis(ax):
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(tokens_label))


def log_log_axes(ax, xlabel, ylabel):
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)


def shared_legend(fig, axes):
    """One legend under the panels: the peers' names are long, and every panel has the same lines."""
    handles, labels = [], []
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            if label not in labels:
                handles.append(handle)
                labels.append(label)
    if not labels:
        return 0
    # As many columns as fit the figure's width: a peer's label is up to ~3.3 inches at this font size.
    columns = max(1, min(len(labels), 3, int(fig.get_size_inches()[0] // 3.3)))
    fig.legend(handles, labels, loc="lower center", ncol=columns, frameon=False)
    return math.ceil(len(labels) / columns)


def grid(count):
    columns = min(count, 3)
    rows = math.ceil(count / columns)
    size = (6.4, 4.2) if count == 1 else (4.2 * columns, 3.2 * rows)
    fig, axes = plt.subplots(rows, columns, figsize=size, squeeze=False)
    flat = [a for line in axes for a in line]
    for extra in flat[count:]:
        extra.set_visible(False)
    return fig, flat[:count]


def annotate_apart(ax, notes, spacing=9.0):
    """Labels (x, y, text, color) beside their points, each moved up until it is `spacing` points clear of
    the labels below it that start near the same x: several backends often choose the same batch
    at about the same throughput (the H200 headline tune: cuDNN's two at batch 31 and 32, 110 M
    tokens/s), and their labels were printed over each other. Call it after the figure has been
    drawn once, so that the axes' limits are final."""
    if not notes:
        return
    to_points = 72.0 / ax.figure.dpi
    right_edge = ax.transAxes.transform((0.85, 0))[0] * to_points
    placed = []  # (x, y) of the labels already placed, in points
    for x, y, text, color in sorted(notes, key=lambda n: n[1]):
        px, py = (value * to_points for value in ax.transData.transform((x, y)))
        # Left of the point near the right edge (the chosen batch is often the largest tried),
        # where a label on the right would be cut off by the figure's edge.
        dx = -6 if px > right_edge else 6
        label_y = py + 6
        for other_x, other_y in sorted(placed, key=lambda p: p[1]):
            if abs(other_x - (px + dx)) < 40 and label_y < other_y + spacing:
                label_y = other_y + spacing
        placed.append((px + dx, label_y))
        ax.annotate(text, (x, y), textcoords="offset points", xytext=(dx, label_y - py), fontsize=7, color=color,
                    ha="right" if dx < 0 else "left")


class Plotter:
    def __init__(self, data, out_dir):
        self.header = data.get("header") or {}
        self.rows = ok_rows(data.get("rows") or [])
        self.tuning = data.get("tuning") or []
        self.roofs = data.get("roofs")
        self.out_dir = out_dir
        labels = [label_of(r) for r in self.rows]
        labels += [label_of(t) for t in self.tuning]
        self.styles = Styles(labels)
        self.made = []
        machine = self.header.get("gpu_name") or self.header.get("cpu_model") or ""
        self.machine = machine

    def save(self, fig, name, title, caption, legend_rows=0, **extra):
        fig.suptitle(title + (f" — {self.machine}" if self.machine else ""), fontsize=10)
        if legend_rows:
            # Room under the panels for the shared legend, about 0.2 inch a row, added to the figure's
            # height (taken from the panels, nine one-column rows squeezed a single panel flat).
            width, height = fig.get_size_inches()
            legend_height = 0.25 + 0.2 * legend_rows
            fig.set_size_inches(width, height + legend_height)
            fig.tight_layout(rect=(0, legend_height / (height + legend_height), 1, 1))
        else:
            fig.tight_layout()
        png, svg = f"{name}.png", f"{name}.svg"
        fig.savefig(os.path.join(self.out_dir, png), metadata={"Software": None})
        fig.savefig(os.path.join(self.out_dir, svg), metadata={"Date": None, "Creator": None})
        plt.close(fig)
        self.made.append({"name": name, "title": title, "caption": caption, "png": png, "svg": svg, **extra})

    # --- metric against sequence length, one panel per head/dtype configuration -------------
    def versus_seq(self, name, key, ylabel, title, caption, log_y=False, reference_line=None, mark_noisy=True):
        """mark_noisy: ring the points whose median missed its noise target, as the table's status
        column flags them ("noise target … not reached (median ±X%)"): a ±20% point used to be
        drawn like any other."""
        rows = [r for r in self.rows if number(r, key) is not None and number(r, key) > 0]
        if not rows:
            return
        panels = {}
        for r in rows:
            panels.setdefault(panel_key(r), []).append(r)
        fig, axes = grid(len(panels))
        noisy_points = 0
        for ax, (pkey, members) in zip(axes, sorted(panels.items())):
            # A line per backend; per (backend, batch) when a backend has several batches at one
            # sequence length (a batch sweep), else the batch follows the sequence length (tokens
            # per batch fixed) and the line goes through them.
            seen = {}
            for r in members:
                seen.setdefault((label_of(r), r["seq_q"]), set()).add(r["batch"])
            split_batch = any(len(b) > 1 for b in seen.values())
            series = {}
            for r in members:
                skey = (label_of(r), r["batch"] if split_batch else None)
                series.setdefault(skey, []).append((r["seq_q"], number(r, key)))
            batches = sorted({b for (_, b) in series if b is not None})
            for (label, batch), points in sorted(series.items(), key=lambda item: (item[0][0], item[0][1] or 0)):
                points.sort()
                dash = "-" if batch is None else ["-", "--", ":", "-."][batches.index(batch) % 4]
                style = self.styles.of(label)
                ax.plot(
                    [p[0] for p in points],
                    [p[1] for p in points],
                    label=label if batch is None else f"{label} B{batch}",
                    linestyle=dash,
                    markersize=4,
                    **style,
                )
            noisy = [r for r in members if mark_noisy and noise_not_reached(r)]
            if noisy:
                noisy_points += len(noisy)
                ax.scatter([r["seq_q"] for r in noisy], [number(r, key) for r in noisy], s=90, facecolors="none",
                           edgecolors="red", linewidths=1.2, zorder=5, label=NOISY_LABEL)
            power_of_two_axis(ax)
            if log_y:
                ax.set_yscale("log")
            if reference_line is not None:
                ax.axhline(reference_line, color="grey", linewidth=0.8, linestyle="--")
            ax.set_title(panel_title(pkey))
            ax.set_xlabel("sequence length")
            ax.set_ylabel(ylabel)
        if noisy_points:
            caption += (f" Ringed in red ({noisy_points}): the median missed its noise target in the time budget, "
                        "as the table's status says (its ± there).")
        self.save(fig, name, title, caption, legend_rows=shared_legend(fig, axes), noisy_points=noisy_points)

    # --- roofline -----------------------------------------------------------------------------
    def roof_list(self):
        if self.roofs is not None:
            return self.roofs
        # Standalone on a results file: the same rule as bench::roof_for.
        c = self.header.get("ceilings") or {}
        roofs = []
        for device, dtype in sorted({(r.get("device", ""), r.get("dtype", "")) for r in self.rows}):
            if device == "cpu":
                compute, memory, label = c.get("cpu_fp32_gflops", 0) * 1e-3, c.get("host_copy_gbps", 0), "fp32 FMA (CPU)"
            elif device.startswith("cuda"):
                compute = c.get(f"gpu_{dtype}_tflops", 0)
                memory, label = c.get("gpu_copy_gbps", 0), f"{dtype} GEMM"
            else:
                continue
            if compute and memory:
                roofs.append({"device": device, "dtype": dtype, "compute_tflops": compute, "memory_gbps": memory,
                              "compute_label": label, "memory_label": "copy"})
        return roofs

    def roofline(self):
        rows = [r for r in self.rows if number(r, "tflops") and number(r, "gbps")]
        if not rows:
            return
        fig, axes = grid(1)
        ax = axes[0]
        intensities = [r["tflops"] * 1e3 / r["gbps"] for r in rows]
        for r, x in zip(rows, intensities):
            label = label_of(r)
            style = self.styles.of(label)
            ax.plot([x], [r["tflops"]], linestyle="none", markersize=5, alpha=0.8, **style)
        for label in sorted({label_of(r) for r in rows}):
            ax.plot([], [], linestyle="none", label=label, **self.styles.of(label))
        roofs = self.roof_list()
        lo, hi = min(intensities) / 4, max(intensities) * 4
        for roof in roofs:
            ridge = roof["compute_tflops"] * 1e3 / roof["memory_gbps"]
            lo, hi = min(lo, ridge / 4), max(hi, ridge * 4)
        xs = [lo * (hi / lo) ** (i / 200) for i in range(201)]
        for i, roof in enumerate(roofs):
            ys = [min(roof["compute_tflops"], x * roof["memory_gbps"] * 1e-3) for x in xs]
            ax.plot(xs, ys, color="black", linewidth=1.2, linestyle=["-", "--", ":", "-."][i % 4],
                    label=f"roof {roof['device']} {roof['dtype']}: {roof['compute_label']} "
                    f"{roof['compute_tflops']:.3g} TFLOP/s, {roof['memory_label']} {roof['memory_gbps']:.4g} GB/s")
        log_log_axes(ax, "arithmetic intensity (FLOP / byte of minimum traffic)", "achieved TFLOP/s")
        ax.legend(loc="lower right")
        fig.set_size_inches(8, 5)
        caption = "Every ok case as a point; the roofs are the ceilings measured at the start of the run."
        if not roofs:
            caption += " This file has no measured ceilings, so no roof is drawn."
        self.save(fig, "roofline", "Roofline", caption)

    # --- accuracy vs speed ----------------------------------------------------------------------
    def accuracy_vs_speed(self):
        rows = [r for r in self.rows if number(r, "tokens_per_s") and number(r, "rel_l1") is not None]
        if not rows:
            return
        fig, axes = grid(1)
        ax = axes[0]
        floor = min([r["rel_l1"] for r in rows if r["rel_l1"] > 0] or [1e-12]) / 2
        for label in sorted({label_of(r) for r in rows}):
            members = [r for r in rows if label_of(r) == label]
            ax.plot([r["tokens_per_s"] for r in members], [max(r["rel_l1"], floor) for r in members],
                    linestyle="none", label=label, markersize=5, alpha=0.8, **self.styles.of(label))
        log_log_axes(ax, "tokens/s", "relative L1 error vs fp64 reference")
        ax.legend(loc="best")
        fig.set_size_inches(7, 4.5)
        self.save(fig, "accuracy_vs_speed", "Accuracy vs speed",
                  "Each ok case: throughput against its relative L1 error; down and right is better. "
                  "Quantized and sparse kernels trade along this plane.")

    # --- tuner curves -----------------------------------------------------------------------------
    def tuner(self):
        if not self.tuning:
            return
        panels = {}
        for entry in self.tuning:
            key = (entry.get("dtype", ""), entry.get("heads_q", 0), entry.get("heads_kv", 0), entry.get("head_dim", 0),
                   bool(entry.get("causal")), -1, -1, entry.get("generator", ""))
            panels.setdefault((entry.get("seq_q", 0), key), []).append(entry)
        fig, axes = grid(len(panels))
        pending = []  # (panel, the chosen batches' labels), placed once every panel's limits are known
        for ax, ((seq, key), entries) in zip(axes, sorted(panels.items())):
            notes = []
            for entry in entries:
                label = label_of(entry)
                style = self.styles.of(label)
                sweep = (entry.get("exhaustive") or {}).get("probes") or []
                measured = sorted((p["batch"], p["tokens_per_s"]) for p in sweep if p.get("feasible"))
                if measured:
                    ax.plot([m[0] for m in measured], [m[1] for m in measured], color=style["color"],
                            linewidth=0.8, alpha=0.5)
                probes = entry["search"]["probes"]
                feasible = sorted((p["batch"], p["tokens_per_s"]) for p in probes if p.get("feasible"))
                # One panel: the search's evaluation count in the legend; several: a backend's label must be
                # the same in every panel for the shared legend, so the count goes beside its star.
                evaluations = entry["search"]["evaluations"]
                ax.plot([m[0] for m in feasible], [m[1] for m in feasible], linestyle="none", markersize=4,
                        label=f"{label} ({evaluations} evaluations)" if len(panels) == 1 else label, **style)
                over = [(p["batch"], p["tokens_per_s"]) for p in probes if not p.get("feasible") and p.get("tokens_per_s")]
                if over:
                    ax.plot([m[0] for m in over], [m[1] for m in over], linestyle="none", marker="x",
                            color=style["color"], markersize=5)
                best = entry["search"].get("best")
                if best:
                    ax.plot([best["batch"]], [best["tokens_per_s"]], marker="*", markersize=14, linestyle="none",
                            markeredgecolor="black", color=style["color"])
                    note = f"B{best['batch']}" if len(panels) == 1 else f"B{best['batch']}, {evaluations} evals"
                    notes.append((best["batch"], best["tokens_per_s"], note, style["color"]))
                for p in probes:
                    if p.get("outcome") == "out of memory":
                        ax.axvline(p["batch"], color=style["color"], linewidth=0.6, linestyle=":")
            power_of_two_axis(ax)
            pending.append((ax, notes))
            ax.set_title(f"N{seq} {panel_title(key)}")
            ax.set_xlabel("batch")
            ax.set_ylabel("tokens/s")
            ax.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(si_label))
        fig.canvas.draw()  # the axes' limits and transforms as they will be saved
        for ax, notes in pending:
            annotate_apart(ax, notes)
        # Under the panels, as the other plots do: inside one, nine backends' labels hid the low curves.
        self.save(fig, "tuner_throughput_vs_batch", "Batch tuner: throughput vs batch",
                  "Dots: the search's feasible probes; x: measured but over a limit; dotted lines: out of memory; "
                  "star: the chosen batch, with the search's evaluation count; thin line: the exhaustive sweep, where run.",
                  legend_rows=shared_legend(fig, axes))

    def all(self):
        if self.tuning:
            # A tune file's rows are the probes of each case at many batches: the tuner plot shows
            # them; curves against sequence length would be one line per batch.
            self.roofline()
            self.accuracy_vs_speed()
            self.tuner()
            return self.made
        self.versus_seq("latency_vs_seq", "ms_median", "median latency (ms)", "Latency vs sequence length",
                        "Median latency of one forward, log-log.", log_y=True)
        self.versus_seq("tflops_vs_seq", "tflops", "TFLOP/s", "TFLOP/s vs sequence length",
                        "Achieved TFLOP/s per backend (FlashAttention's FLOP convention).")
        self.versus_seq("memory_vs_seq", "peak_mem_mib", "peak extra memory (MiB)", "Peak memory vs sequence length",
                        "Peak extra memory of one forward (output included, inputs excluded), log scale.", log_y=True,
                        mark_noisy=False)
        self.versus_seq("speedup_vs_seq", "speedup_vs_vanilla", "speedup vs vanilla", "Speedup vs vanilla",
                        "Vanilla's median over each backend's on the same inputs; the dashed line is 1×.",
                        reference_line=1.0)
        self.roofline()
        self.accuracy_vs_speed()
        self.tuner()
        return self.made


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("input", help="results.json or tune.json (or the CLI's prepared data)")
    parser.add_argument("--out", required=True, help="directory for the PNG and SVG files")
    args = parser.parse_args(argv)
    with open(args.input, encoding="utf-8") as handle:
        data = json.load(handle)
    if isinstance(data, list):
        data = {"rows": data}
    os.makedirs(args.out, exist_ok=True)
    made = Plotter(data, args.out).all()
    with open(os.path.join(args.out, "plots.json"), "w", encoding="utf-8") as handle:
        json.dump(made, handle, indent=2)
        handle.write("\n")
    print(f"{len(made)} plots in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
