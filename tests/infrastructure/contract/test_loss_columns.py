"""A record's loss columns as arrays (contract/loss_columns.py): kept beside the tuples
they were made of, carried through a copy and a take, believed only beside that very
tuple."""

from __future__ import annotations

import numpy as np
import pytest

from genesis_fp16_infrastructure.contract.loss_columns import ARRAYS, column_array, keep_arrays
from genesis_fp16_infrastructure.contract.record_losses import (
    RecordIds,
    RecordLosses,
    RecordLossesError,
)
from genesis_fp16_infrastructure.judging.gate import paired_losses, shared_rows


def _bits(record: RecordLosses, metric: str) -> bytes:
    return np.fromiter(record.column(metric), np.float64).tobytes()


def _kept(record: RecordLosses, metric: str) -> bool:
    """Whether ``record`` answers ``metric`` with the array it keeps (not one made now)."""
    pair = vars(record).get(ARRAYS, {}).get(metric)
    return pair is not None and record.column_array(metric) is pair[1]


def _made() -> dict[str, RecordLosses]:
    listing = RecordIds(("a", "b", "c", "d"), ("x", "y", "x", "y"))
    columns = {"log_loss": [0.5, 0.0, 0.25, 1e-300], "brier": np.array([0.1, -0.0, 0.3, 2.0])}
    rows = RecordLosses.of_rows(listing, np.array([0, 1, 2, 3]), columns)
    whole = RecordLosses.of(["a", "b", "c", "d"], columns, ["x", "y", "x", "y"])
    return {
        "of": whole,
        "of_rows": rows,
        "copy_of rows": RecordLosses.copy_of(rows),
        "copy_of": RecordLosses.copy_of(whole),
        "take rows": RecordLosses.copy_of(rows).take([True, False, True, True]),
        "take": whole.take([False, True, True, False]),
    }


@pytest.mark.parametrize("how", list(_made()))
def test_each_way_a_record_is_made_keeps_arrays_equal_to_its_columns(how: str) -> None:
    """Made by of, of_rows, copy_of or take, a record keeps each column's array, and it
    holds the column's very floats, bit for bit (a -0.0 and a subnormal included)."""
    record = _made()[how]
    for metric in ("log_loss", "brier"):
        assert _kept(record, metric), (how, metric)
        array = record.column_array(metric)
        assert array.tobytes() == _bits(record, metric)
        assert not array.flags.writeable
        with pytest.raises(ValueError):
            array.flags.writeable = True  # over bytes of its own: no one can change it


def test_a_column_set_behind_the_records_back_is_not_believed() -> None:
    """A column replaced after the record was made (object.__setattr__ on the frozen
    record) is made into an array again: the kept one, of the old tuple, is not used."""
    record = _made()["of"]
    changed = {"log_loss": (9.0, 9.0, 9.0, 9.0), "brier": record.losses["brier"]}
    object.__setattr__(record, "losses", changed)
    assert record.column_array("log_loss").tolist() == [9.0] * 4
    assert _kept(record, "brier")


def test_a_planted_or_writeable_array_is_not_believed() -> None:
    """An array someone could still write, or kept beside a list (which can change after
    its array was made), is not believed: the column's own numbers are."""
    values = (0.5, 0.25)
    fields: dict[str, object] = {ARRAYS: {"loss": (values, np.array([7.0, 7.0]))}}
    assert column_array(fields, "loss", values).tolist() == [0.5, 0.25]
    listed = [0.5, 0.25]
    keep_arrays(fields, {"loss": listed}, {"loss": np.array(listed)})  # type: ignore[dict-item]
    listed[0] = 3.0
    assert column_array(fields, "loss", listed).tolist() == [3.0, 0.25]  # type: ignore[arg-type]


def test_a_copy_does_not_carry_an_array_of_a_column_it_copied_anew() -> None:
    """copy_of a record whose column was set to a list: the copy's tuple is new, so the
    old array is not carried, and the copy's array is its own column's."""
    record = _made()["of"]
    object.__setattr__(record, "losses", {"log_loss": [0.1, 0.2, 0.3, 0.4], "brier": [0.0] * 4})
    copy = RecordLosses.copy_of(record)
    assert not _kept(copy, "log_loss")
    assert copy.column_array("log_loss").tolist() == [0.1, 0.2, 0.3, 0.4]


