"""The judged-model capability of the contract: RecordLosses refuses bad scores in one
line, and a declaration is either whole (judged), absent (not judged) or refused."""

from __future__ import annotations

import math
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from genesis_fp16_infrastructure.contract.judging import judging_margin, judging_of
from genesis_fp16_infrastructure.contract.plugin_api import TrainRequestError
from genesis_fp16_infrastructure.contract.record_losses import (
    RecordIds,
    RecordLosses,
    RecordLossesError,
)
from genesis_fp16_infrastructure.contract.split import id_hashes


@pytest.mark.parametrize(
    ("ids", "losses", "segments", "why"),
    [
        (["a", "b"], [1.0], None, "2 ids but 1 loss values"),
        (["a", "a"], [1.0, 2.0], None, "id 'a' twice"),
        (["a", ""], [1.0, 2.0], None, "id 1 is ''"),
        ([1, "b"], [1.0, 2.0], None, "id 0 is 1, not a string"),
        (["a", "b"], [1.0, math.nan], None, "loss of 'b' is nan"),
        (["a", "b"], [1.0, math.inf], None, "loss of 'b' is inf"),
        (["a", "b"], [1.0, "x"], None, "a loss is not a number"),
        (["a", "b"], [1.0, 2.0], ["s"], "1 segments for 2 records"),
        (["a", "b"], [1.0, -0.5], None, "loss of 'b' is -0.5; losses are 0 or more"),
        (["a", "b"], [1.0, 2.0], ["s", 7], "segment 1 is 7, not a string"),
        (["a", "b"], [1.0, 2.0], ["s", None], "segment 1 is None, not a string"),
    ],
)
def test_record_losses_refuse_what_cannot_be_judged_in_one_line(
    ids: list[Any], losses: list[Any], segments: list[str] | None, why: str
) -> None:
    """Unequal lengths, repeated or empty ids, non-finite, non-numeric or negative
    losses, segments that are not strings."""
    with pytest.raises(RecordLossesError, match=f"^RecordLosses: {why}") as caught:
        RecordLosses.of(ids, losses, segments)
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize(
    ("losses", "primary", "why"),
    [
        ({"log_loss": [1.0, 2.0], "brier": [0.5]}, "", "2 ids but 1 brier values"),
        ({"log_loss": [1.0, 2.0], "brier": [0.5, math.nan]}, "", "brier of 'b' is nan"),
        ({"log_loss": [1.0, 2.0], "brier": [0.5, -0.1]}, "", "brier of 'b' is -0.1; losses"),
        ({"log_loss": [1.0, 2.0], "Brier Score": [0.5, 0.1]}, "", "column name 'Brier Score'"),
        ({}, "", "no loss column"),
        ({"log_loss": [1.0, 2.0]}, "brier", "primary 'brier' is not a column of"),
    ],
)
def test_every_loss_column_is_checked_as_the_first_is(
    losses: dict[str, list[float]], primary: str, why: str
) -> None:
    """Each named column is as long as the ids, finite and not negative; names are
    lower_snake_case; the primary names a column; each refusal is one line."""
    with pytest.raises(RecordLossesError, match=f"^RecordLosses: {why}") as caught:
        RecordLosses.of(["a", "b"], losses, primary=primary)
    assert "\n" not in str(caught.value)


def test_named_columns_keep_their_order_and_name_a_primary() -> None:
    """A mapping keeps its columns, the first primary unless one is named; a plain
    sequence (the one-column shape of plugins before columns) is one column "loss";
    take() and mean() work on every column; a dict changed after the check changes
    nothing."""
    columns = {"log_loss": [0.5, 0.25, 0.0], "brier": [0.2, 0.1, 0.0]}
    scored = RecordLosses.of(["x", "y", "z"], columns)
    assert scored.primary == "log_loss" and scored.metrics() == ("log_loss", "brier")
    assert RecordLosses.of(["x"], {"a": [1.0], "b": [2.0]}, primary="b").metrics() == ("b", "a")
    raw = {"loss": [0.5]}
    plain = RecordLosses(("x",), raw)  # type: ignore[arg-type]
    raw["loss"].append(math.inf)
    raw["more"] = [1.0]
    assert plain == RecordLosses(("x",), (0.5,))  # type: ignore[arg-type]
    assert dict(plain.losses) == {"loss": (0.5,)} and plain.primary == "loss"
    kept = scored.take([True, False, True])
    assert kept.column("brier") == (0.2, 0.0) and kept.mean() == 0.25
    assert kept.mean("brier") == pytest.approx(0.1)


def test_record_losses_take_numpy_and_keep_order() -> None:
    """Losses from numpy become floats, in the ids' order; the mean is the plain mean."""
    import numpy as np

    scored = RecordLosses.of(["x", "y", "z"], np.array([0.5, 0.25, 0.0], dtype=np.float32))
    assert scored.column() == (0.5, 0.25, 0.0) and all(type(v) is float for v in scored.column())
    assert scored.mean() == 0.25 and math.isnan(RecordLosses.of([], []).mean())


