"""The judged run's loss records, two trees' ``contract/judging.py`` in one process,
interleaved (issue 90: live and gate grew with the pool): this tree keeps a record of
rows of a checked listing as its columns' arrays, the tuples of Python floats made only
when read (gate38's change, made again with its modules read in one direction).

At each ``--pools`` size P (two loss columns, ``log_loss`` and ``brier``, as se_darwin
scores), the records are made as a later judged run makes them:

* **served** (the live phase): the served model's scores on the held-out fifth and the
  1,000 new records, as rows of the listing (``RecordLosses.of_rows``), copied
  (``copy_of``: ``losses_of``), counted by a column as each tree's ``Served.held_of``
  and ``scored_knew`` count them (the other tree's ``len(losses.column())``, this one's
  ``len(losses.column_array())``) and cut to the gate's records
  (``take``: ``Served.judged``);
* **gate**: the candidate's scores on those, as rows, copied, and both columns paired
  with the served model's (``gate.shared_rows``, ``gate.paired_losses``).

CPU milliseconds of this thread (``time.thread_time``), medians of ``--repeats``, the
trees alternating. ``same``: both trees' pairs equal bit for bit, and the served
records' losses equal, read at the end::

    cd benchmarks && python gate39_loss_columns_ab.py --pools 10000,100000 --repeats 61 \\
        --before /work/base39
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
from ab_table import load_average, print_table
from other_tree import module_from, record_types_path
from thread_clock import thread_ms

from genesis_fp16_infrastructure.contract import record_losses
from genesis_fp16_infrastructure.judging import gate

INF = Path("infrastructure/genesis_fp16_infrastructure")
METRICS = ("log_loss", "brier")
NEW = 1000


def _case(pool: int) -> dict[str, Any]:
    """The listing, the rows scored (held out or new) and judged, and each model's losses."""
    rng = np.random.default_rng(pool)
    ids = tuple(f"traj-{i:08d}" for i in range(pool))
    segments = tuple(f"agent{i % 8}" for i in range(pool))
    held = np.zeros(pool, bool)
    held[::5] = True
    scored = np.flatnonzero(held | (np.arange(pool) >= pool - NEW))
    judged = held[scored]  # the held-out ones among those scored
    served = {m: rng.uniform(0.0, 0.7, len(scored)) for m in METRICS}
    ours = {m: rng.uniform(0.0, 0.7, int(judged.sum())) for m in METRICS}
    return dict(ids=ids, segments=segments, scored=scored, judged=judged, served=served, ours=ours)


def _calls(contract: ModuleType, case: dict[str, Any], count: str) -> tuple[Callable[[], Any], ...]:
    """The served side's and the gate's calls of ``contract``'s records; ``count``: the
    column method its tree's ``Served`` counts the served records by."""
    listing = contract.RecordIds(case["ids"], case["segments"])

    def served() -> Any:
        scored = contract.RecordLosses.of_rows(listing, case["scored"], case["served"])
        losses = contract.RecordLosses.copy_of(scored)
        assert len(getattr(losses, count)()) == len(case["scored"])  # as Served counts them
        return losses.take(case["judged"])

    def candidate(reference: Any) -> list[np.ndarray]:
        rows = case["scored"][case["judged"]]
        ours = contract.RecordLosses.of_rows(listing, rows, case["ours"])
        ours = contract.RecordLosses.copy_of(ours)
        at = gate.shared_rows(ours, reference)
        return [x for m in METRICS for x in gate.paired_losses(ours, reference, 4.6, m, at)]

    return served, candidate


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pools", default="10000,100000")
    parser.add_argument("--repeats", type=int, default=41)
    parser.add_argument("--before", type=Path, required=True, help="the other checkout")
    args = parser.parse_args(argv)
    trees = {"before": module_from(record_types_path(args.before), "judging_before")}
    trees["this"] = record_losses
    load = load_average()
    lines = []
    for pool in (int(p) for p in args.pools.split(",")):
        case = _case(pool)
        counts = {"before": "column", "this": "column_array"}
        calls = {name: _calls(module, case, counts[name]) for name, module in trees.items()}
        times: dict[tuple[str, str], list[float]] = {}
        pairs: dict[str, list[np.ndarray]] = {}
        judged: dict[str, Any] = {}
        for k in range(args.repeats):
            for name in list(trees) if k % 2 == 0 else list(trees)[::-1]:
                served, candidate = calls[name]
                live_ms, judged[name] = thread_ms(served)
                gate_ms, pairs[name] = thread_ms(lambda c=candidate, r=judged[name]: c(r))
                times.setdefault((name, "served"), []).append(live_ms)
                times.setdefault((name, "gate"), []).append(gate_ms)
        same = all(a.tobytes() == b.tobytes() for a, b in zip(*pairs.values(), strict=True))
        same = same and judged["before"].losses == judged["this"].losses
        for name in trees:
            live, cut = (statistics.median(times[(name, part)]) for part in ("served", "gate"))
            lines.append(
                f"| {pool:,} | {len(case['scored']):,} | {int(case['judged'].sum()):,} | "
                f"{name} | {live:.3f} | {cut:.3f} | {live + cut:.3f} | {same} |"
            )
    header = ["pool", "scored", "judged", "tree", "served ms", "gate ms", "both ms", "same"]
    print_table(load, header, lines, note="; CPU ms, medians")


if __name__ == "__main__":
    main()
