"""The drift report's numeric side computed for every feature at once (issue 90): the
bounds, the reference's shares, the bins and the draws' shares are, bit for bit, those of
one feature at a time (the way it was computed before), on values with ties, flags,
signed zeros, float32's extremes, float32 and float64, and kept values grown by added ones."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import genesis_fp16_infrastructure.recipes.retrain.drift as drift
from genesis_fp16_infrastructure.recipes.retrain.drift_reference import SortedValues


def _values(seed: int, dtype: np.dtype) -> np.ndarray:
    """Feature x record values of many shapes: a count, a flag, signed zeros, one value,
    float32's extremes, a few distinct values, and plain noise."""
    rng = np.random.default_rng(seed)
    out = rng.standard_normal((9, 1500)) * 100
    out[0] = np.round(out[0] / 40)  # a count: ties on the bounds
    out[1] = out[1] > 90  # a flag
    out[2] = np.where(rng.random(1500) < 0.5, -0.0, 0.0)  # signed zeros only
    out[3] = 0.1  # one value: one bound
    out[4, :5] = [3.4e38, -3.4e38, 3e38, -3e38, 1e-45]  # float32's extremes
    out[5] = rng.integers(0, 3, 1500)
    return out.astype(dtype)


def _edges_one(deciles: torch.Tensor) -> torch.Tensor:
    """A feature's edges as they were computed, one feature at a time."""
    edges = torch.unique(deciles)
    below = torch.nextafter(edges[:1], torch.tensor([-np.inf], dtype=torch.float64))
    return torch.cat([below, edges])


def _shares_one(ordered: SortedValues, bounds: list[torch.Tensor], width: int) -> torch.Tensor:
    """The reference's shares as they were computed: a feature, and a bound, at a time."""
    out = torch.zeros((len(bounds), width), dtype=torch.float64)
    for i, b in enumerate(bounds):
        limits = drift._at_most(b.numpy()[None], ordered.base.dtype)[0]
        at_most = torch.from_numpy(ordered.at_most(i, limits))
        edges = torch.cat(
            [torch.zeros(1, dtype=torch.long), at_most, torch.tensor([ordered.records])]
        )
        out[i, : len(b) + 1] = edges.diff().double()
    return out / out.sum(-1, keepdim=True)


def _binned_one(values: np.ndarray, bounds: list[torch.Tensor]) -> np.ndarray:
    """Each value's bin as it was computed: one comparison per feature and bound."""
    out = np.zeros(values.shape, dtype=np.uint8)
    for row, column, b in zip(out, values, bounds, strict=True):
        for bound in drift._at_most(b.numpy()[None], values.dtype)[0]:
            row += (column > bound).view(np.uint8)
    return out


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("grown", [False, True])
def test_bounds_shares_and_bins_are_one_feature_at_a_times(dtype: type, grown: bool) -> None:
    """The bounds, the reference's shares and the bins of every feature at once equal
    one feature at a time's, bit for bit, sorted whole or grown by added values."""
    values = _values(3, np.dtype(dtype))
    ordered = SortedValues.of(values)
    if grown:
        ordered = SortedValues.of(values[:, :1400]).grown(values[:, 1400:])
        assert ordered.added.shape[1] == 100
    measured = drift._Measured.of_sorted(ordered)
    q = torch.linspace(0, 1, 11, dtype=torch.float64)
    ranks = q * (ordered.records - 1)
    every = torch.from_numpy(np.sort(values, axis=1)).double()
    low, high = every[:, ranks.long()], every[:, ranks.ceil().long()]
    bounds = [_edges_one(a.lerp(b, ranks - ranks.long())) for a, b in zip(low, high, strict=True)]
    assert len(measured.bounds) == len(bounds)
    for a, b in zip(measured.bounds, bounds, strict=True):
        assert a.dtype == torch.float64 and torch.equal(a, b)
    assert measured.width == max(len(b) for b in bounds) + 1
    assert torch.equal(measured.shares, _shares_one(ordered, bounds, measured.width))
    asked = _values(4, np.dtype(dtype))
    assert np.array_equal(drift._binned(asked, measured.bounds), _binned_one(asked, bounds))


