"""The typed judging records' checks at numpy speed accept and refuse exactly what the
record-by-record check does, with the same one-line error; a copy whose fields are the
very tuples its source's check passed is not walked again, and any field changed since
is checked in full (issue 90)."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from genesis_fp16_infrastructure.contract import record_losses
from genesis_fp16_infrastructure.contract.record_losses import (
    RecordIds,
    RecordLosses,
    RecordLossesError,
)


class Name(str):
    """A str subclass: accepted as an id or a segment, by the record-by-record check."""


class Loss(float):
    """A float subclass: accepted as a loss, by the record-by-record check."""


_METRIC = re.compile(r"[a-z][a-z0-9_]{0,31}")


def _element_wise(
    kind: str, ids: Any, losses: Any, segments: Any, quarantined: Any, primary: str
) -> tuple[Any, ...]:
    """The record-by-record check as the library made it before numpy checked columns
    (d3c3856d's ``_copy_and_check``, ``_check_column`` and quarantined check, their
    per-record loops alone): the fields it keeps, or its RecordLossesError."""
    try:
        ids = tuple(ids)
        if kind == "RecordLosses":
            named = losses if isinstance(losses, Mapping) else {primary or "loss": losses}
            losses = {name: tuple(v) for name, v in named.items()}
        if segments is not None:
            segments = tuple(segments)
    except TypeError as exc:
        raise RecordLossesError(f"{kind}: a field is not a sequence ({exc})") from None
    if kind == "RecordLosses":
        for name in losses:
            if not isinstance(name, str) or not _METRIC.fullmatch(name):
                raise RecordLossesError(
                    f"RecordLosses: column name {name!r:.40} is not lower_snake_case "
                    "(at most 32 characters)"
                )
        if not losses:
            raise RecordLossesError("RecordLosses: no loss column")
        primary = primary or next(iter(losses))
        if primary not in losses:
            raise RecordLossesError(
                f"RecordLosses: primary {primary!r:.40} is not a column of {list(losses)}"
            )
    seen: set[object] = set()
    for index, id_ in enumerate(ids):
        if not isinstance(id_, str) or not id_:
            raise RecordLossesError(f"{kind}: id {index} is {id_!r}, not a string")
        if id_ in seen:
            raise RecordLossesError(f"{kind}: id {id_!r} twice")
        seen.add(id_)
    for name, values in losses.items() if kind == "RecordLosses" else ():
        if len(values) != len(ids):
            raise RecordLossesError(f"RecordLosses: {len(ids)} ids but {len(values)} {name} values")
        for id_, loss in zip(ids, values, strict=True):
            if isinstance(loss, bool) or not isinstance(loss, float) or not math.isfinite(loss):
                raise RecordLossesError(
                    f"RecordLosses: {name} of {id_!r} is {loss!r}, not a finite float"
                )
            if loss < 0.0:
                raise RecordLossesError(
                    f"RecordLosses: {name} of {id_!r} is {loss!r}; losses are 0 or more"
                )
    if segments is not None:
        if len(segments) != len(ids):
            raise RecordLossesError(f"{kind}: {len(segments)} segments for {len(ids)} records")
        for index, segment in enumerate(segments):
            if not isinstance(segment, str):
                raise RecordLossesError(f"{kind}: segment {index} is {segment!r:.40}, not a string")
    if kind == "RecordLosses" and (
        isinstance(quarantined, bool) or not isinstance(quarantined, int) or quarantined < 0
    ):
        raise RecordLossesError(f"RecordLosses: quarantined is {quarantined!r:.40}, not a count")
    return ids, losses, segments, quarantined, primary


def _outcome(call: Any) -> tuple[Any, ...]:
    """What ``call`` returns (each field with its elements' exact types), or its error."""
    try:
        got = call()
    except RecordLossesError as exc:
        return ("refused", str(exc))
    if isinstance(got, RecordLosses | RecordIds):
        fields = (got.ids, getattr(got, "losses", None), got.segments)
        got = (*fields, getattr(got, "quarantined", 0), getattr(got, "primary", ""))
    ids, losses, segments, quarantined, primary = got
    columns = None if losses is None else {k: (v, [type(x) for x in v]) for k, v in losses.items()}
    kinds = [type(x) for x in (*ids, *(segments or ()))]
    return ("kept", ids, columns, segments, kinds, quarantined, primary)


_texts = st.text(alphabet="ab#", max_size=3)
_odd_ids = st.one_of(_texts, _texts.map(Name), st.integers(0, 3), st.none())
_numbers = st.one_of(
    st.sampled_from([math.nan, math.inf, -math.inf, -0.0, -1.5, 5e-324, 1e308]),
    st.floats(0.0, 10.0).map(Loss),
    st.floats(0.0, 10.0).map(np.float64),
    st.floats(0.0, 10.0).map(np.float32),
    st.integers(-2, 3),
    st.booleans(),
    st.sampled_from(["x", "1.5", None]),
)
_odd_segments = st.one_of(_texts.map(Name), st.integers(0, 2), st.none())


@st.composite
def _with_one_odd(draw: st.DrawFn, values: list[Any], odd: st.SearchStrategy[Any]) -> list[Any]:
    """``values``, or with one of them replaced by a draw of ``odd`` (a time in three)."""
    if values and draw(st.integers(0, 2)) == 0:
        values[draw(st.integers(0, len(values) - 1))] = draw(odd)
    return values


@st.composite
def _column(draw: st.DrawFn, length: int) -> Any:
    """Losses, often as many as the ids, valid but for one value half the time: a list,
    a tuple or a float32 numpy array."""
    size = draw(st.sampled_from([length, length, length, max(length - 1, 0), length + 1]))
    if draw(st.booleans()):
        floats = draw(st.lists(st.floats(0.0, 10.0, width=32), min_size=size, max_size=size))
        odd = st.sampled_from([math.nan, math.inf, -math.inf, -0.0, -1.0, 3e38, 1e-45])
        return np.array(draw(_with_one_odd(floats, odd)), np.float32)
    floats = draw(st.lists(st.floats(0.0, 10.0), min_size=size, max_size=size))
    values = draw(_with_one_odd(floats, _numbers))
    return tuple(values) if draw(st.booleans()) else values


@st.composite
def _records(draw: st.DrawFn) -> tuple[Any, ...]:
    """The fields of a RecordLosses: mostly valid, a fault or two among them."""
    unique = st.lists(st.text(alphabet="abcdef", min_size=1, max_size=4), unique=True, max_size=8)
    ids = draw(_with_one_odd(draw(unique), _odd_ids))
    if len(ids) > 1 and draw(st.integers(0, 5)) == 0:
        ids[-1] = ids[0]  # an id twice
    if draw(st.booleans()):
        losses = draw(_column(len(ids)))
    else:
        kinds = st.sampled_from(["loss", "log_loss", "brier"])
        names = draw(st.lists(kinds, min_size=1, unique=True))
        names = draw(st.sampled_from([names] * 9 + [[], [*names, "Brier"], ["", *names], [7]]))
        losses = {name: draw(_column(len(ids))) for name in names}
    segments = None
    if draw(st.booleans()):
        size = draw(st.sampled_from([len(ids), len(ids), len(ids) + 1]))
        drawn = draw(st.lists(_texts, min_size=size, max_size=size))
        segments = draw(_with_one_odd(drawn, _odd_segments))
    return (
        ids,
        losses,
        segments,
        draw(st.sampled_from([0] * 6 + [3, -1, True])),
        draw(st.sampled_from([""] * 6 + ["loss", "brier", "nope"])),
    )


@settings(max_examples=250, deadline=None)
@given(_records())
def test_of_accepts_and_refuses_what_the_record_by_record_check_does(record: tuple) -> None:
    """RecordLosses.of, its columns checked on their float64 arrays: the same fields and
    float types, or the same one-line refusal, as of()'s conversion then the record by
    record check (NaN, inf, negative, non-numbers, lengths, names, ids, segments)."""
    ids, losses, segments, quarantined, primary = record

    def old() -> tuple[Any, ...]:
        named = losses if isinstance(losses, Mapping) else {primary or "loss": losses}
        try:
            floats = {k: np.asarray(v).astype(np.float64) if isinstance(v, np.ndarray)
                      else np.fromiter(v, dtype=np.float64) for k, v in named.items()}  # fmt: skip
        except (TypeError, ValueError) as exc:
            raise RecordLossesError(f"RecordLosses: a loss is not a number ({exc})") from None
        values = {k: tuple(v.tolist()) for k, v in floats.items()}
        return _element_wise("RecordLosses", ids, values, segments, quarantined, primary)

    expected = _outcome(old)
    assert _outcome(lambda: RecordLosses.of(ids, losses, segments, quarantined, primary)) == (
        expected
    )


_SPECIAL = [math.nan, math.inf, -math.inf, -0.0, 0.0, -1.5, -5e-324, 5e-324, 1.7e308, -1e-300]


@settings(max_examples=250, deadline=None)
@given(
    st.lists(st.floats(0.0, 10.0), min_size=1, max_size=6),
    st.lists(st.tuples(st.integers(0, 5), st.sampled_from(_SPECIAL)), max_size=2),
    st.sampled_from([list, tuple, np.float64, np.float32, np.float16]),
)
def test_of_checks_each_value_as_the_record_by_record_check(
    values: list[float], odd: list[tuple[int, float]], kind: Any
) -> None:
    """One column of valid ids' losses, with NaN, infinities, negatives, zeros of either
    sign or extremes among them, as a list, a tuple or a numpy array of floats of each
    width: RecordLosses.of keeps or refuses it as the record by record check does."""
    for at, value in odd:
        values[at % len(values)] = value
    with np.errstate(over="ignore"):  # 1.7e308 as float32 or float16: inf
        column = kind(values) if kind in (list, tuple) else np.array(values).astype(kind)
    ids = [f"r{i}" for i in range(len(values))]

    def old() -> tuple[Any, ...]:
        floats = np.asarray(column, dtype=np.float64) if isinstance(column, np.ndarray) else (
            np.fromiter(column, dtype=np.float64)
        )  # fmt: skip
        return _element_wise("RecordLosses", ids, tuple(floats.tolist()), None, 0, "")

    assert _outcome(lambda: RecordLosses.of(ids, column)) == _outcome(old)


@settings(max_examples=250, deadline=None)
@given(_records())
def test_a_built_record_accepts_and_refuses_what_the_record_by_record_check_does(
    record: tuple,
) -> None:
    """RecordLosses(...) and RecordIds(...) from any fields (bools, ints, numpy floats and
    str or float subclasses among them): what the record by record check gives."""
    ids, losses, segments, quarantined, primary = record
    assert _outcome(lambda: RecordLosses(ids, losses, segments, quarantined, primary)) == _outcome(
        lambda: _element_wise("RecordLosses", ids, losses, segments, quarantined, primary)
    )
    assert _outcome(lambda: RecordIds(ids, segments)) == _outcome(
        lambda: _element_wise("RecordIds", ids, None, segments, 0, "")
    )


_changes = st.sampled_from(["none", "ids", "losses", "column", "segments", "dict", "memo"])


@settings(max_examples=250, deadline=None)
@given(_records(), _changes, _records())
def test_a_copy_is_checked_in_full_where_any_field_changed(
    first: tuple, change: str, other: tuple
) -> None:
    """RecordLosses.copy_of / RecordIds.copy_of of a record changed behind its back
    (object.__setattr__ of ids, losses or segments; a column of its dict replaced; its
    kept check dropped): what the record by record check gives of its fields then."""
    ids, losses, segments, quarantined, primary = first
    try:
        scored = RecordLosses.of(ids, losses, segments, quarantined, primary)
        listed = RecordIds(ids, segments)
    except RecordLossesError:
        return
    new_ids, new_losses, new_segments, _, _ = other
    if change == "ids":
        object.__setattr__(scored, "ids", new_ids)
        object.__setattr__(listed, "ids", new_ids)
    elif change == "losses":
        object.__setattr__(scored, "losses", new_losses)
    elif change == "column":
        scored.losses[scored.primary] = new_ids  # type: ignore[index]
    elif change == "segments":
        object.__setattr__(scored, "segments", new_segments)
        object.__setattr__(listed, "segments", new_segments)
    elif change == "dict":
        object.__setattr__(scored, "losses", {**scored.losses, "brier": scored.column()})
    elif change == "memo":
        vars(scored).pop("_checked", None)
        vars(listed).pop("_checked", None)
    fields = scored.ids, scored.losses, scored.segments, scored.quarantined, scored.primary
    assert _outcome(lambda: RecordLosses.copy_of(scored)) == _outcome(
        lambda: _element_wise("RecordLosses", *fields)
    )
    assert _outcome(lambda: RecordIds.copy_of(listed)) == _outcome(
        lambda: _element_wise("RecordIds", listed.ids, None, listed.segments, 0, "")
    )


def test_an_unchanged_copy_is_not_walked_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """A copy of a record whose fields are still the tuples its check passed (exact strs
    and floats) checks names and counts only; one whose ids are a str subclass, or
    whose column was replaced, is walked in full; so is a listing's copy."""
    scored = RecordLosses.of(["a", "b"], {"log_loss": [0.5, 0.25]}, ["s", "t"])
    listed = RecordIds(("a", "b"), ("s", "t"))
    subclassed = RecordLosses.of([Name("a"), "b"], [0.5, 0.25])
    walked: list[str] = []
    monkeypatch.setattr(record_losses, "_all_of", lambda values, kind: walked.append(kind.__name__))
    assert RecordLosses.copy_of(scored) == scored and RecordIds.copy_of(listed) == listed
    assert walked == []
    RecordLosses.copy_of(subclassed)
    assert walked[:1] == ["str"]
    walked.clear()
    scored.losses["log_loss"] = (0.5, 0.25)  # type: ignore[index]  # equal, but not the one checked
    RecordLosses.copy_of(scored)
    assert walked == ["str", "float", "str"]


@settings(max_examples=300, deadline=None)
@given(_records(), st.integers(0, 9), st.booleans())
def test_a_grown_listing_accepts_and_refuses_what_one_made_whole_does(
    record: tuple, split: int, again: bool
) -> None:
    """RecordIds(first ids).extended(the rest), with a fault or two among the new ids or
    segments (an old id again, an empty one, a non-string, a str subclass, segments
    short or long): the listing RecordIds(all of them) makes, or its one-line refusal;
    a listing grown a second time from the same one too (checked whole then)."""
    ids, _, segments, _, _ = record
    k = min(split, len(ids))
    head = None if segments is None else segments[:k]
    tail = None if segments is None else segments[k:]
    try:
        listed = RecordIds(ids[:k], head)
    except RecordLossesError:
        return  # refused before any growth: RecordIds' own test
    whole = _outcome(lambda: RecordIds(ids, segments))
    assert _outcome(lambda: listed.extended(ids[k:], tail)) == whole
    if again:
        assert _outcome(lambda: listed.extended(ids[k:], tail)) == whole


@settings(max_examples=300, deadline=None)
@given(_records(), st.integers(0, 9), st.randoms(use_true_random=False))
def test_a_spliced_listing_accepts_and_refuses_what_one_made_whole_does(
    record: tuple, split: int, chance: Any
) -> None:
    """RecordIds(some ids).spliced(places of the others among them), with the faults of
    the grown listing's test among the new ones: the listing RecordIds(all of them, in
    the spliced order) makes, or its one-line refusal."""
    ids, _, segments, _, _ = record
    if segments is not None and len(segments) != len(ids):
        return  # segments short or long: the grown listing's test (one check for both)
    k = min(split, len(ids))
    places = sorted(chance.sample(range(len(ids)), len(ids) - k))
    rest = [i for i in range(len(ids)) if i not in set(places)]
    try:
        listed = RecordIds(tuple(ids[i] for i in rest), _at(segments, rest))
    except RecordLossesError:
        return  # refused before any growth: RecordIds' own test
    whole = _outcome(lambda: RecordIds(ids, segments))
    new_ids, new_segments = [ids[i] for i in places], _at(segments, places)
    at = np.array(places, np.int64)
    assert _outcome(lambda: listed.spliced(at, new_ids, new_segments)) == whole


def _at(values: Any, rows: list[int]) -> Any:
    return None if values is None else tuple(values[i] for i in rows)


def test_a_spliced_listing_refuses_places_out_of_order() -> None:
    """The new ids' places must be ascending places of the spliced listing."""
    listed = RecordIds(("a", "b"))
    for places in ([1, 1], [2, 0], [0, 4], [-1, 0], [0]):
        with pytest.raises(RecordLossesError, match=r"^RecordIds: the new ids' places"):
            listed.spliced(np.array(places, np.int64), ["c", "d"])


def test_a_grown_listing_walks_its_new_records_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    """A listing that passed its check whole grows by walking the new ids and segments
    alone, and the grown one grows so again; one grown a second time from the same
    listing (its set of ids given away), or whose ids were changed since its check, is
    walked whole. Each refuses an old id again, in the listing-made-whole's words."""
    listed = RecordIds(tuple(f"r{i}" for i in range(50)), ("s",) * 50)
    walked: list[int] = []
    real = record_losses._all_of
    monkeypatch.setattr(
        record_losses, "_all_of", lambda v, kind: walked.append(len(v)) or real(v, kind)
    )
    grown = listed.extended(["n1", "n2"], ["t", "t"])
    assert grown.ids[-3:] == ("r49", "n1", "n2") and grown.segments[-1:] == ("t",)  # type: ignore[index]
    assert walked and max(walked) == 2
    walked.clear()
    assert len(grown.extended(["n3"], ["t"]).ids) == 53 and max(walked) == 1
    walked.clear()
    assert len(listed.extended(["m1"], ["t"]).ids) == 51 and max(walked) == 51
    with pytest.raises(RecordLossesError, match=r"^RecordIds: id 'r7' twice$"):
        RecordIds(("r7", "r8")).extended(["n", "r7"])
    changed = RecordIds(("a", "b"))
    object.__setattr__(changed, "ids", ("a", "a"))
    with pytest.raises(RecordLossesError, match=r"^RecordIds: id 'a' twice$"):
        changed.extended(["c"])


@settings(max_examples=200, deadline=None)
@given(_records(), st.lists(st.integers(-2, 12), max_size=8))
def test_losses_at_rows_of_a_listing_accept_and_refuse_what_of_does(
    record: tuple, rows: list[int]
) -> None:
    """RecordLosses.of_rows(listing, rows, losses): the record (or the one-line refusal)
    that RecordLosses.of gives for the listing's ids and segments at those rows, for any
    rows (repeated, out of order, out of range: an index error either way) and any
    losses (short, non-finite, negative)."""
    ids, losses, segments, _, _ = record
    try:
        listed = RecordIds(ids, segments)
    except RecordLossesError:
        return  # a listing refused: RecordIds' own test
    at = [r for r in rows if 0 <= r < len(ids)]
    columns = losses if isinstance(losses, Mapping) else {"loss": losses}
    taken = {name: list(values)[: len(at)] for name, values in columns.items()}
    named = None if listed.segments is None else [listed.segments[r] for r in at]
    try:
        made = RecordLosses.of_rows(listed, np.array(at, np.int64), taken)
    except RecordLossesError as exc:
        made_or = ("refused", str(exc))
    else:
        made_or = ("made", made.ids, made.losses, made.segments, made.primary)
    try:
        plain = RecordLosses.of([listed.ids[r] for r in at], taken, named)
    except RecordLossesError as exc:
        plain_or = ("refused", str(exc))
    else:
        plain_or = ("made", plain.ids, plain.losses, plain.segments, plain.primary)
    assert made_or == plain_or


def test_losses_at_rows_of_a_checked_listing_walk_no_id(monkeypatch: pytest.MonkeyPatch) -> None:
    """Rows of a listing that passed its check whole, ascending: its ids and segments
    taken without a walk of their types or a set of them; a listing whose ids were
    planted since its check (a twin id) is walked and refused, and so are rows given
    twice or out of order, in RecordLosses.of's words."""
    listed = RecordIds(tuple(f"r{i}" for i in range(40)), ("s",) * 40)
    walked: list[int] = []
    real = record_losses._all_of
    monkeypatch.setattr(
        record_losses, "_all_of", lambda v, kind: walked.append(len(v)) or real(v, kind)
    )
    part = RecordLosses.of_rows(listed, np.array([1, 5, 39]), {"log_loss": [0.1, 0.2, 0.3]})
    assert part.ids == ("r1", "r5", "r39") and part.segments == ("s",) * 3 and walked == []
    assert RecordLosses.copy_of(part) == part and walked == []
    with pytest.raises(RecordLossesError, match=r"^RecordLosses: id 'r5' twice$"):
        RecordLosses.of_rows(listed, np.array([5, 5]), {"loss": [0.1, 0.2]})
    with pytest.raises(RecordLossesError, match=r"^RecordLosses: 2 ids but 1 loss values$"):
        RecordLosses.of_rows(listed, np.array([5, 1]), {"loss": [0.1]})
    with pytest.raises(RecordLossesError, match=r"loss of 'r1' is nan, not a finite float$"):
        RecordLosses.of_rows(listed, np.array([1]), {"loss": [math.nan]})
    planted = RecordIds(("a", "b", "c"))
    object.__setattr__(planted, "ids", ("a", "a", "c"))
    walked.clear()
    with pytest.raises(RecordLossesError, match=r"^RecordLosses: id 'a' twice$"):
        RecordLosses.of_rows(planted, np.array([0, 1]), {"loss": [0.1, 0.2]})
    assert walked
