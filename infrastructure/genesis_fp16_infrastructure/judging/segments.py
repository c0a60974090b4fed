"""The live watch per segment, and its A/A self-test: what the watch decides and what it
would wrongly decide on this data.

**Segments.** A watched record may carry a segment key (se_darwin: the Genesis agent
that made the record; a plugin that declares none: one segment). A model much worse on
one segment and equal elsewhere moves the mean over all records by that segment's share
only; each segment is therefore watched on its own records as well, and the watch finds
a regression when the overall test *or any segment's* does.

The family's error is split by a fixed allocation (Bonferroni over slots, anytime-valid
because each test is): the overall test gets ``alpha / 2``, and each of ``SLOTS`` segment
slots ``alpha / (2 SLOTS)``. Segments take slots in order of their first record (known
before any label is: the order is fixed in advance, as the bound needs); past the
``SLOTS``-th, later segments share the last slot, ``OTHER``. Under a null where every
segment's expected difference is at most the margin, the chance that any of these tests
ever passes it is at most ``alpha / 2 + SLOTS * alpha / (2 SLOTS) = alpha``. With one
declared segment the family is the overall test alone, at ``alpha``. Why a split and not
an e-value mixture: the split names the segment that failed, and where one segment
carries the evidence the mixture's gain is a few records.

**The self-test.** The watch's own records, its recent ``RECENT`` paired differences,
are replayed ``REPLAYS`` times under the hardest null the test must withstand: each
segment's differences centred on its own mean, moved to the margin, each sign flipped at
random (``margin + s_i (d_i - mean_segment)``: every segment's expected difference is
then exactly the margin, with this data's spread). Each replay runs the whole decision
at every record (every record a look: more looks than the runs make), and the share of
replays that would have rolled back is the false-rollback rate the watch would have on
this data, with its 95% Wilson interval. A sound watch keeps it at most ``alpha``.

>>> d = np.array([0.0, 0.1, -0.1] * 200)
>>> figures = judge(d, np.array(["a", "b", "c"] * 200), span=4.6, margin=0.01, alpha=0.05)
>>> figures["regression"], [s["name"] for s in figures["segments"]]
(False, ['a', 'b', 'c'])
>>> self_test([(d, None, 0.01)], span=4.6, alpha=0.05)["replays"]
200

**The bound.** An anytime-valid bound on a mean of bounded paired differences: the live
watches' test.

The live watch (:mod:`genesis_fp16_infrastructure.judging.watch`, every judged plugin's)
looks at the served model's paired per-record loss differences from its predecessor at
every run, for as long as it is served. A fixed-sample interval looked at that often
would cross any threshold sooner or later by luck; a *confidence sequence* holds at
every look at once.

This is the predictable plug-in empirical-Bernstein confidence sequence of Waudby-Smith
and Ramdas ("Estimating means of bounded random variables by betting", JRSSB 2024, its
Theorem 2), one-sided at each end. For observations ``x_i`` in ``[0, 1]``::

    mu_hat_t   = (1/2 + sum_{i<=t} x_i) / (t + 1)
    var_hat_t  = (1/4 + sum_{i<=t} (x_i - mu_hat_i)^2) / (t + 1)
    lambda_t   = min(sqrt(2 log(1/alpha) / (var_hat_{t-1} t log(1 + t))), CAP)
    v_t        = 4 (x_t - mu_hat_{t-1})^2,  psi(l) = (-log(1 - l) - l) / 4
    lower_t    = (sum lambda_i x_i - log(1/alpha) - sum v_i psi(lambda_i)) / sum lambda_i

``P(lower_t > mean for some t) <= alpha``, however often it is looked at, whenever each
``x_i``'s expectation given the ones before is at most that mean (Ville's inequality on
a nonnegative supermartingale); the upper bound is the mirror image. Records need not be
identically distributed: under a null where every record's expected difference is at
most the margin, ``lower_t > margin`` at any look is a false alarm with probability at
most ``alpha``. Each ``lambda_i`` uses only the records before ``i``, so the records'
order must be fixed before their outcomes are seen (the watch keeps arrival order).

Differences (nats, or any loss's units) are mapped onto ``[0, 1]`` from ``[-span, span]``.

>>> bound = mean_bounds(np.array([0.3, 0.5, 0.4] * 200), span=4.6, alpha=0.05)
>>> bound.lower > 0.2
True
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

CAP = 0.5  # the largest bet; Waudby-Smith and Ramdas suggest 1/2 or 3/4


@dataclass(frozen=True)
class MeanBounds:
    """The plain mean of the observations and its anytime-valid bounds (each one-sided
    at ``alpha``: together a ``1 - 2 alpha`` interval), in the observations' units;
    ``evidence``: against "the mean is at most the margin", where one was given (else 1)."""

    count: int
    mean: float
    lower: float
    upper: float
    alpha: float
    evidence: float = 1.0


def mean_bounds(
    values: np.ndarray, span: float, alpha: float, margin: float | None = None
) -> MeanBounds:
    """The bounds after the last of ``values`` (in ``[-span, span]``, in arrival order);
    with no values, ``[-span, span]``. With a ``margin``, the evidence too: ``exp`` of
    :func:`log_evidence`'s last entry (at most ``exp(700)``), from the same bets. Cost: a
    few vector passes over the values."""
    d = np.asarray(values, dtype=np.float64)
    n = len(d)
    if n == 0:
        return MeanBounds(0, math.nan, -span, span, alpha)
    x = np.clip((d + span) / (2 * span), 0.0, 1.0)
    lam, penalties = _bets(x, alpha)
    weight = float(np.sum(lam))
    centre = float(np.sum(lam * x)) / weight
    half = (math.log(1.0 / alpha) + float(np.sum(penalties))) / weight
    lower, upper = max(centre - half, 0.0), min(centre + half, 1.0)
    evidence = 1.0
    if margin is not None:
        last = float(_evidence(x, lam, penalties, (margin + span) / (2 * span))[-1])
        evidence = math.exp(min(last, 700))
    return MeanBounds(
        n,
        float(d.mean()),
        lower * 2 * span - span,
        upper * 2 * span - span,
        alpha,
        evidence,
    )


def _bets(x: np.ndarray, alpha: float) -> tuple[np.ndarray, np.ndarray]:
    """Each observation's bet ``lambda_t`` and variance term ``v_t psi(lambda_t)``, along
    the last axis of ``x`` (in ``[0, 1]``; one row per sequence). The formulas' steps in
    their order, so their bits, in place: fresh arrays cost the A/A self-test a sixth."""
    t = np.arange(1, x.shape[-1] + 1, dtype=np.float64)
    mu = np.cumsum(x, axis=-1)
    mu = np.divide(np.add(mu, 0.5, out=mu), t + 1, out=mu)
    var = np.cumsum(np.square(x - mu), axis=-1)
    var = np.divide(np.add(var, 0.25, out=var), t + 1, out=var)
    lam = np.concatenate((np.full((*x.shape[:-1], 1), 0.25), var[..., :-1]), axis=-1)
    lam = np.multiply(np.multiply(lam, t, out=lam), np.log1p(t), out=lam)
    lam = np.minimum(np.sqrt(np.divide(2 * math.log(1.0 / alpha), lam, out=lam), out=lam), CAP)
    v = np.concatenate((np.full((*x.shape[:-1], 1), 0.5), mu[..., :-1]), axis=-1)
    v = np.multiply(np.square(np.subtract(x, v, out=v), out=v), 4, out=v)
    return lam, np.divide(np.multiply(v, -np.log1p(-lam) - lam, out=v), 4, out=v)


def log_evidence(values: np.ndarray, span: float, alpha: float, margin: float) -> np.ndarray:
    """The running log e-value against "the mean is at most ``margin``", after each of
    ``values`` (last axis; a 2-D array is one sequence per row). It is the bound's own
    supermartingale: ``lower_t > margin`` exactly when it passes ``log(1 / alpha)``, so
    ``exp`` of the last entry is the evidence so far, on the scale where ``1 / alpha``
    decides. Cost: a few vector passes.

    >>> steps = log_evidence(np.array([0.3] * 400), span=4.6, alpha=0.05, margin=0.01)
    >>> bool(steps[-1] > math.log(20)), bool(steps[10] > math.log(20))
    (True, False)
    """
    d = np.asarray(values, dtype=np.float64)
    if d.shape[-1] == 0:
        return np.zeros(d.shape)
    x = np.clip((d + span) / (2 * span), 0.0, 1.0)
    return _evidence(x, *_bets(x, alpha), (margin + span) / (2 * span))


def _evidence(x: np.ndarray, lam: np.ndarray, penalty: np.ndarray, m: float) -> np.ndarray:
    """:func:`log_evidence`'s path from the observations ``x`` (in ``[0, 1]``, overwritten:
    np.clip made them), their bets (:func:`_bets`) and the margin ``m`` on their scale."""
    np.multiply(np.subtract(x, m, out=x), lam, out=x)
    return np.cumsum(np.subtract(x, penalty, out=x), axis=-1, out=x)


WIDTH = 1.4  # the bound's half-width over sigma sqrt(2 log(1/alpha) / n), from 3,000 records on


def records_needed(bounds: MeanBounds, spread: float, margin: float) -> int | None:
    """About how many more records the bounds need before one of them passes ``margin``
    (the watch then decides: worse, or shown no worse), if the mean and the spread
    (``spread``: the differences' standard deviation) so far hold. The half-width tends
    to about ``WIDTH * spread * sqrt(2 log(1/alpha) / n)`` (measured: 1.35-1.45 from
    3,000 to 20,000 records; wider before, so an early estimate is low). 0 when a bound
    already passed it; None with no records, or a mean at the margin (never, at this mean).

    >>> records_needed(MeanBounds(400, 0.05, 0.0, 0.1, 0.05), spread=0.4, margin=0.01)
    775
    """
    gap = abs(bounds.mean - margin)
    if bounds.count == 0 or gap == 0 or math.isnan(gap) or math.isnan(spread):
        return None
    if bounds.lower > margin or bounds.upper < margin:
        return 0
    total = 2 * math.log(1 / bounds.alpha) * (WIDTH * spread / gap) ** 2
    return max(math.ceil(total) - bounds.count, 1)


SLOTS = 16  # segment slots, each at alpha / (2 SLOTS); a 17th segment shares the 16th
OTHER = "(other)"  # the last slot's name once more segments than slots arrived
REPLAYS = 200  # self-test replays per run: 0 of 200 puts the rate's upper bound at 1.9%
RECENT = 2000  # the self-test replays the watch's last records, at most this many
_Z = 1.959964  # the 95% interval's normal quantile


def slots(names: np.ndarray) -> tuple[list[str], np.ndarray]:
    """The segments' names, in order of their first record (past ``SLOTS``, the last
    is ``OTHER``), and each record's slot."""
    order, first, codes = np.unique(np.asarray(names), return_index=True, return_inverse=True)
    rank = np.argsort(np.argsort(first))  # unique()'s i-th name is the rank[i]-th to arrive
    slot = np.minimum(rank, SLOTS - 1)
    shown = [""] * min(len(order), SLOTS)
    for name, s in zip(order.tolist(), slot.tolist(), strict=True):
        shown[s] = OTHER if s == SLOTS - 1 and len(order) > SLOTS else str(name)
    return shown, slot[codes]


