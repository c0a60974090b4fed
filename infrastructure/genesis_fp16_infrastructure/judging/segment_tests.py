"""The live watch's test of each loss column, overall and per segment, and its A/A
self-test: what the watch decides (:mod:`.watch`) and what it would wrongly decide on this
data, each test the anytime-valid bound of :mod:`.confidence_sequence`.

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
>>> figures.regression, [s.name for s in figures.segments or ()]
(False, ['a', 'b', 'c'])
>>> self_test([(d, None, 0.01)], span=4.6, alpha=0.05).replays
200
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

import numpy as np

from genesis_fp16_infrastructure.contract.reports import LiveFigures, SelfTest, WatchSegment
from genesis_fp16_infrastructure.judging.confidence_sequence import (
    log_evidence,
    mean_bounds,
    records_needed,
)

SLOTS = 16  # segment slots, each at alpha / (2 SLOTS); a 17th segment shares the 16th
OTHER = "(other)"  # the last slot's name once more segments than slots arrived
REPLAYS = 200  # self-test replays per run: 0 of 200 puts the rate's upper bound at 1.9%
RECENT = 2000  # the self-test replays the watch's last records, at most this many
# The self-test's replays are worked out a block of them at a time, about this many bytes
# a block: every step of a block's bets then runs on arrays a core's cache holds, where
# 200 replays of 2,000 records (3.2 MB an array) went to memory at each of ~30 steps.
REPLAY_BYTES = 2**18
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
) -> LiveFigures:
    """One column's figures at its level ``alpha``: the overall bounds, evidence and
    records needed (at ``alpha / 2`` when split), and each segment's (``names``: each
    record's segment; None: one segment, no split)."""
    d = np.asarray(differences, dtype=np.float64)
    overall = _test(d, span, margin, alpha if names is None else alpha / 2)
    segments: tuple[WatchSegment, ...] | None = None
    if names is not None:
        shown, slot = slots(names)
        level = alpha / (2 * SLOTS)
        segments = tuple(
            _test(d[slot == k], span, margin, level, name) for k, name in enumerate(shown)
        )
    return LiveFigures(
        records=overall.records,
        difference=overall.difference,
        lower=overall.lower,
        upper=overall.upper,
        margin=margin,
        alpha=alpha,
        regression=overall.regression or any(s.regression for s in segments or ()),
        evidence=overall.evidence,
        records_needed=overall.records_needed,
        segments=segments,
    )


def _test(d: np.ndarray, span: float, margin: float, alpha: float, name: str = "") -> WatchSegment:
    """One test's figures at its own level: bounds, evidence (``1 / alpha`` decides),
    records needed at the margin, and whether the lower bound passed it (``name``: the
    segment's; the column's own test has none)."""
    bounds = mean_bounds(d, span, alpha, margin)  # the bets worked once, for both
    return WatchSegment(
        name=name,
        records=bounds.count,
        difference=round(bounds.mean, 6) if bounds.count else None,
        lower=round(bounds.lower, 6),
        upper=round(bounds.upper, 6),
        alpha=alpha,
        evidence=float(f"{bounds.evidence:.6g}"),
        records_needed=records_needed(bounds, float(d.std()) if len(d) else math.nan, margin),
        regression=bool(bounds.lower > margin),
    )


def self_test(
    columns: Sequence[tuple[np.ndarray, np.ndarray | None, float]],
    span: float,
    alpha: float,
    replays: int = REPLAYS,
    seed: int = 0,
) -> SelfTest:
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
        # Each segment's records side by side, in their order: its test a slice of them
        order, edges = None, []
        if names is not None:
            order = np.argsort(slot, kind="stable")
            edges = np.searchsorted(slot[order], np.arange(int(slot.max()) + 2)).tolist()
        rows = max(1, REPLAY_BYTES // (8 * len(d)))
        for first in range(0, replays, rows):  # a block of replays at a time (each its own)
            replay = np.clip(margin + flips[len(d)][first : first + rows] * centred, -span, span)
            block = crossed[first : first + rows]
            block |= _crosses(replay, span, margin, alpha if names is None else alpha / 2)
            if order is not None:
                grouped = replay[:, order]
                for low, high in itertools.pairwise(edges):
                    block |= _crosses(grouped[:, low:high], span, margin, alpha / (2 * SLOTS))
    false = int(crossed.sum())
    lower, upper = wilson(false, replays)
    return SelfTest(
        replays=replays,
        records=records,
        false_rollbacks=false,
        rate=round(false / replays, 6),
        lower=round(lower, 6),
        upper=round(upper, 6),
    )


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
