"""What an encoder's word tables cost a part of a pool (issue 90): ``FeatureEncoder.tables``
of the part's values whole, against those its codes use alone (``used_only``, what
``encode_parts`` builds when it is given no tables: a later run's scoring of its new
records, its encode of the rows it works out again), for the last ``--new`` records of
generated pools, one thread, median of ``--repeat``, the two alternating::

    python benchmarks/encoder_tables_cost.py --pools 10000,100000 --new 1000
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from genesis_fp16_infrastructure.data.readers import read_trajectories
from genesis_fp16_infrastructure.data.synthetic import write_pool
from genesis_fp16_infrastructure.world_model.features import (
    Categorical,
    FeatureEncoder,
    numeric_rows,
)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pools", default="10000,100000")
    parser.add_argument("--new", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=25)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    print("| pool | part | tool lists used / in the pool | whole, ms | used alone, ms |")
    print("| --- | --- | --- | --- | --- |")
    for pool in (int(p) for p in args.pools.split(",")):
        with tempfile.TemporaryDirectory() as tmp:
            data = read_trajectories(write_pool(Path(tmp) / "p", pool, 99), keep_text=False)
        columns = data.columns
        labelled = columns.labelled
        whole = Categorical.of_rows(columns, labelled)
        numeric = numeric_rows(columns, labelled)
        encoder = FeatureEncoder.fit_parts(whole, numeric, columns.success)
        part = Categorical.of_rows(columns, labelled[-args.new :])
        took: dict[bool, list[float]] = {False: [], True: []}
        for _ in range(args.repeat):
            for used_only in (False, True):
                started = time.perf_counter()
                encoder.tables(part, used_only=used_only)
                took[used_only].append(time.perf_counter() - started)
        used = len(np.unique(part.tools.codes))
        whole_ms, used_ms = (statistics.median(took[u]) * 1e3 for u in (False, True))
        print(
            f"| {pool:,} | last {args.new:,} | {used:,} / {len(part.tools.values):,} | "
            f"{whole_ms:.2f} | {used_ms:.2f} |"
        )


if __name__ == "__main__":
    main()
