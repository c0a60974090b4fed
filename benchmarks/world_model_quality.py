"""How well the SE-Darwin world model ranks attempts at its defaults, against the best the
features allow, on generated pools of 500, 5,000 and 20,000 records.

    python benchmarks/world_model_quality.py [--sizes 500,5000,20000] [--seeds 10,3,1]
        [--precisions fp32,bf16,fp16]

For each pool size and each of its seeds (pools generated with that seed, split with it):
`SEDarwinPlugin.train` at its defaults (early stopping, sized splits, the sized model) in
each precision on the CPU (one thread), and the reference "what these features allow":
an L2-regularised logistic regression (LBFGS) on the same encoded features, **out of
fold** (5 folds by a hash of the id over the whole pool; the strength is the best of five
by out-of-fold AUC, which flatters the reference). The gap is paired: the model's
held-out AUC minus the reference's out-of-fold AUC on the same held-out records. A
500-record pool holds out 150 records (its AUC's 95% interval is about +-0.07), so small
pools take several seeds and the table gives the mean gap and its standard error.
Writes a Markdown table to stdout.

    python benchmarks/world_model_quality.py --merged-agents 500,2000

instead measures what the per-agent base rate adds where pools of several agents are
merged (se_darwin, qa and builder pools of N records each, seeds 0, 1, 2, read as one
folder): the out-of-fold logistic AUC on the encoded features with and without it.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import statistics
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from agents.se_darwin.plugin import SEDarwinPlugin
from agents.se_darwin.task import SEDarwinTask, TaskOptions
from infrastructure.data.readers import ReadResult, read_trajectories
from infrastructure.data.synthetic import write_pool
from infrastructure.plugin_api import TrainRequest, TrainResult
from infrastructure.world_model.metrics import auc

L2_GRID = (1e-4, 1e-3, 1e-2, 3e-2, 1e-1)
FOLDS = 5


@dataclass(frozen=True)
class Reference:
    pool_auc: float  # out-of-fold AUC over the whole pool
    held_out_auc: float  # out-of-fold AUC over the run's held-out records
    l2: float


def _logistic(x: torch.Tensor, y: torch.Tensor, l2: float) -> tuple[torch.Tensor, torch.Tensor]:
    w = torch.zeros(x.shape[1], dtype=torch.double, requires_grad=True)
    b = torch.zeros((), dtype=torch.double, requires_grad=True)
    opt = torch.optim.LBFGS([w, b], max_iter=200, line_search_fn="strong_wolfe")

    def closure() -> torch.Tensor:
        opt.zero_grad()
        loss = torch.nn.functional.binary_cross_entropy_with_logits(x @ w + b, y)
        loss = loss + l2 * w.pow(2).sum()
        loss.backward()
        return loss

    opt.step(closure)
    return w.detach(), b.detach()


def _fold(trajectory_id: str) -> int:
    digest = hashlib.blake2b(f"fold:{trajectory_id}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") % FOLDS


def _out_of_fold_logits(
    x: torch.Tensor, y: torch.Tensor, fold: torch.Tensor, l2: float
) -> torch.Tensor:
    """Each row's logit from a regression fitted on the other folds (standardised there)."""
    logits = torch.empty(len(y), dtype=torch.double)
    for k in range(FOLDS):
        fit_on = fold != k
        mean, std = x[fit_on].mean(0), x[fit_on].std(0).clamp_min(1e-6)
        w, b = _logistic((x[fit_on] - mean) / std, y[fit_on], l2)
        logits[~fit_on] = ((x[~fit_on] - mean) / std) @ w + b
    return logits


def logistic_reference(task: SEDarwinTask, data: ReadResult) -> Reference:
    """Out-of-fold logistic regression on the task's encoded features of the whole pool."""
    examples = data.examples
    x = task.encoder.encode([e.attempt for e in examples], task.pool).double()
    y = torch.tensor([float(e.label.success) for e in examples], dtype=torch.double)
    fold = torch.tensor([_fold(e.trajectory_id) for e in examples])
    held_ids = {e.trajectory_id for e in task.split.held_out}
    held = torch.tensor([e.trajectory_id in held_ids for e in examples])
    best: Reference | None = None
    for l2 in L2_GRID:
        logits = _out_of_fold_logits(x, y, fold, l2)
        pool_auc = auc(logits, y)
        if best is None or pool_auc > best.pool_auc:
            best = Reference(pool_auc, auc(logits[held], y[held]), l2)
    assert best is not None
    return best


def _out_of_fold_auc(x: torch.Tensor, y: torch.Tensor, fold: torch.Tensor) -> float:
    return max(auc(_out_of_fold_logits(x, y, fold, l2), y) for l2 in L2_GRID)


