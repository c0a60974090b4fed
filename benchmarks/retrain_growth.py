"""What a daemon's SE-Darwin model is worth after its pool grows: trained afresh on the
grown pool (what a scheduled run does now) against the old model continued on it with its
old encoder (what it did before: resume, and train on until validation stops improving).

    python benchmarks/retrain_growth.py [--seeds 3] [--precisions fp32,bf16]

The pool grows in three stages, as a daemon sees it between scheduled runs, and new
agents join it (their base rates are what an old encoder cannot know):

* 500 records: se_darwin's first 500;
* 2,000 records: se_darwin's first 1,000 and qa's first 1,000;
* 5,000 records: se_darwin's first 2,000, qa's first 1,500 and builder's first 1,500.

Each agent's records are the prefix of one ``generate_pool(n, seed)`` of that agent (a
pool read as it was written, older records first). At each stage after the first:

* **scratch**: ``SEDarwinPlugin.train`` at its defaults on the stage's pool, resuming
  the previous stage's folder: the data changed, so it trains afresh (a new encoder on
  the whole pool) and sets the old checkpoints aside;
* **resumed**: the previous stage's *resumed* model (the first stage's model for
  stage 2) continued on the stage's pool with its saved encoder, through ``fit`` with the
  default budget and early stopping, exactly as the plugin resumed before fingerprints.

Both are scored through the prediction API (``WorldModelPredictor.load``) on fresh
records: new pools of the stage's agents and sizes, seeds 1,000,000 + 1,000 s + k, never
trained on. The table gives the mean fresh AUC over the seeds, the paired difference
(resumed minus scratch) with its standard error, and the wall seconds of each. CPU, one
thread. Writes a Markdown table to stdout.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from genesis_fp16.plugin_api import TrainRequest
from genesis_fp16_agents.se_darwin.plugin import SEDarwinPlugin
from genesis_fp16_infrastructure.data.readers import read_trajectories
from genesis_fp16_infrastructure.data.synthetic import generate_pool
from genesis_fp16_infrastructure.recipes.retrain.options import TaskOptions
from genesis_fp16_infrastructure.recipes.retrain.task import WorldModelTask
from genesis_fp16_infrastructure.training import CheckpointManager, FitOptions, fit
from genesis_fp16_infrastructure.world_model.metrics import auc
from genesis_fp16_infrastructure.world_model.predict import (
    WorldModelPredictor,
    read_world_model_state,
)

STAGES: tuple[dict[str, int], ...] = (
    {"se_darwin": 500},
    {"se_darwin": 1000, "qa": 1000},
    {"se_darwin": 2000, "qa": 1500, "builder": 1500},
)
FRESH_SEED = 1_000_000


@dataclass(frozen=True)
class Score:
    fresh_auc: float
    seconds: float
    steps: int


def _write_stage(folder: Path, stage: dict[str, int], pools: dict[str, dict[str, Any]]) -> None:
    """The stage's pool: each agent's prefix, one file per agent (a daemon's data folder)."""
    folder.mkdir(parents=True, exist_ok=True)
    for agent, pool in pools.items():
        count = stage.get(agent, 0)
        path = folder / f"{agent}.json"
        if count == 0:
            path.unlink(missing_ok=True)
            continue
        kept = dict(list(pool["trajectories"].items())[:count])
        path.write_text(json.dumps({**pool, "trajectories": kept}))


def _fresh(stage: dict[str, int], seed: int) -> tuple[list[Any], Any, torch.Tensor]:
    with tempfile.TemporaryDirectory() as tmp:
        for k, (agent, count) in enumerate(stage.items()):
            pool = generate_pool(count, FRESH_SEED + 1000 * seed + k, agent=agent)
            (Path(tmp) / f"{agent}.json").write_text(json.dumps(pool))
        data = read_trajectories(Path(tmp))
    success = torch.tensor([float(e.label.success) for e in data.examples], dtype=torch.double)
    return [e.attempt for e in data.examples], data.pool, success


def _score(folder: Path, fresh: tuple[list[Any], Any, torch.Tensor]) -> float:
    attempts, pool, success = fresh
    predicted = WorldModelPredictor.load(folder).predict(attempts, pool)
    p = torch.tensor([q.success_probability for q in predicted], dtype=torch.double)
    return auc(p, success)


def _scratch(data: Path, folder: Path, precision: str, seed: int) -> tuple[int, float]:
    """The plugin at its defaults, resuming the folder: changed data trains afresh."""
    started = time.monotonic()
    result = SEDarwinPlugin().train(
        TrainRequest(
            agent="se_darwin",
            precision=precision,
            precision_reason="growth benchmark",
            state_dir=folder.parent,
            checkpoint_dir=folder,
            data_path=data,
            seed=seed,
            resume=True,
        )
    )
    if result.extra["resumed_from"] is not None:
        raise RuntimeError("the grown pool was resumed, not trained afresh")
    return result.steps, time.monotonic() - started


def _resumed(data: Path, folder: Path, precision: str, seed: int) -> tuple[int, float]:
    """The old model continued on the grown pool with its old encoder (the old resume)."""
    started = time.monotonic()
    found = CheckpointManager(folder).load_latest()
    if found is None:
        raise RuntimeError(f"no checkpoint in {folder}")
    saved = read_world_model_state(found[0])
    options = TaskOptions()
    task = WorldModelTask(read_trajectories(data), options, seed, "cpu", saved)
    result = fit(
        task,
        FitOptions(
            precision=precision,
            epochs=options.max_epochs,
            seed=seed,
            resume=True,
            checkpoint_dir=folder,
            checkpoint_seconds=None,
            early_stop=task.early_stopping(),
        ),
    )
    return result.steps_run, time.monotonic() - started


def measure(seed: int, precision: str) -> list[tuple[Score, Score]]:
    """One growth sequence: (scratch, resumed) at each stage after the first."""
    largest = {agent: max(s.get(agent, 0) for s in STAGES) for agent in STAGES[-1]}
    pools = {
        a: generate_pool(n, seed * 10 + i, agent=a) for i, (a, n) in enumerate(largest.items())
    }
    out: list[tuple[Score, Score]] = []
    with tempfile.TemporaryDirectory() as tmp:
        data, scratch, resumed = Path(tmp) / "pool", Path(tmp) / "scratch", Path(tmp) / "resumed"
        _write_stage(data, STAGES[0], pools)
        _scratch(data, scratch, precision, seed)
        for name in CheckpointManager(scratch).checkpoints():
            resumed.mkdir(exist_ok=True)
            (resumed / name.name).write_bytes(name.read_bytes())
        for stage in STAGES[1:]:
            _write_stage(data, stage, pools)
            fresh = _fresh(stage, seed)
            steps, seconds = _scratch(data, scratch, precision, seed)
            a = Score(_score(scratch, fresh), seconds, steps)
            steps, seconds = _resumed(data, resumed, precision, seed)
            b = Score(_score(resumed, fresh), seconds, steps)
            out.append((a, b))
            print(
                f"seed {seed} {precision} {sum(stage.values())}: scratch {a}, resumed {b}",
                flush=True,
            )
    return out


def _se(values: Sequence[float]) -> float:
    return statistics.stdev(values) / math.sqrt(len(values)) if len(values) > 1 else math.nan


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--precisions", default="fp32,bf16")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    rows = []
    for precision in args.precisions.split(","):
        runs = [measure(seed, precision) for seed in range(args.seeds)]
        for k, stage in enumerate(STAGES[1:]):
            scratch = [r[k][0] for r in runs]
            resumed = [r[k][1] for r in runs]
            diff = [b.fresh_auc - a.fresh_auc for a, b in zip(scratch, resumed, strict=True)]
            rows.append(
                f"| {sum(STAGES[k].values()):,} -> {sum(stage.values()):,} | {precision} "
                f"| {statistics.mean(s.fresh_auc for s in scratch):.4f} "
                f"| {statistics.mean(s.fresh_auc for s in resumed):.4f} "
                f"| {statistics.mean(diff):+.4f} ({_se(diff):.4f}) | {min(diff):+.4f} "
                f"| {statistics.mean(s.seconds for s in scratch):.1f} "
                f"| {statistics.mean(s.seconds for s in resumed):.1f} "
                f"| {statistics.mean(s.steps for s in scratch):.0f} "
                f"| {statistics.mean(s.steps for s in resumed):.0f} |"
            )
    print(
        f"\n{args.seeds} growth sequence(s) per precision, seeds 0-{args.seeds - 1}, "
        "CPU, 1 thread\n\n"
        "| growth (records) | precision | fresh AUC scratch | fresh AUC resumed "
        "| resumed - scratch (s.e.) | worst | s scratch | s resumed | steps scratch "
        "| steps resumed |\n| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
    )
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
