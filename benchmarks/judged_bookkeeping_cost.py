"""The judged run's bookkeeping that grew with the pool, e35a2155's way against this
tree's, in CPU milliseconds, in one process (issue 90, item 4).

For pools of 10,000 and 100,000 records with 1,000 new at the end, each piece on the same
inputs, the two ways interleaved, medians:

* the listing's lookup among the ids the served model knew (``Served._scored``): then
  ``id_lookups.ranked`` and a search of every id; now ``id_lookups.listed_known``, the last
  run's answer kept and the new ids alone searched;
* the gate's held-out records against the ids the served model's checkpoint names
  (``served.held_out_unknown``): then a search of the ~20,000 judged ids among the
  ~80,000 named; now the named list checked for held-out records, no search;
* the segments the served model knew, as the gate asks about them (``Segments.of``):
  then the set of the segments of every known record; now ``KnownSegments``;
* a run's five held-out draws (``HeldOutSplit.of_hashes``: the listing, the read's
  examples, the served model's list, the candidate's, the scored records): then each
  drawn whole; now the answers of the last run's kept, checked, and what is new drawn,
  the scored records' the listing's at their rows (``Served.held_of``);
* the served model's known ids (``stores.read_known_ids``), which the last run wrote in
  this process: then the file read and checked; now the ids written, the file's identity
  compared;
* the rows a scoring is asked for by rows of a listing (``ScoreOnly``, the served
  model's scoring and the gate's): then a list of Python ints made of the run's array,
  a tuple kept, a list handed to the plugin and its array made of it; now the run's
  array kept, over bytes, and handed out as it is (``ScoreOnly.row_array``);
* the candidate's evaluated logits found for the gate's records (``evaluated_logit``,
  the held-out records, in the order evaluated): then a search of each among the sorted
  evaluated hashes; now each compared at the row kept for it.

    python benchmarks/judged_bookkeeping_cost.py [--repeats 21]
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from genesis_fp16_infrastructure import kept_in_memory
from genesis_fp16_infrastructure.contract import split
from genesis_fp16_infrastructure.contract.split import HELD_OUT, ScoreOnly
from genesis_fp16_infrastructure.data import schema
from genesis_fp16_infrastructure.data.schema import find_ids
from genesis_fp16_infrastructure.judging import id_lookups, stores
from genesis_fp16_infrastructure.judging.served import KnownSegments

BUDGET = 256 * 2**20
NEW = 1_000


def _cpu_ms(run: Callable[[], object]) -> tuple[float, object]:
    started = time.process_time()
    answer = run()
    return 1e3 * (time.process_time() - started), answer


def _pool(size: int) -> np.ndarray:
    rng = np.random.default_rng(size)
    return rng.permutation(np.unique(rng.integers(0, 2**63, size * 2, dtype=np.uint64)))[:size]


def listing_lookup(ids: np.ndarray, repeats: int) -> tuple[float, float]:
    """The last run looked its listing (all but the new) up; this run's lookup, timed."""
    known, before = np.sort(ids[:-NEW]), ids[:-NEW]
    old, new = [], []
    for _ in range(repeats):
        kept_in_memory._PROCESS[:] = []
        schema.known(before, known, id_lookups.ranked("listed ids", before, BUDGET))
        took, want = _cpu_ms(
            lambda: schema.known(ids, known, id_lookups.ranked("listed ids", ids, BUDGET))
        )
        old.append(took)
        kept_in_memory._PROCESS[:] = []
        id_lookups.listed_known("listed ids", before, known, BUDGET)
        took, got = _cpu_ms(lambda: id_lookups.listed_known("listed ids", ids, known, BUDGET))
        new.append(took)
        assert np.array_equal(got, want)  # type: ignore[arg-type]
    return statistics.median(old), statistics.median(new)


def held_out_unknown(ids: np.ndarray, repeats: int) -> tuple[float, float]:
    """The held-out and new records scored; the served model named the rest but the new."""
    held, fresh = HELD_OUT.of_hashes(ids), np.arange(len(ids)) >= len(ids) - NEW
    judged, named = ids[held | fresh], np.sort(ids[~held & ~fresh])
    old, new = [], []
    for _ in range(repeats):
        took, want = _cpu_ms(lambda: HELD_OUT.of_hashes(judged) & ~schema.known(judged, named))
        old.append(took)

        def now() -> np.ndarray:
            keep = HELD_OUT.of_hashes(judged)
            if bool(HELD_OUT.of_hashes(named).any()):  # Served.names_held_out
                keep &= ~schema.known(judged, named)
            return keep

        took, got = _cpu_ms(now)
        new.append(took)
        assert np.array_equal(got, want)  # type: ignore[arg-type]
    return statistics.median(old), statistics.median(new)


def known_segments(size: int, repeats: int) -> tuple[float, float]:
    """Five agents' records, the new ones not known; each agent asked about once."""
    rng = np.random.default_rng(size)
    segments = tuple(rng.choice([f"agent-{i}" for i in range(5)], size).tolist())
    knew = np.arange(size) < size - NEW
    names = list(dict.fromkeys(segments))
    old, new = [], []
    for _ in range(repeats):

        def then() -> list[bool]:
            known = set(itertools.compress(segments, knew.tolist()))
            return [name in known for name in names]

        took, want = _cpu_ms(then)
        old.append(took)

        def now() -> list[bool]:
            known = KnownSegments(segments, knew)
            return [name in known for name in names]

        took, got = _cpu_ms(now)
        new.append(took)
        assert got == want
    return statistics.median(old), statistics.median(new)


