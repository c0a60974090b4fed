"""The records a run reports beside its counts: frozen, typed, each with ``to_json`` and
``from_json`` (:mod:`~genesis_fp16_infrastructure.record_codec`).

:class:`~genesis_fp16_infrastructure.contract.train_result.TrainResult` holds them, the
library's components and the retrain recipe build them, the daemon reads their fields.
Their JSON is the ``train --json`` object's (and the files the recipe keeps), key for
key as before they were typed; ``from_json`` refuses what does not fit in one line.

- :class:`DataReport`: the records a run trained on, and what changed (``data``);
- :class:`DriftReport`: how the new records differ from the served model's (``drift``);
- :class:`GateReport`: the promotion gate's verdict (``gate``), its sets'
  :class:`GateComparison`, its models' :class:`ScoresOn` (``{metric: figure}`` maps);
- :class:`LiveReport`: the live watch's report of the served model against its
  predecessor on new records (``live``).

The training component's records (early stop, demotions, fault bundles, calibration,
range statistics) are its own, in :mod:`~genesis_fp16_infrastructure.training.reports`.
This module imports no torch; no component imports it (tests/test_layering.py).

>>> DataReport.from_json({"records": 40, "fingerprint": "abc", "change": "first"}).change
'first'
>>> DataReport.from_json({"records": 40, "fingerprint": "abc", "change": "maybe"})
Traceback (most recent call last):
...
genesis_fp16_infrastructure.record_codec.ReportError: DataReport.change: one of \
'first', 'unchanged', 'changed' expected, got 'maybe'
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from genesis_fp16_infrastructure.outcome import Outcome
from genesis_fp16_infrastructure.record_codec import (
    JSON,
    OMIT_NONE,
    ROUND,
    Record,
)
from genesis_fp16_infrastructure.training.precision.precision_names import PrecisionName

_R6 = {ROUND: 6}
_OPTIONAL = {OMIT_NONE: True}


@dataclass(frozen=True)
class DataReport(Record):
    """The records a run trained on (their count and fingerprint) and what changed since
    the served model's: ``first`` (no served model), ``unchanged`` or ``changed``, with
    the counts of the change where there is a served model."""

    records: int
    fingerprint: str
    change: Literal["first", "unchanged", "changed"]
    previous_records: int | None = field(default=None, metadata=_OPTIONAL)
    new: int | None = field(default=None, metadata=_OPTIONAL)
    removed: int | None = field(default=None, metadata=_OPTIONAL)
    relabelled: int | None = field(default=None, metadata=_OPTIONAL)
    # An up-to-date run decided from the data manifest (recipes.retrain.freshness): how,
    # and how many changed files it hashed.
    checked_by: str | None = field(default=None, metadata=_OPTIONAL)
    files_hashed: int | None = field(default=None, metadata=_OPTIONAL)


@dataclass(frozen=True)
class DriftReport(Record):
    """Drift and label shift of the records new since the served model's training
    (recipes.retrain.drift): each feature's distance and threshold, the flagged ones,
    the success rate's shift and its threshold."""

    new_records: int
    reference_records: int
    sampled: Mapping[str, int]
    features: Mapping[str, float]
    thresholds: Mapping[str, float]
    flagged: tuple[str, ...]
    label_shift: float
    label_shift_threshold: float
    label_shift_flagged: bool

    @property
    def any_flagged(self) -> bool:
        """A feature, or the label shift, passed its threshold."""
        return bool(self.flagged) or self.label_shift_flagged


