"""The served model's scoring path in a daemon's later run, piece by piece, in CPU ms (issue
90: the judging floor's fixed costs).

se_darwin's later judged run at ``--pool`` records, 1,000 of them new, in this process as a
resident run process serves it (``served_scoring_kept.later_runs``: the first model served,
then the state folder and the kept memory put back before each repeat). Each piece is timed
with ``time.thread_time`` around its calls (an inner call of the same piece is not counted
twice), summed over the run, and the median of ``--repeats`` runs is printed as one JSON
line:

- ``plugin``: the plugin's ``score_records``; ``score_on_copy``: the copy made, scored and
  checked (the plugin included; ``score_on_copy - plugin`` is the copy's own cost);
- ``make_copy`` and ``check_after``: the copy written, and read back (or hashed) after;
- ``copy_of``: ``RecordLosses.copy_of``, the plugin's answer checked on a copy of its own;
- ``trained_ids``: the records a checkpoint names (its load and its side file's arrays);
- ``served`` and ``gated``: the run's first phase and its gate, whole.

A piece a tree does not have is left out. The state folder is copied back before each
repeat, so a side file's identity is new each time: its arrays are read and hashed once a
run here, where a resident daemon keeps them (both trees alike).

    PYTHONPATH=<tree>:<tree>/agents:<tree>/infrastructure OMP_NUM_THREADS=1 \\
        python <tree>/benchmarks/served_scoring_path.py --pool 10000 --repeats 5
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import served_scoring_kept

from genesis_fp16_infrastructure.contract import judging as contract_judging
from genesis_fp16_infrastructure.judging import run, scoring_copy, served, trained_ids, watch

# (modules that hold the name, the name, the piece): every module that calls it by its name
PIECES = (
    ((run,), "_served", "served"),
    ((run,), "_gated", "gated"),
    ((served, scoring_copy), "score_on_copy", "score_on_copy"),
    ((scoring_copy,), "_copied_sha256", "make_copy"),
    ((scoring_copy,), "_copied", "make_copy"),
    ((scoring_copy,), "_sha256", "check_after"),
    ((scoring_copy,), "_holds", "check_after"),
    ((trained_ids, served), "trained_ids", "trained_ids"),
    ((run, served, watch, scoring_copy), "losses_of", "losses_of"),
)


def _timed(call: Callable[..., Any], piece: str, spent: dict[str, float]) -> Callable[..., Any]:
    """``call``, its thread CPU seconds added to ``spent[piece]`` (outermost calls only)."""
    depth = [0]

    @functools.wraps(call)
    def timed(*args: Any, **kwargs: Any) -> Any:
        depth[0] += 1
        started = time.thread_time()
        try:
            return call(*args, **kwargs)
        finally:
            depth[0] -= 1
            if depth[0] == 0:
                spent[piece] = spent.get(piece, 0.0) + time.thread_time() - started

    return timed


def _instrument(spent: dict[str, float]) -> None:
    for modules, name, piece in PIECES:
        holders = [m for m in modules if hasattr(m, name)]
        if holders:
            timed = _timed(getattr(holders[0], name), piece, spent)
            for module in holders:
                setattr(module, name, timed)
    copy_of = contract_judging.RecordLosses.copy_of.__func__  # type: ignore[attr-defined]
    contract_judging.RecordLosses.copy_of = classmethod(_timed(copy_of, "copy_of", spent))  # type: ignore[method-assign,assignment]
    plugin = served_scoring_kept.plugin
    plugin.score_records = _timed(plugin.score_records, "plugin", spent)  # type: ignore[method-assign]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pool", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--cache", type=Path, default=Path("/tmp/served_scoring_path"))
    args = parser.parse_args()
    spent: dict[str, float] = {}
    _instrument(spent)
    cache = args.cache / f"pool-{args.pool}"
    runs = served_scoring_kept.later_runs(
        args.pool, 1000, cache, args.repeats + 1, "zz-pool-3099.json"
    )
    rows, outcomes = [], set()
    for number, later in enumerate(runs):
        spent.clear()
        started = time.thread_time()
        result = later()
        row = {piece: seconds * 1e3 for piece, seconds in spent.items()}
        row["run"] = (time.thread_time() - started) * 1e3
        outcomes.add(str(result.gate.outcome) if result.gate is not None else "none")
        if number:  # the first repeat warms the process
            rows.append(row)
    pieces = sorted({p for row in rows for p in row})
    medians = {p: round(statistics.median(r.get(p, 0.0) for r in rows), 2) for p in pieces}
    print(
        json.dumps(
            {"pool": args.pool, "repeats": len(rows), **medians, "outcomes": sorted(outcomes)}
        )
    )


if __name__ == "__main__":
    main()
