"""The scorings' view of a daemon's later run (``KeptNumeric.view`` of the grown pool),
this tree's against another's, in one process (issue 90 item 2).

``--data`` is a folder ``run_anatomy.py --work`` leaves (``data-<pool>-<new>``:
``old/data/pool-99.json``, ``new/data/pool-3099.json``). The old pool is read once;
each repeat, as a resident run process has it: the old columns with room to grow
(``pool_columns.roomy``, as the record cache keeps them), their numeric rows worked out
and kept (the first run's encode, a fresh ``KeptInMemory``), the pool grown by the new
file's records (``pool_extend.extended``, the later read), then timed: the first view
(the live watch's scoring: what grows), the second (the gate's), and the run's encode's
``rows``. Thread CPU milliseconds, the trees interleaved repeat by repeat; the rows and
stamps' shapes, and the rows' bits, are asserted equal between the trees::

    python benchmarks/view38_view_ab.py --data WORK/data-100000-1000 --against ../base --repeats 15
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
from other_tree import other_modules

from genesis_fp16_infrastructure.data.pool_columns import roomy
from genesis_fp16_infrastructure.data.pool_extend import extended
from genesis_fp16_infrastructure.data.quarantine import QuarantineSink
from genesis_fp16_infrastructure.data.readers import _file_records, read_trajectories
from genesis_fp16_infrastructure.kept_in_memory import KeptInMemory
from genesis_fp16_infrastructure.world_model import kept_numeric as _kept  # noqa: F401

_PACKAGE = "genesis_fp16_infrastructure"
# What the other tree's view is made of (every other module is this tree's).
SWAPPED = (
    "world_model.lineage_columns",
    "world_model.content_keys",
    "world_model.kept_numeric_columns",
    "world_model.kept_numeric_change",
    "world_model.kept_numeric",
)


def one_repeat(numeric: ModuleType, old: Any, block: Any, data: Path, cache: Path) -> tuple:
    """CPU ms of the first view, the second, and the encode's rows of the grown pool;
    the first view's rows."""
    memory = KeptInMemory(2048 * 2**20)
    base = roomy(old)
    numeric.KeptNumeric(cache, data, memory).rows(base)  # the first run's encode
    grown = extended(base, [block])
    assert grown is not None
    columns = grown[0]
    gc.collect()
    figures = []
    for what in ("view", "view", "rows"):
        kept = numeric.KeptNumeric(cache, data, memory)
        start = time.thread_time()
        out = getattr(kept, what)(columns)
        figures.append((time.thread_time() - start) * 1e3)
        if not figures[1:]:
            first = out
    return (*figures, first)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, required=True, help="run_anatomy's data-P-N")
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--against", type=Path, help="another tree, timed interleaved")
    args = parser.parse_args()
    this = {name: sys.modules[f"{_PACKAGE}.{name}"] for name in SWAPPED}
    trees = {"this": this}
    if args.against is not None:
        trees = {"other": other_modules(args.against, SWAPPED), "this": this}
    old = read_trajectories(args.data / "old" / "data", keep_text=False).columns
    new_file = args.data / "new" / "data" / "pool-3099.json"
    block = _file_records(new_file, QuarantineSink(None), None, False)
    spent: dict[str, dict[str, list[float]]] = {
        k: {"view1": [], "view2": [], "rows": []} for k in trees
    }
    with tempfile.TemporaryDirectory() as tmp:
        for k in range(args.repeats):
            names = list(trees) if k % 2 == 0 else list(reversed(trees))
            seen = {}
            for name in names:
                cache = Path(tmp) / f"cache-{name}-{k}"
                cache.mkdir()
                module = trees[name]["world_model.kept_numeric"]
                *figures, first = one_repeat(module, old, block, args.data, cache)
                seen[name] = first
                for what, value in zip(spent[name], figures, strict=True):
                    spent[name][what].append(value)
            if len(seen) == 2:
                a, b = seen.values()
                assert np.array_equal(a.numeric, b.numeric) and a.stamp.shape == b.stamp.shape
    out: dict[str, Any] = {"records": len(old) + len(block.trajectory_id)}
    for name, pieces in spent.items():
        out[name] = {
            f"{what}_cpu_ms": [round(statistics.median(v), 3),
                               round(float(np.percentile(v, 25)), 3),
                               round(float(np.percentile(v, 75)), 3)]
            for what, v in pieces.items()
        }  # fmt: skip
    print(json.dumps(out))


if __name__ == "__main__":
    main()
