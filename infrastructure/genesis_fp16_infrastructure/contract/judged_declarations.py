"""What a judged plugin may declare beside its scores (:mod:`.judging`'s capability):
its own margins (:class:`DeclaresMargin`), their floor (:class:`DeclaresMarginFloor`),
that its records are evaluation episodes (:class:`DeclaresRecords`), and how the gate
reads them (:func:`judging_margin`, :func:`records_are_training_data`). :mod:`.judging`
names all of these too: a plugin imports them from there.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol, TypeGuard, runtime_checkable

DEFAULT_RELATIVE_MARGIN = 0.05  # of the reference model's mean loss, when no margin is declared


@runtime_checkable
class DeclaresMargin(Protocol):
    """A judged plugin's own margin: the loss difference tolerated against a reference
    model (:func:`judging_margin`), instead of a share of its mean loss."""

    judging_margin: float | Mapping[str, float] | None


@runtime_checkable
class DeclaresMarginFloor(Protocol):
    """A judged plugin's least margin: where it declares no ``judging_margin``, the margin
    is a share of the reference's mean loss but never below this (:func:`judging_margin`),
    so that a reference near zero loss does not ask a candidate to show itself equal to
    it beyond what the records can measure (docs/judging.md, "The margins")."""

    judging_margin_floor: float | Mapping[str, float] | None


@runtime_checkable
class DeclaresRecords(Protocol):
    """``records_are_training_data = False``: the scored records are evaluation episodes,
    none of them trained on (:func:`records_are_training_data`)."""

    records_are_training_data: bool


def judging_margin(plugin: object, reference_mean: float, metric: str) -> float:
    """The difference of loss column ``metric`` tolerated against a reference model whose
    mean there (clipped) is ``reference_mean``: the plugin's ``judging_margin`` (a number
    for every column, or a map by column), else :data:`DEFAULT_RELATIVE_MARGIN` of that
    mean, or the plugin's ``judging_margin_floor`` for that column where that is more
    (none declared: no floor).

    >>> class Agent:
    ...     judging_margin = {"log_loss": 0.01}
    ...     judging_margin_floor = 0.001
    >>> judging_margin(Agent(), 0.4, "log_loss"), judging_margin(Agent(), 0.4, "brier")
    (0.01, 0.02)
    >>> judging_margin(Agent(), 0.0002, "brier")  # 5% would be 1e-05
    0.001
    """
    declared = plugin.judging_margin if isinstance(plugin, DeclaresMargin) else None
    if isinstance(declared, Mapping):
        declared = declared.get(metric)
    if declared is not None:
        return float(declared)
    floor = plugin.judging_margin_floor if isinstance(plugin, DeclaresMarginFloor) else None
    if isinstance(floor, Mapping):
        floor = floor.get(metric)
    relative = DEFAULT_RELATIVE_MARGIN * max(reference_mean, 0.0)
    return round(max(relative, float(floor or 0.0)), 12)


def _is_number(value: object) -> TypeGuard[float]:  # a bool is not one
    return isinstance(value, int | float) and not isinstance(value, bool)


def records_are_training_data(plugin: object) -> bool:
    """Whether ``plugin``'s scored records are what it trains on (the default): then a
    run on records the served model all knew has nothing to learn."""
    return not isinstance(plugin, DeclaresRecords) or bool(plugin.records_are_training_data)
