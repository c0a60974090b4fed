"""The judged run's records as the watch's and the gate's scorings pass them (issue 90,
item 4): another tree's ``contract.judging`` (``--against``) against this tree's, in CPU
milliseconds, in one process, interleaved, medians.

For pools of 10,000 and 100,000 records with 1,000 new at the end, the same inputs for
both ways, the records' part of what a judged run does with them (the plugin's forward
and the stores left out):

* the served model scored on the held-out and new rows of its listing
  (``RecordLosses.of_rows``, then the run's ``copy_of``), and whether it was given
  exactly those (``Served._scored``: then a tuple of the asked ids made and compared;
  now by their rows, ``RecordLosses.listed_at``);
* the gate's records taken of it (``Served.judged``: ``RecordLosses.take``);
* the candidate scored on those rows (``of_rows``, ``copy_of``), paired with them
  (``run._judged_records`` and ``gate.shared_rows``: then the ids compared; now the rows,
  ``RecordLosses.same_records``), both loss columns read as arrays and the segments
  coded (``gate.paired_losses``, ``Segments.of``, as the gate reads them in both trees).

    python benchmarks/judged_records_cost.py --against /work/wt/base36 [--repeats 21]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
from other_tree import module_from, record_types_path

from genesis_fp16_infrastructure.contract import record_losses
from genesis_fp16_infrastructure.contract.split import HELD_OUT, id_hashes

NEW = 1_000


def load_judging(tree: Path) -> ModuleType:
    """``tree``'s module of the record types (``other_tree.record_types_path``), loaded as
    a module of its own (its imports are this tree's: the split and its hashes, the same in
    both)."""
    return module_from(record_types_path(tree), "_against_judging")


class Pool:
    """A pool's listing (ids, segments, hashes) and the rows a judged run asks for."""

    def __init__(self, size: int) -> None:
        self.ids = tuple(f"traj-{i:07d}:{i * 7919 % 100_003:05x}" for i in range(size))
        self.segments = tuple(f"agent-{i % 7}" for i in range(size))
        self.hashes = id_hashes(self.ids)
        held = HELD_OUT.of_hashes(self.hashes)
        new = np.zeros(size, bool)
        new[size - NEW :] = True
        self.asked = np.flatnonzero(held | new)  # the served model's scoring
        self.judged = held[self.asked] & ~new[self.asked]  # of those, the gate's
        rng = np.random.default_rng(0)
        self.losses = {"log_loss": rng.random(size), "brier": rng.random(size) / 4}


def judged_records(module: ModuleType, pool: Pool, listing: Any) -> float:
    """The records' part of one judged run (module docstring), as ``module`` does it;
    its answer: the paired primary losses' sum (the same both ways)."""
    new_way = hasattr(module.RecordLosses, "listed_at")
    rows = pool.asked
    columns = {name: values[rows] for name, values in pool.losses.items()}
    served = module.RecordLosses.copy_of(module.RecordLosses.of_rows(listing, rows, columns))
    given = served.listed_at(listing.ids, rows) if new_way else None
    if given is None:
        given = served.hashed_as(module.at_rows(listing.ids, rows.tolist()), pool.hashes[rows])
    elif given:
        vars(served).setdefault("id_hashes", pool.hashes[rows])
    assert given
    reference = served.take(pool.judged)
    at = rows[pool.judged]
    picked = {name: values[at] for name, values in pool.losses.items()}
    candidate = module.RecordLosses.copy_of(module.RecordLosses.of_rows(listing, at, picked))
    if new_way:
        same = candidate.same_records(reference) and candidate.same_records(reference)
    else:
        same = candidate.hashed_as(reference.ids, reference.id_hashes)
        same = same and candidate.ids == reference.ids  # gate.shared_rows
    assert same
    total = 0.0
    for metric in candidate.metrics():
        a = np.fromiter(candidate.column(metric), np.float64, len(candidate.column(metric)))
        b = np.fromiter(reference.column(metric), np.float64, len(reference.column(metric)))
        total += float((a - b).sum())
    names = list(dict.fromkeys(reference.segments))
    index = {name: code for code, name in enumerate(names)}
    codes = np.fromiter(map(index.__getitem__, reference.segments), np.int64)
    return total + float(codes.sum())


def _cpu_ms(run: Callable[[], float]) -> tuple[float, float]:
    started = time.process_time()
    answer = run()
    return 1e3 * (time.process_time() - started), answer


def compare(old: ModuleType, size: int, repeats: int) -> tuple[float, float]:
    """Median CPU ms of the old way and this tree's at a pool of ``size``, interleaved;
    both give the same answer."""
    pool = Pool(size)
    listings = {
        way: module.RecordIds(pool.ids, pool.segments, pool.hashes)
        for way, module in (("old", old), ("new", record_losses))
    }
    times: dict[str, list[float]] = {"old": [], "new": []}
    for _ in range(repeats):
        answers = []
        for way, module in (("old", old), ("new", record_losses)):
            ms, answer = _cpu_ms(lambda m=module, w=way: judged_records(m, pool, listings[w]))
            times[way].append(ms)
            answers.append(answer)
        assert answers[0] == answers[1], answers
    return statistics.median(times["old"]), statistics.median(times["new"])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--against", type=Path, required=True, help="the other tree's root")
    parser.add_argument("--repeats", type=int, default=21)
    args = parser.parse_args(argv)
    old = load_judging(args.against)
    print("| pool | then (ms CPU) | now (ms CPU) |")
    print("| ---: | ---: | ---: |")
    for size in (10_000, 100_000):
        then, now = compare(old, size, args.repeats)
        print(f"| {size:,} | {then:.2f} | {now:.2f} |")


if __name__ == "__main__":
    main()