def judge(
    differences: np.ndarray,
    names: np.ndarray | None,
    span: float,
    margin: float,
    alpha: float,
) -> dict[str, Any]:
    """The decision's figures: the overall bounds, evidence and records needed, and each
    segment's (``names``: each record's segment; None: one segment, no split)."""
    d = np.asarray(differences, dtype=np.float64)
    overall_alpha = alpha if names is None else alpha / 2
    overall = _test(d, span, margin, overall_alpha)
    figures: dict[str, Any] = {**overall, "segments": None}
    if names is None:
        return figures
    shown, slot = slots(names)
    segments = []
    for k, name in enumerate(shown):
        segments.append({"name": name, **_test(d[slot == k], span, margin, alpha / (2 * SLOTS))})
    figures["segments"] = segments
    figures["regression"] = overall["regression"] or any(s["regression"] for s in segments)
    return figures


def _test(d: np.ndarray, span: float, margin: float, alpha: float) -> dict[str, Any]:
    """One test's figures at its own level: bounds, evidence (``1 / alpha`` decides),
    records needed at the margin, and whether the lower bound passed it."""
    bounds = mean_bounds(d, span, alpha, margin)  # the bets worked once, for both
    return {
        "records": bounds.count,
        "difference": round(bounds.mean, 6) if bounds.count else None,
        "lower": round(bounds.lower, 6),
        "upper": round(bounds.upper, 6),
        "alpha": alpha,
        "evidence": float(f"{bounds.evidence:.6g}"),
        "records_needed": records_needed(bounds, float(d.std()) if len(d) else math.nan, margin),
        "regression": bool(bounds.lower > margin),
    }


