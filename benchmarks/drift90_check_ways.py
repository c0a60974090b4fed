"""Ways to check that a kept drift reference's sampled numbers are still the pool's
(``drift_reference._same_numbers``: every value compared), timed in one process,
interleaved, in CPU milliseconds (medians and spread), on the anatomy's pool shape
(``drift_ab_90._pool``), issue 90.

Each way answers the same question on the same arrays: the product's (gathered and
compared ``CHECK_ROWS`` records at a time, a Python ``all`` over the blocks), one numpy
gather of every sampled record and one comparison, and blocks of several sizes gathered
into one reused buffer (numpy's ``take`` in "clip" mode, which does not copy its
``out`` first) and compared into another. Every way must say "same" of the kept
numbers and "not same" once one value is moved (the last sampled record's last
feature), or the row says so.

    python benchmarks/drift90_check_ways.py --pools 10000,100000 --new 1000 --repeats 41
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable
from functools import partial

import numpy as np
import torch
from drift_ab_90 import _pool

from genesis_fp16_infrastructure.data.pool_columns import PoolColumns
from genesis_fp16_infrastructure.recipes.retrain import drift_reference
from genesis_fp16_infrastructure.recipes.retrain.drift import DRIFT_SAMPLE

Check = Callable[[np.ndarray, np.ndarray, np.ndarray], bool]


def _whole(values: np.ndarray, rows: np.ndarray, kept: np.ndarray) -> bool:
    """One gather of every sampled record, one comparison."""
    return np.array_equal(np.take(values, rows, axis=0), kept)


def _buffered(block: int, values: np.ndarray, rows: np.ndarray, kept: np.ndarray) -> bool:
    """``block`` records at a time, gathered into one buffer and compared into another."""
    buffer = np.empty((min(block, len(rows)), values.shape[1]), values.dtype)
    same = np.empty(buffer.shape, np.bool_)
    for start in range(0, len(rows), block):
        at = rows[start : start + block]
        got = np.take(values, at, axis=0, out=buffer[: len(at)], mode="clip")
        if not np.equal(got, kept[start : start + len(at)], out=same[: len(at)]).all():
            return False
    return True


def _ways(columns: PoolColumns) -> dict[str, Check]:
    """Each way, as a call on (values, rows, kept)."""

    def product(values: np.ndarray, rows: np.ndarray, kept: np.ndarray) -> bool:
        return drift_reference._same_numbers(columns, torch.from_numpy(values), rows, kept)

    ways: dict[str, Check] = {
        f"product ({drift_reference.CHECK_ROWS:,} a block, all())": product,
        "one gather, one comparison": _whole,
    }
    for block in (2048, 8192, 32768):
        ways[f"{block:,} a block, reused buffers"] = partial(_buffered, block)
    return ways


def _row(pool: int, new: int, repeats: int) -> list[str]:
    columns, served, numeric = _pool(pool, new)
    first = len(served.labelled)
    level = drift_reference.sample_level(first, DRIFT_SAMPLE)
    rows = np.flatnonzero(drift_reference.in_sample(columns.key[:first], level))
    values = numeric.numpy()
    kept = np.take(values, rows, axis=0)
    moved = kept.copy()
    moved[-1, -1] += 1.0
    ways = _ways(columns)
    ms: dict[str, list[float]] = {name: [] for name in ways}
    for k in range(repeats):
        for name in ways if k % 2 == 0 else reversed(list(ways)):
            started = time.process_time()
            ways[name](values, rows, kept)
            ms[name].append((time.process_time() - started) * 1000)
    lines = []
    for name, check in ways.items():
        right = check(values, rows, kept) and not check(values, rows, moved)
        q = statistics.quantiles(ms[name], n=4)
        lines.append(
            f"| {pool:,} | {len(rows):,} | {name} | {statistics.median(ms[name]):.2f} | "
            f"{q[0]:.2f}-{q[2]:.2f} | {'right' if right else 'WRONG'} |"
        )
    return lines


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pools", default="10000,100000")
    parser.add_argument("--new", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=41)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    load = os.getloadavg()
    rows = [line for p in args.pools.split(",") for line in _row(int(p), args.new, args.repeats)]
    print(
        f"`python benchmarks/drift90_check_ways.py --pools {args.pools} --new {args.new} "
        f"--repeats {args.repeats}`; {os.cpu_count()} cores, load {load[0]:.2f} before, "
        f"{os.getloadavg()[0]:.2f} after. CPU ms of this process: median, quartiles."
    )
    print("\n| pool | sampled | way | median | quartiles | answers |\n|---:|---:|---|---:|---|---|")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
