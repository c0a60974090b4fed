"""The two checks a kept drift reference is believed by, two trees' modules in one
process, interleaved (issue 90 item 3): ``new_records.new_at_end`` (the pool's first
record hashes are the served model's: two wrapping sums) and
``drift_reference._same_numbers`` (the kept sample's numbers are the pool's), in CPU
milliseconds (medians), on the anatomy's pool shape (``drift_ab_90._pool``). Each
answer is compared between the trees (``same``).

    python benchmarks/drift_checks_ab.py --pools 10000,100000 --new 1000 --repeats 41 \\
        --before /work/wt/base36
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
from drift_ab_90 import _pool
from other_tree import module_from

from genesis_fp16_infrastructure.recipes.retrain import drift_reference, new_records
from genesis_fp16_infrastructure.recipes.retrain.drift import DRIFT_SAMPLE

RETRAIN = Path("infrastructure/genesis_fp16_infrastructure/recipes/retrain")


def _file_module(tree: Path, name: str) -> ModuleType:
    """``tree``'s ``name``.py of the retrain recipe as a module of its own."""
    return module_from(tree / RETRAIN / f"{name}.py", f"{name}_before")


def _ms(call: Callable[..., Any], given: tuple[Any, ...]) -> tuple[float, Any]:
    started = time.process_time_ns()
    out = call(*given)
    return (time.process_time_ns() - started) / 1e6, out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pools", default="10000,100000")
    parser.add_argument("--new", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=41)
    parser.add_argument("--before", required=True, help="the other checkout")
    args = parser.parse_args(argv)
    before = Path(args.before)
    old_records, old_reference = (
        _file_module(before, n) for n in ("new_records", "drift_reference")
    )
    print(f"load {os.getloadavg()[0]:.2f}; before {before}")
    print("| pool | check | rows | before ms | this ms | same |")
    print("|---:|---|---:|---:|---:|---|")
    for pool in (int(p) for p in args.pools.split(",")):
        columns, served, numeric = _pool(pool, args.new)
        first = len(served.labelled)
        level = drift_reference.sample_level(first, DRIFT_SAMPLE)
        rows = np.flatnonzero(drift_reference.in_sample(columns.key[:first], level))
        kept = np.take(numeric.numpy(), rows, axis=0)
        checks: dict[str, tuple[Callable[..., Any], Callable[..., Any], tuple[Any, ...]]] = {
            "new_at_end": (
                old_records.new_at_end,
                new_records.new_at_end,
                (columns, served),
            ),
            "_same_numbers": (
                old_reference._same_numbers,
                drift_reference._same_numbers,
                (columns, numeric, rows, kept),
            ),
        }
        counts = {"new_at_end": first, "_same_numbers": len(rows)}
        for name, (old, new, given) in checks.items():
            times: tuple[list[float], list[float]] = ([], [])
            same = True
            for _ in range(args.repeats):
                a, out_old = _ms(old, given)
                b, out_new = _ms(new, given)
                times[0].append(a)
                times[1].append(b)
                same = same and np.array_equal(np.asarray(out_old), np.asarray(out_new))
            print(
                f"| {pool:,} | {name} | {counts[name]:,} | {statistics.median(times[0]):.3f} "
                f"| {statistics.median(times[1]):.3f} | {same} |"
            )
    print(f"load {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
