"""The lifecycle's typed figures: the gate's scores and comparisons, the live watch's report.

A verdict and a served entry
(:mod:`~genesis_fp16_infrastructure.agent_folder.lifecycle_records`) keep these, never a
dict twin; they are the contract's records, defined here a layer below it
(``contract.reports`` names them): the gate's scores (:class:`ScoresOn`) and comparisons
(:class:`GateComparison`), the live watch's figures (:class:`LiveReport`, each column's
:class:`LiveFigures`, its segments' :class:`WatchSegment` and its :class:`SelfTest`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from genesis_fp16_infrastructure.agent_folder.kept_record import Json
from genesis_fp16_infrastructure.record_codec import JSON, OMIT_NONE, ROUND, Record

_R6 = {ROUND: 6}
_OPTIONAL = {OMIT_NONE: True}


@dataclass(frozen=True)
class GateComparison(Record):
    """Candidate against served on one set of records (``name``: ``held_out``,
    ``current``, ``known``, ``newest`` or ``golden``), on one loss column (``metric``), its
    segment if one, with the margin and the verdict; the figures are in ``reason``."""

    name: str = field(metadata={JSON: "set"})
    passed: bool | None = None  # None: this set cannot decide
    reason: str = ""
    # The segment (a plugin's key: the agent that made the records) a comparison is of; its
    # answer (judging.gate: no_worse, worse or inconclusive; passed is None when
    # inconclusive) and, when inconclusive, the records it would need.
    segment: str | None = field(default=None, metadata=_OPTIONAL)
    finding: str | None = field(default=None, metadata=_OPTIONAL)
    records_needed: int | None = field(default=None, metadata=_OPTIONAL)
    # The judged plugin's loss column compared (contract.judging.RecordLosses.losses), and
    # the difference tolerated there.
    metric: str | None = field(default=None, metadata=_OPTIONAL)
    margin: float | None = field(default=None, metadata={**_R6, **_OPTIONAL})


@dataclass(frozen=True)
class ScoresOn(Record):
    """A model's figures on the set that decided (``name``): each gated loss column's mean
    (``losses``, clipped to the plugin's ``loss_span``, the primary first), the records,
    and what is reported beside them, never gated (``reported``: a plugin's AUC, from
    its run's own evaluation). A verdict written before loss columns reads its ``loss``
    (else ``log_loss``) into ``losses`` and its ``auc`` into ``reported``.

    >>> ScoresOn.from_json({"set": "current", "auc": 0.9, "log_loss": None, "loss": 0.2})
    ScoresOn(name='current', losses={'loss': 0.2}, records=None, reported={'auc': 0.9}, \
primary='loss')
    """

    name: str = field(metadata={JSON: "set"})
    losses: Mapping[str, float] = field(default_factory=dict, metadata=_R6)
    records: int | None = field(default=None, metadata=_OPTIONAL)
    reported: Mapping[str, float] = field(default_factory=dict, metadata=_R6)
    # The primary column (None: the first of ``losses``): files keep no key order.
    primary: str | None = field(default=None, metadata=_OPTIONAL)

    def __post_init__(self) -> None:
        if self.primary is None and self.losses:
            object.__setattr__(self, "primary", next(iter(self.losses)))

    @classmethod
    def from_json(cls, data: object, where: str = "") -> ScoresOn:
        if isinstance(data, Mapping) and "losses" not in data:  # before loss columns
            older = [(k, data[k]) for k in ("loss", "log_loss") if finite(data.get(k)) is not None]
            auc = data.get("auc")
            reported = {"auc": auc} if finite(auc) is not None else {}
            data = {**data, "losses": dict(older[:1]), "reported": reported}
        found: ScoresOn = super().from_json(data, where)
        return found

    def figures(self) -> dict[str, float]:
        """Every finite figure by name: the loss columns (the primary first), then the
        reported."""
        primary = self.primary or ""
        first = {primary: self.losses[primary]} if primary in self.losses else {}
        figures = {**first, **self.losses, **self.reported}
        return {k: v for k, v in figures.items() if finite(v) is not None}


@dataclass(frozen=True)
class WatchSegment(Record):
    """One segment's test in a live watch (judging.watch): its records, the mean
    difference and its anytime-valid bounds at the segment's own level ``alpha``, the
    evidence so far (an e-value: ``1 / alpha`` decides), the records still needed to
    decide at the margin (None: never at this mean), and whether it found a regression."""

    name: str
    records: int
    difference: float | None
    lower: float
    upper: float
    alpha: float
    evidence: float
    records_needed: int | None
    regression: bool


@dataclass(frozen=True)
class SelfTest(Record):
    """The live watch's A/A self-test (judging.watch.self_test): of ``replays`` replays
    of its last ``records`` records under the null at the margin, how many would have
    rolled back, the rate and its 95% interval."""

    replays: int
    records: int
    false_rollbacks: int
    rate: float
    lower: float
    upper: float


@dataclass(frozen=True)
class LiveFigures(Record):
    """One loss column's live test (judging.watch), as :class:`WatchSegment`'s figures at
    the column's level ``alpha``, with both models' means (clipped), the column's margin
    and its segments' tests (None: one segment)."""

    records: int
    difference: float | None
    lower: float
    upper: float
    margin: float
    alpha: float
    regression: bool
    served_loss: float | None = field(default=None, metadata=_OPTIONAL)
    previous_loss: float | None = field(default=None, metadata=_OPTIONAL)
    evidence: float | None = field(default=None, metadata=_OPTIONAL)
    records_needed: int | None = field(default=None, metadata=_OPTIONAL)
    segments: tuple[WatchSegment, ...] | None = field(default=None, metadata=_OPTIONAL)


@dataclass(frozen=True)
class LiveReport(Record):
    """The live watch's report of one run (judging.watch): the model watched
    (``served``) against its predecessor (``against``) on every record scored since it
    was served (``records``, ``new_records`` of them this run), each loss column's test
    by name (``metrics``; the ``primary``'s is :attr:`watched`), the family's level and
    A/A self-test, and what the watch did: rolled back (to ``now_served``), or ``held``
    (why not). A report of one column, its figures beside the rest (before the map),
    reads as its map.

    >>> old = {"served": "m2", "against": "m1", "records": 9, "new_records": 9, "alpha": 0.05,
    ...     "difference": 0.6, "lower": 0.4, "upper": 0.8, "margin": 0.02, "regression": True}
    >>> LiveReport.from_json(old).metrics["loss"].lower
    0.4
    """

    served: str
    against: str | None
    records: int
    new_records: int
    alpha: float
    regression: bool
    rolled_back: bool = False
    held: str | None = None
    now_served: str | None = field(default=None, metadata=_OPTIONAL)
    updated_at: str = ""
    primary: str = "loss"
    metrics: Mapping[str, LiveFigures] = field(default_factory=dict)
    self_test: SelfTest | None = field(default=None, metadata=_OPTIONAL)

    def __post_init__(self) -> None:
        if self.primary not in self.metrics:
            raise ValueError(f"primary {self.primary!r:.40} is not one of {list(self.metrics)}")

    @property
    def watched(self) -> LiveFigures:
        """The primary column's figures: what a one-line view shows."""
        return self.metrics[self.primary]

    @property
    def regressed(self) -> tuple[str, ...]:
        """The columns whose test found a regression (a rollback names them)."""
        return tuple(name for name, f in self.metrics.items() if f.regression)

    @classmethod
    def from_json(cls, data: object, where: str = "") -> LiveReport:
        if isinstance(data, Mapping) and "metrics" not in data:  # one column, before the map
            # Its column is read from its keys: the codec ignores those no field names.
            metric = data.get("metric") or "loss"
            data = {**data, "primary": metric, "metrics": {metric: data}}
        found: LiveReport = super().from_json(data, where)
        return found

    @classmethod
    def from_figures_json(cls, data: Mapping[str, Json]) -> LiveReport:
        """The figures a served entry or a verdict keeps (:meth:`figures_json`'s, or
        either older shape: one column beside the rest, or the map), as the report of a
        watch that did nothing (``served`` empty: the entry's model, said by its
        reader)."""
        kept = {k: v for k, v in data.items() if k not in OUTCOME_KEYS}
        return cls.from_json({**kept, "served": ""})

    def figures_json(self) -> dict[str, Json]:
        """The figures alone, as a served entry or a rolled-back verdict keeps them: the
        JSON without what the watch did (``served``, ``rolled_back``, ``held``,
        ``now_served``)."""
        return {k: v for k, v in self.to_json().items() if k not in OUTCOME_KEYS}


# A live watch's figures as the lifecycle keeps them (a served entry's, a rolled-back
# verdict's): the report without what the watch did, as they were always written.
OUTCOME_KEYS = ("served", "rolled_back", "held", "now_served")


def finite(value: Any) -> float | None:
    """``value`` as a float when it is a finite number (not a bool), else None."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None
