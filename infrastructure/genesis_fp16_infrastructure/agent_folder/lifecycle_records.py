"""The agent folder's records, typed: the served-model lifecycle's and the runs'.

The served-model lifecycle's: a candidate's meta (``candidate.json``) and verdict
(``verdict.json``, read by :func:`read_verdict`), and the pointer (``served.json``,
:class:`ServedPointer`): its entries (the served model and those before it), its pin and
its journal entries.
Readers take fields, never string keys, and a verdict's outcome is an :class:`Outcome`.

Each record is a msgspec ``Struct`` declaring the keys the code reads. The figures a
verdict and a served entry keep are the contract's records, defined here a layer below it
(``contract.reports`` names them): the gate's scores (:class:`ScoresOn`) and comparisons
(:class:`GateComparison`), the live watch's figures (:class:`LiveReport`), never a dict
twin. Nothing a file holds is lost: every other key (a meta's request, keys a newer
release adds) is kept in ``extra``, and the figures' JSON as read in ``as_read``, written
back as it was while the field holds what was read from it (an older form, a hand's edit
the record cannot read: then the field is None), so a folder written before these types
reads and writes the same JSON (a key written ``null`` may come back absent: the readers
treat both alike)::

    >>> v = Verdict.from_json({"outcome": "held", "reason": "pinned", "served": {"loss": 1},
    ...                        "seconds": 0.5})
    >>> v.outcome is Outcome.HELD, v.served, v.as_read, v.extra
    (True, None, {'served': {'loss': 1}}, {'seconds': 0.5})
    >>> v.to_json() == {"outcome": "held", "reason": "pinned", "served": {"loss": 1},
    ...                 "seconds": 0.5}
    True
    >>> Verdict.from_json({"served": {"set": "held_out", "loss": 0.4}}).served.losses
    {'loss': 0.4}

A value of the wrong type (an outcome no release wrote, a text where a number belongs)
raises ``ValueError`` in one line naming the record: the reader sets the file aside
(``agent_folder.files.load``), as it does an unreadable one.

The words a verdict, a run and a statistical finding end in are spelled once, here,
beside the records that keep them.

Every product file names an outcome by its member here, never by its string: a verdict's
``outcome`` (the gate's and the live watch's), a run's (``TrainResult.outcome``, the
daemon's metric label) and a non-inferiority test's ``finding``. Both enums are ``str``
valued (``StrEnum``): a member *is* its string, so the JSON on disk, the metric labels
and the text a user reads are the words they always were, and a verdict read back from
an older folder compares equal to the member without conversion::

    >>> Outcome.ROLLED_BACK == "rolled_back", f"{Outcome.HELD}", Outcome("promoted")
    (True, 'held', <Outcome.PROMOTED: 'promoted'>)
    >>> import json; json.dumps({"outcome": Outcome.INCONCLUSIVE})
    '{"outcome": "inconclusive"}'

``benchmarks/design_counts.py`` counts the product files that spell one of these words
(tests/test_design_counts.py bounds it to this one).

The runs': an agent's recent runs, kept in its folder for the status page's memory, and the
record of one run (:class:`LastRun`), which ``last_run.json`` holds alone.

The run history file, ``run_history.jsonl``, which keeps these records, is
:mod:`~genesis_fp16_infrastructure.agent_folder.run_history`'s.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from pathlib import Path
from typing import Any, ClassVar, Self

import msgspec

from genesis_fp16_infrastructure.agent_folder import files
from genesis_fp16_infrastructure.agent_folder.kept_record import Held, Json, KeptRecord
from genesis_fp16_infrastructure.agent_folder.layout import VERDICT
from genesis_fp16_infrastructure.record_codec import JSON, OMIT_NONE, ROUND, Record
from genesis_fp16_infrastructure.training.precision.precision_names import (
    PrecisionName,
    RequestedName,
)

POINTER_VERSION = 1


class Outcome(StrEnum):
    """What became of a candidate (the gate's verdict, a rollback) or of a run."""

    # A candidate's verdict (verdict.json, the journal's ``verdicts``, GateReport.outcome).
    PROMOTED = "promoted"  # served: no worse than the model served before
    REJECTED = "rejected"  # shown worse; also a run that trained a rejected candidate
    INCONCLUSIVE = "inconclusive"  # neither shown: kept, judged again as records arrive
    UNDECIDED = "undecided"  # not judged (no scores, a refusal); never served
    HELD = "held"  # no worse, but the operator's pin keeps the served model
    ROLLED_BACK = "rolled_back"  # served, then replaced by the model served before it
    # A run's (TrainResult.outcome, the daemon's ``outcome`` label) beside REJECTED.
    SUCCESS = "success"
    FAILED = "failed"  # its steps learned nothing: TrainResult.failure says why
    STOPPED = "stopped"  # asked to stop before its end
    UP_TO_DATE = "up_to_date"  # nothing new to learn: no candidate trained


class Finding(StrEnum):
    """What one non-inferiority test showed (judging.gate): the candidate
    within the margin, beyond it, or neither."""

    NO_WORSE = "no_worse"
    WORSE = "worse"
    INCONCLUSIVE = "inconclusive"  # neither yet: a verdict is then ``inconclusive``


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

    def figures_json(self) -> dict[str, Json]:
        """The figures alone, as a served entry or a rolled-back verdict keeps them: the
        JSON without what the watch did (``served``, ``rolled_back``, ``held``,
        ``now_served``)."""
        return {k: v for k, v in self.to_json().items() if k not in _OUTCOME_KEYS}


# A live watch's figures as the lifecycle keeps them (a served entry's, a rolled-back
# verdict's): the report without what the watch did, as they were always written.
_OUTCOME_KEYS = ("served", "rolled_back", "held", "now_served")


def _read_live(data: Mapping[str, Json], served: str) -> LiveReport:
    """The figures a served entry or a verdict keeps, as the report of a watch of
    ``served`` that did nothing (either shape: one column beside the rest, or the map)."""
    kept = {k: v for k, v in data.items() if k not in _OUTCOME_KEYS}
    return LiveReport.from_json({**kept, "served": served})


def _scores() -> Held:
    return Held(ScoresOn.from_json, ScoresOn.to_json)


def _live() -> Held:
    return Held(lambda data: _read_live(data, ""), LiveReport.figures_json)


class CandidateMeta(KeptRecord):
    """``candidate.json``: written when a candidate's training begins: its id and time
    (``agent_folder.candidates.new_candidate``), its data (``fingerprint``: the data
    files' digest, the records the served model was scored on), ``continues``: the served
    model it resumed from, and what its run was asked (``data_path``, ``seed`` and the
    plugin ``options``, as ``TrainRequest.recorded_options`` records them; an older meta
    keeps its ``request`` in ``extra``)."""

    id: str | None = None
    created_at: str | None = None
    fingerprint: str | None = None
    records: int | None = None
    continues: str | None = None
    data_path: str | None = None
    seed: int | None = None
    options: dict[str, str | int | float | bool] | None = None


class Verdict(KeptRecord):
    """``verdict.json`` (and a journal entry's ``verdicts``): the gate's record of a
    candidate (``GateReport``'s JSON: its scores on the set that decided, ``candidate``
    and ``served``, and its sets' ``comparisons``, as the contract's records), stamped
    when written; ``gate_outcome``: what the gate said of a model rolled back since;
    ``journal_seq``: the transition that decided it (roll-forward); ``live``: a
    rolled-back model's live figures (the watch's report, what it did left out; its
    ``served`` is not kept: the verdict's candidate)."""

    outcome: Outcome | None = None
    reason: str | None = None
    precision: PrecisionName | None = None  # the precision the candidate was judged in
    checkpoint: str | None = None  # the candidate's file the gate judged
    candidate: ScoresOn | None = None  # its scores on the deciding set
    served: ScoresOn | None = None  # the served model's there
    served_id: str | None = None
    judged_on: str | None = None  # the data digest an inconclusive one was judged on
    evidence: str | None = None  # held_out or training_data (GateReport.evidence)
    records_needed: int | None = None
    gate_outcome: Outcome | None = None
    decided_at: str | None = None
    decided_at_s: float | None = None
    journal_seq: int | None = None
    live: LiveReport | None = None
    detail: str | None = None  # a live rollback's figures in one line
    comparisons: tuple[GateComparison, ...] = ()

    _HELD: ClassVar[Mapping[str, Held]] = {
        "candidate": _scores(),
        "served": _scores(),
        "live": _live(),
        "comparisons": Held(
            lambda data: tuple(GateComparison.from_json(c) for c in data),
            lambda comparisons: [c.to_json() for c in comparisons],
            list,
        ),
    }


class ServedEntry(KeptRecord):
    """A model in ``served.json``, served now or before: the candidate's id and
    checkpoint (relative to the checkpoints folder), the data, precision and gate scores
    it was judged with (agent_folder.candidates.candidate_entry), ``how`` it came to be
    served (first, gate, manual, rollback) and when, ``judged``: a whole-pool fit's
    split model the gate judged, and ``live``: the live watch's last figures on it."""

    id: str | None = None
    checkpoint: str | None = None
    fingerprint: str | None = None
    records: int | None = None
    precision: PrecisionName | None = None
    scores: ScoresOn | None = None
    trained_at: str | None = None
    how: str | None = None
    served_at: str | None = None
    judged: str | None = None
    live: LiveReport | None = None

    _HELD: ClassVar[Mapping[str, Held]] = {"scores": _scores(), "live": _live()}

    @classmethod
    def from_json(cls, data: Mapping[str, Json]) -> Self:
        """As :meth:`KeptRecord.from_json`; its live figures are of this model (``served``)."""
        entry = super().from_json(data)
        if entry.live is None or entry.id is None:
            return entry
        live = replace(entry.live, served=entry.id)  # still what was read: kept as read
        read = {**entry.read_values, "live": live}
        return msgspec.structs.replace(entry, live=live, read_values=read)


class Pin(KeptRecord):
    """The operator's pin: the command that set it and when; while it holds, neither
    the gate nor the live watch replaces the served model."""

    by: str | None = None
    at: str | None = None


class JournalEntry(KeptRecord):
    """One transition of the pointer (transitions.journaled): its number, its kind (serve's
    ``how``, ``rollback``, ``unpin``, ``trim``, ``repair``), when, the model served and
    the pin after it, the verdicts it decided (candidate id -> verdict, each with this
    ``journal_seq``), and a rollback's or trim's ``dropped`` and ``reason``. Each entry
    is the transition's event too (agent_folder.outbox): ``served`` and ``pinned`` are
    written even when null, as they always were; the last three only when set."""

    seq: int
    kind: str
    at: str | None = None
    at_s: float | None = None
    served: str | None = None
    pinned: Pin | None = None
    verdicts: dict[str, Verdict] = msgspec.field(default_factory=dict)
    dropped: str | list[str | None] | None = None  # a rollback's model (id), a trim's
    reason: str | None = None

    # A verdict that does not read leaves the entry out (ServedPointer.from_json), as
    # an entry that does not read.
    _HELD: ClassVar[Mapping[str, Held]] = {
        "pinned": Held(Pin.from_json, Pin.to_json, tolerant=False),
        "verdicts": Held(
            lambda data: {str(k): Verdict.from_json(v) for k, v in data.items()},
            lambda verdicts: {k: v.to_json() for k, v in verdicts.items()},
            tolerant=False,
        ),
    }

    def to_json(self) -> dict[str, Json]:
        out = super().to_json()
        return {"at": None, "at_s": None, "served": None, "pinned": None, **out}


@dataclass(frozen=True)
class ServedPointer:
    """What ``served.json`` holds: the served entry, the ones served before it, and the
    operator's pin (None: the daemon's gate and live watch may replace the served model)."""

    served: ServedEntry
    history: list[ServedEntry] = field(default_factory=list)
    pinned: Pin | None = None
    # The transitions that wrote this pointer, numbered (module docstring, "Crash-safe").
    sequence: int = 0
    journal: list[JournalEntry] = field(default_factory=list)

    def to_json(self) -> dict[str, Json]:
        data: dict[str, Json] = {
            "version": POINTER_VERSION,
            "served": self.served.to_json(),
            "history": [entry.to_json() for entry in self.history],
        }
        if self.pinned is not None:
            data["pinned"] = self.pinned.to_json()
        if self.sequence:
            data["sequence"] = self.sequence
            data["journal"] = [entry.to_json() for entry in self.journal]
        return data

    @classmethod
    def from_json(cls, data: Any) -> ServedPointer:
        """The pointer ``data`` holds (``served.json``'s JSON, or a run file's copy of it);
        ``ValueError`` saying why it cannot be followed, never half-read. A history entry
        or a journal entry a hand made unreadable is left out (the journal's numbers
        count the transitions from the others)."""
        version = data.get("version") if isinstance(data, dict) else type(data).__name__
        if version != POINTER_VERSION:
            raise ValueError(f"not version {POINTER_VERSION} (found {version!r})")
        served, history = data.get("served"), data.get("history", [])
        if not isinstance(served, dict) or not isinstance(served.get("checkpoint"), str):
            raise ValueError("names no checkpoint")
        if not isinstance(history, list):
            raise ValueError("history is not a list")
        pinned = data.get("pinned")
        sequence, journal = data.get("sequence", 0), data.get("journal", [])
        if not isinstance(sequence, int) or not isinstance(journal, list) or sequence < 0:
            raise ValueError("sequence or journal unreadable")
        entries = []
        for entry in journal:
            try:
                entries.append(JournalEntry.from_json(entry))
            except ValueError:
                continue
        return cls(
            ServedEntry.from_json(served),
            [ServedEntry.from_json(h) for h in history if isinstance(h, dict)],
            Pin.from_json(pinned) if isinstance(pinned, dict) else None,
            sequence,
            entries,
        )


def read_verdict(candidate: Path) -> Verdict:
    """The candidate's verdict; one without an outcome (``Verdict()``) while it has none
    (training), or when its file is unusable: set aside and reported (agent_folder.files)."""
    found = files.load(VERDICT.at(candidate), VERDICT, Verdict.from_json)
    return Verdict() if found is None else found


def stamped(verdict: Verdict) -> Verdict:
    """``verdict`` as a decision made now (its time), without a journal number."""
    return msgspec.structs.replace(
        verdict, journal_seq=None, decided_at=utc_now(), decided_at_s=time.time()
    )


def utc_now() -> str:
    """Now, in UTC, as every record of the owner writes it."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


# -- the runs: the last run and the recent ones (run_history.py keeps them) ----
TEXT_CHARS = 160  # a score's name, a model's id, a drift warning
# A last run's reason is cut to REASON_CHARS; a measured auto on CUDA names six rows
# (three precisions, eager and captured) in its precision's reason.
REASON_CHARS = 400
PRECISION_REASON_CHARS = 1000
MARK_COLUMNS = 4  # the columns a gate or live mark keeps, the primary first
NAME_CHARS = 32  # a column's name (contract.judging: at most 32 characters)


@dataclass(frozen=True)
class LastRun:
    """One finished run: its outcome (``success``, ``up_to_date``, ``failed``,
    ``stopped``), the precision it trained in and was asked for, when it ended (Unix
    time), how long it took, why it ended so (one line), who ran it (``daemon`` or
    ``train``) and its optimizer steps."""

    outcome: str
    precision: PrecisionName | None
    precision_requested: RequestedName | None
    finished_at: float
    duration_seconds: float
    reason: str
    source: str
    steps: int | None
    eval: dict[str, float] | None = None  # the run's eval figures (`model list` shows them)
    # Why it ran in that precision (a measured auto: every timed precision, its spread).
    precision_reason: str = ""


class GateMark(msgspec.Struct, frozen=True):
    """The gate's verdict on the run's candidate: the outcome, the two models' ids and
    their finite scores on the gate's first set by column (the loss columns, then the
    reported ones, such as ``auc``), the ``primary`` first. The set that decided, and
    the column a rejection was worse on, are in the run's reason."""

    outcome: str
    set: str | None = None
    primary: str | None = None
    candidate: dict[str, float] = msgspec.field(default_factory=dict)
    served: dict[str, float] = msgspec.field(default_factory=dict)
    candidate_id: str | None = None
    served_id: str | None = None


