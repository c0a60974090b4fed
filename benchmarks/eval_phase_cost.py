"""What a later run's ``eval`` phase costs, in this process, part by part.

Issue 90. The phase is ``WorldModelTask.eval_seconds``: each validation (early stopping's
yardstick, every ``min(steps_per_epoch, validate_every)`` steps) and the held-out
evaluation at the end, each a forward of the ensemble over its records
(``forward_chunked``) and its metrics (``task._metrics``). For a pool of P records with n
new, this builds the task on ``encode_phase_cost.py``'s data (``--data``: the same
folders, written if absent), then times, ``--repeats`` times, one forward and one
metrics call over each part, with a model of the task's shape (a forward's arithmetic
does not depend on its weights). Each figure is the thread's CPU seconds
(``time.thread_time``), the median of the repeats; ``eval_model`` is what a run of
``--steps`` steps spends by them: validations x (forward + metrics) + the held-out's.

    PYTHONPATH=<tree>:<tree>/agents:<tree>/infrastructure \\
        python benchmarks/eval_phase_cost.py --pool 100000 --new 1000 --repeats 7
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from genesis_fp16_infrastructure.data.readers import read_trajectories
from genesis_fp16_infrastructure.data.synthetic import write_pool
from genesis_fp16_infrastructure.recipes.retrain import task as task_module
from genesis_fp16_infrastructure.recipes.retrain.options import TaskOptions
from genesis_fp16_infrastructure.world_model.predict import forward_chunked


def _cpu(work: Callable[[], Any], repeats: int) -> float:
    """The median thread CPU seconds of ``work``."""
    spent = []
    for _ in range(repeats):
        start = time.thread_time()
        work()
        spent.append(time.thread_time() - start)
    return statistics.median(spent)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pool", type=int, default=100_000)
    parser.add_argument("--new", type=int, default=1_000)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--data", type=Path, help="the pools' folder, kept (written if absent)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    root = Path(tempfile.mkdtemp(prefix="eval-cost-"))
    data = args.data or root / "pools"
    try:
        grown = data / f"{args.pool}-{args.new}" / "grown"
        for seed, count in ((99, args.pool - args.new), (3099, args.new)):
            target = grown / f"pool-{seed}.json"
            if not target.exists():
                written = write_pool(root / "generated", count, seed)
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.move(written, target)
        pool = read_trajectories(grown, keep_text=False)
        task = task_module.WorldModelTask(pool, TaskOptions.from_mapping({}), 1)
        model = task.build_model().eval()
        every = min(task.steps_per_epoch, task.options.validate_every)
        figures: dict[str, Any] = {"validations": args.steps // every}
        with torch.no_grad():
            for name, part in (("validation", task.validation_data), ("held_out", task.eval_data)):
                out = forward_chunked(model, part.x)
                figures[f"{name}_rows"] = len(part)
                figures[f"{name}_forward"] = _cpu(
                    lambda p=part: forward_chunked(model, p.x), args.repeats
                )
                figures[f"{name}_metrics"] = _cpu(
                    lambda o=out, p=part: task_module._metrics(o, p), args.repeats
                )
        validation = figures["validation_forward"] + figures["validation_metrics"]
        held_out = figures["held_out_forward"] + figures["held_out_metrics"]
        figures["eval_model"] = figures["validations"] * validation + held_out
        rounded = {k: round(v, 4) if isinstance(v, float) else v for k, v in figures.items()}
        load = Path("/proc/loadavg").read_text().split()[:3]
        print(json.dumps({"pool": args.pool, "new": args.new, "load": load, **rounded}))
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
