"""Objects built a field at a time equal those their classes' __init__ builds."""

from __future__ import annotations

from dataclasses import dataclass, fields

import pytest

from genesis_fp16_infrastructure.data.lineage import PoolEntry
from genesis_fp16_infrastructure.data.pool_columns import objects
from genesis_fp16_infrastructure.data.schema import AttemptInput


def test_objects_equal_what_init_builds_and_stay_frozen() -> None:
    scores, parents = [0.5, None], [("a",), ()]
    operators, created = ["mutation", "baseline"], [1.0, None]
    built = objects(
        PoolEntry,
        ("score", "parents", "operator", "created"),
        (scores, parents, operators, created),
    )
    expected = [PoolEntry(*row) for row in zip(scores, parents, operators, created, strict=True)]
    assert built == expected
    with pytest.raises(AttributeError):
        built[0].score = 1.0  # type: ignore[misc]


def test_a_non_init_field_is_set_too() -> None:
    """``AttemptInput.own``, no argument of its ``__init__``, is set like the rest."""
    expected = AttemptInput(trajectory_id="t", tools_used=("a",))
    values = {f.name: [getattr(expected, f.name)] for f in fields(AttemptInput)}
    values["own"] = [b"x"]
    (attempt,) = objects(AttemptInput, list(values), list(values.values()))
    assert attempt == expected and attempt.own == b"x"


def test_a_missing_field_or_a_short_column_is_refused() -> None:
    with pytest.raises(TypeError, match="PoolEntry has fields"):
        objects(PoolEntry, ("score", "parents", "operator"), ([0.1], [()], ["x"]))
    with pytest.raises(ValueError, match="differ in length"):
        objects(PoolEntry, ("score", "parents", "operator", "created"), ([0.1], [()], ["x"], []))


def test_a_class_with_a_post_init_is_refused() -> None:
    @dataclass(frozen=True, slots=True)
    class Checked:
        value: int

        def __post_init__(self) -> None:
            if self.value < 0:
                raise ValueError("negative")

    with pytest.raises(TypeError, match="__post_init__"):
        objects(Checked, ("value",), ([-1],))
