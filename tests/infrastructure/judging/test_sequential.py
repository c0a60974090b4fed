"""The live watch's sequential test: anytime-valid under many looks, and it detects."""

from __future__ import annotations

import math

import numpy as np

from genesis_fp16_infrastructure.judging.confidence_sequence import mean_bounds

SPAN = 4.6  # the watch's: log(0.99 / 0.01)
MARGIN = 0.01
LOOKS = range(25, 3001, 25)  # a run every 25 records, 120 looks


def _streams(mean: float, count: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.clip(rng.normal(mean, 0.3, size=(count, LOOKS[-1])), -SPAN, SPAN)


def _alarms(streams: np.ndarray, alarm: object) -> int:
    return sum(any(alarm(s[:n]) for n in LOOKS) for s in streams)  # type: ignore[operator]


def _fixed_sample(d: np.ndarray) -> bool:
    """A fixed-sample one-sided 95% z bound, as if each look were the only one."""
    return float(d.mean() - 1.645 * d.std() / math.sqrt(len(d))) > MARGIN


def test_models_at_the_margin_raise_few_false_alarms_over_120_looks() -> None:
    """Differences whose mean is exactly the margin, looked at 120 times each: the test
    alarms in at most alpha of 200 streams, where a fixed-sample bound looked at as often
    alarms in more (the reason a confidence sequence is needed)."""
    streams = _streams(MARGIN, 200, seed=0)
    sequential = _alarms(streams, lambda d: mean_bounds(d, SPAN, 0.05).lower > MARGIN)
    fixed = _alarms(streams, _fixed_sample)
    assert sequential <= 0.05 * 200, sequential
    assert fixed > 0.05 * 200 > sequential, (fixed, sequential)


def test_equal_models_never_alarm_in_a_seeded_simulation() -> None:
    """Equal models (mean difference 0): no alarm in 200 streams of 120 looks."""
    streams = _streams(0.0, 200, seed=1)
    assert _alarms(streams, lambda d: mean_bounds(d, SPAN, 0.05).lower > MARGIN) == 0


def test_a_real_regression_is_detected_and_sooner_when_larger() -> None:
    """A served model worse by 0.1 nats per record is detected in every one of 50 streams
    within 3,000 records; one worse by 0.5 within 200."""
    for mean, within in ((0.1, 3000), (0.5, 200)):
        streams = _streams(mean, 50, seed=2)
        first = [
            next((n for n in LOOKS if mean_bounds(s[:n], SPAN, 0.05).lower > MARGIN), None)
            for s in streams
        ]
        assert all(n is not None and n <= within for n in first), (mean, first)


def test_the_bounds_cover_the_mean_and_narrow() -> None:
    """The interval holds the true mean at every look of a stream, and narrows with
    records; no values give the whole range."""
    stream = _streams(0.2, 1, seed=3)[0]
    widths = []
    for n in LOOKS:
        bound = mean_bounds(stream[:n], SPAN, 0.05)
        assert bound.lower <= 0.2 <= bound.upper, (n, bound)
        widths.append(bound.upper - bound.lower)
    assert widths[-1] < widths[0] / 5
    empty = mean_bounds(np.zeros(0), SPAN, 0.05)
    assert (empty.count, empty.lower, empty.upper) == (0, -SPAN, SPAN)
