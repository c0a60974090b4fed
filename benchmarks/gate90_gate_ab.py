"""The gate's loss pairs and segments, two trees' ``contract/judging.py`` and
``judging/gate.py`` in one process, interleaved (issue 90: the gate phase grew with the
pool).

At each ``--pools`` size P (a fifth held out and judged, as se_darwin's gate judges; two
loss columns, ``log_loss`` and ``brier``), the records are made the way a judged run
makes them: the served model's scores as rows of the listing (``RecordLosses.of_rows``),
copied (``copy_of``: what the run keeps of a plugin's answer) and cut to the judged rows
(``take``); the candidate's as rows of the listing, copied. Then both columns paired
(``gate.paired_losses``). Timed: that whole chain (``chain``: what each tree pays to
make the records and pair them), the pairing alone (``pairs``), and the segments' codes
the gate asks apart (``segments``: ``gate.Segments.of`` on the judged records' eight
segments, six of them known to the served model), in CPU milliseconds of this thread
(``time.thread_time``: a loaded host's waits left out), medians of ``--repeats``, the
trees alternating. ``same``: both trees' pairs equal bit for bit, and their segments'
pairs and vetoes equal::

    python benchmarks/gate90_gate_ab.py --pools 10000,100000 --repeats 41 \\
        --before /work/base37
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


def _trees(before: Path) -> dict[str, tuple[ModuleType, ModuleType]]:
    """Each tree's (contract.judging, judging.gate) modules, ``before``'s loaded beside."""
    old_judging = module_from(record_types_path(before), "judging_before")
    old_gate = module_from(before / INF / "judging/gate.py", "gate_before")
    return {"before": (old_judging, old_gate), "this": (record_losses, gate)}


def _case(pool: int) -> dict[str, Any]:
    """The listing's ids and segments, the rows scored, and the losses of each model."""
    rng = np.random.default_rng(pool)
    ids = tuple(f"traj-{i:08d}" for i in range(pool))
    segments = tuple(f"agent{i % 8}" for i in range(pool))
    judged = np.arange(0, pool, 5)
    served = {m: rng.uniform(0.0, 0.7, len(judged)) for m in METRICS}
    ours = {m: (v + rng.normal(0, 0.03, len(judged))).clip(0) for m, v in served.items()}
    return {"ids": ids, "segments": segments, "rows": judged, "served": served, "ours": ours}


def _chain(modules: tuple[ModuleType, ModuleType], case: dict[str, Any]) -> Callable[[], Any]:
    """The records made as a run makes them, then paired; returns (make, pair) calls."""
    contract, gate_module = modules
    listing = contract.RecordIds(case["ids"], case["segments"])
    rows = case["rows"]

    def make() -> tuple[Any, Any]:
        scored = contract.RecordLosses.of_rows(listing, rows, case["served"])
        served = contract.RecordLosses.copy_of(scored).take(np.ones(len(rows), bool))
        ours = contract.RecordLosses.copy_of(
            contract.RecordLosses.of_rows(listing, rows, case["ours"])
        )
        return ours, served

    def pair(ours: Any, served: Any) -> list[np.ndarray]:
        at = gate_module.shared_rows(ours, served)
        return [
            part
            for metric in METRICS
            for part in gate_module.paired_losses(ours, served, 1.0, metric, at)
        ]

    return make, pair


def _segments(gate_module: ModuleType, case: dict[str, Any]) -> Callable[[], Any]:
    """The gate's segments of the judged records (their served side's, paired in order)."""
    judged = [case["segments"][i] for i in case["rows"].tolist()]
    rows, known = np.arange(len(judged)), {f"agent{k}" for k in range(6)}
    return lambda: gate_module.Segments.of(tuple(judged), rows, known)


def _same_segments(a: Any, b: Any) -> bool:
    """Whether two trees' Segments pick the same pairs and the same vetoes."""
    vetoes = [(n, p.tolist()) for n, p in a.vetoes] == [(n, p.tolist()) for n, p in b.vetoes]
    return bool(np.array_equal(a.inside, b.inside)) and vetoes


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pools", default="10000,100000")
    parser.add_argument("--repeats", type=int, default=41)
    parser.add_argument("--before", type=Path, required=True, help="the other checkout")
    args = parser.parse_args(argv)
    trees = _trees(args.before)
    load = load_average()
    rows = []
    for pool in (int(p) for p in args.pools.split(",")):
        case = _case(pool)
        calls = {name: _chain(modules, case) for name, modules in trees.items()}
        chain: dict[str, list[float]] = {name: [] for name in trees}
        pairs: dict[str, list[float]] = {name: [] for name in trees}
        coded: dict[str, list[float]] = {name: [] for name in trees}
        asked = {name: _segments(modules[1], case) for name, modules in trees.items()}
        out: dict[str, Any] = {}
        segments: dict[str, Any] = {}
        for k in range(args.repeats):
            for name in list(trees) if k % 2 == 0 else list(trees)[::-1]:
                make, pair = calls[name]
                made_ms, made = thread_ms(make)
                paired_ms, out[name] = thread_ms(lambda pair=pair, made=made: pair(*made))
                chain[name].append(made_ms + paired_ms)
                pairs[name].append(paired_ms)
                coded_ms, segments[name] = thread_ms(asked[name])
                coded[name].append(coded_ms)
        same = all(
            a.tobytes() == b.tobytes() for a, b in zip(out["before"], out["this"], strict=True)
        ) and _same_segments(segments["before"], segments["this"])
        for name in trees:
            rows.append(
                f"| {pool:,} | {len(case['rows']):,} | {name} | "
                f"{statistics.median(chain[name]):.3f} | {statistics.median(pairs[name]):.3f} | "
                f"{statistics.median(coded[name]):.3f} | {same} |"
            )
    print_table(
        load, ["pool", "judged", "tree", "chain ms", "pairs ms", "segments ms", "same"], rows
    )


if __name__ == "__main__":
    main()
