"""The gate's pieces that issue 90 changed, the old way and the new, paired in one process.

At each ``--pools`` size P (a fifth of it held out and judged, as se_darwin's gate
judges; ``--new`` records new to the served model), on synthetic losses of two columns
and eight segments:

* **questions**: every question of one verdict, as main asked them (``compare_segments``
  per column, ``compare`` of the ``known`` and ``newest`` records taken: each pairs the
  records again) and as ``questions._comparisons`` asks them now (paired once); their JSON
  compared;
* **known ids**: the candidate's known ids as main made them (the served model's and the
  pool's concatenated, the whole sorted) and now (the new ones merged in); compared.

Alternating, ``--repeats`` times each; medians::

    python benchmarks/gate_parts_ab.py --pools 10000,100000 --new 1000 --repeats 15
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np

from genesis_fp16.plugin_api import RecordLosses
from genesis_fp16_infrastructure.contract import split
from genesis_fp16_infrastructure.data import schema
from genesis_fp16_infrastructure.judging import stores
from genesis_fp16_infrastructure.judging.gate import compare, compare_segments
from genesis_fp16_infrastructure.judging.questions import _comparisons, _known_segments
from genesis_fp16_infrastructure.judging.run import _known_after


def _case(pool: int, new: int) -> tuple[Any, RecordLosses, np.ndarray]:
    rng = np.random.default_rng(pool)
    judged = pool // 5
    ids = [f"traj-{i:08d}" for i in range(pool)]
    segments = [f"agent{i % 8}" for i in range(pool)]
    hashes = split.id_hashes(ids)
    listed = SimpleNamespace(ids=ids, segments=tuple(segments), id_hashes=hashes)
    columns = {"log_loss": rng.uniform(0.1, 0.7, judged), "brier": rng.uniform(0.0, 0.3, judged)}
    picked = [ids[i] for i in range(0, pool, 5)]
    theirs = RecordLosses.of(picked, {k: v.tolist() for k, v in columns.items()},
                             [segments[i] for i in range(0, pool, 5)])  # fmt: skip
    served = SimpleNamespace(
        known=np.sort(hashes[: pool - new]),
        losses=theirs,
        records=listed,
        knew=None,
        plugin=SimpleNamespace(loss_span=1.0, judging_margin=0.01),
        checkpoint=Path("served.pt"),
    )
    served.knew = schema.known(hashes, served.known)
    noise = {k: (v + rng.normal(0, 0.03, judged)).clip(0) for k, v in columns.items()}
    ours = RecordLosses.of(picked, {k: v.tolist() for k, v in noise.items()})
    rolled = np.sort(hashes[: pool - 2 * new])
    return served, ours, rolled


def _old_questions(served: Any, ours: RecordLosses, rolled: np.ndarray) -> list[Any]:
    """main's ``_comparisons`` (5a728149), the same calls in the same order."""
    theirs, known = served.losses, _known_segments(served)
    knew = schema.known(ours.id_hashes, served.known)
    on_known = ours.take(knew)
    newer = ~schema.known(ours.id_hashes, rolled)
    found: list[Any] = []
    for metric in ours.metrics():
        margin = lambda mean: 0.01  # noqa: E731
        found += compare_segments("current", ours, theirs, 1.0, margin, known, metric)
        found.append(replace(compare("known", on_known, theirs, 1.0, margin, metric),
                             required=False))  # fmt: skip
        found.append(compare("newest", ours.take(newer), theirs, 1.0, margin, metric))
    return found


def _ways(served: Any, ours: RecordLosses, rolled: np.ndarray) -> dict[str, Any]:
    """Each part's two ways, as calls."""
    request: Any = SimpleNamespace(golden_data_path=None)
    return {
        "questions": {
            "main": lambda: _old_questions(served, ours, rolled),
            "now": lambda: _comparisons(request, served, ours, Path("c.pt"), False, rolled),
        },
        "known ids": {
            "main": lambda: split.sorted_unique(
                np.concatenate([served.known, served.records.id_hashes])
            ),
            "now": lambda: stores.sorted_distinct(_known_after(served, ours)),
        },
    }


def _timed(call: Callable[[], Any]) -> tuple[float, Any]:
    started = time.perf_counter()
    out = call()
    return time.perf_counter() - started, out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pools", default="10000,100000")
    parser.add_argument("--new", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args(argv)
    load = " ".join(Path("/proc/loadavg").read_text().split()[:3])
    rows = []
    for pool in (int(p) for p in args.pools.split(",")):
        served, ours, rolled = _case(pool, args.new)
        ways = _ways(served, ours, rolled)
        for part, both in ways.items():
            seconds: dict[str, list[float]] = {w: [] for w in both}
            outs: dict[str, Any] = {}
            for k in range(args.repeats):
                for way in both if k % 2 == 0 else list(both)[::-1]:
                    took, outs[way] = _timed(both[way])
                    seconds[way].append(took)
            a, b = outs["main"], outs["now"]
            same = (
                [c.to_json() for c in a] == [c.to_json() for c in b]
                if part == "questions"
                else np.array_equal(a, b)
            )
            for way, s in seconds.items():
                rows.append(
                    f"| {pool:,} | {args.new:,} | {part} | {way} | "
                    f"{1000 * statistics.median(s):.2f} | {1000 * min(s):.2f} | "
                    f"{'same' if same else 'DIFFERENT'} |"
                )
    after = " ".join(Path("/proc/loadavg").read_text().split()[:3])
    print(
        "\n".join(
            [
                "# The gate's changed pieces, main's way and now, paired in one process",
                "",
                f"`python benchmarks/gate_parts_ab.py --pools {args.pools} --new {args.new} "
                f"--repeats {args.repeats}`; {os.cpu_count()} cores; load average {load} "
                f"before, {after} after (shared host: paired, not absolute).",
                "",
                "| pool | new | part | way | median ms | min ms | result |",
                "| --- | --- | --- | --- | --- | --- | --- |",
                *rows,
            ]
        )
    )


if __name__ == "__main__":
    main()