def test_record_losses_keep_a_copy_of_what_was_checked(tmp_path: Path) -> None:
    """Lists passed in and changed after the check (inf, an id short, a duplicate id)
    change nothing the RecordLosses holds; a frozen one changed behind its back is
    caught where the judged run uses it (its own copy, checked again)."""
    from genesis_fp16_infrastructure.judging.scoring_copy import losses_of

    ids, losses, segments = ["a", "b"], [0.5, 0.25], ["s", "t"]
    scored = RecordLosses(ids, losses, segments)  # type: ignore[arg-type]
    ids.append("c"), ids.__setitem__(1, "a"), losses.__setitem__(0, math.inf), segments.pop()
    assert scored == RecordLosses(("a", "b"), (0.5, 0.25), ("s", "t"))  # type: ignore[arg-type]

    class Changing:
        def score_records(self, checkpoint: Path, request: Any) -> RecordLosses:
            self.returned = RecordLosses.of(["a", "b"], [0.5, 0.25])
            return self.returned

    plugin, request = Changing(), SimpleNamespace(agent="judged", checkpoint_dir=tmp_path)
    checkpoint = tmp_path / "ckpt.pt"  # scored on a copy in the agent's folder (issue 69)
    checkpoint.write_bytes(b"weights")
    used = losses_of(plugin, checkpoint, request)  # type: ignore[arg-type]
    object.__setattr__(plugin.returned, "losses", (0.5, math.inf))  # after the check
    assert used is not None and used.column() == (0.5, 0.25) and used is not plugin.returned
    plugin.score_records = lambda checkpoint, request: plugin.returned  # type: ignore[method-assign]
    with pytest.raises(TrainRequestError, match=r"cannot score \S*ckpt\.pt: .* loss of 'b' is inf"):
        losses_of(plugin, checkpoint, request)  # type: ignore[arg-type]


class _Judged:
    api_version, name, judging_version, loss_span = 3, "judged", 1, 1.0

    def score_records(self, checkpoint: Path, request: Any) -> RecordLosses:
        return RecordLosses.of([], [])


def test_judging_of_tells_judged_plain_and_half_declared_plugins_apart() -> None:
    """Whole: judged; no score_records, or api_version 2: not judged; another judging
    version, a missing or bad span, a margin that is no number: TypeError naming it."""
    judged = _Judged()
    assert judging_of(judged) is judged
    assert judging_of(object()) is None
    old = _Judged()
    old.api_version = 2
    assert judging_of(old) is None
    for attribute, value, why in (
        ("judging_version", 2, "judging_version 2, this genesis-fp16 supports 1"),
        ("loss_span", 0.0, "loss_span 0.0 is not a positive finite number"),
        ("loss_span", math.inf, "loss_span inf is not a positive finite number"),
        ("judging_margin", "big", "judging_margin 'big' is not a number"),
        ("judging_margin", {"brier": "big"}, "judging_margin {'brier': 'big'} is not a number"),
        ("judging_margin_floor", -0.001, "judging_margin_floor -0.001 is not a finite number"),
        ("judging_margin_floor", {"loss": math.inf}, "judging_margin_floor {'loss': inf} is not"),
    ):
        bad = _Judged()
        setattr(bad, attribute, value)
        with pytest.raises(TypeError, match=f"^judged: {why}"):
            judging_of(bad)


def test_the_margin_is_declared_or_relative_to_the_reference() -> None:
    """Without judging_margin, 5% of the reference's mean loss; with it, that number; with a
    map by column, the column's number, else 5% of its mean."""
    assert judging_margin(_Judged(), 0.4, "loss") == pytest.approx(0.02)
    declared = _Judged()
    declared.judging_margin = 0.1  # type: ignore[attr-defined]
    assert judging_margin(declared, 0.4, "loss") == 0.1
    by_column = _Judged()
    by_column.judging_margin = {"log_loss": 0.01}  # type: ignore[attr-defined]
    assert judging_margin(by_column, 0.4, "log_loss") == 0.01
    assert judging_margin(by_column, 0.4, "brier") == pytest.approx(0.02)


def test_a_declared_floor_is_the_least_relative_margin() -> None:
    """judging_margin_floor lifts the relative margin near zero loss and nowhere else; a
    map applies by column; a declared judging_margin is taken as it is."""
    floored = _Judged()
    floored.judging_margin_floor = 0.001  # type: ignore[attr-defined]
    assert judging_margin(floored, 0.0002, "loss") == 0.001
    assert judging_margin(floored, 0.4, "loss") == pytest.approx(0.02)
    by_column = _Judged()
    by_column.judging_margin_floor = {"brier": 0.001}  # type: ignore[attr-defined]
    assert judging_margin(by_column, 0.0002, "brier") == 0.001
    assert judging_margin(by_column, 0.0002, "loss") == pytest.approx(1e-5)
    by_column.judging_margin = 0.0001  # type: ignore[attr-defined]
    assert judging_margin(by_column, 0.0002, "brier") == 0.0001


