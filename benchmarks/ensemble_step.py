"""One training step of SE-Darwin's 5-member ensemble against one network's, on the CPU.

A step is forward, backward and a fused AdamW step, eager, as the trainer runs it (the
loss scaler left out: fp32 and bf16 need none). Three models at the shapes and batch size
se_darwin picks for a generated pool (2,000 records by default, the daemon's sample
size: cross-validated, 5 folds, hidden 32, batch 250):

- ``single``: one WorldModel, the plain loss;
- ``loop``: before: the ensemble's earlier layout (one WorldModel per member, run one
  after another) and the cross-validated loss as it was (each member's in turn), both
  kept here as the reference;
- ``stacked``: after: ``WorldModelEnsemble`` (stacked weights, one batched matmul per
  layer) and ``WorldModelTask.loss`` (every member's loss in one pass).

Runs are interleaved (each round times every model in turn), so a machine shared with
other work slows them alike. The table gives each model's median ms per step over the
rounds and their spread (min-max), in wall time and in this thread's CPU time (one torch
thread: the CPU time leaves out what other processes took), the ratios of the medians to
``single`` and to ``loop``, and the aten ops one step dispatches (forward, backward and
optimizer: about the kernels a GPU would launch)::

    python benchmarks/ensemble_step.py --rounds 15 --steps 20 --out benchmarks/results/x.md
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

from genesis_fp16_agents.se_darwin import plugin
from genesis_fp16_infrastructure.data.readers import read_trajectories
from genesis_fp16_infrastructure.recipes.retrain.options import TaskOptions
from genesis_fp16_infrastructure.recipes.retrain.task import WorldModelTask
from genesis_fp16_infrastructure.world_model.model import (
    ModelConfig,
    WorldModel,
    WorldModelEnsemble,
    WorldModelOutput,
    world_model_losses,
)

MODELS = ("single", "loop", "stacked")
DTYPES = {"fp32": None, "bf16": torch.bfloat16}


class LoopEnsemble(nn.Module):
    """The ensemble before stacking (up to commit b5ee647): members run one after another;
    state-dict keys ``members.K.<WorldModel key>``. The tests use it as the reference."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.config = config
        one = replace(config, members=1)
        self.members = nn.ModuleList(WorldModel(one) for _ in range(config.members))

    def forward(self, x: torch.Tensor, per_member: bool = False) -> WorldModelOutput:
        outputs = [member(x) for member in self.members]
        stacked = (torch.stack(parts) for parts in zip(*outputs, strict=True))
        if per_member:
            return WorldModelOutput(*stacked)
        return WorldModelOutput(*(parts.mean(0) for parts in stacked))


def loop_loss(
    model: nn.Module,
    x: torch.Tensor,
    labels: tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor],
    fold: torch.Tensor,
    members: int,
) -> torch.Tensor:
    """WorldModelTask.loss before stacking: each member's loss on its other folds, in turn."""
    out: WorldModelOutput = model(x, per_member=True)
    total = torch.zeros((), device=x.device)
    for k in range(members):
        own = WorldModelOutput(*(part[k] for part in out))
        total = total + world_model_losses(own, *labels, weight=fold != k).total
    return total


class _CountOps(TorchDispatchMode):
    """Counts the aten ops dispatched while active (forward, backward and optimizer)."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        self.count += 1
        return func(*args, **(kwargs or {}))


def _task(records: int, seed: int) -> WorldModelTask:
    with tempfile.TemporaryDirectory() as folder:
        path = plugin.generate_sample_data(Path(folder), records, seed=seed)
        return WorldModelTask(read_trajectories(path), TaskOptions(), seed)


def _step_fn(name: str, task: WorldModelTask, dtype: torch.dtype | None) -> Callable[[], None]:
    """One training step of model ``name`` on the task's first batch, as a closure."""
    torch.manual_seed(0)  # every ensemble starts from the same weights
    config = task.config
    model: nn.Module
    if name == "single":
        model = WorldModel(replace(config, members=1))
    else:
        model = LoopEnsemble(config) if name == "loop" else WorldModelEnsemble(config)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)
    batch = next(iter(task.train_batches(0, 0)))[0]
    labels = (batch.success, batch.score, batch.score_known, batch.outcome)

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=dtype or torch.float32, enabled=dtype is not None):
            if name == "single":
                loss = world_model_losses(model(batch.x), *labels).total
            elif name == "loop":
                loss = loop_loss(model, batch.x, labels, batch.fold, config.members)
            else:
                loss = task.loss(model, batch)
        loss.backward()
        optimizer.step()

    return step


