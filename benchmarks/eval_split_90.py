"""A run's ``eval`` phase split into the held-out forward and the rest (issue 90 item 3).

The ``eval`` phase (``WorldModelTask.eval_seconds``) is every ``validate()`` during
training and the final ``evaluate()``. For each pool size it trains a pool as a run does
(``SEDarwinPlugin.train``, fp32, one thread, ``--steps``) and counts, by wrapping the
task's methods in this process, the CPU seconds (``time.process_time``: a shared host's
other work is not counted) of: the held-out forward (``_predict`` on the held-out part:
the one part of eval that must grow with the pool), the validations' forwards, the
metrics of each part (AUC, Brier, the losses) and the digest of the evaluated weights.
Run it under each tree (``PYTHONPATH``) to compare them.

- ``--work``: ``run_anatomy.py``'s data (``<work>/data-<P>-<new>``, its first and its
  new records together: the pool of the daemon's measured later run); without it, a
  generated se_darwin pool of P records (``generate_sample_data``, seed 0).
- ``--repeats``: that many runs of each pool; every part's figure is the median of them.
- **the floor**, after each run, in the same process: the candidate's forward alone over
  the held-out rows (``forward_chunked``, the run's evaluated model, eval mode, no grad),
  and the whole held-out evaluation (``_measure``: forward, digest, metrics), each the
  median of ``--floor-repeats`` calls; and the forward's parts, each of the ensemble's
  layers called alone on its input of one chunk (``predict.chunk_rows``, as
  ``forward_chunked`` cuts it), times the chunks, with the three heads as one batched
  matmul (what fusing them would save, and whether its logits would be the same bits here).

    python benchmarks/eval_split_90.py --pools 10000,100000 --steps 200 \\
        --work /tmp/anatomy-work --repeats 3
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from genesis_fp16.plugin_api import PrecisionRequest, TrainRequest
from genesis_fp16_agents.se_darwin.plugin import SEDarwinPlugin
from genesis_fp16_infrastructure.recipes.retrain import task as task_module
from genesis_fp16_infrastructure.world_model import predict

SPENT: dict[str, list[float]] = {}  # name: [calls, CPU seconds]
EVALUATED: dict[str, Any] = {}  # the last held-out evaluation's task, model and part


def _counted(name: Callable[..., str], call: Callable[..., Any]) -> Callable[..., Any]:
    def counted(*args: Any) -> Any:
        started = time.process_time()
        try:
            return call(*args)
        finally:
            entry = SPENT.setdefault(name(*args), [0, 0.0])
            entry[0] += 1
            entry[1] += time.process_time() - started

    return counted


def _wrap() -> None:
    task = task_module.WorldModelTask

    def forward_name(self: Any, model: Any, data: Any) -> str:
        return "held-out forward" if data is self.eval_data else "validation forwards"

    def metrics_name(out: Any, data: Any) -> str:
        return "held-out metrics" if len(data) == EVALUATED.get("rows") else "validation metrics"

    measure = task._measure

    def measured(self: Any, model: Any, data: Any) -> Any:
        if data is self.eval_data:
            EVALUATED.update(task=self, model=model, data=data, rows=len(data))
        return measure(self, model, data)

    task._predict = _counted(forward_name, task._predict)  # type: ignore[method-assign]
    task_module._metrics = _counted(metrics_name, task_module._metrics)
    task_module.weights_digest = _counted(
        lambda model: "weights digest", task_module.weights_digest
    )
    task._measure = _counted(lambda *args: "eval (all)", measured)  # type: ignore[method-assign]


def _median_ms(work: Callable[[], Any], repeats: int) -> float:
    spent = []
    for _ in range(repeats):
        started = time.process_time()
        work()
        spent.append(time.process_time() - started)
    return statistics.median(spent) * 1000


def _floor(repeats: int) -> dict[str, float]:
    """The held-out forward alone and the whole held-out evaluation, in this process,
    with the run's evaluated model; the forward's parts on one chunk, times the chunks."""
    task, model, data = EVALUATED["task"], EVALUATED["model"], EVALUATED["data"]
    model.eval()
    out: dict[str, float] = {}
    with torch.no_grad():
        out["floor: held-out forward alone"] = _median_ms(
            lambda: predict.forward_chunked(model, data.x), repeats
        )
        spent = task.eval_seconds
        out["floor: held-out evaluation (_measure)"] = _median_ms(
            lambda: task._measure(model, data), repeats
        )
        task.eval_seconds = spent
        out.update(_forward_parts(model, data.x, repeats))
    return out


def _forward_parts(model: Any, x: torch.Tensor, repeats: int) -> dict[str, float]:
    """Each layer of an ensemble called alone on its input of one chunk, median ms times
    the chunks; and the three heads as one batched matmul, with whether its logits equal
    the three heads' bit for bit (an ensemble's: a single network has no stacked layers)."""
    config = model.config
    if config.members < 2:
        return {}
    rows = predict.chunk_rows(config.members * config.hidden, x.device)  # forward_chunked's
    chunks = -(-len(x) // rows)
    h = x[:rows].expand(config.members, *x[:rows].shape)
    out: dict[str, float] = {}
    for layer in model.trunk:
        name = f"part: trunk {_kind(layer)}"
        spent = _median_ms(lambda layer=layer, h=h: layer(h), repeats) * chunks
        out[name] = out.get(name, 0.0) + spent
        h = layer(h)
    heads = (model.success_head, model.score_head, model.outcome_head)
    out["part: three heads"] = _median_ms(lambda: [head(h) for head in heads], repeats) * chunks
    weight = torch.cat([head.weight for head in heads], dim=1).transpose(1, 2)
    bias = torch.cat([head.bias for head in heads], dim=1).unsqueeze(1)
    out["part: heads as one matmul"] = (
        _median_ms(lambda: torch.baddbmm(bias, h, weight), repeats) * chunks
    )
    fused = torch.baddbmm(bias, h, weight)
    apart = torch.cat([head(h) for head in heads], dim=-1)
    out["heads as one matmul: the same bits here (1: yes, 0: no)"] = float(
        torch.equal(fused, apart)
    )
    return out


def _kind(layer: Any) -> str:
    """A stacked trunk layer's kind: its members' Linear or LayerNorm, or the layer's name."""
    if type(layer).__name__ != "_Stacked":
        return type(layer).__name__
    return "Linear (batched matmul)" if layer.eps is None else "LayerNorm (and its affine)"


