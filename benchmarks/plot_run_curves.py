#!/usr/bin/env python3
"""Draw one tracked run's curves (train loss, loss scale, skipped steps) into a PNG.

Reads the TensorBoard event files a run wrote (``GENESIS_FP16_TRACKING_DIR`` or
``train --tracking-dir``; docs/tracking.md) with TensorBoard's own reader, so the picture
shows what TensorBoard would. ::

    genesis-fp16 train se_darwin --precision fp16 --steps 300 --tracking-dir runs
    python benchmarks/plot_run_curves.py runs/se_darwin/<run_id> --out docs/run-curves.png
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

PANELS = (
    ("train/loss", "train loss (mean since the last log)"),
    ("train/loss_scale", "loss scale"),
    ("train/skipped_steps", "skipped steps (total)"),
)


def read_scalars(run: Path) -> dict[str, list[tuple[int, float]]]:
    """Every scalar tag of one run folder: ``{tag: [(step, value), ...]}``."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run), size_guidance={"scalars": 0})  # 0: keep all
    events.Reload()
    return {
        tag: [(event.step, event.value) for event in events.Scalars(tag)]
        for tag in events.Tags()["scalars"]
    }


def precision_of(scalars: dict[str, list[tuple[int, float]]]) -> str:
    """The precisions the run's steps ran in, by the ``precision/*`` curves."""
    ran = [tag.split("/", 1)[1] for tag, points in scalars.items()
           if tag.startswith("precision/") and any(value for _, value in points)]  # fmt: skip
    return "+".join(sorted(ran)) or "unknown"


def plot(run: Path, out: Path, title: str | None = None) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    scalars = read_scalars(run)
    missing = [tag for tag, _ in PANELS if tag not in scalars]
    if missing:
        raise SystemExit(f"{run}: no {', '.join(missing)} in its event files (a tracked run?)")
    fig, axes = plt.subplots(len(PANELS), 1, figsize=(7, 7.5), sharex=True)
    for ax, (tag, label) in zip(axes, PANELS, strict=True):
        steps, values = zip(*scalars[tag], strict=True)
        marker = "o" if len(steps) <= 60 else None  # dots while they are few enough to see
        ax.plot(steps, values, marker=marker, markersize=3, linewidth=1.2)
        if tag == "train/loss_scale":  # powers of two: the scaler halves and doubles it
            ax.set_yscale("log", base=2)
        if tag == "train/skipped_steps":  # a count: whole numbers from 0
            ax.yaxis.set_major_locator(MaxNLocator(integer=True))
            ax.set_ylim(-0.5, max(values) + 1)
        ax.set_ylabel(label)
        ax.grid(True, alpha=0.3)
    axes[-1].set_xlabel("optimizer step (skipped steps included)")
    fig.suptitle(title or f"{run.parent.name} run {run.name} ({precision_of(scalars)})")
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=100)
    plt.close(fig)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path, help="one run's folder: <tracking dir>/<agent>/<run_id>")
    parser.add_argument("--out", type=Path, default=Path("run-curves.png"))
    parser.add_argument("--title", help="default: agent, run id and precision")
    args = parser.parse_args(argv)
    if not args.run.is_dir():
        parser.error(f"{args.run}: no such run folder")
    plot(args.run, args.out, args.title)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
