"""A later run's ``encode`` in this process, as a resident run process does it after a
first model: the thread's CPU milliseconds of ``WorldModelTask(...)`` on the grown pool,
and of gathering the training batches of a 200-step run (``train_batches``).

Issue 90 item 2. ``--data`` is a folder ``run_anatomy.py --work`` leaves
(``data-<pool>-<new>``: ``old/data/pool-99.json`` and ``new/data/pool-3099.json``). Each
repeat starts a fresh store (``KeptInMemory``), builds the first task on the old pool
(its rows kept, as the first run keeps them), lets the scorings' view take the grown pool
(the new file sorting last: ``zz-pool-3099.json``, as ``--new-after``), then times the
task on the grown pool: with the first task's state as the served model's where the tree
takes one (``served=``, ``change=``: ``recipes.retrain.encoder_choice``), else as the
tree does it (a fit). Run it under each tree's ``PYTHONPATH``, back to back:

    PYTHONPATH=<tree>:<tree>/agents:<tree>/infrastructure \\
        python benchmarks/later_encode_cost.py --data WORK/data-100000-1000 --repeats 7

``--against OTHER_TREE`` times, in the same process and interleaved repeat by repeat,
the other tree's task, split, encoder choice, kept encoded rows, kept numeric rows,
content keys and lineage columns (``SWAPPED``, loaded under other names; every other
module is this tree's) against this tree's, on the same pools: the medians of each, old
against new, with nothing between them but those files. ``view`` is the scorings' read
of the grown pool's numeric rows (where it grows).
"""

from __future__ import annotations

import argparse
import gc
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from other_tree import other_modules

from genesis_fp16_infrastructure.data.fingerprint import compare
from genesis_fp16_infrastructure.data.readers import ReadResult, read_trajectories
from genesis_fp16_infrastructure.kept_in_memory import KeptInMemory
from genesis_fp16_infrastructure.recipes.retrain import task as _task  # noqa: F401 (SWAPPED)
from genesis_fp16_infrastructure.recipes.retrain.options import TaskOptions

SEED = 3
STEPS = 200  # the batches a run anatomy's later run trains on
_PACKAGE = "genesis_fp16_infrastructure"


# What ``--against`` loads from the other tree (the rest is this tree's, shared).
SWAPPED = (
    "world_model.lineage_columns",
    "world_model.content_keys",
    "world_model.kept_numeric_change",
    "world_model.kept_numeric",
    "world_model.kept_encoded",
    "recipes.retrain.split",
    "recipes.retrain.encoder_choice",
    "recipes.retrain.task",
)


def one_repeat(
    modules: dict[str, Any], old: ReadResult, new: ReadResult, data: Path, cache: Path
) -> tuple[float, float, float, str]:
    """CPU ms of the scorings' view of the grown pool's numeric rows, of the later task,
    then of its 200 steps' batches; how its encoder came."""
    module, numeric = modules["recipes.retrain.task"], modules["world_model.kept_numeric"]
    options = TaskOptions.from_mapping({})
    memory = KeptInMemory(1024 * 2**20)
    kept = numeric.KeptNumeric(cache, data, memory)
    first = module.WorldModelTask(old, options, SEED, kept=kept)
    served = first.extra_state()
    del first  # the run before has ended: its parts are not lent any more
    gc.collect()
    start = time.thread_time()
    numeric.KeptNumeric(cache, data, memory).view(new.columns)  # the scorings' read
    view = (time.thread_time() - start) * 1e3
    kept = numeric.KeptNumeric(cache, data, memory)
    change = compare(served["data"], new.fingerprint)
    start = time.thread_time()
    try:
        task = module.WorldModelTask(
            new, options, SEED, kept=kept, seen=new.fingerprint, served=served, change=change,
        )  # fmt: skip
    except TypeError:  # a tree before encoder_choice: it fits
        task = module.WorldModelTask(new, options, SEED, kept=kept, seen=new.fingerprint)
    encode = (time.thread_time() - start) * 1e3
    start = time.thread_time()
    steps = 0
    for epoch in range(STEPS):
        for _ in task.train_batches(epoch, SEED):
            steps += 1
            if steps == STEPS:
                break
        if steps == STEPS:
            break
    gather = (time.thread_time() - start) * 1e3
    how = getattr(task, "encoder_use", "fitted")
    del task
    gc.collect()
    return view, encode, gather, how


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, required=True, help="run_anatomy's data-P-N")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--against", type=Path, help="another tree, timed interleaved")
    args = parser.parse_args()
    torch.set_num_threads(1)
    this = {name: sys.modules[f"{_PACKAGE}.{name}"] for name in SWAPPED}
    trees = {"this": this}
    if args.against is not None:
        trees = {"other": other_modules(args.against, SWAPPED), "this": this}
    spent = {k: {"view": [], "encode": [], "gather": []} for k in trees}
    how = {}
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "data"
        data.mkdir()
        shutil.copy(args.data / "old" / "data" / "pool-99.json", data / "pool-99.json")
        old = read_trajectories(data, keep_text=False)
        shutil.copy(args.data / "new" / "data" / "pool-3099.json", data / "zz-pool-3099.json")
        new = read_trajectories(data, keep_text=False)
        for k in range(args.repeats):
            names = list(trees) if k % 2 == 0 else list(reversed(trees))
            for name in names:
                cache = Path(tmp) / f"cache-{name}-{k}"
                *figures, how[name] = one_repeat(trees[name], old, new, data, cache)
                for what, value in zip(spent[name], figures, strict=True):
                    spent[name][what].append(value)
    out: dict[str, Any] = {"records": new.labelled, "steps": STEPS}
    for name, figures in spent.items():
        out[name] = {"encoder": how[name]} | {
            f"{what}_cpu_ms_median": round(statistics.median(values), 1)
            for what, values in figures.items()
        }
        out[name] |= {f"{what}_cpu_ms": [round(v, 1) for v in vs] for what, vs in figures.items()}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
