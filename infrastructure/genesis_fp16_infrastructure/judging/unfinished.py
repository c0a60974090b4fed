"""A candidate whose run was cut short (killed, or stopped by a signal, a precision switch
or a reload) is continued by the agent's next judged run, or closed with its reason.

A run cut short leaves its candidate without a verdict: killed, it had no time to write
one; stopped, it is not judged (a half-trained model is never served) and writes none.
The next judged run of the agent (:func:`decide_unfinished`, before it asks whether
anything is new) continues the newest such candidate in its own folder when that
candidate asked what this run asks: the same served model continued (or none), the same
data files (their digest), seed and plugin options. The plugin's resume then reads the
candidate's own newest checkpoint, and the training loop continues an interrupted run
toward its own target when the budget asked is the same (``training.run.loop``), so a
job killed again and again ends bitwise where an unbroken one ends. The candidate is
then judged once, as any other.

Every other unfinished candidate is closed: its verdict ``undecided`` with the reason it
cannot be continued (its data changed or is gone, another model is served now, other
options), so none stays without a verdict and the history's pruning counts it as it
counts a rejected one. Before this (2c6d7b6d), every run made a new candidate: a resumed
kill loop trained afresh from the served model 25 times in 32 and ended short of its
target, and the killed candidates piled up, never judged nor pruned.

JSON only, no torch.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import NamedTuple

from genesis_fp16_infrastructure.agent_folder.candidates import KeptCandidate, read_candidates
from genesis_fp16_infrastructure.agent_folder.kept_record import Json
from genesis_fp16_infrastructure.agent_folder.lifecycle_records import (
    CandidateMeta,
    Outcome,
    Verdict,
    stamped,
)
from genesis_fp16_infrastructure.agent_folder.transaction import Transaction, transaction
from genesis_fp16_infrastructure.contract.reports import GateReport
from genesis_fp16_infrastructure.judging.verdict import verdict_of

logger = logging.getLogger(__name__)


def unfinished_candidates(folder: Path) -> list[Path]:
    """The candidates of ``folder`` that have no verdict (cut short), oldest first."""
    return [c.path for c in read_candidates(folder) if c.verdict.outcome is None]


class Taken(NamedTuple):
    """What :func:`decide_unfinished` decided: the candidate this run continues (None:
    none), the folder's candidates as they stand once its closes are committed (each one
    it closes with the verdict its file will hold), and those closes, not yet written
    (each candidate's folder and verdict record: :meth:`stage` stages them)."""

    candidate: Path | None
    candidates: tuple[KeptCandidate, ...]
    closing: tuple[tuple[Path, Verdict], ...] = ()

    def stage(self, tx: Transaction) -> None:
        """Stage every close in ``tx``: the candidate's verdict ``undecided``, with why."""
        for candidate, verdict in self.closing:
            tx.verdict(candidate, verdict)


def take_unfinished(folder: Path, meta: CandidateMeta | Mapping[str, Json]) -> Path | None:
    """The unfinished candidate (no verdict) of ``folder`` that this run continues
    (:func:`settle_unfinished`, on the candidates read now)."""
    if not isinstance(meta, CandidateMeta):
        meta = CandidateMeta.from_json(meta)
    return settle_unfinished(folder, meta, read_candidates(folder)).candidate


def settle_unfinished(
    folder: Path, meta: CandidateMeta, candidates: tuple[KeptCandidate, ...]
) -> Taken:
    """:func:`decide_unfinished`, its closes committed in one transaction of their own
    (``agent_folder.transaction``: under the pointer's lock, what a killed writer left
    settled first, one commit); none to close, no transaction. A judged run stages them
    in its phase's transaction instead (``judging.run``)."""
    taken = decide_unfinished(meta, candidates)
    if taken.closing:
        with transaction(folder) as tx:
            taken.stage(tx)
    return taken


def decide_unfinished(meta: CandidateMeta, candidates: tuple[KeptCandidate, ...]) -> Taken:
    """The unfinished candidate (no verdict) that this run continues: the newest whose
    meta asked what ``meta`` (this run's, as a new candidate would record it) asks; None
    when there is none. Each other unfinished candidate is to be closed: its verdict
    ``undecided``, with the reason it is not continued. Nothing is written here.
    ``candidates``: the folder's, as the run's phase read them (each meta and verdict
    read once, :func:`~.candidates.read_candidates`)."""
    taken: Path | None = None
    closing: list[tuple[KeptCandidate, str]] = []
    unfinished = [c for c in candidates if c.verdict.outcome is None]
    for candidate in reversed(unfinished):  # newest first
        why = _not_continued(candidate.meta, meta) if taken is None else None
        if taken is None and why is None:
            taken = candidate.path
            logger.info("continuing candidate %s, cut short earlier", candidate.name)
            continue
        if why is None:
            assert taken is not None
            why = f"a newer candidate cut short on the same request ({taken.name}) is continued"
        logger.info("closing candidate %s, cut short earlier: %s", candidate.name, why)
        closing.append((candidate, f"not continued: {why}"))
    if not closing:
        return Taken(taken, candidates)
    closes = tuple((c.path, _closed(c.path, reason, meta.continues)) for c, reason in closing)
    closed = {path: stamped(verdict) for path, verdict in closes}
    kept = tuple(c.decided(closed[c.path]) if c.path in closed else c for c in candidates)
    return Taken(taken, kept, closes)


def _closed(candidate: Path, reason: str, served_id: str | None) -> Verdict:
    """The verdict of ``candidate`` closed: ``undecided`` with ``reason`` (no figures),
    as its file will hold it (stamped when it is written)."""
    report = GateReport(Outcome.UNDECIDED, reason, served_id=served_id, candidate_id=candidate.name)
    return verdict_of(report)


def _not_continued(recorded: CandidateMeta, meta: CandidateMeta) -> str | None:
    """Why the run ``meta`` asks for cannot continue the candidate whose meta is
    ``recorded``; None when it can."""
    if recorded.id is None:  # an unusable meta (set aside as it was read)
        return "its candidate.json cannot be read"
    if recorded.continues != meta.continues:
        now = meta.continues or "none"
        return f"it continued model {recorded.continues or 'none'}; this run continues {now}"
    if recorded.fingerprint != meta.fingerprint:
        return "its data files changed or are gone since (a new candidate trains on them now)"
    asked = {"data_path": meta.data_path, "seed": meta.seed, "options": meta.options}
    for key, value in asked.items():
        if getattr(recorded, key) != value:
            said = getattr(recorded, key)
            return f"it was asked another {key.replace('_', ' ')} ({said!r})"
    return None
