"""The per-segment watch and its A/A self-test: a regression on one segment is found
from that segment's records, the family holds its level, the self-test replays the very
decision the watch makes."""

from __future__ import annotations

import math

import numpy as np
import pytest

from genesis_fp16_infrastructure.judging import segment_tests as watch
from genesis_fp16_infrastructure.judging.confidence_sequence import (
    log_evidence,
    mean_bounds,
    records_needed,
)

SPAN, MARGIN, ALPHA = 4.6, 0.01, 0.05
AGENTS = np.array(["se_darwin", "qa", "builder", "ops", "critic", "planner"])


def _mixed(
    n: int, harmed_by: float, seed: int, others: float = 0.0, spread: float = 0.3
) -> tuple[np.ndarray, np.ndarray]:
    """``n`` records of six agents in turn; the first agent's differences ``harmed_by``
    nats, the others' ``others``, each with a normal spread of ``spread``."""
    rng = np.random.default_rng(seed)
    names = AGENTS[np.arange(n) % len(AGENTS)]
    d = rng.normal(others, spread, n) + (harmed_by - others) * (names == AGENTS[0])
    return np.clip(d, -SPAN, SPAN), names


def test_a_regression_on_one_agent_is_found_although_the_mean_is_within_the_margin() -> None:
    """One agent of six 1 nat worse, the five others 0.2 better: the mean (0) never
    passes the margin, the harmed agent's own 200 records of 1,200 do, and the watch
    decides."""
    d, names = _mixed(1200, 1.0, seed=1, others=-0.2)
    figures = watch.judge(d, names, SPAN, MARGIN, ALPHA)
    harmed = next(s for s in figures.segments or () if s.name == "se_darwin")
    assert figures.lower <= MARGIN and harmed.regression and figures.regression
    assert harmed.records == 200 and harmed.alpha == ALPHA / (2 * watch.SLOTS)
    assert harmed.evidence >= 1 / harmed.alpha and harmed.records_needed == 0
    assert not any(s.regression for s in figures.segments or () if s is not harmed)
    unsplit = watch.judge(d, None, SPAN, MARGIN, ALPHA)  # the diluted mean alone
    assert not unsplit.regression and unsplit.segments is None


def test_segments_take_slots_in_order_of_arrival_and_the_last_is_shared() -> None:
    """Twenty agents: the first fifteen by first record own slots, the rest share OTHER."""
    names = np.array([f"a{i:02d}" for i in (19, 3, 3, *range(20))])
    shown, slot = watch.slots(names)
    assert shown[:3] == ["a19", "a03", "a00"] and shown[-1] == watch.OTHER
    assert len(shown) == watch.SLOTS and slot.max() == watch.SLOTS - 1
    assert list(slot[:3]) == [0, 1, 1]


def test_the_evidence_decides_exactly_where_the_bound_passes_the_margin() -> None:
    """At every prefix of a stream drifting past the margin: log-evidence above
    log(1/alpha) if and only if the lower bound is above the margin."""
    d = np.clip(np.random.default_rng(2).normal(0.06, 0.4, 3000), -SPAN, SPAN)
    path = log_evidence(d, SPAN, ALPHA, MARGIN)
    for n in range(10, 3001, 10):
        assert (path[n - 1] > math.log(1 / ALPHA)) == (
            mean_bounds(d[:n], SPAN, ALPHA).lower > MARGIN
        ), n
    assert path[-1] > math.log(1 / ALPHA) > path[4]  # it did decide, and not at once


def test_the_records_needed_are_about_the_records_it_then_took() -> None:
    """On a steady stream (mean 0.03, spread 0.4), the estimate at 1,000 records is within
    a factor of two of the records the bound then needed to pass the margin."""
    d = np.clip(np.random.default_rng(3).normal(0.03, 0.4, 40_000), -SPAN, SPAN)
    needed = records_needed(mean_bounds(d[:1000], SPAN, ALPHA), float(d[:1000].std()), MARGIN)
    path = log_evidence(d, SPAN, ALPHA, MARGIN)
    took = int(np.argmax(path > math.log(1 / ALPHA))) + 1 - 1000
    assert needed is not None and took > 0 and took / 2 <= needed <= took * 2, (needed, took)
    assert records_needed(mean_bounds(d[:0], SPAN, ALPHA), 0.4, MARGIN) is None


@pytest.mark.parametrize("segmented", [False, True])
def test_the_self_test_replays_the_watchs_own_decision(segmented: bool) -> None:
    """Each replay's verdict is the watch's: judge() on every prefix of that replay rolls
    back at some prefix exactly for the replays the self-test counts (small: 16 x 150,
    at alpha 0.9 so that some do), with segments and without."""
    d, names = _mixed(150, 0.0, seed=4, spread=3.0)
    split = names if segmented else None
    found = watch.self_test([(d, split, 0.3)], SPAN, 0.9, replays=16, seed=5)
    signs = np.random.default_rng(5).choice((-1.0, 1.0), size=(16, 150))
    means = {n: d[names == n].mean() for n in AGENTS} if segmented else {}
    centred = d - (np.array([means[n] for n in names]) if segmented else d.mean())
    direct = 0
    for row in signs:
        replay = np.clip(0.3 + row * centred, -SPAN, SPAN)
        direct += any(
            watch.judge(replay[:t], None if split is None else split[:t], SPAN, 0.3, 0.9).regression
            for t in range(1, 151)
        )
    assert found.false_rollbacks == direct and 0 < direct < 16


def test_on_data_at_the_margin_the_self_test_keeps_the_rate_below_alpha() -> None:
    """A/A on 2,000 records of six agents (each at the margin's edge after centring):
    false rollbacks at most alpha of 400 replays, and the interval says so."""
    d, names = _mixed(2000, 0.2, seed=6)
    found = watch.self_test([(d, names, MARGIN)], SPAN, ALPHA, replays=400)
    assert found.rate <= ALPHA and found.lower <= found.rate <= found.upper
    assert found.records == 2000 and found.replays == 400


def test_the_wilson_interval_covers_the_rate() -> None:
    """The 95% Wilson interval of 10 in 200 is [0.0274, 0.0896] (by hand)."""
    lower, upper = watch.wilson(10, 200)
    assert round(lower, 4) == 0.0274 and round(upper, 4) == 0.0896
