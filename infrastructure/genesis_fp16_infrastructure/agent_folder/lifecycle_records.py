"""The served-model lifecycle's records, typed: a candidate's meta and verdict, the served pointer.

The served-model lifecycle's: a candidate's meta (``candidate.json``) and verdict
(``verdict.json``, read by :func:`read_verdict`), and the pointer (``served.json``,
:class:`ServedPointer`): its entries (the served model and those before it), its pin and
its journal entries.
Readers take fields, never string keys, and a verdict's outcome is an :class:`Outcome`.

Each record is a msgspec ``Struct`` declaring the keys the code reads. The figures a
verdict and a served entry keep are the contract's records, defined a layer below it in
:mod:`~genesis_fp16_infrastructure.agent_folder.lifecycle_figures` (the gate's scores
and comparisons, the live watch's report), never a dict twin. Nothing a file holds is
lost: every other key (a meta's request, keys a newer release adds) is kept in
``extra``, and the figures' JSON as read in ``as_read``, written back as it was while
the field holds what was read from it (an older form, a hand's edit the record cannot
read: then the field is None), so a folder written before these types reads and writes
the same JSON (a key written ``null`` may come back absent: the readers treat both
alike)::

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

A finished run's records (``LastRun``, ``RunEntry``) are
:mod:`~genesis_fp16_infrastructure.agent_folder.run_records`'s.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from pathlib import Path
from typing import Any, ClassVar, Self

import msgspec

from genesis_fp16_infrastructure.agent_folder import files
from genesis_fp16_infrastructure.agent_folder.kept_record import (
    BY_KEY,
    EACH,
    Held,
    Json,
    KeptRecord,
)
from genesis_fp16_infrastructure.agent_folder.layout import VERDICT
from genesis_fp16_infrastructure.agent_folder.lifecycle_figures import (
    GateComparison,
    LiveReport,
    ScoresOn,
)
from genesis_fp16_infrastructure.precision_names import PrecisionName

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


def _scores() -> Held:
    return Held(ScoresOn.from_json, ScoresOn.to_json)


def _live() -> Held:
    return Held(LiveReport.from_figures_json, LiveReport.figures_json)


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
        "comparisons": Held(GateComparison.from_json, GateComparison.to_json, EACH),
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
        "verdicts": Held(Verdict.from_json, Verdict.to_json, BY_KEY, tolerant=False),
    }
    _NULLS_WRITTEN: ClassVar[tuple[str, ...]] = ("at", "at_s", "served", "pinned")


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
            "history": list(map(ServedEntry.to_json, self.history)),
        }
        if self.pinned is not None:
            data["pinned"] = self.pinned.to_json()
        if self.sequence:
            data["sequence"] = self.sequence
            data["journal"] = list(map(JournalEntry.to_json, self.journal))
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
