"""Scoring and evaluation forwards run in chunks of rows (issue 90): each forward holds
at most ``CHUNK_ACTIVATIONS`` activations (but never fewer than ``MIN_CHUNK_ROWS`` rows
where there are more), the chunks cover every row once, and the joined output is the
whole forward's: to the bit where the BLAS takes the chunks' rows as it takes the
whole's, else within a float32 rounding (a matmul of fewer rows may block its sums
otherwise)."""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from genesis_fp16_infrastructure.data.readers import read_trajectories
from genesis_fp16_infrastructure.data.synthetic import write_pool
from genesis_fp16_infrastructure.recipes.retrain.options import TaskOptions
from genesis_fp16_infrastructure.recipes.retrain.task import WorldModelTask
from genesis_fp16_infrastructure.world_model import predict
from genesis_fp16_infrastructure.world_model.model import (
    ModelConfig,
    WorldModel,
    WorldModelEnsemble,
    build_world_model,
)
from genesis_fp16_infrastructure.world_model.predict import forward_chunked


@pytest.fixture
def forwards(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """The rows of every world-model forward run while the test runs."""
    seen: list[int] = []
    for cls in (WorldModel, WorldModelEnsemble):
        real = cls.forward

        def counted(self, x, *args, _real=real, **kwargs):  # type: ignore[no-untyped-def]
            seen.append(len(x))
            return _real(self, x, *args, **kwargs)

        monkeypatch.setattr(cls, "forward", counted)
    yield seen


@pytest.mark.parametrize(("members", "per_member"), [(1, False), (5, False), (5, True)])
def test_a_forward_over_many_rows_runs_in_bounded_chunks_with_the_same_bits(
    forwards: list[int], monkeypatch: pytest.MonkeyPatch, members: int, per_member: bool
) -> None:
    """1,000 rows through a 16-wide model with room for 100 rows a forward: 10 forwards
    of at most 100 rows each, and every output the one-forward output's."""
    torch.manual_seed(0)
    model = build_world_model(ModelConfig(in_features=6, hidden=16, members=members)).eval()
    monkeypatch.setattr(predict, "CHUNK_ACTIVATIONS", 100 * 16 * members)
    monkeypatch.setattr(predict, "MIN_CHUNK_ROWS", 1)  # chunks below the floor, to see them
    x = torch.randn(1000, 6)
    with torch.no_grad():
        whole = model(x, per_member=True) if per_member else model(x)
        forwards.clear()
        chunked = forward_chunked(model, x, per_member=per_member)
    assert max(forwards) <= 100 and sum(forwards) == 1000 and len(forwards) == math.ceil(1000 / 100)
    for got, want in zip(chunked, whole, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)


def test_a_wide_model_never_runs_chunks_of_fewer_rows_than_the_floor(
    forwards: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A model so wide that the activations' bound alone would give it chunks of 20 rows
    runs chunks of ``MIN_CHUNK_ROWS`` (here 100), the last one what is left; the joined
    output is the one forward's (within a float32 rounding)."""
    torch.manual_seed(0)
    model = build_world_model(ModelConfig(in_features=6, hidden=16, members=2)).eval()
    monkeypatch.setattr(predict, "CHUNK_ACTIVATIONS", 20 * 16 * 2)
    monkeypatch.setattr(predict, "MIN_CHUNK_ROWS", 100)
    x = torch.randn(250, 6)
    with torch.no_grad():
        whole = model(x)
        forwards.clear()
        chunked = forward_chunked(model, x)
    assert forwards == [100, 100, 50]
    for got, want in zip(chunked, whole, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)


def test_another_device_runs_the_accelerator_s_chunks(
    forwards: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The CPU's chunk bound is the CPU's: a forward on another device (here the meta
    device, which runs a GPU's control flow with shapes alone) takes
    ``ACCELERATOR_CHUNK_ACTIVATIONS``'s chunks, and the same rows on the CPU the CPU's."""
    monkeypatch.setattr(predict, "CHUNK_ACTIVATIONS", 100 * 16 * 2)
    monkeypatch.setattr(predict, "ACCELERATOR_CHUNK_ACTIVATIONS", 300 * 16 * 2)
    monkeypatch.setattr(predict, "MIN_CHUNK_ROWS", 1)
    config = ModelConfig(in_features=6, hidden=16, members=2)
    with torch.no_grad():
        forward_chunked(
            build_world_model(config).eval().to("meta"), torch.empty(700, 6, device="meta")
        )
        assert forwards == [300, 300, 100]
        forwards.clear()
        forward_chunked(build_world_model(config).eval(), torch.zeros(700, 6))
    assert forwards == [100] * 7


def test_a_few_rows_take_one_forward(forwards: list[int]) -> None:
    """Rows within the bound: one forward, the model's own output."""
    model = build_world_model(ModelConfig(in_features=6, hidden=16, members=3)).eval()
    with torch.no_grad():
        forward_chunked(model, torch.randn(50, 6))
    assert forwards == [50]


@pytest.mark.parametrize("cross", [False, True])
def test_the_runs_evaluation_runs_in_chunks_and_reports_the_same_figures(
    forwards: list[int], monkeypatch: pytest.MonkeyPatch, tmp_path: Path, cross: bool
) -> None:
    """se_darwin's validation and held-out evaluation (the run's eval phase), held-out
    ensemble and cross-validated: no forward over more rows than the bound allows, and
    the metrics of one forward over every row (within a float32 rounding)."""
    path = write_pool(tmp_path, 1500, seed=3)
    options = TaskOptions.from_mapping({"cross_validation": cross, "members": 3})
    task = WorldModelTask(read_trajectories(path), options, seed=3)
    model = task.build_model().eval()
    with torch.no_grad():
        whole = task.evaluate(model), task.validate(model)
        assert max(forwards) > 64  # the evaluation sets are larger than the bound below
        monkeypatch.setattr(predict, "CHUNK_ACTIVATIONS", 64 * task.config.hidden * 3)
        monkeypatch.setattr(predict, "MIN_CHUNK_ROWS", 1)
        forwards.clear()
        chunked = task.evaluate(model), task.validate(model)
    assert forwards and max(forwards) <= 64
    for got, want in zip(chunked, whole, strict=True):
        assert got == pytest.approx(want, rel=1e-5, abs=1e-5)
