"""The validation sample stops at VALIDATION_CAP records (issue 90), and a smaller cap moves
records from validation to training alone: the held-out part is the same records."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from genesis_fp16_infrastructure.data.readers import read_trajectories
from genesis_fp16_infrastructure.data.synthetic import generate_pool
from genesis_fp16_infrastructure.recipes.retrain import split as split_module
from genesis_fp16_infrastructure.recipes.retrain.options import EVAL_BOUNDS, EVAL_TARGET
from genesis_fp16_infrastructure.recipes.retrain.split import (
    VALIDATION_CAP,
    VALIDATION_MAX,
    split_examples,
    split_fractions,
)

SIZES = [3_334, 5_000, 10_000, 11_000, 20_000, 25_000, 26_000, 50_000, 100_000, 10**6, 10**7]


def _issue_36_shares(examples: int, eval_fraction: float) -> tuple[float, float]:
    """split_fractions as issue 36 left it, its cap 20,000 records."""
    low = EVAL_BOUNDS[0]
    rest = examples * (1 - eval_fraction)
    validation = min(VALIDATION_MAX, max(low, EVAL_TARGET / max(rest, 1)))
    validation = min(validation, 20_000 / max(rest, 1))
    return round(eval_fraction, 4), round(validation, 4)


@pytest.mark.parametrize("eval_fraction", [None, 0.2, 0.25])
def test_the_validation_sample_is_at_most_the_cap(eval_fraction: float | None) -> None:
    """At every pool size the validation share of the rest is at most 2,000 records."""
    assert VALIDATION_CAP <= 2_000  # a bound only goes down (issue 90: 20,000 before)
    for examples in SIZES:
        held, validation = split_fractions(examples, eval_fraction)
        rest = examples * (1 - (held if eval_fraction is None else eval_fraction))
        assert validation * rest <= VALIDATION_CAP + 1e-6, (examples, eval_fraction)
    # the daemon's 100,000-record pool, its judged fifth held out: 2,000, was 8,000
    assert split_fractions(100_000, 0.2) == (0.2, 0.025)


def test_pools_under_the_cap_are_split_as_before() -> None:
    """Where the rest is under 20,000 records (under 25,000 records, the judged fifth held
    out) the shares are issue 36's to the digit: the gate's cases keep their parts."""
    compared = 0
    for examples in range(3_334, 25_001, 83):
        for fraction in (0.2, round(min(0.3, max(0.1, EVAL_TARGET / examples)), 4)):
            if examples * (1 - fraction) * 0.1 <= VALIDATION_CAP:  # 10%: the smallest share
                compared += 1
                assert split_fractions(examples, fraction) == _issue_36_shares(examples, fraction)
    assert compared > 400


def test_a_smaller_cap_moves_validation_records_to_training_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same pool and seed under a smaller cap: the held-out part is the same records,
    train and validation together are the same records, and validation only loses some."""
    path = tmp_path / "pool.json"
    path.write_text(json.dumps(generate_pool(6000, seed=4)))
    data = read_trajectories(path)
    before = split_examples(data, seed=1)
    cap = 300
    monkeypatch.setattr(split_module, "VALIDATION_CAP", cap)
    after = split_examples(data, seed=1)
    assert len(before.validation) > 2 * cap  # the cap binds on this pool
    np.testing.assert_array_equal(after.held_out, before.held_out)
    assert after.eval_fraction == before.eval_fraction
    known = np.sort(np.concatenate((after.train, after.validation)))
    np.testing.assert_array_equal(known, np.sort(np.concatenate((before.train, before.validation))))
    assert np.isin(after.validation, before.validation).all()
    # a hash draw of about `cap` records: within 4 standard deviations of it, never above
    # its expected size by more
    expected = after.validation_fraction * (len(after.train) + len(after.validation))
    assert expected <= cap
    assert abs(len(after.validation) - expected) <= 4 * math.sqrt(expected)
