"""The drift report of a daemon's later runs, two trees' ``drift.py`` in one process,
interleaved (issue 90 item 3): what each run's report costs in CPU milliseconds given
what the resident run process kept from the run before.

For each ``--pools`` size P, on the anatomy's pool shape (P - ``--new`` records of seed
99, then ``--new`` of seed 3099 in a file sorting after, read as a run reads them, the
numbers handed in as the run's task hands them), two cases:

- ``after first``: the served model is the first run's (its pool: the old records); the
  first run reported no drift (no served model then), so the base tree has nothing kept,
  and this tree has the reference its first run kept (``drift.keep_reference``);
- ``after promotion``: the served model read all but the last ``--new`` records, the
  run before it all but the last 2 x ``--new`` (its reference kept, by each tree as it
  keeps one): this tree grows the kept reference by the records between.

What each tree kept is made before each timed report (untimed). The two reports are
compared: the same flags (``same flags``), and field for field (``same``; past
``DRIFT_SAMPLE`` reference records the two trees sample the reference differently).

    python benchmarks/drift_kept_ab.py --pools 10000,100000 --new 1000 --repeats 9 \\
        --before /work/wt/base35
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import torch
from drift_ab_90 import _module, _pool

from genesis_fp16_infrastructure import kept_in_memory
from genesis_fp16_infrastructure.data.fingerprint import DataFingerprint
from genesis_fp16_infrastructure.data.pool_columns import PoolColumns
from genesis_fp16_infrastructure.recipes.retrain import drift

BUDGET = 1024 * 2**20


def _prefix(columns: PoolColumns, labelled: int) -> DataFingerprint:
    """The fingerprint of the pool's first ``labelled`` labelled records (what a served
    model that read them holds)."""
    from genesis_fp16_infrastructure.data.fingerprint import _made, _sorted

    ids, keys = _sorted(columns.id_hash[columns.labelled[:labelled]], columns.key[:labelled])
    return _made(ids, keys)


def _slice(columns: PoolColumns, labelled: int) -> PoolColumns:
    """The pool as the earlier run read it: its first ``labelled`` labelled records are
    its labelled ones (the rows past them were not there)."""
    from dataclasses import replace

    cut = {
        "labelled": columns.labelled[:labelled],
        "success": columns.success[:labelled],
        "label_score": columns.label_score[:labelled],
        "label_scored": columns.label_scored[:labelled],
        "outcome": columns.outcome[:labelled],
        "key": columns.key[:labelled],
        "judged": columns.judged[:labelled],
    }
    return replace(columns, **cut)


def _run(
    trees: dict[str, ModuleType],
    columns: PoolColumns,
    numeric: torch.Tensor,
    kept: int,
    served: int,
    repeats: int,
) -> tuple[dict[str, str], str]:
    """Each tree's report on ``columns`` over a model that read its first ``served``
    labelled records, this tree's earlier run having kept the first ``kept``'s reference:
    the median CPU milliseconds (with the quartiles), and whether the reports agree."""
    fingerprint = _prefix(columns, served)
    earlier = _slice(columns, kept)
    seconds: dict[str, list[float]] = {n: [] for n in trees}
    outs: dict[str, Any] = {}
    for k in range(repeats):
        for name in trees if k % 2 == 0 else reversed(list(trees)):
            module = trees[name]
            kept_in_memory._PROCESS.clear()
            if hasattr(module, "keep_reference"):  # this tree's earlier run kept it
                module.keep_reference(earlier, numeric[:kept], BUDGET)
            started = time.process_time()
            outs[name] = module.drift_report(columns, fingerprint, 0, numeric, BUDGET)
            seconds[name].append(time.process_time() - started)
    kept_in_memory._PROCESS.clear()
    a, b = (o.to_json() for o in outs.values())
    flags = ("flagged", "label_shift_flagged")
    same = "same" if a == b else "same flags" if all(a[f] == b[f] for f in flags) else "DIFFERENT"
    return {n: _spread([x * 1000 for x in s]) for n, s in seconds.items()}, same


def _spread(ms: list[float]) -> str:
    """The median of ``ms`` and its quartiles, as a table shows them."""
    q = statistics.quantiles(ms, n=4)
    return f"{statistics.median(ms):.1f} ({q[0]:.1f}-{q[2]:.1f})"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pools", default="10000,100000")
    parser.add_argument("--new", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--before", type=Path, required=True, help="the other checkout")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    trees = {"before": _module(args.before), "this tree": drift}
    load = Path("/proc/loadavg").read_text().strip()
    rows = []
    for size in (int(p) for p in args.pools.split(",")):
        columns, first, numeric = _pool(size, args.new)
        old = first.records  # the first run's labelled records
        total = len(columns.labelled)
        for way, kept in (("after first", old), ("after promotion", old - (total - old))):
            ms, same = _run(trees, columns, numeric, kept, old, args.repeats)
            shown = " | ".join(ms.values())
            rows.append(f"| {size:,} | {args.new:,} | {way} | {shown} | {same} |")
    text = "\n".join(
        [
            f"`python benchmarks/drift_kept_ab.py --pools {args.pools} --new {args.new} "
            f"--repeats {args.repeats} --before {args.before}`; {os.cpu_count()} cores, "
            f"torch {torch.__version__}, one thread; load average {load} before, "
            f"{Path('/proc/loadavg').read_text().strip()} after. CPU milliseconds of this "
            "process, median (quartiles).",
            "",
            "| pool | new | case | before | this tree | reports |",
            "| --- | --- | --- | --- | --- | --- |",
            *rows,
        ]
    )
    print(text)
    if args.out is not None:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
