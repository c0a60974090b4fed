"""What a later run's ``encode`` phase costs, in this process, section by section.

Issue 90 item 2. The phase is ``WorldModelTask(...)``: the kept numeric rows
(``world_model.kept_numeric``), the encoder's fit, its tables and each part's encode.
For a pool of P records, this writes ``run_anatomy.py``'s data (P - n records of seed 99,
then n of seed 3099, ``pool-<seed>.json``: the new file sorts first), reads both pools
once, then ``--repeats`` times: keeps the first pool's rows in a resident store (as the
run before and its scorings leave them) and times the task on the grown pool. Each
figure is the thread's CPU seconds (``time.thread_time``: a loaded host's waits left
out) and the wall seconds, medians of the repeats; the sections are the functions named.

    PYTHONPATH=<tree>:<tree>/agents:<tree>/infrastructure \\
        python benchmarks/encode_phase_cost.py --pool 100000 --new 1000 --repeats 5

Run it once per tree, back to back (the sections it names exist in both trees).
"""

from __future__ import annotations

import argparse
import functools
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
from genesis_fp16_infrastructure.kept_in_memory import KeptInMemory
from genesis_fp16_infrastructure.recipes.retrain import task as task_module
from genesis_fp16_infrastructure.recipes.retrain.options import TaskOptions
from genesis_fp16_infrastructure.world_model import features, kept_numeric

SECTIONS = (
    (kept_numeric.KeptNumeric, "rows"),
    (features.FeatureEncoder, "fit_parts"),
    (features.FeatureEncoder, "tables"),
    (features.FeatureEncoder, "encode_parts"),
    (task_module, "choose_split"),
)


def _timed(owner: Any, name: str, spent: dict[str, float]) -> None:
    real: Callable[..., Any] = getattr(owner, name)

    @functools.wraps(real)
    def timed(*args: Any, **kwargs: Any) -> Any:
        start = time.thread_time()
        try:
            return real(*args, **kwargs)
        finally:
            spent[name] = spent.get(name, 0.0) + time.thread_time() - start

    setattr(owner, name, timed)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pool", type=int, default=100_000)
    parser.add_argument("--new", type=int, default=1_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--data", type=Path, help="the pools' folder, kept (written if absent)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    root = Path(tempfile.mkdtemp(prefix="encode-cost-"))
    data = args.data or root / "pools"
    try:
        for folder, seed, count in (
            ("old", 99, args.pool - args.new),
            ("grown", 99, args.pool - args.new),
            ("grown", 3099, args.new),
        ):
            target = data / f"{args.pool}-{args.new}" / folder / f"pool-{seed}.json"
            if not target.exists():
                written = write_pool(root / "generated", count, seed)
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.move(written, target)
        old = read_trajectories(target.parents[1] / "old", keep_text=False)
        grown = read_trajectories(target.parent, keep_text=False)
        spent: dict[str, float] = {}
        for owner, name in SECTIONS:
            _timed(owner, name, spent)
        memory, options = KeptInMemory(512 * 2**20), TaskOptions.from_mapping({})
        figures: dict[str, list[float]] = {}
        for _ in range(args.repeats):
            kept_numeric.KeptNumeric(root / "cache", root / "data", memory).rows(old.columns)
            kept = kept_numeric.KeptNumeric(root / "cache", root / "data", memory)
            spent.clear()
            cpu, wall = time.thread_time(), time.perf_counter()
            task_module.WorldModelTask(grown, options, 1, kept=kept, seen=grown.fingerprint)
            spent["encode_cpu"] = time.thread_time() - cpu
            spent["encode_wall"] = time.perf_counter() - wall
            for name, seconds in spent.items():
                figures.setdefault(name, []).append(seconds)
        medians = {k: round(statistics.median(v), 4) for k, v in figures.items()}
        load = Path("/proc/loadavg").read_text().split()[:3]
        print(json.dumps({"pool": args.pool, "new": args.new, "load": load, **medians}))
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