def test_the_request_keeps_the_rows_the_split_does_not_hold_out(tmp_path: Path) -> None:
    """request.training_rows keeps exactly the rows the held-out split does not hold out,
    in order: about four in five, the same for the same ids however the pool grows."""
    import numpy as np

    from genesis_fp16_infrastructure.contract.split import HELD_OUT
    from genesis_fp16_infrastructure.contract.train_request import TrainRequest
    from genesis_fp16_infrastructure.training.precision.precision_request import PrecisionRequest

    request = TrainRequest(
        agent="a",
        precision=PrecisionRequest("fp32"),
        precision_reason="test",
        state_dir=tmp_path,
        checkpoint_dir=tmp_path,
    )
    ids = [f"line-{i}" for i in range(500)]
    rows = request.training_rows(ids)
    assert rows == np.flatnonzero(~HELD_OUT.of_ids(ids)).tolist() and 350 < len(rows) < 450
    grown = request.training_rows([f"new-{i}" for i in range(100)] + ids)
    assert [r - 100 for r in grown if r >= 100] == rows


def test_record_losses_take_keeps_the_flagged_records_and_their_segments() -> None:
    """take() keeps the records whose flag is true, in order, segments with them."""
    scored = RecordLosses.of(["a", "b", "c"], [0.1, 0.2, 0.3], ["s", "t", "s"])
    kept = scored.take([True, False, True])
    assert kept.ids == ("a", "c") and kept.column() == (0.1, 0.3) and kept.segments == ("s", "s")
    assert RecordLosses.of(["a"], [0.5]).take([False]).ids == ()


@pytest.mark.parametrize("hashed_first", [True, False])
def test_a_part_s_id_hashes_are_its_own_ids_hashes(hashed_first: bool) -> None:
    """take() hands its part the whole's id hashes, picked, when the whole has them:
    the same as hashing the part's own ids, and read-only like them."""
    ids = [f"record-{i}" for i in range(50)]
    scored = RecordLosses.of(ids, [0.1] * 50)
    if hashed_first:
        assert len(scored.id_hashes) == 50
    keep = [i % 3 == 0 for i in range(50)]
    part = scored.take(keep)
    fresh = RecordLosses.of(part.ids, part.column())
    assert part.id_hashes.tolist() == fresh.id_hashes.tolist()
    assert not part.id_hashes.flags.writeable
    assert scored.take([False] * 50).id_hashes.tolist() == []


def test_record_ids_take_the_plugins_kept_hashes_only_where_they_are_the_ids() -> None:
    """A listing with its ids' hashes is not hashed again (the hashes it gave are its
    id_hashes, copied read-only); hashes of other ids, of another count or not 64-bit
    integers are refused in one line."""
    ids = [f"record-{i}" for i in range(500)]
    kept = id_hashes(ids)
    listed = RecordIds(tuple(ids), hashes=kept)
    kept[:] = 0  # the plugin's array changed after: the listing keeps its own copy
    assert np.array_equal(listed.id_hashes, id_hashes(ids))
    assert not listed.id_hashes.flags.writeable
    other = id_hashes(ids)
    other[0] ^= 1  # the first of the sample
    for bad in (other, id_hashes(ids[1:]), id_hashes(ids).astype(np.float64), ["x"] * 500):
        with pytest.raises(RecordLossesError, match="hashes are not the ids' id_hashes"):
            RecordIds(tuple(ids), hashes=np.asarray(bad))


@pytest.mark.parametrize("keep", [[], [2], [0, 3], [1, 2, 4], [0, 1, 2, 3, 4]])
def test_a_part_is_what_a_checked_build_of_its_records_gives(keep: list[int]) -> None:
    """take() sets its part's fields without checking them again: each field is what
    building a RecordLosses of the kept records gives (every column, the segments, the
    primary, the quarantined count), and the part is as frozen as a built one."""
    columns = {"log_loss": [0.5, 0.1, 0.2, 0.3, 0.4], "brier": [0.0, 1.0, 2.0, 3.0, 4.0]}
    scored = RecordLosses.of("abcde", columns, "stsus", quarantined=3, primary="brier")
    part = scored.take([i in keep for i in range(5)])
    built = RecordLosses.of(
        [scored.ids[i] for i in keep],
        {name: [values[i] for i in keep] for name, values in columns.items()},
        [scored.segments[i] for i in keep],  # type: ignore[index]
        quarantined=3,
        primary="brier",
    )
    assert part == built and part.metrics() == ("brier", "log_loss")
    assert [type(v) for v in (part.ids, part.segments, *part.losses.values())] == [tuple] * 4
    with pytest.raises(AttributeError):
        part.ids = ()  # type: ignore[misc]
