"""A run's ``eval`` phase split into the held-out forward and the rest (issue 90 item 3).

The ``eval`` phase (``WorldModelTask.eval_seconds``) is every ``validate()`` during
training and the final ``evaluate()``. For each pool size it writes a generated se_darwin
pool (``generate_sample_data``, seed 0), trains it as a run does (``SEDarwinPlugin.train``,
fp32, one thread, ``--steps``) and counts, by wrapping the task's methods in this
process, the CPU seconds (``time.process_time``: a shared host's other work is not
counted) of: the held-out forward (``_predict`` on the held-out part: the one part of
eval that must grow with the pool), the validations' forwards, the metrics of each part
(AUC, Brier, the losses) and the digest of the evaluated weights. Run it under each tree
(``PYTHONPATH``) to compare them.

    python benchmarks/eval_split_90.py --pools 10000,100000 --steps 200
"""

from __future__ import annotations

import argparse
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

SPENT: dict[str, list[float]] = {}  # name: [calls, CPU seconds]


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
        return f"metrics of {len(data):,} records"

    task._predict = _counted(forward_name, task._predict)  # type: ignore[method-assign]
    task_module._metrics = _counted(metrics_name, task_module._metrics)
    task_module.weights_digest = _counted(
        lambda model: "weights digest", task_module.weights_digest
    )
    task._measure = _counted(lambda *args: "eval (all)", task._measure)  # type: ignore[method-assign]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pools", default="10000,100000")
    parser.add_argument("--steps", type=int, default=200)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    _wrap()
    print(f"load average before: {Path('/proc/loadavg').read_text().strip()}")
    print("| pool | part | calls | CPU ms |")
    print("| --- | --- | --- | --- |")
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        for size in (int(p) for p in args.pools.split(",")):
            pool = SEDarwinPlugin().generate_sample_data(tmp / f"pool-{size}", size, 0)
            SPENT.clear()
            request = TrainRequest(
                agent="se_darwin",
                precision=PrecisionRequest("fp32"),
                precision_reason="eval split benchmark",
                state_dir=tmp,
                checkpoint_dir=tmp / f"run-{size}",
                data_path=pool,
                seed=0,
                resume=False,
                steps=args.steps,
            )
            SEDarwinPlugin().train(request)
            total = SPENT["eval (all)"][1]
            forward = SPENT["held-out forward"][1]
            for part, (calls, seconds) in SPENT.items():
                print(f"| {size:,} | {part} | {calls:.0f} | {seconds * 1000:.1f} |")
            print(
                f"| {size:,} | **the rest** (all less the held-out forward) | | "
                f"**{(total - forward) * 1000:.1f}** |",
                flush=True,
            )
    print(f"load average after: {Path('/proc/loadavg').read_text().strip()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