def _pool(tmp: Path, size: int, work: Path | None, new: int) -> Path:
    if work is None:
        return SEDarwinPlugin().generate_sample_data(tmp / f"pool-{size}", size, 0)
    folder = work / f"data-{size}-{new}"
    if not folder.is_dir():
        raise SystemExit(f"--work {work}: no {folder.name} (run_anatomy.py writes it)")
    return folder


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pools", default="10000,100000")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--work", type=Path, help="run_anatomy.py's data folder")
    parser.add_argument("--new", type=int, default=1000, help="the new records in --work")
    parser.add_argument("--repeats", type=int, default=1, help="runs of each pool")
    parser.add_argument("--floor-repeats", type=int, default=9)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    _wrap()
    print(f"load average before: {Path('/proc/loadavg').read_text().strip()}")
    print(f"| pool | part | calls | CPU ms, median of {args.repeats} run(s) | each run |")
    print("| --- | --- | --- | --- | --- |")
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        for size in (int(p) for p in args.pools.split(",")):
            pool = _pool(tmp, size, args.work, args.new)
            runs: dict[str, list[float]] = {}
            calls: dict[str, float] = {}
            for run in range(args.repeats):
                SPENT.clear()
                EVALUATED.clear()
                request = TrainRequest(
                    agent="se_darwin",
                    precision=PrecisionRequest("fp32"),
                    precision_reason="eval split benchmark",
                    state_dir=tmp,
                    checkpoint_dir=tmp / f"run-{size}-{run}",
                    data_path=pool,
                    seed=0,
                    resume=False,
                    steps=args.steps,
                )
                SEDarwinPlugin().train(request)
                spent = {part: seconds * 1000 for part, (_, seconds) in SPENT.items()}
                calls.update({part: count for part, (count, _) in SPENT.items()})
                spent["**the rest** (eval less the held-out forward)"] = (
                    spent["eval (all)"] - spent["held-out forward"]
                )
                spent.update(_floor(args.floor_repeats))
                for part, ms in spent.items():
                    runs.setdefault(part, []).append(ms)
            for part, each in runs.items():
                count = f"{calls[part]:.0f}" if part in calls else ""
                listed = ", ".join(f"{ms:.1f}" for ms in each)
                print(f"| {size:,} | {part} | {count} | {statistics.median(each):.1f} | {listed} |")
            sys.stdout.flush()
    print(f"load average after: {Path('/proc/loadavg').read_text().strip()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
