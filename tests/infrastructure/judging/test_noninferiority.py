"""The three answers of a non-inferiority question, and Holm's family over them."""

from __future__ import annotations

import math

import numpy as np

from genesis_fp16_infrastructure.judging.gate import Z_95, Bound, holm_worse


def test_each_answer_follows_its_bounds() -> None:
    """Upper bound within the margin: no worse; lower bound past it (Holm): worse; a bound
    on each side of it: inconclusive."""
    no_worse = Bound("a", 1000, -0.01, 0.005, 0.01)
    worse = Bound("b", 1000, 0.05, 0.005, 0.01)
    open_ = Bound("c", 200, 0.005, 0.01, 0.01)
    flags = holm_worse([no_worse, worse, open_])
    assert [b.finding(f) for b, f in zip([no_worse, worse, open_], flags, strict=True)] == [
        "no_worse",
        "worse",
        "inconclusive",
    ]


def test_records_needed_brings_the_upper_bound_to_the_margin() -> None:
    """At the observed mean and spread, the records needed put the upper bound on the
    margin; a mean past the margin needs more than records (None)."""
    rng = np.random.default_rng(0)
    d = rng.normal(0.004, 0.15, 300)  # s.e. about 0.009: not yet within 0.01
    bound = Bound.of("newest", d, 0.01)
    assert bound.finding(False) == "inconclusive"
    needed = bound.records_needed()
    assert needed is not None and needed > 300
    sd = bound.se * math.sqrt(bound.records)
    assert bound.mean + Z_95 * sd / math.sqrt(needed) <= 0.01 + 1e-12
    assert bound.mean + Z_95 * sd / math.sqrt(needed - 1) > 0.01
    assert Bound("x", 300, 0.02, 0.01, 0.01).records_needed() is None


def test_holm_needs_more_than_one_questions_5_percent_when_there_are_several() -> None:
    """A p-value of 0.03 alone is shown worse; beside three questions with large p-values
    it is not (Holm compares it with 0.05 / 4), while a p-value of 0.001 still is."""
    z_003 = 1.8807936081512509  # the one-sided normal quantile of 0.97
    borderline = Bound("seg", 200, 0.01 + z_003 * 0.01, 0.01, 0.01)
    assert math.isclose(borderline.p_worse(), 0.03, rel_tol=1e-6)
    assert holm_worse([borderline]) == [True]
    calm = [Bound(f"s{i}", 200, 0.0, 0.01, 0.01) for i in range(3)]
    assert holm_worse([borderline, *calm]) == [False, False, False, False]
    strong = Bound("seg", 200, 0.01 + 3.1 * 0.01, 0.01, 0.01)
    assert holm_worse([strong, *calm]) == [True, False, False, False]


def test_holm_steps_down_past_the_smallest() -> None:
    """Holm's second comparison is with alpha / (k - 1), not alpha / k: p-values of 0.01
    and 0.036 are both shown worse, where a Bonferroni split (0.025 each) keeps one."""
    z_001 = 2.3263478740408408
    first = Bound("a", 200, 0.01 + z_001 * 0.01, 0.01, 0.01)  # p 0.01 <= 0.025
    second = Bound("b", 200, 0.01 + 1.8 * 0.01, 0.01, 0.01)  # p 0.036 <= 0.05
    assert holm_worse([first, second]) == [True, True]
    assert 0.025 < second.p_worse() <= 0.05  # Bonferroni (0.025) would not have
