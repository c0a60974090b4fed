"""The judged run's gate: a candidate against the served model on the same records.

Both models' losses (the plugin's ``score_records``) are paired by record id and clipped
to ``[0, loss_span]``; the candidate is promoted only when the one-sided 95% upper bound
of the mean paired difference (candidate - served) is within the margin: the burden of
proof is on the candidate, and a candidate no better and no worse is promoted only when
the records are enough to show it. Each candidate is judged once, so this is a
fixed-sample bound (mean + 1.645 s.e., normal: the records are many, their differences
bounded); the live watch, which looks again at every run, needs the anytime-valid one
(:mod:`.watch`). The margin is the plugin's ``judging_margin``, else 5% of the
served model's mean loss on those records, never under the plugin's
``judging_margin_floor`` if it declares one (contract.judging.judging_margin).

A plugin that returns several loss columns (contract.judging: se_darwin's ``log_loss`` and
``brier``) has each column asked every question, with its own margin: the candidate is
promoted only when shown no worse on every required question of every column (an
intersection-union test keeps each at its level), and Holm's step-down over all the
questions of all the columns (below) keeps the family-wise chance of a
false "worse" at 5%.

When the request names a golden set (``GENESIS_FP16_AGENTS__<AGENT>__GOLDEN_DATA``: a
fixed pool the operator trusts), the candidate must pass there too.

>>> a = RecordLosses.of([str(i) for i in range(100)], [0.2] * 100)
>>> b = RecordLosses.of([str(i) for i in range(100)], [0.5] * 100)
>>> compare("current", a, b, span=1.0, margin=lambda served_mean: 0.01).passed
True

**Non-inferiority with three answers**: shown no worse, shown worse, or not yet known.

The gate asks one question of each set of paired records, and of each segment the served
model knew: is the candidate worse than the reference by more than a stated margin? With
``d`` the per-record difference (candidate − reference, above 0: worse), its mean ``m``
and standard error ``s``::

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
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from genesis_fp16_infrastructure.agent_folder.lifecycle_records import Finding, Outcome
from genesis_fp16_infrastructure.contract.record_losses import RecordLosses
from genesis_fp16_infrastructure.contract.reports import GateComparison, ScoresOn
from genesis_fp16_infrastructure.data.schema import find_ids
from genesis_fp16_infrastructure.record_codec import JSON, LOCAL, ROUND, Record

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


MIN_RECORDS = 2  # an s.e. needs two; fewer shared records cannot decide
SEGMENT_MIN_RECORDS = 100  # a segment is judged on its own from this many shared records


@dataclass(frozen=True)
class Paired(Record):
    """Candidate against a reference on one set of records (mean losses clipped); the
    verdict file's ``judged`` list holds each one's JSON (rounded, NaN as null)."""

    name: str = field(metadata={JSON: "set"})
    records: int
    candidate: float = field(metadata={JSON: "candidate_loss", ROUND: 6})
    reference: float = field(metadata={JSON: "served_loss", ROUND: 6})
    # mean(candidate - reference): below 0, the candidate is better
    difference: float = field(metadata={ROUND: 6})
    upper: float = field(metadata={ROUND: 6})  # its one-sided 95% upper bound
    margin: float
    passed: bool | None  # None: too few shared records to decide, or inconclusive
    lower: float = field(default=math.nan, metadata={ROUND: 6})  # its one-sided 95% lower bound
    segment: str | None = None  # the records' segment (RecordLosses.segments), if one
    # no_worse, worse or inconclusive (Bound.finding), as settled by decide()
    finding: Finding | None = None
    # False: a veto only (shown worse rejects; not shown no worse holds nothing back)
    required: bool = field(default=True, metadata={LOCAL: True})
    metric: str = "loss"  # the loss column (RecordLosses.losses) compared

    def bound(self) -> Bound | None:
        """Its question for :func:`decide`; None when it has too few records."""
        if not math.isfinite(self.upper) or not math.isfinite(self.lower):
            return None
        se = (self.upper - self.lower) / (2 * Z_95)
        name = f"{self.metric} on {self.label}"
        return Bound(name, self.records, self.difference, se, self.margin, self.required)

    @property
    def label(self) -> str:
        return self.name if self.segment is None else f"{self.name} (segment {self.segment})"

    def comparison(self) -> GateComparison:
        """As the gate report's comparison (the figures are in ``reason``)."""
        bound = self.bound()
        needed = bound.records_needed() if bound and self.finding == Finding.INCONCLUSIVE else None
        return GateComparison(
            name=self.name,
            passed=self.passed,
            reason=self.reason(),
            segment=self.segment,
            finding=self.finding,
            records_needed=needed,
            metric=self.metric,
            margin=self.margin if math.isfinite(self.margin) else None,
        )

    def reason(self) -> str:
        if not self.records:  # an empty set (no held-out record left), not "nothing served"
            return f"{self.label}: no records to judge on, too few to decide"
        if math.isnan(self.reference):  # the first model: nothing served to compare with
            return (
                f"{self.label}: {self.metric} {self.candidate:.6g} on {self.records} records, "
                "nothing served to compare with"
            )
        if self.bound() is None:
            return f"{self.label}: {self.records} shared record(s), too few to decide"
        words = {
            Finding.WORSE: "shown worse beyond",
            Finding.INCONCLUSIVE: "neither shown within nor beyond",
        }
        shown = words.get(self.finding, "within") if self.finding else "within"
        return (
            f"{self.label}: {self.metric} {self.candidate:.6g} vs served {self.reference:.6g} on "
            f"{self.records} records, worse by {self.lower:+.6g} to {self.upper:+.6g} (95%), "
            f"{shown} the margin {self.margin:.6g}"
        )


