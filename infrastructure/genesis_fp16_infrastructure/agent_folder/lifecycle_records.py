"""The served-model lifecycle's records, typed: a candidate's meta (``candidate.json``)
and verdict (``verdict.json``), and the pointer (``served.json``, :class:`ServedPointer`):
its entries (the served model and those before it), its pin and its journal entries.
Readers take fields, never string keys, and a verdict's outcome is an :class:`Outcome`.

Each record is a msgspec ``Struct`` declaring the keys the code reads. Nothing a file
holds is lost: every other key (a verdict's comparisons' figures, a meta's request, keys
a newer release adds) is kept in ``extra`` and written back as it was, so a folder
written before these types reads and writes the same JSON (a key written ``null`` may
come back absent: the readers treat both alike)::

    >>> v = Verdict.from_json({"outcome": "held", "reason": "pinned", "served": {"loss": 1}})
    >>> v.outcome is Outcome.HELD, v.extra
    (True, {'served': {'loss': 1}})
    >>> v.to_json() == {"outcome": "held", "reason": "pinned", "served": {"loss": 1}}
    True

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
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Self

import msgspec

from genesis_fp16_infrastructure.training.precision.precision_names import PrecisionName

EXTRA = "extra"
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
    """What one non-inferiority test showed (judging.noninferiority): the candidate
    within the margin, beyond it, or neither."""

    NO_WORSE = "no_worse"
    WORSE = "worse"
    INCONCLUSIVE = "inconclusive"  # neither yet: a verdict is then ``inconclusive``


class _Kept(msgspec.Struct, kw_only=True, omit_defaults=True):
    """A record of a JSON object: its declared fields, and ``extra``, the keys it does
    not declare, kept as read."""

    extra: dict[str, Any] = {}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Self:
        """The record ``data`` holds; ``ValueError`` (one line) when it does not fit."""
        if not isinstance(data, Mapping):
            raise ValueError(f"{cls.__name__}: a JSON {type(data).__name__}, not an object")
        declared = set(cls.__struct_fields__) - {EXTRA}
        known = {k: v for k, v in data.items() if k in declared}
        extra = {k: v for k, v in data.items() if k not in declared}
        try:
            return msgspec.convert({**known, EXTRA: extra}, cls)
        except msgspec.ValidationError as exc:
            raise ValueError(f"{cls.__name__}: {exc}") from None

    def to_json(self) -> dict[str, Any]:
        """The JSON object: the declared fields that are set, then ``extra``'s keys."""
        out: dict[str, Any] = msgspec.to_builtins(self)
        return {**out.pop(EXTRA, {}), **out}


class CandidateMeta(_Kept):
    """``candidate.json``: written when a candidate's training begins (its data and its
    request are in ``extra``); ``continues``: the served model it resumed from."""

    id: str | None = None
    created_at: str | None = None
    fingerprint: str | None = None
    records: int | None = None
    continues: str | None = None


class Verdict(_Kept):
    """``verdict.json`` (and a journal entry's ``verdicts``): the gate's record of a
    candidate (``GateReport``'s JSON: its comparisons and scores on the sets stay in
    ``extra``), stamped when written; ``gate_outcome``: what the gate said of a model
    rolled back since; ``journal_seq``: the transition that decided it (roll-forward)."""

    outcome: Outcome | None = None
    reason: str | None = None
    precision: PrecisionName | None = None  # the precision the candidate was judged in
    checkpoint: str | None = None  # the candidate's file the gate judged
    candidate: dict[str, Any] | None = None  # its scores on the deciding set
    served_id: str | None = None
    judged_on: str | None = None  # the data digest an inconclusive one was judged on
    evidence: str | None = None  # held_out or training_data (GateReport.evidence)
    records_needed: int | None = None
    gate_outcome: Outcome | None = None
    decided_at: str | None = None
    decided_at_s: float | None = None
    journal_seq: int | None = None
    live: dict[str, Any] | None = None  # a rolled-back model's live figures
    comparisons: list[Any] = []


class ServedEntry(_Kept):
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
    scores: dict[str, Any] | None = None
    trained_at: str | None = None
    how: str | None = None
    served_at: str | None = None
    judged: str | None = None
    live: dict[str, Any] | None = None


class Pin(_Kept):
    """The operator's pin: the command that set it and when; while it holds, neither
    the gate nor the live watch replaces the served model."""

    by: str | None = None
    at: str | None = None


class JournalEntry(_Kept, omit_defaults=False):
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
    pinned: dict[str, Any] | None = None  # Pin's JSON, as the event carries it
    verdicts: dict[str, Verdict] = {}
    dropped: Any = None
    reason: str | None = None

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Self:
        """As :meth:`_Kept.from_json`, each verdict read whole (:class:`Verdict`)."""
        if not isinstance(data, Mapping):
            raise ValueError(f"{cls.__name__}: a JSON {type(data).__name__}, not an object")
        verdicts = data.get("verdicts") or {}
        if not isinstance(verdicts, Mapping):
            raise ValueError(f"{cls.__name__}: verdicts is a {type(verdicts).__name__}")
        entry = super().from_json({k: v for k, v in data.items() if k != "verdicts"})
        read = {str(k): Verdict.from_json(v) for k, v in verdicts.items()}
        return msgspec.structs.replace(entry, verdicts=read)

    def to_json(self) -> dict[str, Any]:
        out = super().to_json()
        for key in ("verdicts", "dropped", "reason"):
            if out[key] is None or out[key] == {}:
                del out[key]
        if self.verdicts:
            out["verdicts"] = {k: v.to_json() for k, v in self.verdicts.items()}
        return out


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

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
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