def self_test(
    columns: Sequence[tuple[np.ndarray, np.ndarray | None, float]],
    span: float,
    alpha: float,
    replays: int = REPLAYS,
    seed: int = 0,
) -> dict[str, Any]:
    """The A/A self-test (module docstring) of the loss columns of the same records, each
    ``(differences, names, margin)`` and tested at ``alpha``, on their last ``RECENT``
    records: how many of ``replays`` would have rolled back on any column (each record's
    sign flipped alike in every column), the rate and its 95% interval."""
    crossed, records, flips = np.zeros(replays, dtype=np.bool_), 0, {}
    for differences, names, margin in columns:
        d = np.asarray(differences, dtype=np.float64)[-RECENT:]
        slot = np.zeros(len(d), dtype=np.int64) if names is None else slots(names[-RECENT:])[1]
        records = max(records, len(d))
        if not len(d):
            continue
        centred = d - (np.bincount(slot, d) / np.bincount(slot))[slot]
        if len(d) not in flips:  # the same draws for each column of as many records
            flips[len(d)] = np.random.default_rng(seed).choice((-1.0, 1.0), (replays, len(d)))
        replay = np.clip(margin + flips[len(d)] * centred, -span, span)
        crossed |= _crosses(replay, span, margin, alpha if names is None else alpha / 2)
        for k in range(int(slot.max()) + 1 if names is not None else 0):
            crossed |= _crosses(replay[:, slot == k], span, margin, alpha / (2 * SLOTS))
    false = int(crossed.sum())
    lower, upper = wilson(false, replays)
    return {
        "replays": replays,
        "records": records,
        "false_rollbacks": false,
        "rate": round(false / replays, 6),
        "lower": round(lower, 6),
        "upper": round(upper, 6),
    }


def _crosses(replay: np.ndarray, span: float, margin: float, alpha: float) -> np.ndarray:
    """Per row: whether the test at ``alpha`` would have passed the margin at any record."""
    if replay.shape[1] == 0:
        return np.zeros(len(replay), dtype=np.bool_)
    path = log_evidence(replay, span, alpha, margin)
    return np.asarray((path > math.log(1.0 / alpha)).any(axis=1))


def wilson(successes: int, trials: int) -> tuple[float, float]:
    """The 95% Wilson score interval of a rate.

    >>> [round(x, 4) for x in wilson(0, 200)]
    [0.0, 0.0188]
    """
    if trials == 0:
        return 0.0, 1.0
    p, z2 = successes / trials, _Z * _Z
    centre = (p + z2 / (2 * trials)) / (1 + z2 / trials)
    half = _Z * math.sqrt(p * (1 - p) / trials + z2 / (4 * trials * trials)) / (1 + z2 / trials)
    return max(centre - half, 0.0), min(centre + half, 1.0)