def held_out_draws(ids: np.ndarray, repeats: int) -> tuple[float, float]:
    """The last run drew its listing and the served model's list; this run draws its
    listing (grown by the new), the read's examples (the same hashes), the served
    model's list, the candidate's (that and the new ones not held out) and the records
    scored (the held-out and the new)."""
    held = HELD_OUT._draw(ids)
    fresh = np.arange(len(ids)) >= len(ids) - NEW
    named = np.sort(ids[~held & ~fresh])
    trained = np.sort(ids[~held])
    rows = np.flatnonzero(held | fresh)
    scored = ids[rows]
    asked = [ids, ids.copy(), named, trained, scored]
    old, new = [], []
    for _ in range(repeats):
        took, want = _cpu_ms(lambda: [HELD_OUT._draw(h) for h in asked])
        old.append(took)
        split._DRAWN.clear()
        HELD_OUT.of_hashes(ids[:-NEW]), HELD_OUT.of_hashes(named)  # the last run's

        def now() -> list[np.ndarray]:
            drawn = [HELD_OUT.of_hashes(h) for h in asked[:-1]]
            return [*drawn, drawn[0][rows]]  # the scored: the listing's at their rows

        took, got = _cpu_ms(now)
        new.append(took)
        assert all(map(np.array_equal, got, want))  # type: ignore[call-overload]
    return statistics.median(old), statistics.median(new)


def known_ids_read(ids: np.ndarray, repeats: int) -> tuple[float, float]:
    """The served model's known ids (all but the new), as the last run wrote them."""
    old, new = [], []
    with tempfile.TemporaryDirectory() as folder:
        candidate = Path(folder)
        for _ in range(repeats):
            kept_in_memory._PROCESS[:] = []
            stores.write_known_ids(candidate, ids[:-NEW], BUDGET)
            took, want = _cpu_ms(lambda: stores.read_known_ids(candidate))
            old.append(took)
            took, got = _cpu_ms(lambda: stores.read_known_ids(candidate, BUDGET))
            new.append(took)
            assert np.array_equal(got, want)  # type: ignore[arg-type]
    return statistics.median(old), statistics.median(new)


def asked_rows(ids: np.ndarray, repeats: int) -> tuple[float, float]:
    """The served model's scoring's rows (the held-out and the new) and the gate's (the
    held-out), asked by rows of the listing and taken as the scoring's array."""
    listing = tuple(map(str, ids.tolist()))
    held = HELD_OUT.of_hashes(ids)
    fresh = np.arange(len(ids)) >= len(ids) - NEW
    asked = [np.flatnonzero(held | fresh), np.flatnonzero(held)]
    old, new = [], []
    for _ in range(repeats):

        def then() -> list[np.ndarray]:
            made = [(listing, tuple(rows.tolist())) for rows in asked]  # of_rows's tuple
            # rows(): the listing compared id for id, then a list of its rows
            handed = [list(at) if listing == among else [] for among, at in made]
            return [np.asarray(rows, dtype=np.int64) for rows in handed]

        took, want = _cpu_ms(then)
        old.append(took)

        def now() -> list[np.ndarray | None]:
            return [ScoreOnly.of_rows(listing, rows).row_array(listing) for rows in asked]

        took, got = _cpu_ms(now)
        new.append(took)
        assert all(map(np.array_equal, got, want))  # type: ignore[call-overload]
    return statistics.median(old), statistics.median(new)


def evaluated_lookup(ids: np.ndarray, repeats: int) -> tuple[float, float]:
    """The held-out records evaluated, kept sorted with each one's row; the gate asks for
    the same records in the order evaluated."""
    judged = ids[HELD_OUT.of_hashes(ids)]
    order = np.argsort(judged, kind="stable")
    kept = judged[order]
    rows = np.empty(len(order), np.intp)
    rows[order] = np.arange(len(order))
    old, new = [], []
    for _ in range(repeats):
        took, want = _cpu_ms(lambda: find_ids(kept, judged)[0])
        old.append(took)

        def now() -> np.ndarray:
            if len(rows) == len(judged) and np.array_equal(kept[rows], judged):
                return rows
            return find_ids(kept, judged)[0]

        took, got = _cpu_ms(now)
        new.append(took)
        assert np.array_equal(got, want)  # type: ignore[arg-type]
    return statistics.median(old), statistics.median(new)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=21)
    args = parser.parse_args(argv)
    load = " ".join(Path("/proc/loadavg").read_text().split()[:3])
    print(f"load average {load}; CPU ms, medians of {args.repeats}, {NEW:,} new records\n")
    print("| piece | pool | e35a2155 | this tree |")
    print("| --- | --- | --- | --- |")
    for size in (10_000, 100_000):
        ids = _pool(size)
        pieces = {
            "listing's known lookup": listing_lookup(ids, args.repeats),
            "held-out unknown": held_out_unknown(ids, args.repeats),
            "known segments": known_segments(size, args.repeats),
            "a run's held-out draws": held_out_draws(ids, args.repeats),
            "served model's known ids": known_ids_read(ids, args.repeats),
            "rows asked, two scorings": asked_rows(ids, args.repeats),
            "evaluated logits' lookup": evaluated_lookup(ids, args.repeats),
        }
        for name, (old, new) in pieces.items():
            print(f"| {name} | {size:,} | {old:.2f} | {new:.2f} |")


if __name__ == "__main__":
    main()
