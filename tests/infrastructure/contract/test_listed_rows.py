"""Losses made of rows of a checked listing keep the rows, not their ids (issue 90): the
judged run pairs them by their rows and never takes the ids; read, the ids and segments
are the listing's at those rows; a record changed behind its back (ids, segments, rows
or a column set since, its kept rows planted) is not believed: its copy is checked in
full, as any other record's is, and refused in the same words."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from genesis_fp16_infrastructure.contract import listed_rows, record_losses
from genesis_fp16_infrastructure.contract.listed_rows import (
    LISTED,
    ListedRows,
    still_listed,
    taken_at,
)
from genesis_fp16_infrastructure.contract.record_losses import (
    RecordIds,
    RecordLosses,
    RecordLossesError,
)
from genesis_fp16_infrastructure.contract.split import id_hashes

IDS = tuple(f"r{i}" for i in range(40))
SEGMENTS = tuple(f"s{i % 3}" for i in range(40))


def _part(rows: list[int], listing: RecordIds | None = None) -> RecordLosses:
    listed = listing or RecordIds(IDS, SEGMENTS)
    values = {"log_loss": [0.1 * (i % 5) for i in rows], "brier": [0.01 * i for i in rows]}
    return RecordLosses.of_rows(listed, np.array(rows, np.int64), values)


def test_records_paired_by_rows_never_take_their_ids(monkeypatch: pytest.MonkeyPatch) -> None:
    """The served model's records, copied, told as the rows asked, cut to the gate's and
    paired with the candidate's copy: no id or segment taken (no ``at_rows`` of the
    listing); read, they are the listing's at the rows, and hash as those ids do."""
    listing = RecordIds(IDS, SEGMENTS)
    taken: list[int] = []
    real = record_losses.at_rows
    monkeypatch.setattr(record_losses, "at_rows", lambda v, r: taken.append(len(v)) or real(v, r))
    served = RecordLosses.copy_of(_part([1, 4, 7, 9, 30], listing))
    assert served.listed_at(listing.ids, np.array([1, 4, 7, 9, 30])) is True
    assert served.listed_at(listing.ids, np.array([1, 4, 7, 9])) is False
    assert served.listed_at(("x",), np.array([0])) is None  # another listing: compare ids
    reference = served.take(np.array([True, False, True, False, True]))
    candidate = RecordLosses.copy_of(_part([1, 7, 30], listing))
    assert candidate.same_records(reference) and not candidate.same_records(served)
    assert len(IDS) not in taken and "ids" not in vars(candidate) and "ids" not in vars(reference)
    assert candidate.ids == ("r1", "r7", "r30") and reference.segments == ("s1", "s1", "s0")
    assert candidate.column("log_loss") == reference.column("log_loss")
    assert candidate.id_hashes.tolist() == id_hashes(candidate.ids).tolist()
    assert candidate == RecordLosses.of(candidate.ids, candidate.losses, candidate.segments)