class LiveColumn(msgspec.Struct, frozen=True):
    """One column's live test: the mean difference (served minus predecessor, in the
    column's units), its anytime-valid bounds, the margin, and whether it regressed."""

    difference: float | None = None
    lower: float | None = None
    upper: float | None = None
    margin: float | None = None
    regression: bool = False

    @classmethod
    def of(cls, figures: Mapping[str, Any]) -> LiveColumn:
        """A column's figures in a live watch's JSON: what is not finite or true left out."""
        d, lo, up, m = (finite(figures.get(k)) for k in ("difference", "lower", "upper", "margin"))
        return cls(d, lo, up, m, figures.get("regression") is True)


class LiveMark(msgspec.Struct, frozen=True):
    """The live watch's running figures after the run: the records scored, whether it
    found a regression and rolled back, and each column's test (``metrics``, the
    ``primary`` first)."""

    records: int
    regression: bool
    rolled_back: bool
    primary: str | None = None
    metrics: dict[str, LiveColumn] = msgspec.field(default_factory=dict)

    @property
    def watched(self) -> LiveColumn:
        """The primary column's test: what the watch chart draws."""
        return self.metrics.get(self.primary or "", LiveColumn())

    @property
    def regressed(self) -> tuple[str, ...]:
        """The columns whose test found a regression."""
        return tuple(name for name, column in self.metrics.items() if column.regression)

    @classmethod
    def of(cls, live: Mapping[str, Any]) -> LiveMark:
        """The figures of a live watch's JSON (a run's report, or the served entry's, which
        a hand may have edited): what is not a finite number, a count or true left out."""
        records, metrics, primary = live.get("records"), live.get("metrics"), live.get("primary")
        if not isinstance(metrics, Mapping):  # one column beside the rest, before the map
            primary = live.get("metric") if isinstance(live.get("metric"), str) else "loss"
            metrics = {primary: live}
        columns = {str(k): c for k, c in metrics.items() if isinstance(c, Mapping)}
        primary = primary if isinstance(primary, str) and primary in columns else None
        kept = sorted(columns.items(), key=lambda item: item[0] != primary)[:MARK_COLUMNS]
        return cls(
            records=records if isinstance(records, int) and not isinstance(records, bool) else 0,
            regression=live.get("regression") is True,
            rolled_back=live.get("rolled_back") is True,
            primary=None if primary is None else cut(primary, NAME_CHARS),
            metrics={cut(name, NAME_CHARS): LiveColumn.of(column) for name, column in kept},
        )


