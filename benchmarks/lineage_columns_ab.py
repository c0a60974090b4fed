"""The lineage features two ways, interleaved: the record-at-a-time walk against the arrays.

    python benchmarks/lineage_columns_ab.py POOL [--repeats 3]

``POOL``: a pool file or folder (``genesis-fp16 data generate``). Each repetition times
the walk (``tests/lineage_walk.py``, the product's own path until the arrays took every
case, kept as the tests' yardstick) over every labelled record, then ``lineage_columns`` over the
same records, each on a fresh ``Pool`` (no depth or index left from the other), the
arrays' index built inside the timing. Prints the medians and the spread, and whether the
two gave the same bits.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from array import array
from pathlib import Path

import numpy as np

from genesis_fp16_infrastructure.data.lineage import Pool
from genesis_fp16_infrastructure.data.readers import read_trajectories
from genesis_fp16_infrastructure.world_model.lineage_columns import lineage_columns

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from lineage_walk import lineage_row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("pool", type=Path)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    data = read_trajectories(args.pool, keep_text=False)
    attempts = [e.attempt for e in data.examples]
    walk, arrays = [], []
    same = True
    for _ in range(args.repeats):
        pool = Pool(data.pool.entries)
        start = time.perf_counter()
        rows = array("d")
        for a in attempts:
            rows.extend(lineage_row(a, pool))
        walk.append(time.perf_counter() - start)
        pool = Pool(data.pool.entries)
        start = time.perf_counter()
        columns = lineage_columns(attempts, pool)
        arrays.append(time.perf_counter() - start)
        expected = np.frombuffer(rows, dtype=np.float64).reshape(len(attempts), -1)
        same = same and np.array_equal(columns.view(np.int64), expected.view(np.int64))
    print(
        f"{len(attempts):,} records: walk {statistics.median(walk):.2f} s "
        f"({min(walk):.2f}-{max(walk):.2f}), arrays {statistics.median(arrays):.2f} s "
        f"({min(arrays):.2f}-{max(arrays):.2f}), same bits: {same}"
    )


if __name__ == "__main__":
    main()