def _ops(step: Callable[[], None]) -> int:
    with _CountOps() as counter:
        step()
    return counter.count


def measure(task: WorldModelTask, rounds: int, steps: int, warmup: int) -> list[dict[str, Any]]:
    """Per precision and model: wall and CPU ms per step in each round, interleaved, and
    the ops of one step. The CPU time is this thread's (``time.thread_time``): with one
    torch thread every kernel runs on it, so it leaves out the time other work on a
    shared machine took from it, which the wall time does not."""
    rows = []
    for precision, dtype in DTYPES.items():
        fns = {name: _step_fn(name, task, dtype) for name in MODELS}
        ops = {name: _ops(fn) for name, fn in fns.items()}
        for fn in fns.values():
            for _ in range(warmup):
                fn()
        wall: dict[str, list[float]] = {name: [] for name in MODELS}
        cpu: dict[str, list[float]] = {name: [] for name in MODELS}
        for _ in range(rounds):
            for name, fn in fns.items():
                started, cpu_started = time.perf_counter(), time.thread_time()
                for _ in range(steps):
                    fn()
                wall[name].append((time.perf_counter() - started) * 1e3 / steps)
                cpu[name].append((time.thread_time() - cpu_started) * 1e3 / steps)
        for name in MODELS:
            rows.append(
                {
                    "precision": precision,
                    "model": name,
                    "wall": wall[name],
                    "cpu": cpu[name],
                    "ops": ops[name],
                }
            )
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| precision | model | wall ms/step, median (min-max) | CPU ms/step, median (min-max) "
        "| vs single, wall / CPU | vs loop, wall / CPU | aten ops/step |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    med = {
        (r["precision"], r["model"], kind): statistics.median(r[kind])
        for r in rows
        for kind in ("wall", "cpu")
    }

    def ratio(r: dict[str, Any], base: str) -> str:
        return " / ".join(
            f"{med[(r['precision'], r['model'], k)] / med[(r['precision'], base, k)]:.2f}"
            for k in ("wall", "cpu")
        )

    for r in rows:
        spans = [
            f"{med[(r['precision'], r['model'], k)]:.2f} ({min(r[k]):.2f}-{max(r[k]):.2f})"
            for k in ("wall", "cpu")
        ]
        lines.append(
            f"| {r['precision']} | {r['model']} | {spans[0]} | {spans[1]} "
            f"| {ratio(r, 'single')} | {ratio(r, 'loop')} | {r['ops']} |"
        )
    return "\n".join(lines)


def _cpu_name() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown CPU"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=2000, help="generated pool size")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--steps", type=int, default=20, help="steps timed per round")
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--threads", type=int, default=1, help="torch.set_num_threads")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", type=Path, help="also write the table here")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    task = _task(args.records, args.seed)
    config, batch = task.config, task.batch_size
    header = (
        f"{_cpu_name()}, {len(os.sched_getaffinity(0))} cores visible, "
        f"{torch.get_num_threads()} torch thread(s), torch {torch.__version__}; "
        f"{args.records} records: {config.members} members, in {config.in_features}, "
        f"hidden {config.hidden}, depth {config.depth}, batch {batch}; "
        f"{args.rounds} rounds of {args.steps} steps after {args.warmup} warm-up steps"
    )
    text = f"{header}\n\n{table(measure(task, args.rounds, args.steps, args.warmup))}\n"
    print(text)
    if args.out is not None:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