def scores_on(comparisons: Sequence[Paired], side: str) -> ScoresOn | None:
    """``side``'s (``candidate`` or ``served``) figures on the first set: each column's
    mean on its pooled records, the primary first (the first comparison's column)."""
    if not comparisons:
        return None
    first = comparisons[0]
    pooled = [c for c in comparisons if c.name == first.name and c.segment is None]
    means = {c.metric: c.candidate if side == "candidate" else c.reference for c in pooled}
    losses = {metric: round(mean, 6) for metric, mean in means.items() if math.isfinite(mean)}
    return ScoresOn(first.name, losses, first.records)


def paired_losses(
    first: RecordLosses,
    second: RecordLosses,
    span: float,
    metric: str | None = None,
    rows: tuple[np.ndarray, np.ndarray] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Both models' clipped losses of column ``metric`` (None: the primary) on the records
    both scored, in ``first``'s order (``rows``: their :func:`shared_rows`, when known)."""
    i, j = shared_rows(first, second) if rows is None else rows
    # Each column's array as the record keeps it (made when it was scored): no walk of
    # ~20,000 Python floats per column and model at 100,000 records.
    a, b = first.column_array(metric)[i], second.column_array(metric)[j]
    return np.clip(a, 0.0, span), np.clip(b, 0.0, span)


def shared_rows(first: RecordLosses, second: RecordLosses) -> tuple[np.ndarray, np.ndarray]:
    """The rows of the records both scored, paired by id (its 64-bit hash, as the held-out
    split and the stores pair them): ``first``'s rows in its order, and ``second``'s row
    of each. One sort and one binary search, not a dict of every id per question; none
    when both hold the same ids in the same order (the gate's reference is cut to the
    records the candidate was asked for)."""
    if first.same_records(second):  # by their rows, where both are rows of one listing
        rows = np.arange(len(first.column_array()))  # no tuple of its floats made
        return rows, rows
    order = np.argsort(second.id_hashes)  # ids are distinct: stable or not, one order
    at, hit = find_ids(second.id_hashes[order], first.id_hashes)
    return np.flatnonzero(hit), order[at[hit]]


def compare(
    name: str,
    candidate: RecordLosses,
    served: RecordLosses,
    span: float,
    margin: Callable[[float], float],
    metric: str | None = None,
) -> Paired:
    """The candidate against the served model on the records both scored, on loss column
    ``metric`` (None: the primary); ``margin`` maps the served model's mean (clipped)
    loss there to the difference tolerated. Its finding is its own question's alone
    (:func:`decide` settles it with the others)."""
    a, b = paired_losses(candidate, served, span, metric)
    return _paired(name, a, b, margin, None, metric or candidate.primary)


def compare_segments(
    name: str,
    candidate: RecordLosses,
    served: RecordLosses,
    span: float,
    margin: Callable[[float], float],
    known: Collection[str] | None = None,
    metric: str | None = None,
) -> list[Paired]:
    """The gate's questions on one set of records, on loss column ``metric`` (None: the
    primary; issue 68's design, with power):

    - required: the candidate no worse on the pooled records of the segments the served
      model knew (``known``; None: every segment), so that records only the candidate
      knows excuse nothing;
    - a veto each: every known segment with at least ``SEGMENT_MIN_RECORDS`` shared
      records, shown worse on its own (Holm over all the questions, in :func:`decide`),
      when the records hold two or more segments: a loss on one cannot hide in the
      pooled mean, and a segment too small to show itself no worse holds nothing back.
    """
    metric, rows = metric or candidate.primary, shared_rows(candidate, served)
    a, b = paired_losses(candidate, served, span, metric, rows)
    segments = Segments.of(served.segments, rows[1], known)
    return segment_questions(name, a, b, margin, segments, metric)


@dataclass(frozen=True)
class Segments:
    """Which pairs :func:`compare_segments` asks about: ``inside``, those of the segments the
    served model knew (None: a single question on every pair, the records holding fewer
    than two segments), and ``vetoes``, each known segment's pairs where it has at least
    ``SEGMENT_MIN_RECORDS``, by name. The same for every loss column: worked out once
    from the segments' integer codes, not an object array compared per segment and
    column (the gate at 100,000 records judges about 20,000)."""

    inside: np.ndarray | None
    vetoes: tuple[tuple[str, np.ndarray], ...] = ()

    @classmethod
    def of(
        cls, segments: Sequence[str] | None, rows: np.ndarray, known: Collection[str] | None
    ) -> Segments:
        """From the served side's ``segments`` (None: none kept) and its ``rows`` paired."""
        if segments is None:
            return cls(None)
        # Each segment's code in one pass of C's loops (a name seen first gets the next
        # code): about 20,000 held-out records at a 100,000-record pool.
        index = _Codes()
        every = np.fromiter(map(index.__getitem__, segments), np.int64, len(segments))
        names, codes = list(index), every[rows]
        counts = np.bincount(codes, minlength=len(names))  # each code's pairs, no sort
        if np.count_nonzero(counts) < 2:
            return cls(None)
        knew = np.zeros(len(names), dtype=bool)
        knew[[c for c, name in enumerate(names) if known is None or name in known]] = True
        inside = knew[codes]
        vetoes = []
        for c in sorted(np.flatnonzero(knew & (counts > 0)).tolist(), key=names.__getitem__):
            if counts[c] >= SEGMENT_MIN_RECORDS:
                vetoes.append((names[c], codes == c))
        return cls(inside, tuple(vetoes))


class _Codes(dict[str, int]):
    """Segment names' codes, in the order first seen: a name missing gets the next."""

    def __missing__(self, name: str) -> int:
        code = self[name] = len(self)
        return code


def segment_questions(
    name: str,
    a: np.ndarray,
    b: np.ndarray,
    margin: Callable[[float], float],
    segments: Segments,
    metric: str,
) -> list[Paired]:
    """:func:`compare_segments`' questions on the paired clipped losses ``a`` (candidate)
    and ``b`` (served) of column ``metric``."""
    if segments.inside is None:
        return [_paired(name, a, b, margin, None, metric)]
    inside = segments.inside
    found = [_paired(name, a[inside], b[inside], margin, None, metric)]
    for segment, picked in segments.vetoes:
        veto = _paired(name, a[picked], b[picked], margin, segment, metric)
        found.append(replace(veto, required=False))
    return found


def compare_part(
    name: str,
    a: np.ndarray,
    b: np.ndarray,
    keep: np.ndarray,
    margin: Callable[[float], float],
    metric: str,
) -> Paired:
    """:func:`compare`'s question on the pairs where ``keep`` (one flag per pair) is true:
    the candidate's part of the records paired, without pairing them again."""
    return _paired(name, a[keep], b[keep], margin, None, metric)


def _paired(
    name: str,
    a: np.ndarray,
    b: np.ndarray,
    margin: Callable[[float], float],
    segment: str | None,
    metric: str = "loss",
) -> Paired:
    n = len(a)
    if n < MIN_RECORDS:
        mean_a = float(a.mean()) if n else math.nan
        mean_b = float(b.mean()) if n else math.nan
        return Paired(name, n, mean_a, mean_b, mean_a - mean_b, math.nan, math.nan, None,
                      segment=segment, metric=metric)  # fmt: skip
    bound = Bound.of(name, a - b, margin(float(b.mean())))
    finding = bound.finding(holm_worse([bound])[0])
    return Paired(
        name, n, float(a.mean()), float(b.mean()), bound.mean, bound.upper, bound.margin,
        _PASSED.get(finding), bound.lower, segment, finding, metric=metric,
    )  # fmt: skip


_PASSED = {Finding.NO_WORSE: True, Finding.WORSE: False}  # inconclusive: passed is None


def decide(comparisons: Sequence[Paired]) -> tuple[Outcome, str, list[Paired]]:
    """Every comparison's question settled together: ``rejected`` when Holm shows one
    worse beyond its margin, ``promoted`` when each required one is shown no worse,
    ``inconclusive`` when neither (kept, judged again), ``undecided`` when none can be
    asked; with the reason naming the sets and segments that decided, and the settled
    comparisons. A comparison that is not ``required`` can only veto (be shown worse).

    >>> d = np.tile([-0.2, 0.2], 20)  # 40 records, mean 0: not shown within 0.01
    >>> wide = replace(_paired("known", d, np.zeros(40), lambda m: 0.01, None), required=False)
    >>> sure = _paired("held_out", np.zeros(400), np.zeros(400) + 0.1, lambda m: 0.01, None)
    >>> print(decide([sure, wide])[0], decide([sure, replace(wide, required=True)])[0])
    promoted inconclusive
    """
    bounds = [c.bound() for c in comparisons]
    asked = [b for b in bounds if b is not None]
    if not asked:
        why = "; ".join(c.reason() for c in comparisons) or "no comparison"
        return Outcome.UNDECIDED, why, list(comparisons)
    flags = iter(holm_worse(asked))
    settled = []
    for c, b in zip(comparisons, bounds, strict=True):
        if b is None:
            settled.append(c)
            continue
        finding = b.finding(next(flags))
        settled.append(replace(c, finding=finding, passed=_PASSED.get(finding)))
    undecided: tuple[tuple[Outcome, Finding, str], ...] = (
        (Outcome.REJECTED, Finding.WORSE, "worse than the served model"),
        (Outcome.INCONCLUSIVE, Finding.INCONCLUSIVE, "inconclusive, not shown no worse"),
    )
    for outcome, finding, words in undecided:
        found = [
            c for c in settled if c.finding == finding and (c.required or finding == Finding.WORSE)
        ]
        if found:
            return outcome, f"{words}: " + "; ".join(c.reason() for c in found), settled
    if any(c.bound() is None and c.required for c in settled):
        return Outcome.UNDECIDED, next(c for c in settled if c.bound() is None).reason(), settled
    also = sorted({c.metric for c in settled if c.required} - {settled[0].metric})
    shown = "".join(f"; and on {metric}" for metric in also)
    return (
        Outcome.PROMOTED,
        f"no worse than the served model: {settled[0].reason()}{shown}",
        settled,
    )
