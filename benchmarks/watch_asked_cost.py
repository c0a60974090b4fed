"""What the live watch no longer does per run to ask the predecessor for the new records
(issue 90: the work around training grows with what is new), timed in one process::

    python benchmarks/watch_asked_cost.py [--pool 1000000] [--new 10000] [--repeat 7]

A listing of ``--pool`` ids (with segments), the served model's losses made of rows of
it (``RecordLosses.of_rows``: the held-out fifth and the new records, as a daemon's
judged run asks), and ``--new`` of those rows new. Before 3d4aef3e/3736fb70 the watch
took the new records' ids and segments from the whole tuples of the served model's
records (``RecordLosses.ids``/``segments``: every scored record's made), and asked the
predecessor for them by their ids, which a plugin finds among its listing with a set
lookup of every listed id (``ScoreOnly.rows``). Now it takes them at their rows alone
(``listed_rows.taken_at``) and asks by their rows in the listing
(``ScoreOnly.of_rows``, ``ScoreOnly.row_array``). Medians of ``--repeat``, milliseconds
of this process's CPU; each way's answer is checked to be the same records.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import numpy as np

from genesis_fp16.plugin_api import RecordLosses
from genesis_fp16_infrastructure.contract.listed_rows import taken_at
from genesis_fp16_infrastructure.contract.record_losses import RecordIds
from genesis_fp16_infrastructure.contract.split import HELD_OUT, ScoreOnly


def _ms(run: Callable[[], object], repeat: int) -> tuple[float, object]:
    took, answer = [], None
    for _ in range(repeat):
        started = time.process_time()
        answer = run()
        took.append(1e3 * (time.process_time() - started))
    return statistics.median(took), answer


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pool", type=int, default=1_000_000)
    parser.add_argument("--new", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args(argv)
    ids = tuple(f"trajectory-{i:09d}" for i in range(args.pool))
    listing = RecordIds(ids, tuple(f"agent-{i % 7}" for i in range(args.pool)))
    new = np.zeros(args.pool, bool)
    new[-args.new :] = True
    asked = np.flatnonzero(HELD_OUT.of_ids(list(ids)) | new)  # the served model's rows
    losses = [0.5] * len(asked)

    def served() -> RecordLosses:
        return RecordLosses.of_rows(listing, asked, {"log_loss": losses})

    fresh = np.flatnonzero(new[asked])  # the new records, as rows of the served losses
    pool_ids = list(ids)  # the plugin's own listing, as score_records holds it

    def before() -> tuple[list[int], tuple[str, ...]]:
        scored = served()
        only = [scored.ids[i] for i in fresh.tolist()]
        named = scored.segments
        assert named is not None
        segments = tuple(named[i] for i in fresh.tolist())
        return ScoreOnly(frozenset(only)).rows(pool_ids), segments

    def after() -> tuple[list[int], tuple[str, ...]]:
        scored = served()
        segments = taken_at(scored, "segments", fresh)
        rows = ScoreOnly.of_rows(ids, asked[fresh]).row_array(ids)
        assert rows is not None and segments is not None
        return rows.tolist(), segments

    was, old = _ms(before, args.repeat)
    now, ours = _ms(after, args.repeat)
    assert old == ours, "not the same records"
    print(
        f"pool {args.pool:,}, {len(asked):,} scored by the served model, {args.new:,} new: "
        f"{was:.1f} ms before, {now:.1f} ms now (median of {args.repeat}, CPU)"
    )


if __name__ == "__main__":
    main()
