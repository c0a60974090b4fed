"""What a run's ``eval`` phase forwards: validation rows against the held-out evaluation's.

Issue 90 ("cost grows with what is new"): the ``eval`` phase (``WorldModelTask.
eval_seconds``) is every ``validate()`` during training plus the final ``evaluate()``. For
each pool size it writes a generated se_darwin pool, trains it as the daemon's measured run
does (``SEDarwinPlugin.train``, fp32, one thread, ``--steps``), and counts, by wrapping the
task's ``validate`` and ``evaluate`` in this process: the calls, the rows each forwards
(records times the ensemble's members), and the seconds each takes. With ``--caps`` the
same pool is trained once per ``split.VALIDATION_CAP`` (paired, same process, same seed):
only the validation part moves, the held-out part is the judged run's fifth either way.

    python benchmarks/validation_cost_90.py --pools 10000,100000 --steps 200 --caps 20000,2000

Prints a Markdown table (and ``--out`` a JSON of the rows) with the load average.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from genesis_fp16.plugin_api import TrainRequest
from genesis_fp16_agents.se_darwin.plugin import SEDarwinPlugin
from genesis_fp16_infrastructure.recipes.retrain import split as split_module
from genesis_fp16_infrastructure.recipes.retrain.task import WorldModelTask


def _load() -> str:
    """The load average: every figure here is read beside it."""
    return Path("/proc/loadavg").read_text().strip()


def _counted(tally: dict[str, list[float]], name: str, method: Callable[..., Any]) -> Any:
    def wrapper(self: WorldModelTask, model: torch.nn.Module) -> Any:
        data = self.validation_data if name == "validate" else self.eval_data
        start = time.perf_counter()
        try:
            return method(self, model)
        finally:
            entry = tally.setdefault(name, [0, 0, 0, 0.0])
            entry[0] += 1
            entry[1] += len(data)
            entry[2] += len(data) * self.config.members
            entry[3] += time.perf_counter() - start

    return wrapper


def measure(pool: Path, tmp: Path, cap: int, steps: int, seed: int) -> dict[str, Any]:
    """One run of ``steps`` on ``pool`` with VALIDATION_CAP at ``cap``: its counts."""
    tally: dict[str, list[float]] = {}
    kept = split_module.VALIDATION_CAP, WorldModelTask.validate, WorldModelTask.evaluate
    split_module.VALIDATION_CAP = cap
    WorldModelTask.validate = _counted(tally, "validate", kept[1])  # type: ignore[method-assign]
    WorldModelTask.evaluate = _counted(tally, "evaluate", kept[2])  # type: ignore[method-assign]
    try:
        folder = tmp / f"ckpt-{cap}-{time.monotonic_ns()}"
        started = time.perf_counter()
        result = SEDarwinPlugin().train(
            TrainRequest(
                agent="se_darwin",
                precision="fp32",
                precision_reason="validation cost benchmark",
                state_dir=tmp,
                checkpoint_dir=folder,
                data_path=pool,
                seed=seed,
                resume=False,
                steps=steps,
            )
        )
        seconds = time.perf_counter() - started
    finally:
        split_module.VALIDATION_CAP = kept[0]
        WorldModelTask.validate, WorldModelTask.evaluate = kept[1], kept[2]  # type: ignore[method-assign]
    phases = (result.extra or {}).get("phases", {}) if isinstance(result.extra, dict) else {}
    val = tally.get("validate", [0, 0, 0, 0.0])
    ev = tally.get("evaluate", [0, 0, 0, 0.0])
    return {
        "cap": cap,
        "validations": int(val[0]),
        "validation_records": int(val[1] // max(val[0], 1)),
        "validation_rows": int(val[2]),
        "validation_seconds": round(val[3], 4),
        "evaluations": int(ev[0]),
        "held_out_records": int(ev[1] // max(ev[0], 1)),
        "held_out_rows": int(ev[2]),
        "held_out_seconds": round(ev[3], 4),
        "eval_auc": round(float(result.eval["auc"]), 4),
        "run_seconds": round(seconds, 2),
        "phases": phases,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pools", default="10000,100000")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--caps", default=str(split_module.VALIDATION_CAP))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    caps = [int(c) for c in args.caps.split(",")]
    rows = []
    print(f"load before: {_load()}", flush=True)
    print(
        "| pool | cap | validations | val records | val rows | val s | held-out records "
        "| held-out rows | held-out s | val share of eval | eval AUC |"
    )
    print("| --- " * 11 + "|")
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        for size in (int(p) for p in args.pools.split(",")):
            pool = SEDarwinPlugin().generate_sample_data(tmp / f"pool-{size}", size, args.seed)
            for cap in caps:
                row = {"pool": size, **measure(pool, tmp, cap, args.steps, args.seed)}
                row["load"] = _load()
                rows.append(row)
                total = row["validation_seconds"] + row["held_out_seconds"]
                print(
                    f"| {size:,} | {cap:,} | {row['validations']} | {row['validation_records']:,} "
                    f"| {row['validation_rows']:,} | {row['validation_seconds']:.3f} "
                    f"| {row['held_out_records']:,} | {row['held_out_rows']:,} "
                    f"| {row['held_out_seconds']:.3f} "
                    f"| {row['validation_seconds'] / max(total, 1e-9):.0%} | {row['eval_auc']} |",
                    flush=True,
                )
    print(f"load after: {_load()}", flush=True)
    if args.out:
        args.out.write_text(json.dumps({"rows": rows, "cpus": os.cpu_count()}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
