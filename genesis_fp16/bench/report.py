"""Derived columns, the CSV, the markdown table and the plot."""

from __future__ import annotations

import csv
import math
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

Row = dict[str, Any]

# The CSV's columns, in order; docs/benchmarks.md explains each one.
COLUMNS: tuple[str, ...] = (
    "device",
    "device_name",
    "torch_version",
    "threads",
    "size",
    "params",
    "runner",
    "execution",
    "precision_requested",
    "precision_ran",
    "honest",
    "batch_size",
    "warmup_steps",
    "timed_steps",
    "median_step_ms",
    "samples_per_s",
    "speedup_vs_fp32",
    "time_vs_hand",
    "peak_mem_mb",
    "mem_vs_fp32",
    "mem_measure",
    "eval_loss",
    "eval_loss_fp32",
    "eval_loss_gap",
    "skipped_steps",
    "overflow_rate",
    "host_syncs_per_step",
    "kernels_per_step",
    "note",
    "command",
)


def _find(rows: Sequence[Row], **match: Any) -> Row | None:
    for row in rows:
        if all(row.get(k) == v for k, v in match.items()) and row.get("median_step_ms"):
            return row
    return None


def _ratio(a: Any, b: Any) -> float | None:
    if a is None or b is None or not b:
        return None
    return float(a) / float(b)


def derive(rows: Sequence[Row]) -> None:
    """Fill the columns that compare rows: against fp32, and against the hand-written loop.

    Comparisons against a row that did not run what it asked for are left empty: a ratio
    between two different precisions would be reported under the wrong name.
    """
    for row in rows:
        if not row.get("median_step_ms"):
            continue
        workload = {"size": row["size"], "batch_size": row["batch_size"]}
        fp32 = _find(rows, **workload, runner=row["runner"], precision_requested="fp32")
        if fp32 is not None and fp32["honest"] and row["honest"]:
            steps = str(row["warmup_steps"] + row["timed_steps"])
            reference = fp32.get("eval_loss_at", {}).get(steps)
            if reference is not None:
                row["eval_loss_fp32"] = reference
                row["eval_loss_gap"] = row["eval_loss"] - reference
            row["speedup_vs_fp32"] = _ratio(fp32["median_step_ms"], row["median_step_ms"])
            row["mem_vs_fp32"] = _ratio(row.get("peak_mem_mb"), fp32.get("peak_mem_mb"))
        hand = _find(
            rows, **workload, runner="hand", precision_requested=row["precision_requested"]
        )
        if hand is not None and hand["honest"] and row["honest"]:
            row["time_vs_hand"] = _ratio(row["median_step_ms"], hand["median_step_ms"])


def note_for(row: Row) -> str:
    """The row's note: the honesty verdict first, a diverged training next, then what the
    library said it did."""
    parts = []
    if row.get("error"):
        parts.append(f"FAILED: {row['error']}")
    elif not row.get("honest"):
        parts.append(
            f"requested {row['precision_requested']} but {row.get('precision_ran')} ran: "
            f"not a {row['precision_requested']} result"
        )
    loss = row.get("eval_loss")
    if isinstance(loss, float) and not math.isfinite(loss):
        # The CSV writes a NaN as an empty cell: without this line the divergence is silent.
        parts.append(f"eval loss {loss}: training diverged, its speed is not a usable result")
    if row.get("runner_note"):
        parts.append(str(row["runner_note"]))
    return "; ".join(parts)


def device_slug(device: str, name: str) -> str:
    """The device part of result file names, e.g. `cpu-amd-epyc-2-cores`."""
    slug = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
    return f"{device}-{slug}"


def _cell(value: Any) -> Any:
    if isinstance(value, float):
        return "" if math.isnan(value) else f"{value:.6g}"
    return "" if value is None else value


def write_csv(rows: Sequence[Row], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS, extrasaction="ignore")
        writer.writeheader()
        for row in rows:
            writer.writerow({c: _cell(row.get(c)) for c in COLUMNS})


def _fmt(value: Any, spec: str) -> str:
    return "" if value is None else format(value, spec)


def markdown_table(rows: Sequence[Row]) -> str:
    """A compact table of the rows, for the terminal and the docs."""
    head = (
        "| size | batch | runner | execution | requested | ran | step ms | samples/s | vs fp32 "
        "| vs hand | peak MiB | eval loss | gap to fp32 | skipped | overflow rate | syncs/step "
        "| kernels/step |"
    )
    lines = [head, "|" + " --- |" * (head.count("|") - 1)]
    for r in rows:
        ran = r.get("precision_ran", "")
        ran = ran if r.get("honest") else f"**{ran}** (not honest)"
        lines.append(
            f"| {r['size']} | {r.get('batch_size', '')} | {r['runner']} "
            f"| {r.get('execution', '')} | {r['precision_requested']} | {ran} "
            f"| {_fmt(r.get('median_step_ms'), '.1f')} | {_fmt(r.get('samples_per_s'), '.0f')} "
            f"| {_fmt(r.get('speedup_vs_fp32'), '.2f')} | {_fmt(r.get('time_vs_hand'), '.3f')} "
            f"| {_fmt(r.get('peak_mem_mb'), '.0f')} | {_fmt(r.get('eval_loss'), '.4f')} "
            f"| {_fmt(r.get('eval_loss_gap'), '+.1e')} | {_fmt(r.get('skipped_steps'), 'd')} "
            f"| {_fmt(r.get('overflow_rate'), '.2f')} "
            f"| {_fmt(r.get('host_syncs_per_step'), '.2f')} "
            f"| {_fmt(r.get('kernels_per_step'), '.0f')} |"
        )
    return "\n".join(lines)


def _bars(ax: Any, rows: Sequence[Row], size: str, batch: Any, metric: str) -> None:
    runners = list(dict.fromkeys(r["runner"] for r in rows))
    precisions = list(dict.fromkeys(r["precision_requested"] for r in rows))
    width = 0.8 / max(len(runners), 1)
    for i, runner in enumerate(runners):
        labelled = False
        for j, precision in enumerate(precisions):
            row = _find(
                rows, size=size, batch_size=batch, runner=runner, precision_requested=precision
            )
            if row is None or row.get(metric) is None:
                continue
            ax.bar(
                j + (i - (len(runners) - 1) / 2) * width,
                row[metric],
                width,
                color=f"C{i}",
                hatch="" if row["honest"] else "//",
                edgecolor=None if row["honest"] else "black",
                label=None if labelled else runner,
            )
            labelled = True
    ax.set_xticks(range(len(precisions)), precisions)
    ax.set_yscale("log")


def write_plot(rows: Sequence[Row], path: Path, title: str) -> None:
    """Throughput (top) and peak memory (bottom) per size; dishonest rows are hatched."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = list(dict.fromkeys((r["size"], r.get("batch_size")) for r in rows))
    fig, axes = plt.subplots(2, len(panels), figsize=(6 * len(panels), 8), squeeze=False)
    for col, (size, batch) in enumerate(panels):
        for ax, metric, unit in (
            (axes[0][col], "samples_per_s", "samples/s (log)"),
            (axes[1][col], "peak_mem_mb", "peak MiB (log)"),
        ):
            _bars(ax, rows, size, batch, metric)
            ax.set_title(f"{size}, batch {batch}: {unit}")
        axes[0][col].legend(fontsize=8)
    fig.suptitle(f"{title}\nhatched: the requested precision did not run (see the CSV note)")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
