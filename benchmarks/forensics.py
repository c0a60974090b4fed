"""Run the rlhf_ppo precision matrix: every preset x seeds, a fixed number of PPO iterations.

    .venv/bin/python benchmarks/forensics.py --iterations 40 --seeds 0 1 2 --out forensics.json

Writes one JSON object per (preset, seed) with the final reward, the first-iteration and
run-mean diagnostics, and prints a Markdown table of means over seeds. Runs on one
thread: the models are tiny, and more threads only contend on a shared CPU.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time
from pathlib import Path
from typing import Any

import torch

from genesis_fp16_agents.rlhf_ppo.task import PPOConfig, PPOTask
from genesis_fp16_infrastructure.rl.precision_presets import PRESETS
from genesis_fp16_infrastructure.training import FitOptions, fit

TABLE = (
    ("reward", "eval reward"),
    ("reward_first", "reward it0"),
    ("kl_k3_abs_error", "|k3 err| it0"),
    ("kl_log_ratio_below_ulp_frac", "log-ratio<ulp it0"),
    ("kl_log_ratio_below_1e6_frac", "log-ratio<1e-6 it0"),
    ("mismatch_abs_dlogp_mean", "mean|dlogp|"),
    ("mismatch_phantom_clip_frac", "phantom clip"),
    ("reward_abs_error", "|reward err|"),
    ("reward_resolution_median", "reward res."),
    ("value_quant_ratio", "value quant."),
    ("ref_seq_err_final", "ref |S_T|"),
    ("ref_seq_err_growth_exponent", "ref b"),
)


def run_one(preset: str, seed: int, iterations: int, device: str) -> dict[str, Any]:
    """``iterations`` PPO iterations through fit() in ``preset``'s policy precision."""
    runs: list[dict[str, float]] = []
    task = PPOTask(PPOConfig(), seed, device, preset=preset, on_diagnostics=runs.append)
    options = FitOptions(
        precision=PRESETS[preset].policy, epochs=iterations, device=device, seed=seed
    )
    start = time.perf_counter()
    result = fit(task, options)
    first = runs[0]
    mean = {k: _nanmean([r[k] for r in runs]) for k in runs[-1]}
    return {
        "preset": preset,
        "seed": seed,
        "iterations": iterations,
        "wall_seconds": time.perf_counter() - start,
        "eval": dict(result.eval),
        "first": first,
        "mean": mean,
        "skipped_steps": result.summary.skipped_steps,
    }


def _nanmean(xs: list[float]) -> float:
    finite = [x for x in xs if math.isfinite(x)]
    return statistics.fmean(finite) if finite else math.nan


def table(rows: list[dict[str, Any]]) -> str:
    """Means over seeds per preset (eval reward also with its spread)."""
    head = "| preset | " + " | ".join(label for _, label in TABLE) + " |"
    lines = [head, "|" + " --- |" * (len(TABLE) + 1)]
    for preset in PRESETS:
        mine = [r for r in rows if r["preset"] == preset]
        if not mine:
            continue
        cells = []
        for key, _ in TABLE:
            if key == "reward":
                vals = [r["eval"]["reward"] for r in mine]
                sd = statistics.pstdev(vals)
                cells.append(f"{statistics.fmean(vals):.3f} ± {sd:.3f}")
                continue
            source = "first" if key.endswith("_frac") and "kl_" in key else "mean"
            if key == "reward_first":
                vals = [r["first"]["reward_true_mean"] for r in mine]
            elif key == "kl_k3_abs_error":
                vals = [r["first"][key] for r in mine]
            else:
                vals = [r[source][key] for r in mine]
            cells.append(f"{_nanmean(vals):.3g}")
        lines.append(f"| {preset} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=40)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--presets", nargs="+", default=list(PRESETS), choices=list(PRESETS))
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", type=Path, default=Path("forensics.json"))
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    rows = []
    for preset in args.presets:
        for seed in args.seeds:
            row = run_one(preset, seed, args.iterations, args.device)
            rows.append(row)
            print(
                f"{preset} seed {seed}: reward {row['eval']['reward']:.3f} "
                f"({row['wall_seconds']:.1f} s)",
                flush=True,
            )
    args.out.write_text(json.dumps(rows, indent=1))
    print(table(rows))


if __name__ == "__main__":
    main()
