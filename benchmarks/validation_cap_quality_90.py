"""What a smaller validation cap does to the SE-Darwin world model's quality (issue 90).

For each seed s, ``generate_pool(size, seed=s)`` is trained at the plugin's defaults (early
stopping, fp32, one thread: ``world_model_quality.py``'s run) once per
``split.VALIDATION_CAP`` in ``--caps``, in this process, on the same pool and scored on
the same fresh records (``world_model_quality.fresh_records``). Only the validation part
moves between caps (records it gives up train instead); the held-out part is the judged
run's fifth, the same records at every cap, and its AUC is what ``train --json`` reports.

    python benchmarks/validation_cap_quality_90.py --size 100000 --seeds 3 --caps 20000,2000

Prints a Markdown row per (seed, cap): held-out AUC, fresh AUC, best step, steps at stop,
validation records, seconds; then the paired difference of each cap from the first.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
from world_model_quality import _train, fresh_records

from genesis_fp16_agents.se_darwin.plugin import SEDarwinPlugin
from genesis_fp16_infrastructure.recipes.retrain import split as split_module
from genesis_fp16_infrastructure.world_model.metrics import auc
from genesis_fp16_infrastructure.world_model.predict import WorldModelPredictor


def _load() -> str:
    """The load average: every figure here is read beside it."""
    return Path("/proc/loadavg").read_text().strip()


def run(size: int, seed: int, caps: list[int]) -> list[dict[str, float]]:
    """One pool trained once per cap, each scored on the same fresh records."""
    fresh = fresh_records(size, seed)
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        plugin = SEDarwinPlugin()
        path = plugin.generate_sample_data(Path(tmp), size, seed)
        for cap in caps:
            kept = split_module.VALIDATION_CAP
            split_module.VALIDATION_CAP = cap
            try:
                started = time.monotonic()
                folder = Path(tmp) / f"ckpt-{cap}"
                result = _train(plugin, path, folder, "fp32", seed, {})
                seconds = time.monotonic() - started
            finally:
                split_module.VALIDATION_CAP = kept
            predicted = WorldModelPredictor.load(folder).predict(fresh.attempts, fresh.pool)
            p = torch.tensor([q.success_probability for q in predicted], dtype=torch.double)
            split = (result.extra or {}).get("split", {}) if isinstance(result.extra, dict) else {}
            out.append(
                {
                    "seed": seed,
                    "cap": cap,
                    "held_out_auc": float(result.eval["auc"]),
                    "fresh_auc": auc(p, fresh.success),
                    "best_step": result.early_stop.best_step,
                    "steps": result.steps,
                    "validation_fraction": split.get("validation_fraction"),
                    "seconds": round(seconds, 1),
                    "load": _load(),
                }
            )
            row = out[-1]
            print(
                f"| {seed} | {cap:,} | {row['held_out_auc']:.4f} | {row['fresh_auc']:.4f} "
                f"| {row['best_step']} | {row['steps']} | {row['seconds']} | {row['load']} |",
                flush=True,
            )
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=100_000)
    parser.add_argument("--seeds", type=int, default=3, help="pools, from --first-seed")
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--caps", default=f"20000,{split_module.VALIDATION_CAP}")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    caps = [int(c) for c in args.caps.split(",")]
    print("| seed | cap | held-out AUC | fresh AUC | best step | steps | seconds | load |")
    print("| --- " * 8 + "|")
    rows = []
    for seed in range(args.first_seed, args.first_seed + args.seeds):
        rows += run(args.size, seed, caps)
        if args.out:
            args.out.write_text(json.dumps(rows, indent=1) + "\n")
    for cap in caps[1:]:
        for metric in ("held_out_auc", "fresh_auc"):
            base = {r["seed"]: r[metric] for r in rows if r["cap"] == caps[0]}
            diffs = [r[metric] - base[r["seed"]] for r in rows if r["cap"] == cap]
            spread = statistics.stdev(diffs) if len(diffs) > 1 else float("nan")
            print(
                f"cap {cap} - cap {caps[0]}, {metric}: mean {statistics.mean(diffs):+.4f} "
                f"(per seed {', '.join(f'{d:+.4f}' for d in diffs)}; sd {spread:.4f})"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