class RunEntry(msgspec.Struct, frozen=True):
    """One finished run as the history keeps it: its last-run record (why it trained in
    its precision too), its loss scale and skipped steps, the guard's demotions (one line
    each), the records it quarantined, the drift warning (None: none flagged), the gate's
    verdict and the live watch's figures."""

    run: LastRun
    loss_scale: float | None = None
    skipped_steps: int | None = None
    demotions: tuple[str, ...] = ()
    quarantined: int | None = None
    drift: str | None = None
    gate: GateMark | None = None
    live: LiveMark | None = None

    @classmethod
    def of_error(cls, outcome: str, reason: str, duration: float, source: str) -> RunEntry:
        """The entry of a run that ended without a result (failed, or stopped as it
        started): its record alone."""
        reason = cut(reason, REASON_CHARS)
        return cls(LastRun(outcome, None, None, time.time(), round(duration, 3), reason, source, 0))


def finite(value: Any) -> float | None:
    """``value`` as a float when it is a finite number (not a bool), else None."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def text(value: Any) -> str | None:
    """``value`` as one cut line (:func:`cut`), None kept."""
    return None if value is None else cut(str(value))


def cut(text: str, chars: int = TEXT_CHARS) -> str:
    """``text`` on one line (a traceback's newlines would break it), cut to ``chars``."""
    line = " ".join(str(text).split())
    return line if len(line) <= chars else line[: chars - 1] + "…"
