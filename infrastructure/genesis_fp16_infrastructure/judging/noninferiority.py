"""Non-inferiority with three answers: shown no worse, shown worse, or not yet known.

Both gates (the retrain recipe's and the judged run's) ask one question of each set of
paired records, and of each segment the served model knew: is the candidate worse than
the reference by more than a stated margin? With ``d`` the per-record difference
(candidate − reference, above 0: worse), its mean ``m`` and standard error ``s``::

    no worse:      m + 1.645 s <= margin      the burden of proof met (95%, one-sided)
    worse:         Holm over every question says m > margin (family-wise 5%)
    inconclusive:  neither: the records cannot tell yet

Why the two sides are treated apart: the candidate is promoted only when *every*
required question says "no worse" (an intersection-union test), and such a test keeps
its level without any split of alpha: promoting a candidate that is worse beyond the
margin on some segment needs that segment's own 5% test to err (Berger, 1982). Calling
a candidate "worse" is the opposite, a union: any one question suffices, so with k
segments and sets the chance that one of them says "worse" by luck grows with k. Holm's
step-down keeps that family-wise chance at 5% for any dependence between the questions,
and never rejects less than a Bonferroni split.

``records_needed`` is what an inconclusive question asks for: at the observed mean and
spread, the records at which the upper bound would reach the margin (None when the
observed mean is itself beyond the margin: more records alone cannot show it).

>>> b = Bound.of("newest", np.tile([-0.2, 0.2], 100), 0.01)  # 200 records, mean 0
>>> b.finding(worse=False), b.records_needed()
(<Finding.INCONCLUSIVE: 'inconclusive'>, 1088)
>>> holm_worse([Bound("a", 100, 0.05, 0.01, 0.01), Bound("b", 100, 0.03, 0.01, 0.01)])
[True, True]
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from genesis_fp16_infrastructure.agent_folder.lifecycle_records import Finding

ALPHA = 0.05  # each promotion question one-sided; the "worse" family as a whole
Z_95 = 1.6448536269514722  # the one-sided 95% normal quantile


@dataclass(frozen=True)
class Bound:
    """One question: ``mean`` difference (candidate − reference, above 0 worse) of
    ``records`` paired records, its standard error ``se``, and the ``margin`` tolerated.
    ``required``: whether the candidate must be shown no worse here to be promoted (a
    veto-only question, such as an AUC on too few successes, is not)."""

    name: str
    records: int
    mean: float
    se: float
    margin: float
    required: bool = True

    @classmethod
    def of(cls, name: str, differences: np.ndarray, margin: float) -> Bound:
        """From the per-record differences (at least two)."""
        d = np.asarray(differences, dtype=np.float64)
        se = float(d.std(ddof=1) / math.sqrt(len(d)))
        return cls(name, len(d), float(d.mean()), se, margin)

    @property
    def upper(self) -> float:
        """The one-sided 95% upper bound of how much worse."""
        return self.mean + Z_95 * self.se

    @property
    def lower(self) -> float:
        """The one-sided 95% lower bound of how much worse."""
        return self.mean - Z_95 * self.se

    def p_worse(self) -> float:
        """The one-sided p-value of "worse beyond the margin" (small: shown worse)."""
        if self.se <= 0:
            return 0.0 if self.mean > self.margin else 1.0
        return 0.5 * math.erfc((self.mean - self.margin) / self.se / math.sqrt(2))

    def finding(self, worse: bool) -> Finding:
        """This question's answer, given whether Holm's family found it ``worse``."""
        if worse:
            return Finding.WORSE
        return Finding.NO_WORSE if self.upper <= self.margin else Finding.INCONCLUSIVE

    def records_needed(self) -> int | None:
        """The records at which, at this mean and spread, the upper bound would reach
        the margin; None when the mean is not within the margin."""
        if self.mean >= self.margin:
            return None
        return math.ceil(self.records * (Z_95 * self.se / (self.margin - self.mean)) ** 2)


def holm_worse(bounds: Sequence[Bound], alpha: float = ALPHA) -> list[bool]:
    """Which of ``bounds`` Holm's step-down shows worse beyond its margin, with the
    family-wise error of any false "worse" at most ``alpha``: the i-th smallest p-value
    (from 0) is compared with ``alpha / (k - i)``, stopping at the first that fails."""
    order = sorted(range(len(bounds)), key=lambda i: bounds[i].p_worse())
    worse = [False] * len(bounds)
    for rank, index in enumerate(order):
        if bounds[index].p_worse() > alpha / (len(bounds) - rank):
            break
        worse[index] = True
    return worse
