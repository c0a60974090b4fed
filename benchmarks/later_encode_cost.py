"""A later run's ``encode`` in this process, as a resident run process does it after a
first model: the thread's CPU milliseconds of ``WorldModelTask(...)`` on the grown pool.

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
"""

from __future__ import annotations

import argparse
import gc
import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import torch

from genesis_fp16_infrastructure.data.fingerprint import compare
from genesis_fp16_infrastructure.data.readers import read_trajectories
from genesis_fp16_infrastructure.kept_in_memory import KeptInMemory
from genesis_fp16_infrastructure.recipes.retrain.options import TaskOptions
from genesis_fp16_infrastructure.recipes.retrain.task import WorldModelTask
from genesis_fp16_infrastructure.world_model.kept_numeric import KeptNumeric

SEED = 3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, required=True, help="run_anatomy's data-P-N")
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "data"
        data.mkdir()
        shutil.copy(args.data / "old" / "data" / "pool-99.json", data / "pool-99.json")
        old = read_trajectories(data, keep_text=False)
        shutil.copy(args.data / "new" / "data" / "pool-3099.json", data / "zz-pool-3099.json")
        new = read_trajectories(data, keep_text=False)
        options = TaskOptions.from_mapping({})
        spent, how = [], "fitted"
        for k in range(args.repeats):
            memory, cache = KeptInMemory(1024 * 2**20), Path(tmp) / f"cache-{k}"
            first = WorldModelTask(old, options, SEED, kept=KeptNumeric(cache, data, memory))
            served = first.extra_state()
            del first  # the run before has ended: its parts are not lent any more
            gc.collect()
            KeptNumeric(cache, data, memory).view(new.columns)  # the scorings' read
            kept = KeptNumeric(cache, data, memory)
            change = compare(served["data"], new.fingerprint)
            start = time.thread_time()
            try:
                task = WorldModelTask(
                    new, options, SEED, kept=kept, seen=new.fingerprint, served=served,
                    change=change,
                )  # fmt: skip
            except TypeError:  # a tree before encoder_choice: it fits
                task = WorldModelTask(new, options, SEED, kept=kept, seen=new.fingerprint)
            spent.append((time.thread_time() - start) * 1e3)
            how = getattr(task, "encoder_use", "fitted")
            del task
            gc.collect()
    print(
        json.dumps(
            {
                "records": new.labelled,
                "encoder": how,
                "encode_cpu_ms_median": round(statistics.median(spent), 1),
                "encode_cpu_ms": [round(s, 1) for s in spent],
            }
        )
    )


if __name__ == "__main__":
    main()