def merged_agents_gain(per_agent: int) -> tuple[float, float]:
    """(OOF AUC with the agent base rate, without it) on three merged agents' pools."""
    with tempfile.TemporaryDirectory() as tmp:
        for seed, agent in enumerate(("se_darwin", "qa", "builder")):
            write_pool(Path(tmp), per_agent, seed=seed, agent=agent)
        data = read_trajectories(Path(tmp) / "trajectory_pools")
        task = SEDarwinTask(data, TaskOptions(), 0)
    examples = data.examples
    x = task.encoder.encode([e.attempt for e in examples], task.pool).double()
    y = torch.tensor([float(e.label.success) for e in examples], dtype=torch.double)
    fold = torch.tensor([_fold(e.trajectory_id) for e in examples])
    # The agent's base rate is the encoder's last column.
    return _out_of_fold_auc(x, y, fold), _out_of_fold_auc(x[:, :-1], y, fold)


def _train(
    plugin: SEDarwinPlugin,
    data: Path,
    tmp: Path,
    precision: str,
    seed: int,
    options: Mapping[str, Any],
) -> TrainResult:
    return plugin.train(
        TrainRequest(
            agent="se_darwin",
            precision=precision,
            precision_reason="quality benchmark",
            state_dir=tmp,
            checkpoint_dir=tmp / f"ckpt-{precision}",
            data_path=data,
            seed=seed,
            resume=False,
            options=options,
        )
    )


@dataclass(frozen=True)
class Run:
    held_out: int
    auc: float
    low: float
    high: float
    reference: Reference
    best_step: int
    steps: int
    seconds: float


def measure(
    size: int, seed: int, precisions: Sequence[str], options: Mapping[str, Any]
) -> dict[str, Run]:
    """One pool: the reference once, then a default run per precision."""
    out: dict[str, Run] = {}
    with tempfile.TemporaryDirectory() as tmp:
        plugin = SEDarwinPlugin()
        path = plugin.generate_sample_data(Path(tmp), size, seed)
        data = read_trajectories(path)
        reference = logistic_reference(SEDarwinTask(data, TaskOptions(), seed), data)
        for precision in precisions:
            started = time.monotonic()
            result = _train(plugin, path, Path(tmp), precision, seed, options)
            ev, early = result.eval, result.extra["early_stop"]
            out[precision] = Run(
                int(ev["examples"]),
                ev["auc"],
                ev["auc_ci_low"],
                ev["auc_ci_high"],
                reference,
                early["best_step"],
                result.steps,
                time.monotonic() - started,
            )
    return out


def _row(size: int, precision: str, runs: Sequence[Run]) -> str:
    gaps = [r.auc - r.reference.held_out_auc for r in runs]
    gap_se = statistics.stdev(gaps) / math.sqrt(len(gaps)) if len(gaps) > 1 else math.nan
    first = runs[0]
    mean = statistics.fmean
    return (
        f"| {size} | {len(runs)} | {precision} | {mean(r.held_out for r in runs):.0f} | "
        f"{mean(r.auc for r in runs):.3f} | {first.auc:.3f} [{first.low:.3f}, {first.high:.3f}] | "
        f"{mean(r.reference.held_out_auc for r in runs):.3f} | "
        f"{mean(gaps):+.3f} | {'' if math.isnan(gap_se) else f'{gap_se:.4f}'} | "
        f"{mean(r.reference.pool_auc for r in runs):.3f} | "
        f"{mean(r.best_step for r in runs):.0f} / {mean(r.steps for r in runs):.0f} | "
        f"{mean(r.seconds for r in runs):.1f} |"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="500,5000,20000")
    parser.add_argument("--seeds", default="10,3,1", help="pools (seeds 0..N-1) per size")
    parser.add_argument("--precisions", default="fp32,bf16,fp16")
    parser.add_argument("--options", default="{}", help="se_darwin options as JSON (not defaults)")
    parser.add_argument("--merged-agents", help="records per agent, e.g. 500,2000")
    args = parser.parse_args(argv)
    options = json.loads(args.options)
    torch.set_num_threads(1)
    if args.merged_agents:
        print("| records (3 agents) | logistic OOF, with agent base rate | without |")
        print("| --- | --- | --- |")
        for per_agent in (int(n) for n in args.merged_agents.split(",")):
            with_rate, without = merged_agents_gain(per_agent)
            print(f"| {3 * per_agent} | {with_rate:.3f} | {without:.3f} |", flush=True)
        return 0
    sizes = [int(s) for s in args.sizes.split(",")]
    seeds = [int(s) for s in args.seeds.split(",")]
    if len(seeds) != len(sizes):
        parser.error(f"--seeds {args.seeds!r} needs one count per size ({args.sizes!r})")
    precisions = args.precisions.split(",")
    print(
        "| records | pools | precision | held-out | AUC | seed 0: AUC [95% interval] | "
        "logistic OOF, same records | gap | gap s.e. | logistic OOF, pool | "
        "best step / steps | seconds |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for size, count in zip(sizes, seeds, strict=True):
        runs = [measure(size, seed, precisions, options) for seed in range(count)]
        for precision in precisions:
            print(_row(size, precision, [r[precision] for r in runs]), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