@pytest.mark.parametrize("keys", [1, drift.SHARE_KEYS])
def test_the_draws_shares_are_each_draws_own_bincount(
    keys: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The draws' shares counted by one bincount of int32 keys (or a feature a bincount)
    equal each (feature, draw)'s own numpy bincount, divided by its total."""
    monkeypatch.setattr(drift, "SHARE_KEYS", keys)
    values = _values(5, np.dtype(np.float64))
    reference = drift._Reference({}, drift._Measured.of(torch.from_numpy(values)))
    draws, size = 7, 300
    bins = np.random.default_rng(6).integers(0, reference.width, (9, draws * size))
    shares = reference._shares(bins.astype(np.uint8), draws)
    for f in range(9):
        for d in range(draws):
            count = np.bincount(bins[f, d * size : (d + 1) * size], minlength=reference.width)
            expected = torch.from_numpy(count.astype(np.float64))
            assert torch.equal(shares[f, d], expected / expected.sum())


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("block", [7, drift.DRAW_ROWS])
def test_drawn_bins_are_the_records_own_whichever_is_binned(
    dtype: type, block: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Draws of more records than the reference holds gather its own records' bins,
    binned once; draws of fewer bin the records drawn alone: both are each drawn
    record's bins, binned alone (in blocks of any size), bit for bit."""
    monkeypatch.setattr(drift, "DRAW_ROWS", block)
    numbers = np.ascontiguousarray(_values(7, np.dtype(dtype))[:, :400].T)  # record x feature
    measured = drift._Measured.of(torch.from_numpy(np.ascontiguousarray(numbers.T)))
    reference = drift._Reference({}, measured, numbers)
    generator = torch.Generator().manual_seed(8)
    for draws, size in ((20, 30), (2, 30)):  # 600 drawn of 400 records, then 60
        picked = torch.randint(400, (draws, size), generator=generator)
        at = picked.numpy().ravel()
        expected = _binned_one(np.ascontiguousarray(numbers[at].T), measured.bounds)
        assert np.array_equal(reference._drawn_bins(picked), expected)


def _categorical_one(p: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
    """The L-infinity distance of each row of ``counts`` as it was computed, in torch."""
    seen = p > 0
    p = torch.cat([p[seen], torch.zeros(1, dtype=torch.float64)])
    counts = torch.cat([counts[:, seen], counts[:, ~seen].sum(1, keepdim=True)], 1)
    total, p_total = counts.sum(1, keepdim=True), p.sum()
    if not p_total:
        return (total[:, 0] > 0).double()
    far = (p / p_total - counts / total).abs().max(1).values
    return torch.where(total[:, 0] > 0, far, torch.ones_like(far))


@pytest.mark.parametrize("empty_reference", [False, True])
def test_categorical_distances_are_torchs(empty_reference: bool) -> None:
    """The categorical distance in numpy equals the torch computation's, bit for bit:
    categories the reference never had, rows with no record, and an empty reference."""
    rng = np.random.default_rng(9)
    p = rng.integers(0, 50, 40).astype(np.float64)
    p[::5] = 0  # categories the reference never had
    if empty_reference:
        p[:] = 0
    counts = rng.integers(0, 30, (25, 40)).astype(np.float64)
    counts[3] = 0  # a draw of no record
    reference = torch.from_numpy(p)
    measured = drift._Measured.of(torch.zeros((1, 30), dtype=torch.float64))
    ref = drift._Reference({}, measured, counts={"tool": reference})
    got = ref.categorical_distance("tool", torch.from_numpy(counts))
    assert torch.equal(got, _categorical_one(reference, torch.from_numpy(counts)))
