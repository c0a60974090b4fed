"""A later read's fingerprint grown from the kept one, another tree's way against this
tree's, in CPU milliseconds, in one process (issue 90, item 2).

``data.fingerprint.extended_fingerprint`` is what a resident process's later read adds
to the pool it grew: the new labelled records sorted and merged into the kept
fingerprint, and the digest of every record hash. For pools of 10,000 and 100,000
records with 1,000 new at the end, on the same columns and the same kept fingerprint,
the ``--before`` tree's ``data/fingerprint.py`` (loaded as a module of its own) and this
tree's are called in turn, ``--repeats`` times, and the medians of each one's CPU time
(``time.thread_time``) are printed with the growth from 10,000 to 100,000. Both must
give the same fingerprint (its records, digest and arrays): checked on every call.

    python benchmarks/fingerprint_growth_ab.py --before ../base36 [--repeats 41]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import torch
from other_tree import module_from

from genesis_fp16_infrastructure.data import fingerprint
from genesis_fp16_infrastructure.data.readers import read_trajectories
from genesis_fp16_infrastructure.data.synthetic import generate_pool

FINGERPRINT = Path("infrastructure/genesis_fp16_infrastructure/data/fingerprint.py")


def _module(tree: Path) -> ModuleType:
    """``tree``'s fingerprint.py as a module of its own (its imports: this tree's)."""
    return module_from(tree / FINGERPRINT, "fingerprint_before")


def _pool(size: int, new: int, folder: Path) -> tuple[Any, int, fingerprint.DataFingerprint]:
    """A pool of ``size`` records, its last ``new`` after the others, as the grown pool's
    columns; the row its new records start at, and the old records' fingerprint."""
    trajectories = generate_pool(size, seed=99)["trajectories"]
    path = folder / f"pool-{size}.json"
    path.write_text(json.dumps({"trajectories": trajectories}))
    columns = read_trajectories(path, keep_text=False).columns
    rows = size - new
    old = folder / f"old-{size}.json"
    kept = dict(list(trajectories.items())[:rows])
    old.write_text(json.dumps({"trajectories": kept}))
    before = fingerprint.fingerprint_of(read_trajectories(old, keep_text=False).columns)
    return columns, rows, before


def _same(a: Any, b: Any) -> bool:
    arrays = torch.equal(a.ids, b.ids) and torch.equal(a.labelled, b.labelled)
    return (a.records, a.digest, a.grown_from) == (b.records, b.digest, b.grown_from) and arrays


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, required=True, help="the other checkout")
    parser.add_argument("--pools", default="10000,100000")
    parser.add_argument("--new", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=41)
    args = parser.parse_args()
    torch.set_num_threads(1)
    ways = {"before": _module(args.before).extended_fingerprint}
    ways["this tree"] = fingerprint.extended_fingerprint
    load = Path("/proc/loadavg").read_text().split()[:3]
    medians: dict[int, dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for size in (int(p) for p in args.pools.split(",")):
            columns, rows, before = _pool(size, args.new, Path(tmp))
            seconds: dict[str, list[float]] = {name: [] for name in ways}
            for r in range(args.repeats):
                outs = []
                for name in ways if r % 2 == 0 else list(ways)[::-1]:
                    started = time.thread_time()
                    outs.append(ways[name](before, columns, rows))
                    seconds[name].append(time.thread_time() - started)
                assert _same(*outs), "the two ways' fingerprints differ"
            medians[size] = {n: statistics.median(s) * 1000 for n, s in seconds.items()}
            print(f"{size:,} records, {args.new:,} new: " + ", ".join(
                f"{n} {ms:.3f} ms" for n, ms in medians[size].items()))  # fmt: skip
    if len(medians) == 2:
        small, large = sorted(medians)
        for name in ways:
            grew = medians[large][name] - medians[small][name]
            print(f"{name}: grows {grew:+.3f} ms from {small:,} to {large:,}")
    after = Path("/proc/loadavg").read_text().split()[:3]
    print(f"load {' '.join(load)} before, {' '.join(after)} after")


if __name__ == "__main__":
    main()
