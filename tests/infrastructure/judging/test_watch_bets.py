"""The live watch's bets (``confidence_sequence._bets``) work ``log1p`` out only for the
bets under the cap, and give the bits of the formula worked out for every bet; its A/A
self-test (``segment_tests.self_test``), worked out a block of replays at a time, counts
what the whole replay would."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from genesis_fp16_infrastructure.judging import confidence_sequence as bound
from genesis_fp16_infrastructure.judging import segment_tests as segments


def _reference(x: np.ndarray, alpha: float) -> tuple[np.ndarray, np.ndarray]:
    """The bets and variance terms of the module docstring's formulas, every step on
    every element (what ``_bets`` computed before it skipped the capped ``log1p``)."""
    t = np.arange(1, x.shape[-1] + 1, dtype=np.float64)
    mu = (np.cumsum(x, axis=-1) + 0.5) / (t + 1)
    var = (np.cumsum(np.square(x - mu), axis=-1) + 0.25) / (t + 1)
    lam = np.concatenate((np.full((*x.shape[:-1], 1), 0.25), var[..., :-1]), axis=-1)
    lam = np.minimum(np.sqrt(2 * math.log(1.0 / alpha) / (lam * t * np.log1p(t))), bound.CAP)
    v = np.concatenate((np.full((*x.shape[:-1], 1), 0.5), mu[..., :-1]), axis=-1)
    v = np.square(x - v) * 4
    return lam, v * (-np.log1p(-lam) - lam) / 4


@settings(max_examples=60, deadline=None)
@given(
    rows=st.integers(1, 6),
    length=st.integers(1, 400),
    spread=st.sampled_from([0.0, 0.01, 0.05, 0.2, 0.5]),
    alpha=st.sampled_from([1e-6, 0.003125, 0.025, 0.5, 0.9]),
    seed=st.integers(0, 2**32 - 1),
)
def test_the_bets_are_the_formulas_bits_capped_or_not(
    rows: int, length: int, spread: float, alpha: float, seed: int
) -> None:
    x = np.clip(0.5 + np.random.default_rng(seed).normal(0.0, spread, (rows, length)), 0, 1)
    lam, terms = bound._bets(x.copy(), alpha)
    want_lam, want_terms = _reference(x, alpha)
    assert lam.tobytes() == want_lam.tobytes()
    assert terms.tobytes() == want_terms.tobytes()


@pytest.mark.parametrize("capped", [0.0, 0.3, 0.7, 1.0])
def test_a_mix_of_capped_and_free_bets_gives_each_its_own_term(capped: float) -> None:
    """Bets set directly, some at the cap and some under it, in both of the function's
    ways (most capped: log1p of the free ones alone; most free: of every one)."""
    rng = np.random.default_rng(5)
    lam = rng.uniform(0.01, bound.CAP, (4, 300))
    lam[rng.random(lam.shape) < capped] = bound.CAP
    terms = bound._psi_terms(lam)
    assert terms.tobytes() == (-np.log1p(-lam) - lam).tobytes()


@pytest.mark.parametrize("segmented", [True, False])
def test_the_self_test_counts_the_replays_the_whole_replay_would(segmented: bool) -> None:
    """A self-test that rolls back on some replays (a loose level), worked out a block
    of replays at a time with each segment's records side by side, counts the replays
    that the whole replay, each segment's records picked out by a mask, and the formulas'
    bets would."""
    rng = np.random.default_rng(11)
    d = rng.normal(0.0, 0.2, 1500)
    names = rng.choice(np.array(["a", "b", "c"]), 1500) if segmented else None
    found = segments.self_test([(d, names, 0.0)], span=4.6, alpha=0.8, seed=3)
    assert 0 < found.false_rollbacks < found.replays  # the test can tell a miscount
    assert 8 * len(d) * found.replays > segments.REPLAY_BYTES  # more than one block
    flips = np.random.default_rng(3).choice((-1.0, 1.0), (found.replays, len(d)))
    slot = np.zeros(len(d), np.int64) if names is None else segments.slots(names)[1]
    centred = d - (np.bincount(slot, d) / np.bincount(slot))[slot]
    replay = np.clip(flips * centred, -4.6, 4.6)

    def crosses(r: np.ndarray, level: float) -> np.ndarray:
        x = np.clip((r + 4.6) / 9.2, 0.0, 1.0)
        lam, penalty = _reference(x, level)
        path = np.cumsum((x - 0.5) * lam - penalty, axis=-1)
        return np.asarray((path > math.log(1.0 / level)).any(axis=1))

    crossed = crosses(replay, 0.4 if segmented else 0.8)
    for k in range(int(slot.max()) + 1 if segmented else 0):
        crossed |= crosses(replay[:, slot == k], 0.8 / (2 * segments.SLOTS))
    assert found.false_rollbacks == int(crossed.sum())


def test_each_test_of_the_self_test_sees_its_records_in_order_for_every_replay(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Worked out a block of replays at a time, with each segment's records side by side:
    the overall test is given every record and each segment's test that segment's records,
    in arrival order, for every replay, at its level."""
    rng = np.random.default_rng(4)
    d = rng.normal(0.0, 0.2, 900)
    names = rng.choice(np.array(["a", "b", "c", "d"]), 900)
    seen: list[tuple[float, np.ndarray]] = []
    real = segments._crosses

    def spy(replay: np.ndarray, span: float, margin: float, alpha: float) -> np.ndarray:
        seen.append((alpha, replay.copy()))
        return real(replay, span, margin, alpha)

    monkeypatch.setattr(segments, "_crosses", spy)
    found = segments.self_test([(d, names, 0.01)], span=4.6, alpha=0.05, seed=9)
    slot = segments.slots(names)[1]
    tests = 1 + int(slot.max()) + 1
    assert len(seen) % tests == 0 and len(seen) // tests > 1  # several blocks
    flips = np.random.default_rng(9).choice((-1.0, 1.0), (found.replays, len(d)))
    centred = d - (np.bincount(slot, d) / np.bincount(slot))[slot]
    replay = np.clip(0.01 + flips * centred, -4.6, 4.6)
    wanted = [(0.025, replay)] + [
        (0.05 / (2 * segments.SLOTS), replay[:, slot == k]) for k in range(tests - 1)
    ]
    for at, (level, values) in enumerate(wanted):
        given = seen[at::tests]
        assert {alpha for alpha, _ in given} == {level}
        assert np.vstack([rows for _, rows in given]).tobytes() == values.tobytes()