@dataclass(frozen=True)
class GateComparison(Record):
    """Candidate against served on one set of records (``name``: ``held_out``,
    ``current``, ``known`` or ``golden``), on one loss column (``metric``), its segment if
    one, with the margin and the verdict; the figures are in ``reason``."""

    name: str = field(metadata={JSON: "set"})
    passed: bool | None = None  # None: this set cannot decide
    reason: str = ""
    # The segment (se_darwin: the Genesis agent) a per-segment comparison is of; its
    # answer (judging.noninferiority: no_worse, worse or inconclusive; passed is None when
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
    and what is reported beside them, never gated (``reported``: se_darwin's AUC, from
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
            older = [(k, data.get(k)) for k in ("loss", "log_loss") if _finite(data.get(k))]
            auc = data.get("auc")
            reported = {"auc": auc} if _finite(auc) else {}
            data = {**data, "losses": dict(older[:1]), "reported": reported}
        found: ScoresOn = super().from_json(data, where)
        return found

    def figures(self) -> dict[str, float]:
        """Every finite figure by name: the loss columns (the primary first), then the
        reported."""
        primary = self.primary or ""
        first = {primary: self.losses[primary]} if primary in self.losses else {}
        return {k: v for k, v in {**first, **self.losses, **self.reported}.items() if _finite(v)}


def _finite(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


@dataclass(frozen=True)
class GateReport(Record):
    """The promotion gate's verdict on a candidate (judging.run, judging.gate): what
    became of it and why, each set's comparison, the scores of the set that decided, the
    model it was held against (``served_id``: None for the first model) and the file
    served if promoted. The candidate's verdict file holds the same record; one read
    back from an older file keeps what this record knows of it."""

    outcome: Outcome
    reason: str
    comparisons: tuple[GateComparison, ...] = ()
    seconds: float = field(default=0.0, metadata={ROUND: 4})
    precision: PrecisionName | None = None
    candidate: ScoresOn | None = None
    served: ScoresOn | None = None
    served_id: str | None = None
    checkpoint: str | None = None
    candidate_id: str | None = field(default=None, metadata=_OPTIONAL)
    # Written with the verdict file (served.write_verdict) and by a rollback.
    decided_at: str | None = field(default=None, metadata=_OPTIONAL)
    decided_at_s: float | None = field(default=None, metadata=_OPTIONAL)
    gate_outcome: Outcome | None = field(default=None, metadata=_OPTIONAL)
    detail: str | None = field(default=None, metadata=_OPTIONAL)
    # An inconclusive verdict's (issue 62): the records its undecided sets would need, and
    # the data digest it was judged on (judged again when the data moves on).
    records_needed: int | None = field(default=None, metadata=_OPTIONAL)
    judged_on: str | None = field(default=None, metadata=_OPTIONAL)
    # Issue 68: the records the verdict stands on: ``held_out`` (neither model trained on
    # them) or ``training_data`` (a plugin whose candidate names none it trained on);
    # None: records no model trains on (rlhf_ppo's evaluation episodes), or older files.
    evidence: Literal["held_out", "training_data"] | None = field(default=None, metadata=_OPTIONAL)


@dataclass(frozen=True)
class WatchSegment(Record):
    """One segment's test in a live watch (judging.segments): its records, the mean
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
    """The live watch's A/A self-test (judging.segments.self_test): of ``replays`` replays
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
            column = {k: data[k] for k in _COLUMN if k in data}
            metric = data.get("metric") or "loss"
            data = {**data, "primary": metric, "metrics": {metric: column}}
        found: LiveReport = super().from_json(data, where)
        return found

    @staticmethod
    def figures_of(data: object) -> dict[str, Any]:
        """A live report's JSON (either shape; a pointer's, a hand may have edited it) in
        one level for a one-line view: ``metric`` (the primary's name), the primary
        column's figures, the report's."""
        metrics = data.get("metrics") if isinstance(data, Mapping) else None
        if not isinstance(data, Mapping) or not isinstance(metrics, Mapping):
            return dict(data) if isinstance(data, Mapping) else {}
        columns = {k: f for k, f in metrics.items() if isinstance(f, Mapping)}
        out = {k: v for k, v in data.items() if k != "metrics"}
        metric = data.get("primary")
        return {"metric": metric, **columns.get(str(metric), {}), **out}


# A LiveReport's keys before the map that are its one column's (unknown keys: ignored)
_COLUMN = ("served_loss", "previous_loss", "difference", "lower", "upper", "margin", "evidence",
           "records_needed", "segments", "records", "alpha", "regression")  # fmt: skip