def test_paired_losses_are_the_columns_numbers_whether_kept_or_not() -> None:
    """The gate's pairs from kept arrays equal those from the columns' floats."""
    kept = _made()["of"]
    bare = RecordLosses.of(kept.ids, {m: list(kept.column(m)) for m in kept.metrics()})
    vars(bare).pop(ARRAYS)
    served = _made()["take rows"]
    for metric in ("log_loss", "brier"):
        a = paired_losses(kept, served, 1.0, metric)
        b = paired_losses(bare, served, 1.0, metric)
        assert [x.tobytes() for x in a] == [x.tobytes() for x in b]


def test_a_record_of_rows_makes_no_tuple_of_floats_until_its_losses_are_read() -> None:
    """Of rows of a checked listing, copied and cut: its columns kept as arrays alone (no
    ``losses``), paired and counted by them; a column read makes that tuple alone, the
    losses read make the rest, equal to the floats given, and the record is then as one
    made with them (copied and cut by its rows, its arrays kept)."""
    listing = RecordIds(("a", "b", "c", "d"), ("x", "y", "x", "y"))
    columns = {"log_loss": [0.5, 0.0, 0.25, 1e-300], "brier": [0.1, -0.0, 0.3, 2.0]}
    part = RecordLosses.copy_of(RecordLosses.of_rows(listing, np.array([0, 1, 2, 3]), columns))
    cut = part.take([True, False, True, True])
    for record in (part, cut):
        assert "losses" not in vars(record) and record.metrics() == ("log_loss", "brier")
    assert cut.column_array("brier").tolist() == [0.1, 0.3, 2.0]
    assert cut.same_records(RecordLosses.copy_of(cut)) and "losses" not in vars(cut)
    assert cut.column("brier") == (0.1, 0.3, 2.0) and "losses" not in vars(cut)
    assert cut.losses == {"log_loss": (0.5, 0.25, 1e-300), "brier": (0.1, 0.3, 2.0)}
    assert cut.column("brier") is cut.losses["brier"] and _kept(cut, "brier")
    again = RecordLosses.copy_of(cut).take([False, True, True])
    assert again.losses == {"log_loss": (0.25, 1e-300), "brier": (0.3, 2.0)}
    assert again.segments == ("x", "y") and "ids" not in vars(again)
    assert _bits(part, "brier") == np.array([0.1, -0.0, 0.3, 2.0]).tobytes()


@pytest.mark.parametrize("how", ["copy_of", "take"])
@pytest.mark.parametrize(
    ("field", "value", "said"),
    [
        ("quarantined", -1, "quarantined is -1, not a count"),
        ("primary", "nope", "primary 'nope' is not a column"),
    ],
)
def test_a_record_kept_as_arrays_is_named_and_counted_again_when_copied_or_cut(
    how: str, field: str, value: object, said: str
) -> None:
    """A record of rows kept as its arrays alone, its count or primary set behind its back
    (``object.__setattr__``): its copy and its part refuse it, in the words a record
    made with those fields is refused in."""
    listing = RecordIds(("a", "b", "c"), ("x", "y", "x"))
    lazy = RecordLosses.of_rows(listing, np.array([0, 2]), {"loss": [0.5, 0.25]})
    assert "losses" not in vars(lazy)
    object.__setattr__(lazy, field, value)
    with pytest.raises(RecordLossesError, match=said):
        RecordLosses.copy_of(lazy) if how == "copy_of" else lazy.take([True, True])


def test_the_gate_pairs_and_counts_records_of_rows_by_their_arrays_alone() -> None:
    """The gate's rows and pairs of two records of rows of one listing (the candidate's
    and the served model's, cut to the judged records) make no tuple of their floats:
    both still keep their columns as arrays alone, and the pairs are their numbers."""
    listing = RecordIds(("a", "b", "c", "d"), ("x", "y", "x", "y"))
    served = RecordLosses.of_rows(listing, np.array([0, 1, 3]), {"loss": [0.5, 0.1, 0.25]})
    judged = RecordLosses.copy_of(served).take([True, False, True])
    ours = RecordLosses.copy_of(
        RecordLosses.of_rows(listing, np.array([0, 3]), {"loss": [0.4, 0.3]})
    )
    a, b = paired_losses(ours, judged, 1.0, "loss", shared_rows(ours, judged))
    assert a.tolist() == [0.4, 0.3] and b.tolist() == [0.5, 0.25]
    assert "losses" not in vars(ours) and "losses" not in vars(judged)
