"""The gate's records are asked for by their rows in the listing the served model's
scoring asked by (``Served.judged_asked``), whenever that scoring was given exactly the
records it asked for; by their ids otherwise."""

from __future__ import annotations

import numpy as np

from genesis_fp16_infrastructure.contract.judging import RecordLosses
from genesis_fp16_infrastructure.contract.split import HELD_OUT, ScoreOnly
from genesis_fp16_infrastructure.judging.served import Served

LISTING = tuple(f"record-{i}" for i in range(600))
ASKED = list(range(0, 600, 3))


def _served(scored: list[int]) -> Served:
    """A served model whose scoring asked for ``ASKED`` by rows and was given ``scored``;
    it knew no record (every held-out one is judged on)."""
    served = Served.__new__(Served)
    served.asked = ScoreOnly.of_rows(LISTING, ASKED)
    served.losses = RecordLosses.of([LISTING[i] for i in scored], [0.25] * len(scored))
    served.known, served.named = np.zeros(0, np.uint64), None
    return served


def test_the_gates_records_are_asked_by_their_rows_in_the_listing() -> None:
    """Given the records it asked for: a ScoreOnly of rows whose rows of the listing are
    the held-out ones among them, the judged ids in order, and the same rows a lookup of
    those ids gives (the listing as a list, as a plugin holds it)."""
    served = _served(ASKED)
    asked = served.judged_asked
    judged = list(served.judged.ids)
    assert isinstance(asked, ScoreOnly) and 0 < len(judged) < len(ASKED)
    held = HELD_OUT.of_ids(list(LISTING))
    assert judged == [LISTING[i] for i in ASKED if held[i]]
    rows = asked.rows(list(LISTING))
    assert [LISTING[i] for i in rows] == judged
    assert rows == ScoreOnly(frozenset(judged)).rows(list(LISTING))


def test_a_scoring_given_more_records_asks_by_ids() -> None:
    """Given every record though it asked for a third: the gate's records by their ids."""
    served = _served(list(range(len(LISTING))))
    asked = served.judged_asked
    assert isinstance(asked, tuple) and asked == served.judged.ids
