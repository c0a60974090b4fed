"""The judged run's gate: a candidate against the served model on the same records.

Both models' losses (the plugin's ``score_records``) are paired by record id and clipped
to ``[0, loss_span]``; the candidate is promoted only when the one-sided 95% upper bound
of the mean paired difference (candidate - served) is within the margin: the burden of
proof is on the candidate, and a candidate no better and no worse is promoted only when
the records are enough to show it. Each candidate is judged once, so this is a
fixed-sample bound (mean + 1.645 s.e., normal: the records are many, their differences
bounded); the live watch, which looks again at every run, needs the anytime-valid one
(:mod:`.sequential`). The margin is the plugin's ``judging_margin``, else 5% of the
served model's mean loss on those records (contract.judging.judging_margin).

When the request names a golden set (``GENESIS_FP16_AGENTS__<AGENT>__GOLDEN_DATA``: a
fixed pool the operator trusts), the candidate must pass there too.

>>> a = RecordLosses.of([str(i) for i in range(100)], [0.2] * 100)
>>> b = RecordLosses.of([str(i) for i in range(100)], [0.5] * 100)
>>> compare("current", a, b, span=1.0, margin=lambda served_mean: 0.01).passed
True
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from genesis_fp16_infrastructure.contract.judging import RecordLosses
from genesis_fp16_infrastructure.contract.reports import GateComparison, ScoresOn

Z_95 = 1.6448536269514722  # one-sided 95%
MIN_RECORDS = 2  # an s.e. needs two; fewer shared records cannot decide


@dataclass(frozen=True)
class Paired:
    """Candidate against a reference on one set of records (mean losses clipped)."""

    name: str
    records: int
    candidate: float
    reference: float
    difference: float  # mean(candidate - reference): below 0, the candidate is better
    upper: float  # its one-sided 95% upper bound
    margin: float
    passed: bool | None  # None: too few shared records to decide

    def comparison(self) -> GateComparison:
        """As the gate report's comparison (no AUC: the figures are in ``reason``)."""
        return GateComparison(
            name=self.name,
            candidate=None,
            served=None,
            passed=self.passed,
            reason=self.reason(),
        )

    def scores(self, side: str) -> ScoresOn:
        loss = self.candidate if side == "candidate" else self.reference
        return ScoresOn(self.name, math.nan, math.nan, records=self.records, loss=round(loss, 6))

    def reason(self) -> str:
        if self.passed is None:
            return f"{self.name}: {self.records} shared record(s), too few to decide"
        word = "within" if self.passed else "beyond"
        return (
            f"{self.name}: loss {self.candidate:.6g} vs served {self.reference:.6g} on "
            f"{self.records} records, worse by at most {self.upper:+.6g} (95%), {word} the "
            f"margin {self.margin:.6g}"
        )

    def to_json(self) -> dict[str, object]:
        return {
            "set": self.name,
            "records": self.records,
            "candidate_loss": round(self.candidate, 6),
            "served_loss": round(self.reference, 6),
            "difference": round(self.difference, 6),
            "upper": round(self.upper, 6),
            "margin": self.margin,
            "passed": self.passed,
        }


def paired_losses(
    first: RecordLosses, second: RecordLosses, span: float
) -> tuple[np.ndarray, np.ndarray]:
    """Both models' clipped losses on the records both scored, in ``first``'s order."""
    where = {id_: i for i, id_ in enumerate(second.ids)}
    shared = [(i, where[id_]) for i, id_ in enumerate(first.ids) if id_ in where]
    a = np.array([first.losses[i] for i, _ in shared], dtype=np.float64)
    b = np.array([second.losses[j] for _, j in shared], dtype=np.float64)
    return np.clip(a, 0.0, span), np.clip(b, 0.0, span)


def compare(
    name: str,
    candidate: RecordLosses,
    served: RecordLosses,
    span: float,
    margin: Callable[[float], float],
) -> Paired:
    """The candidate against the served model on the records both scored; ``margin``
    maps the served model's mean (clipped) loss there to the difference tolerated."""
    a, b = paired_losses(candidate, served, span)
    n = len(a)
    if n < MIN_RECORDS:
        mean_a = float(a.mean()) if n else math.nan
        mean_b = float(b.mean()) if n else math.nan
        return Paired(name, n, mean_a, mean_b, mean_a - mean_b, math.nan, math.nan, None)
    d = a - b
    upper = float(d.mean() + Z_95 * d.std(ddof=1) / math.sqrt(n))
    tolerated = margin(float(b.mean()))
    return Paired(
        name, n, float(a.mean()), float(b.mean()), float(d.mean()), upper, tolerated,
        upper <= tolerated,
    )  # fmt: skip
