"""The drift report's binning by comparisons (issue 90 item 3): each record's bin is where
``torch.bucketize`` puts it, bit for bit, values on a bound, beyond every bound and
infinite included, with no binary search left."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
import torch

import genesis_fp16_infrastructure.recipes.retrain.drift as drift
from genesis_fp16_infrastructure.recipes.retrain import drift_reference


def test_bins_are_bucketizes(monkeypatch: pytest.MonkeyPatch) -> None:
    """A reference of few values (a flag, a count) and of many: every bin is bucketize's,
    and bucketize is not called (16 ms of CPU for 20,000 drawn records; comparisons 5)."""
    generator = torch.Generator().manual_seed(7)
    values = torch.rand((3, 4000), generator=generator, dtype=torch.float64)
    values[0] = values[0].mul(4).floor()  # a count: many records on each bound
    values[1] = (values[1] > 0.9).double()  # a flag
    measured = drift._Measured.of(values)
    categorical: dict[str, drift._Categorical] = {}
    reference = drift._Reference(categorical, measured)
    asked = torch.rand((3, 5000), generator=generator, dtype=torch.float64).mul(6).sub(1)
    asked[:, :4] = torch.tensor([-math.inf, math.inf, -1.0, 0.0], dtype=torch.float64)
    asked[:, 4:4000] = values[:, : 4000 - 4]  # on the bounds and between them
    expected = torch.stack(
        [torch.bucketize(v, b) for v, b in zip(asked, measured.bounds, strict=True)]
    )

    def refused(*args: Any, **kwargs: Any) -> torch.Tensor:
        raise AssertionError("a binary search per record: the bins are counted comparisons")

    monkeypatch.setattr(torch, "bucketize", refused)
    assert torch.equal(reference._bin(asked), expected)


def test_float32_values_are_measured_as_their_float64_copy() -> None:
    """The reference's float32 numbers measured as they are (sorted and compared in
    float32): the same bounds, bins and shares, bit for bit, as their float64 copy's,
    with deciles that fall between two float32 values, ties on them, float32's largest
    and smallest values; and a bound between two float32 values compared exactly."""
    generator = torch.Generator().manual_seed(11)
    values = torch.randn((5, 3001), generator=generator).mul(1000)
    values[0] = values[0].round()  # a count: ties on the bounds
    values[1] = (values[1] > 900).float()  # a flag
    values[2, :7] = torch.tensor([3.4e38, -3.4e38, 3e38, -3e38, 1e-45, 0.0, -0.0])
    values[3] = torch.linspace(0, 1, 3001).float()  # deciles lerped between neighbours
    values[4] = torch.full((3001,), 0.1)  # one value: a single bound
    narrow = drift._Measured.of(values)
    wide = drift._Measured.of(values.double())
    assert narrow.width == wide.width
    for a, b in zip(narrow.bounds, wide.bounds, strict=True):
        assert a.dtype == b.dtype == torch.float64 and torch.equal(a, b)
    assert torch.equal(narrow.shares, wide.shares)
    narrow_bins = drift._binned(values.numpy(), narrow.bounds)
    assert (narrow_bins == drift._binned(values.double().numpy(), wide.bounds)).all()
    # a bound strictly between two float32 values: compared exactly, not rounded to one
    between = torch.tensor([0.1], dtype=torch.float64)
    row = torch.tensor([[0.1, 0.2]], dtype=torch.float32)
    assert float(row[0, 0]) > 0.1  # float32's nearest to 0.1 is above it
    assert drift._binned(row.numpy(), [between]).tolist() == [[1, 1]]
    assert drift._binned(row.double().numpy(), [between]).tolist() == [[1, 1]]


def test_the_reference_is_measured_in_float32() -> None:
    """The reference's numbers (float32, as the features are) are transposed without a
    float64 copy: half the bytes."""
    numbers = torch.randn((2500, 29), generator=torch.Generator().manual_seed(3)).numpy()
    major = drift_reference.feature_major(numbers)
    assert major.dtype == np.float32 and np.array_equal(major, numbers.T)
    assert drift_reference.feature_major(numbers.astype(np.float64)).dtype == np.float64
