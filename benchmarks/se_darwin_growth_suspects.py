"""Why a candidate on a fifth agent's clean records was worse on agents the served model
knew (issue 93, item 4): its start, its budget, or one network's luck? Direct fits, no gate.

    python benchmarks/se_darwin_growth_suspects.py [--seeds 0,1,2] [--records 900] [--fits 5]

The pools of ``benchmarks/se_darwin_growth.py`` (four agents, then a fifth; seeds 100 s +
k). Every model is one network (``members=1``, what a held-out run trained before issue
93) fitted through ``fit`` as the recipe fits it (early stopping, default options,
seed s), unless its row says otherwise. Each row: its steps and its held-out log-loss
(the judged fifth, P clipped as the gate clips it) over the four known agents, minus the
served model's (the first model, on four agents), then per known agent:

* ``afresh``: the candidate a scheduled run trains (the grown pool, afresh);
* ``same data, seed +j``: the served model's pool again, fit seed s + j (one network's
  luck on data it already had);
* ``afresh, seed +j``: the candidate with fit seed s + j;
* ``served weights continued``: the served checkpoint resumed on the grown pool with its
  encoder, early-stopped (a start from what it knew);
* ``patience 20`` and ``lr 1e-3``: the candidate with a longer patience (budget), or a
  smaller step;
* ``mean of N``: the mean P(success) of the ``--fits`` served-pool fits against the mean
  of as many candidates (seeds s .. s + N - 1);
* ``members=5``: the candidate and the served model as this build trains them by default
  (five networks together, their mean served).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch

from genesis_fp16.plugin_api import PrecisionRequest
from genesis_fp16_infrastructure.agent_folder.candidates import newest_checkpoint
from genesis_fp16_infrastructure.data.readers import ReadResult, read_trajectories
from genesis_fp16_infrastructure.data.synthetic import generate_pool
from genesis_fp16_infrastructure.recipes.retrain.options import TaskOptions
from genesis_fp16_infrastructure.recipes.retrain.scoring import record_losses
from genesis_fp16_infrastructure.recipes.retrain.split import judged_held_out
from genesis_fp16_infrastructure.recipes.retrain.task import WorldModelTask
from genesis_fp16_infrastructure.training import FitOptions, fit
from genesis_fp16_infrastructure.training.checkpoint_load import load_checkpoint
from genesis_fp16_infrastructure.world_model.features import Categorical, numeric_rows
from genesis_fp16_infrastructure.world_model.predict import (
    WorldModelPredictor,
    read_world_model_state,
)

AGENTS = tuple(f"agent_{k}" for k in range(5))
ONE = TaskOptions(members=1)


def _pool(root: Path, seed: int, records: int, agents: int) -> ReadResult:
    folder = root / f"pool{agents}"
    folder.mkdir()
    for k in range(agents):
        pool = generate_pool(records, seed * 100 + k, agent=AGENTS[k])
        (folder / f"{AGENTS[k]}.json").write_text(json.dumps(pool))
    return read_trajectories(folder)


def _fit(data: ReadResult, folder: Path, seed: int, fit_seed: int, options: TaskOptions = ONE,
         saved: dict | None = None) -> int:  # fmt: skip
    task = WorldModelTask(data, options, seed, "cpu", saved)
    result = fit(
        task,
        FitOptions(
            precision=PrecisionRequest("fp32"),
            epochs=options.max_epochs,
            seed=fit_seed,
            resume=saved is not None,
            checkpoint_dir=folder,
            checkpoint_seconds=None,
            early_stop=task.early_stopping(),
        ),
    )
    return result.summary.step


def _p(folder: Path, data: ReadResult) -> torch.Tensor:
    """The checkpoint's P(success) on the judged held-out records, as the gate scores."""
    columns = data.columns
    rows = columns.labelled[np.flatnonzero(judged_held_out(data))]
    checkpoint = newest_checkpoint(folder)
    assert checkpoint is not None, folder
    predictor = WorldModelPredictor.of_state(load_checkpoint(checkpoint))
    x = predictor.encoder.encode_parts(
        Categorical.of_rows(columns, rows), numeric_rows(columns, rows)
    )
    with torch.no_grad():
        return torch.sigmoid(predictor.model(x).success_logit.float())


def suspects(seed: int, records: int, fits: int) -> list[str]:
    root = Path(tempfile.mkdtemp(prefix=f"suspects-{seed}-"))
    four, five = _pool(root, seed, records, 4), _pool(root, seed, records, 5)
    held = np.flatnonzero(judged_held_out(five))
    success = five.columns.success[held]
    agents = np.array([str(a) for a in five.columns.agent.take(five.columns.labelled[held])])
    known = agents != AGENTS[4]

    def loss(p: torch.Tensor) -> np.ndarray:
        return record_losses(p, success)["log_loss"]

    served_steps = _fit(four, root / "served", seed, seed)
    served = loss(_p(root / "served", five))
    rows: list[str] = []

    def row(name: str, steps: int | str, p: torch.Tensor, base: np.ndarray = served) -> None:
        diff = loss(p) - base
        each = " | ".join(f"{diff[agents == a].mean():+.4f}" for a in AGENTS[:4])
        rows.append(f"| {seed} | {name} | {steps} | {diff[known].mean():+.4f} | {each} |")
        print(rows[-1], file=sys.stderr, flush=True)

    rows.append(f"| {seed} | served (4 agents) | {served_steps} | {served[known].mean():.4f} |")
    same = [_p(root / "served", five)]
    grown = []
    for j in range(fits):
        if j:
            steps = _fit(four, root / f"same{j}", seed, seed + j)
            same.append(_p(root / f"same{j}", five))
            row(f"same data, seed +{j}", steps, same[-1])
        steps = _fit(five, root / f"afresh{j}", seed, seed + j)
        grown.append(_p(root / f"afresh{j}", five))
        row("afresh" if j == 0 else f"afresh, seed +{j}", steps, grown[-1])
    shutil.copytree(root / "served", root / "warm")
    state = read_world_model_state(load_checkpoint(newest_checkpoint(root / "served")))  # type: ignore[arg-type]
    row("served weights continued", _fit(five, root / "warm", seed, seed, ONE, state),
        _p(root / "warm", five))  # fmt: skip
    for name, options in (
        ("patience 20", TaskOptions(members=1, patience=20)),
        ("lr 1e-3", TaskOptions(members=1, learning_rate=1e-3)),
    ):
        folder = root / name.replace(" ", "_")
        row(name, _fit(five, folder, seed, seed, options), _p(folder, five))
    mean_served = loss(torch.stack(same).mean(0))
    row(f"mean of {fits} (vs mean of {fits} served)", "-", torch.stack(grown).mean(0), mean_served)
    default = TaskOptions()
    _fit(four, root / "served5", seed, seed, default)
    steps = _fit(five, root / "afresh5", seed, seed, default)
    row("members=5 (vs served members=5)", steps, _p(root / "afresh5", five),
        loss(_p(root / "served5", five)))  # fmt: skip
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--records", type=int, default=900, help="each agent's pool")
    parser.add_argument("--fits", type=int, default=5)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    rows = [r for s in args.seeds.split(",") for r in suspects(int(s), args.records, args.fits)]
    print(
        "| seed | model | steps | known agents' log-loss - served's | "
        + " | ".join(AGENTS[:4])
        + " |\n| --- | --- | --- | --- |"
        + " --- |" * 4
    )
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