def test_a_planted_or_stale_listing_is_not_believed() -> None:
    """Rows planted out of order, past the listing, or in a writeable array, ids or
    segments set behind its back, a column replaced or added: not the rows it was made
    of (``still_listed`` None), so its copy is checked in full and a fault refused."""
    part = _part([2, 5, 9])
    assert still_listed(vars(part), part.losses) is not None
    listed = vars(part)[LISTED]
    for rows in ([5, 2, 9], [2, 5, 40], [2, 5, 5]):
        planted = _part([2, 5, 9])
        at = np.frombuffer(np.array(rows, np.int64).tobytes(), np.int64)
        vars(planted)[LISTED] = ListedRows(listed.ids, listed.segments, at)
        assert still_listed(vars(planted), planted.losses) is None
    writeable = _part([2, 5, 9])
    vars(writeable)[LISTED] = listed._replace(at=np.array([2, 5, 9]))
    assert still_listed(vars(writeable), writeable.losses) is None
    twin = _part([2, 5, 9])
    object.__setattr__(twin, "ids", ("r2", "r2", "r9"))
    assert twin.listed_at(IDS, np.array([2, 5, 9])) is None
    with pytest.raises(RecordLossesError, match=r"^RecordLosses: id 'r2' twice$"):
        RecordLosses.copy_of(twin)
    short = _part([2, 5, 9])
    object.__setattr__(short, "segments", ("s2",))
    with pytest.raises(RecordLossesError, match=r"^RecordLosses: 1 segments for 3 records$"):
        RecordLosses.copy_of(short)
    replaced = _part([2, 5, 9])
    replaced.losses["brier"] = (0.1, -0.5, 0.2)  # type: ignore[index]
    with pytest.raises(RecordLossesError, match=r"brier of 'r5' is -0.5; losses are 0 or more$"):
        RecordLosses.copy_of(replaced)
    added = _part([2, 5, 9])
    added.losses["extra"] = (0.1, 0.2)  # type: ignore[index]
    with pytest.raises(RecordLossesError, match=r"^RecordLosses: 3 ids but 2 extra values$"):
        RecordLosses.copy_of(added)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.integers(0, 39), unique=True, max_size=8).map(sorted),
    st.sampled_from(["none", "read", "ids", "segments", "rows", "column", "checked"]),
    st.lists(st.sampled_from(["r1", "r2", "", "r2"]), max_size=4),
)
def test_a_copy_of_rows_is_what_the_whole_check_gives(
    rows: list[int], change: str, other: list[str]
) -> None:
    """Whatever was done to a record made of rows since (nothing, its ids read, ids or
    segments set, its rows planted, a column replaced, its kept check dropped): its copy
    holds, or refuses, what RecordLosses.of gives of the fields it shows."""
    part = _part(rows)
    if change == "read":
        assert part.ids == tuple(IDS[i] for i in rows)
    elif change == "ids":
        object.__setattr__(part, "ids", tuple(other))
    elif change == "segments":
        object.__setattr__(part, "segments", tuple(other))
    elif change == "rows":
        at = np.frombuffer(np.array(other and [3, 1][: len(rows)], np.int64).tobytes(), np.int64)
        vars(part)[LISTED] = vars(part)[LISTED]._replace(at=at)
    elif change == "column":
        part.losses["log_loss"] = tuple(0.5 for _ in other)  # type: ignore[index]
    elif change == "checked":
        vars(part).pop("_checked")

    def shown() -> Any:
        fields = part.ids, part.losses, part.segments
        return RecordLosses.of(*fields, part.quarantined, part.primary)

    assert _outcome(lambda: RecordLosses.copy_of(part)) == _outcome(shown)


def _outcome(call: Any) -> tuple[Any, ...]:
    try:
        got = call()
    except RecordLossesError as exc:
        return ("refused", str(exc))
    return ("kept", got.ids, dict(got.losses), got.segments, got.primary)


def _imported(module: str) -> dict[str, set[str]]:
    """The names ``module`` (contract/<module>.py) imports, by the contract module they
    come from."""
    import ast
    from pathlib import Path

    from genesis_fp16_infrastructure import contract

    tree = ast.parse((Path(contract.__file__).parent / f"{module}.py").read_text())
    found: dict[str, set[str]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(contract.__name__):
            found.setdefault(node.module.rsplit(".", 1)[1], set()).update(
                a.name for a in node.names
            )
    return found


def test_listed_rows_and_loss_columns_are_read_in_one_direction() -> None:
    """A record's copy reads its listed rows and its columns' arrays each once, from its
    own module (the judged walks do not grow, issue 94's count): ``loss_columns`` imports
    nothing of ``listed_rows``, and ``listed_rows`` only the name of the arrays' key."""
    assert "listed_rows" not in _imported("loss_columns")
    assert _imported("listed_rows").get("loss_columns") == {"ARRAYS"}


def test_ids_and_segments_at_some_rows_are_taken_at_those_rows_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``taken_at`` of a record of rows whose ids were never read: the listing's ids and
    segments at those of its rows alone (no tuple of every record's made, nor kept), the
    same as its whole tuples give at those rows once they are read; a listing without
    segments: None."""
    rows = [1, 4, 7, 9, 30]
    part = RecordLosses.copy_of(_part(rows))
    taken: list[int] = []
    real = listed_rows.at_rows
    monkeypatch.setattr(listed_rows, "at_rows", lambda v, r: taken.append(len(r)) or real(v, r))
    at = np.array([3, 0], np.int64)
    assert taken_at(part, "ids", at) == ("r9", "r1")
    assert taken_at(part, "segments", at) == ("s0", "s1")
    assert taken == [2, 2] and "ids" not in vars(part) and "segments" not in vars(part)
    monkeypatch.undo()
    whole = (part.ids, part.segments)  # read now: taken from the tuples alike
    assert taken_at(part, "ids", at) == (whole[0][3], whole[0][0])
    assert taken_at(part, "segments", at) == (whole[1][3], whole[1][0])
    bare = RecordLosses.copy_of(_part(rows, RecordIds(IDS)))
    assert taken_at(bare, "segments", at) is None and taken_at(bare, "ids", at) == ("r9", "r1")
