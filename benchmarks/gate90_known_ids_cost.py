"""What the gate's write of a candidate's known ids costs as the pool grows, fsyncs and all.

Issue 90: at each gate ``judging.stores.write_known_ids`` rewrites the candidate's whole
``judged_ids.npz`` (every id its model knew: about 800 kB at a 100,000-record pool) and
fsyncs it and its folder. For each ``--pools`` size P: P distinct sorted id hashes (as
the gate hands them: ``stores.sorted_distinct`` finds them sorted), written into a fresh
candidate folder under ``--dir`` (the disk the daemon's state folder is on) with no
memory store (budget 0: the write alone), the pools alternating, ``--repeats`` times.
Medians and the largest of wall milliseconds (``time.perf_counter``: the fsyncs wait on
the disk) and this process's CPU milliseconds (``time.process_time``: the kernel's part
of the fsyncs included)::

    python benchmarks/gate90_known_ids_cost.py --pools 10000,100000 --repeats 31 --dir /tmp
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from genesis_fp16_infrastructure.judging import stores


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pools", default="10000,100000")
    parser.add_argument("--repeats", type=int, default=31)
    parser.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()))
    args = parser.parse_args(argv)
    pools = [int(p) for p in args.pools.split(",")]
    rng = np.random.default_rng(0)
    ids = {p: np.unique(rng.integers(0, 2**63, p, dtype=np.uint64)) for p in pools}
    wall: dict[int, list[float]] = {p: [] for p in pools}
    cpu: dict[int, list[float]] = {p: [] for p in pools}
    load = " ".join(Path("/proc/loadavg").read_text().split()[:3])
    with tempfile.TemporaryDirectory(dir=args.dir) as root:
        for k in range(args.repeats):
            for pool in pools if k % 2 == 0 else pools[::-1]:
                candidate = Path(root) / f"candidate-{pool}-{k}"
                candidate.mkdir()
                started, spent = time.perf_counter(), time.process_time()
                stores.write_known_ids(candidate, ids[pool], 0)
                wall[pool].append(1000 * (time.perf_counter() - started))
                cpu[pool].append(1000 * (time.process_time() - spent))
    after = " ".join(Path("/proc/loadavg").read_text().split()[:3])
    print(f"{os.cpu_count()} cores; load average {load} before, {after} after; dir {args.dir}")
    print("| pool | file kB | wall ms median | wall ms max | CPU ms median |")
    print("|---:|---:|---:|---:|---:|")
    for pool in pools:
        size = ids[pool].nbytes // 1024
        print(
            f"| {pool:,} | {size:,} | {statistics.median(wall[pool]):.2f} | "
            f"{max(wall[pool]):.2f} | {statistics.median(cpu[pool]):.2f} |"
        )


if __name__ == "__main__":
    main()
