"""The drift report of two trees' ``drift.py`` in one process, paired and interleaved
(issue 90 item 3), and what merging a promotion's records into a kept sorted reference
would save against sorting it again.

For each ``--pools`` size P: a served model's pool of P - ``--new`` records (seed 99) and
``--new`` more (seed 3099) in a file sorting after, read as a run reads them. Each tree's
``recipes/retrain/drift.py`` (``--before``: another checkout's, loaded beside this
one's) makes the report ``--repeats`` times, the two alternating: ``measured`` (nothing
kept: the daemon's run after a promotion, or after a first model) and ``taken`` (the
reference kept by the previous run over the same served model). Seconds are CPU seconds
of this process (``time.process_time``: a shared host's other work is not counted); the
two reports are compared field for field.

``merge``: the reference's values as a promotion leaves them (P - 2 x ``--new`` records
kept and sorted, ``--new`` records joining), each feature sorted again (numpy's sort)
against the kept sorted values merged with the joining ones sorted (a stable sort of the
two runs: timsort merges them; and an insert at their ``searchsorted`` places).

    python benchmarks/drift_ab_90.py --pools 10000,100000 --new 1000 --repeats 11 \
        --before /work/wt/m5a
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import torch
from other_tree import module_from

from genesis_fp16_infrastructure import kept_in_memory
from genesis_fp16_infrastructure.data.fingerprint import fingerprint_of
from genesis_fp16_infrastructure.data.readers import read_trajectories
from genesis_fp16_infrastructure.data.synthetic import write_pool
from genesis_fp16_infrastructure.recipes.retrain import drift
from genesis_fp16_infrastructure.world_model.features import numeric_rows

BUDGET = 1024 * 2**20
DRIFT = Path("infrastructure/genesis_fp16_infrastructure/recipes/retrain/drift.py")


def _module(tree: Path) -> ModuleType:
    """``tree``'s drift.py as a module of its own (its imports: this tree's library)."""
    return module_from(tree / DRIFT, "drift_before")


def _cpu(call: Callable[[], Any]) -> tuple[float, Any]:
    started = time.process_time()
    out = call()
    return time.process_time() - started, out


def _pool(pool: int, new: int) -> tuple[Any, Any, torch.Tensor]:
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "data"
        data.mkdir()
        write_pool(Path(tmp) / "g1", pool - new, 99).rename(data / "pool-1.json")
        old = read_trajectories(data, keep_text=False).columns
        write_pool(Path(tmp) / "g2", new, 3099).rename(data / "pool-2.json")
        columns = read_trajectories(data, keep_text=False).columns
    return columns, fingerprint_of(old), numeric_rows(columns, columns.labelled)


def _ab(pool: int, new: int, repeats: int, trees: dict[str, ModuleType]) -> list[str]:
    columns, served, numeric = _pool(pool, new)
    lines = []
    for way, budget in (("measured", 0), ("taken", BUDGET)):
        stores: dict[str, list[kept_in_memory.KeptInMemory]] = {}
        for name, module in trees.items():  # warmed; each keeps its own reference
            kept_in_memory._PROCESS.clear()
            module.drift_report(columns, served, 0, numeric, budget)
            stores[name] = list(kept_in_memory._PROCESS)
        seconds: dict[str, list[float]] = {name: [] for name in trees}
        outs: dict[str, Any] = {}
        for k in range(repeats):
            for name in trees if k % 2 == 0 else reversed(list(trees)):
                kept_in_memory._PROCESS[:] = stores[name]
                report = functools.partial(trees[name].drift_report, columns, served)
                took, outs[name] = _cpu(functools.partial(report, 0, numeric, budget))
                seconds[name].append(took)
        reports = {
            json.dumps(o.to_json() if o is not None else None, sort_keys=True)
            for o in outs.values()
        }
        shown = " | ".join(
            f"{statistics.median(s) * 1000:.1f} ({min(s) * 1000:.1f})" for s in seconds.values()
        )
        lines.append(
            f"| {pool:,} | {new:,} | {way} | {shown} | "
            f"{'same' if len(reports) == 1 else 'DIFFERENT'} |"
        )
    kept_in_memory._PROCESS.clear()
    return lines + _merge(numeric, pool, new, repeats)


def _merge(numeric: torch.Tensor, pool: int, new: int, repeats: int) -> list[str]:
    """Sorting a promoted reference again against merging its joining records in."""
    values = numeric[: pool - new].T.double().contiguous().numpy()
    kept = np.sort(values[:, :-new], axis=1)
    joining = values[:, -new:]

    def again() -> np.ndarray:
        return np.sort(values, axis=1)

    def timsort() -> np.ndarray:
        both = np.concatenate([kept, np.sort(joining, axis=1)], axis=1)
        return np.sort(both, axis=1, kind="stable")

    def inserted() -> np.ndarray:
        added = np.sort(joining, axis=1)
        out = np.empty_like(values)
        for row, old, add in zip(out, kept, added, strict=True):
            at = np.searchsorted(old, add) + np.arange(len(add))
            rest = np.ones(len(row), bool)
            rest[at] = False
            row[at], row[rest] = add, old
        return out

    ways = {"sorted again": again, "timsort merge": timsort, "insert": inserted}
    seconds: dict[str, list[float]] = {w: [] for w in ways}
    for k in range(repeats):
        for way in ways if k % 2 == 0 else reversed(list(ways)):
            seconds[way].append(_cpu(ways[way])[0])
    same = all(np.array_equal(ways[w](), again()) for w in ways)
    return [
        f"| {pool:,} | {new:,} | merge: {way} ({values.shape[1]:,} records) | "
        f"{statistics.median(s) * 1000:.1f} ({min(s) * 1000:.1f}) | | "
        f"{'same' if same else 'DIFFERENT'} |"
        for way, s in seconds.items()
    ]


def ab_arguments(description: str) -> argparse.ArgumentParser:
    """The options a paired drift benchmark takes: the pools, the new records, the
    repeats and the other checkout, whose ``drift`` module runs beside this tree's."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--pools", default="10000,100000")
    parser.add_argument("--new", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=11)
    parser.add_argument("--before", type=Path, required=True, help="the other checkout")
    return parser


def main(argv: list[str] | None = None) -> None:
    parser = ab_arguments(__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    trees = {"before": _module(args.before), "this tree": drift}
    load = Path("/proc/loadavg").read_text().strip()
    rows = []
    for pool in (int(p) for p in args.pools.split(",")):
        rows += _ab(pool, args.new, args.repeats, trees)
    text = "\n".join(
        [
            f"`python benchmarks/drift_ab_90.py --pools {args.pools} --new {args.new} "
            f"--repeats {args.repeats} --before {args.before}`; {os.cpu_count()} cores, "
            f"torch {torch.__version__}, one thread; load average {load} before, "
            f"{Path('/proc/loadavg').read_text().strip()} after. CPU milliseconds of "
            "this process, median (min).",
            "",
            "| pool | new | way | before | this tree | reports |",
            "| --- | --- | --- | --- | --- | --- |",
            *rows,
        ]
    )
    print(text)
    if args.out is not None:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
