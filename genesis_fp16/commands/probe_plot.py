"""The probe's plot: each parameter's gradient error against FP32, one line per variant.

matplotlib is an optional extra (``pip install 'genesis-fp16[plot]'``); it is imported
only when a plot is asked for.

>>> plot_layer_errors(report, Path("out/probe-se_darwin.png"))  # doctest: +SKIP
"""

from __future__ import annotations

import math
from pathlib import Path

from genesis_fp16_infrastructure.api import ProbeReport


class PlotUnavailable(Exception):
    """matplotlib is not installed."""


def plot_layer_errors(report: ProbeReport, path: Path, title: str = "") -> Path:
    """Write a PNG of ||g - g32|| / ||g32|| per parameter for every low-precision variant."""
    try:
        import matplotlib

        matplotlib.use("Agg")  # no display: the plot only goes to a file
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise PlotUnavailable(
            f"the probe plot needs matplotlib ({exc}); install it with "
            "pip install 'genesis-fp16[plot]', or leave out --out"
        ) from None
    shown = [v for v in report.variants if v.family != "fp32" and v.error is None]
    layers = list(shown[0].measures.layer_errors) if shown else []
    fig, ax = plt.subplots(figsize=(max(6.0, 0.35 * len(layers) + 3) + 3, 5))
    floor = 1e-12  # log axis: exact zeros (an FP32 island) drawn at the bottom
    for variant in shown:
        errors = [variant.measures.layer_errors[name] for name in layers]
        values = [e if math.isfinite(e) else 1e3 for e in errors]
        ax.plot(range(len(layers)), [max(v, floor) for v in values], marker="o", label=variant.name)
    ax.axhline(report.noise_floor, color="black", linestyle="--", label="minibatch noise floor")
    ax.set_yscale("log")
    ax.set_xticks(range(len(layers)), layers, rotation=90, fontsize=7)
    ax.set_ylabel("||g - g32|| / ||g32||  (non-finite at 1e3)")
    ax.set_title(title or f"precision probe on {report.device}: recommended {report.recommended}")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
