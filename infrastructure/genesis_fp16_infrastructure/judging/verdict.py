"""A scored candidate's verdict: decided before anything is written (:class:`Decided`),
then staged in its phase's transaction as the record its file holds (the gate's report
and every comparison's figures), with the promotion it decides.

The gate (``judging.run``, phase 4) and a kept candidate judged again (phase 3) decide
a verdict on the figures they scored, outside the pointer's lock; the phase's one
transaction then stages it (:meth:`Decided.stage`): the verdict, then, for a promotion,
the pointer that serves the model, unless the operator's pin holds it (``held``). A
candidate that cannot be judged is closed ``undecided`` (:func:`undecided`), in a
transaction of its own: nothing is served. The verdict is read into its record once
(``Verdict``), and the commit writes that record (``agent_folder.transaction``).

JSON only, no torch.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

from genesis_fp16_infrastructure.agent_folder.candidates import KeptCandidate, candidate_entry
from genesis_fp16_infrastructure.agent_folder.kept_record import Json
from genesis_fp16_infrastructure.agent_folder.lifecycle_records import Finding, Outcome, Verdict
from genesis_fp16_infrastructure.agent_folder.transaction import Transaction, transaction
from genesis_fp16_infrastructure.contract.reports import GateComparison, GateReport
from genesis_fp16_infrastructure.judging.gate import Paired, scores_on
from genesis_fp16_infrastructure.precision_names import PrecisionName


@dataclass(frozen=True)
class Decided:
    """The gate's verdict on a scored candidate, decided and not yet written (nothing of
    the folder read or changed since the phase read it): :meth:`stage` stages it in the
    phase's transaction. ``first``: no model served yet (its promotion is the first)."""

    kept: KeptCandidate
    checkpoint: Path
    outcome: Outcome
    reason: str
    comparisons: list[Paired]
    started: float
    used: PrecisionName | None
    served_id: str | None
    first: bool
    digest: str
    evidence: Literal["held_out", "training_data"] | None
    reported: Mapping[str, float]

    def stage(self, tx: Transaction) -> GateReport:
        """The verdict staged in ``tx``, and acted on: the first model is promoted as it
        is; a promoted one is served unless the operator's pin holds it (``held``)."""
        candidate, comparisons = self.kept.path, self.comparisons
        report, verdict = _verdict(
            tx, candidate, self.checkpoint, self.outcome, self.reason, self.started,
            self.used, comparisons, self.served_id, self.digest, self.evidence, self.reported,
        )  # fmt: skip
        if self.outcome != Outcome.PROMOTED:
            return report
        serving, how = time.monotonic(), "first" if self.first else "gate"
        entry = candidate_entry(tx.folder, candidate, self.checkpoint, verdict, self.kept.meta)
        if tx.serve(entry, how, unless_pinned=True):
            return report
        seconds = round(time.monotonic() - serving, 4)
        why = "pinned by the operator: " + self.reason
        held = replace(report, outcome=Outcome.HELD, reason=why, seconds=seconds)
        _written(tx, candidate, held, comparisons)  # replaces the promotion staged
        return held


def undecided(
    candidate: Path, checkpoint: Path | None, why: str, started: float, used: PrecisionName | None
) -> GateReport:
    """The verdict ``undecided`` (why: ``why``) on ``candidate`` (its newest checkpoint:
    ``checkpoint``), committed in a transaction of its own: nothing is served."""
    with transaction(candidate.parent.parent) as tx:
        return _verdict(tx, candidate, checkpoint, Outcome.UNDECIDED, why, started, used, [])[0]


def _verdict(
    tx: Transaction,
    candidate: Path,
    checkpoint: Path | None,
    outcome: Outcome,
    reason: str,
    started: float,
    precision: PrecisionName | None,
    comparisons: list[Paired],
    served_id: str | None = None,
    judged_on: str | None = None,
    evidence: Literal["held_out", "training_data"] | None = None,
    reported: Mapping[str, float] | None = None,
) -> tuple[GateReport, Verdict]:
    """The gate's report, staged in ``tx`` as the candidate's verdict (with the figures),
    and that verdict's record; ``checkpoint``: the candidate's newest (as the phase
    found it: no listing under the lock), named in the report;
    ``judged_on``: the data's digest (an inconclusive one is judged again on other data);
    ``reported``: the candidate run's own figures reported beside its losses, never
    gated (``judging.run._reported``)."""
    scores, compared = scores_on(comparisons, "candidate"), [c.comparison() for c in comparisons]
    if scores is not None and reported:
        scores = replace(scores, reported=reported)
    report = GateReport(
        outcome=outcome,
        reason=reason,
        comparisons=tuple(compared),
        seconds=round(time.monotonic() - started, 4),
        precision=precision,
        candidate=scores,
        served=None if served_id is None else scores_on(comparisons, "served"),
        served_id=served_id,
        checkpoint=None if checkpoint is None else checkpoint.name,
        candidate_id=candidate.name,
        records_needed=_needed(compared) if outcome == Outcome.INCONCLUSIVE else None,
        judged_on=judged_on,
        evidence=evidence,
    )
    return report, _written(tx, candidate, report, comparisons)


def _written(
    tx: Transaction, candidate: Path, report: GateReport, comparisons: list[Paired]
) -> Verdict:
    """``report`` staged in ``tx`` as the candidate's verdict, the record its file will
    hold with every comparison's figures (one staged before for the same candidate:
    replaced); returns that record (made once: the commit writes it as it is)."""
    verdict = verdict_of(report, comparisons)
    tx.verdict(candidate, verdict)
    return verdict


def verdict_of(report: GateReport, judged: Sequence[Paired] = ()) -> Verdict:
    """``report`` as the verdict record its file will hold, field by field (no JSON in
    between): the gate's figures as the contract's records; what the verdict does not
    declare (the gate's ``seconds``, the candidate's id, each comparison's figures as
    ``judged``) kept in ``extra`` as the report's JSON writes it. The file is the one
    that reading the report's JSON as a verdict wrote (a test holds them byte for byte)."""
    extra: dict[str, Json] = {"seconds": round(report.seconds, 4)}  # as its JSON rounds it
    if report.candidate_id is not None:
        extra["candidate_id"] = report.candidate_id
    extra["judged"] = [c.to_json() for c in judged]
    # The report writes its comparisons, an empty list too; the record leaves an empty
    # tuple out unless it was given so (as a read of the report's JSON would keep it).
    given: dict[str, Json] = {} if report.comparisons else {"comparisons": []}
    return Verdict(
        outcome=report.outcome,
        reason=report.reason,
        precision=report.precision,
        checkpoint=report.checkpoint,
        candidate=report.candidate,
        served=report.served,
        served_id=report.served_id,
        judged_on=report.judged_on,
        evidence=report.evidence,
        records_needed=report.records_needed,
        comparisons=report.comparisons,
        extra=extra,
        as_read=given,
        read_values={name: () for name in given},
    )


def _needed(comparisons: list[GateComparison]) -> int | None:
    """The records an inconclusive verdict's undecided comparisons would need (None: more
    records alone would not show one of them no worse)."""
    needs = [c.records_needed for c in comparisons if c.finding == Finding.INCONCLUSIVE]
    return None if not needs or None in needs else max(n for n in needs if n is not None)
