"""The gate's records are asked for by their rows in the listing the served model's
scoring asked by (``Served.judged_asked``), whenever that scoring was given exactly the
records it asked for; by their ids otherwise."""

from __future__ import annotations

import numpy as np
import pytest

from genesis_fp16_infrastructure.contract.record_losses import RecordIds, RecordLosses
from genesis_fp16_infrastructure.contract.split import HELD_OUT, ScoreOnly, id_hashes, sorted_unique
from genesis_fp16_infrastructure.data import schema
from genesis_fp16_infrastructure.judging.questions import _on_known
from genesis_fp16_infrastructure.judging.served import Served, held_out_unknown

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


def test_the_judged_records_known_are_the_listings_lookup_at_their_rows() -> None:
    """Given the records it asked for by rows, whether it knew each scored record (the
    watch's) and each judged one is the listing's lookup at their rows (``scored_knew``,
    ``judged_knew``), the same flags a search of the known ids gives; the gate's
    ``known`` part (``_on_known``) is the same either way. A lookup that is not of this
    listing (another length), or a scoring given more than it asked for: None, and
    ``_on_known`` searches the known ids."""
    served = _served(ASKED)
    listed = RecordIds(LISTING)
    served.records = listed
    served.known = sorted_unique(listed.id_hashes[: len(LISTING) // 2])
    served.named = sorted_unique(listed.id_hashes[: len(LISTING) // 4])  # trained on these
    served.plugin = object()  # its records are training data
    served.knew = schema.known(listed.id_hashes, served.known)
    served._asked_rows, served.given_asked = np.asarray(ASKED), True
    judged = served.judged
    searched = schema.known(judged.id_hashes, served.known)
    assert served.judged_knew is not None and 0 < served.judged_knew.sum() < len(searched)
    assert served.judged_knew.tolist() == searched.tolist()
    scored = schema.known(served.losses.id_hashes, served.known)  # type: ignore[union-attr]
    assert served.scored_knew is not None and served.scored_knew.tolist() == scored.tolist()
    candidate = RecordLosses.of(judged.ids, [0.5] * len(judged.ids))
    assert candidate.hashed_as(judged.ids, judged.id_hashes)
    found = _on_known(candidate, served)
    assert found is not None and found.tolist() == searched.tolist()
    stale = _served(ASKED)
    stale.records, stale.known, stale.plugin = listed, served.known, served.plugin
    stale.named = served.named
    stale.knew = served.knew[:-1]  # not the listing its rows are of
    stale._asked_rows, stale.given_asked = np.asarray(ASKED), True
    assert stale.judged_knew is None
    again = RecordLosses.of(stale.judged.ids, [0.5] * len(stale.judged.ids))
    assert again.hashed_as(stale.judged.ids, stale.judged.id_hashes)
    assert _on_known(again, stale).tolist() == searched.tolist()  # type: ignore[union-attr]
    more = _served(list(range(len(LISTING))))
    more.records, more.knew, more.given_asked = listed, served.knew, False
    more._asked_rows = np.asarray(ASKED)
    assert more.judged_knew is None


def test_a_named_list_with_no_held_out_record_is_not_searched(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The judged records are the held-out ones the served model did not train on: where
    the records its checkpoint names hold no held-out one (a model served through the
    gate), none is searched for among them, and the answer is the search's; where they
    hold one (an older or adopted model), they are searched, and that record is left out."""
    listing = np.array(list(LISTING))
    held = HELD_OUT.of_ids(list(LISTING))
    searched: list[int] = []
    real = schema.known

    def known(ids: np.ndarray, sorted_known: np.ndarray, order: object = None) -> np.ndarray:
        searched.append(len(ids))
        return real(ids, sorted_known)

    monkeypatch.setattr(schema, "known", known)
    for named in (listing[~held][:150], np.concatenate([listing[~held][:150], listing[held][:2]])):
        served = _served(ASKED)
        served.named = sorted_unique(id_hashes(named.tolist()))
        searched.clear()
        keep = held_out_unknown(served, served.losses)
        ids = served.losses.id_hashes
        want = HELD_OUT.of_hashes(ids) & ~np.isin(ids, served.named)
        assert np.array_equal(keep, want)
        assert searched == ([] if len(named) == 150 else [len(ids)])
        assert served.names_held_out == (len(named) > 150)


def test_the_scored_records_held_out_are_the_listings_draw_at_their_rows() -> None:
    """Given the records it asked for by rows, which of its scored records are held out
    is the listing's draw at those rows (drawn once a run), the same as a draw of their
    hashes; a draw of another listing (another length), a scoring given more than it
    asked for, or other losses than its own: drawn of their hashes."""
    served = _served(ASKED)
    listed = RecordIds(LISTING)
    served.records = listed
    served._listed_held = HELD_OUT.of_hashes(listed.id_hashes)
    served._asked_rows, served.given_asked = np.asarray(ASKED), True
    losses = served.losses
    assert losses is not None
    drawn = HELD_OUT.of_hashes(losses.id_hashes)
    assert 0 < drawn.sum() < len(drawn)
    assert served.held_of(losses).tolist() == drawn.tolist()
    other = RecordLosses.of(losses.ids, [0.5] * len(losses.ids))
    assert served.held_of(other).tolist() == drawn.tolist()
    served._listed_held = ~served._listed_held[:-1]  # stale: not of this listing
    assert served.held_of(losses).tolist() == drawn.tolist()
    served._listed_held = HELD_OUT.of_hashes(listed.id_hashes)
    served.given_asked = False  # given more than it asked: its rows are not these
    served._listed_held = ~served._listed_held
    assert served.held_of(losses).tolist() == drawn.tolist()
