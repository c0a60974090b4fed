"""An anytime-valid bound on a mean of bounded paired differences: the live watch's test
(:mod:`.watch`; each segment's and the A/A self-test's: :mod:`.segment_tests`).

The live watch (every judged plugin's)
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
from dataclasses import dataclass

import numpy as np

CAP = 0.5  # the largest bet; Waudby-Smith and Ramdas suggest 1/2 or 3/4
# -log1p(-lambda) - lambda at lambda = CAP, by the same ufuncs as :func:`_bets`' others
_AT_CAP = float((-np.log1p(np.full(1, -CAP)) - CAP)[0])


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
    their order, so their bits, in place: fresh arrays cost the A/A self-test a sixth.

    ``log1p`` is worked out only for the bets under ``CAP``: a watch's loss differences
    are small beside their span, so nearly every bet is capped, and one ``log1p`` an
    element was a fifth of this function's time and more on a loaded host (a 200 x 2,000
    replay, all capped: 12.1 -> 9.4 ms, ``benchmarks/watch_bets_cost.py``). A capped
    bet's term is ``_AT_CAP``, the same value by the same ufuncs; where most bets are
    under it, every one is worked out."""
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
    return lam, np.divide(np.multiply(v, _psi_terms(lam), out=v), 4, out=v)


def _psi_terms(lam: np.ndarray) -> np.ndarray:
    """``-log1p(-lam) - lam`` of each bet (:func:`_bets`): ``_AT_CAP`` where it is capped."""
    free = lam < CAP
    count = int(np.count_nonzero(free))
    if 2 * count > lam.size:
        return -np.log1p(-lam) - lam
    terms = np.full(lam.shape, _AT_CAP)
    if count:
        under = lam[free]
        terms[free] = -np.log1p(-under) - under
    return terms


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
