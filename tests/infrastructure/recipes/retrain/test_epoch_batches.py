"""The world model's step loop is lean (issue 90, item 6): an epoch's rows are gathered
a block of batches at a time, only the blocks a run reads; its batches are views of them
holding exactly the rows a gather per batch took, in the same order; and a fit() switches
the model's mode once per evaluation, not per step."""

from __future__ import annotations

from dataclasses import replace
from itertools import islice

import pytest
import torch
from op_counter import OpCounter
from torch import nn

from genesis_fp16_infrastructure.data.readers import read_trajectories
from genesis_fp16_infrastructure.data.synthetic import write_pool
from genesis_fp16_infrastructure.recipes.retrain import task as task_module
from genesis_fp16_infrastructure.recipes.retrain.options import TaskOptions
from genesis_fp16_infrastructure.recipes.retrain.task import (
    GATHER_BATCHES,
    Batch,
    WorldModelTask,
    _chunks,
)
from genesis_fp16_infrastructure.training.run.fit import fit
from genesis_fp16_infrastructure.training.run.loop import epoch_groups
from genesis_fp16_infrastructure.training.run.task import FitOptions

SEED = 3


@pytest.fixture(scope="module")
def task(tmp_path_factory: pytest.TempPathFactory) -> WorldModelTask:
    path = write_pool(tmp_path_factory.mktemp("pool"), 800, seed=SEED)
    options = TaskOptions.from_mapping({"cross_validation": False, "batch_size": 48})
    return WorldModelTask(read_trajectories(path), options, seed=SEED)


def _gathered_per_batch(task: WorldModelTask, epoch: int) -> list[Batch]:
    """The batches as a gather per batch took them before (the order the guarantees of
    resume and kill are stated in): the epoch's permutation, sliced, then gathered."""
    generator = torch.Generator().manual_seed(SEED * 1_000_003 + epoch)
    order = torch.randperm(len(task.train_data), generator=generator)
    return [task.train_data.take(order[s:e]) for s, e in _chunks(len(order), task.batch_size)]


def _same_bits(a: Batch, b: Batch) -> bool:
    return all(x.dtype == y.dtype and torch.equal(x, y) for x, y in zip(a, b, strict=True))


def test_each_batch_holds_the_rows_a_gather_per_batch_took_in_the_same_order(
    task: WorldModelTask,
) -> None:
    """Two epochs, and a resume in the middle of one: every batch equals, bit for bit, the
    per-batch gather of the same slice of the same permutation, with the same sample count."""
    for epoch in (0, 1):
        got = list(task.train_batches(epoch, SEED))
        want = _gathered_per_batch(task, epoch)
        assert len(got) == len(want) > 2
        for (batch, samples), expected in zip(got, want, strict=True):
            assert _same_bits(batch, expected) and samples == len(expected)
    resumed = [group[0] for group in epoch_groups(task, 1, 3, SEED, 1)]
    assert all(_same_bits(b, e) for (b, _), e in zip(resumed, want[3:], strict=True))


def test_an_epoch_gathers_its_rows_once_not_once_a_batch(task: WorldModelTask) -> None:
    """One gather per field of the batch (six) for an epoch of fewer batches than a block
    (``GATHER_BATCHES``), whatever its number of batches."""
    with OpCounter(torch.ops.aten.index_select.default) as counter:
        batches = list(task.train_batches(0, SEED))
    assert 2 < len(batches) <= GATHER_BATCHES
    assert counter.count == len(Batch._fields)


@pytest.mark.parametrize("block", [1, 3, 4])
def test_an_epoch_gathers_the_blocks_a_run_reads_and_no_more(
    task: WorldModelTask, monkeypatch: pytest.MonkeyPatch, block: int
) -> None:
    """Batches gathered ``block`` at a time: every batch equals the per-batch gather bit
    for bit, six gathers a block; a run that reads 5 batches gathers only the blocks
    holding them (its cost follows its steps, not the training part's size)."""
    monkeypatch.setattr(task_module, "GATHER_BATCHES", block)
    want = _gathered_per_batch(task, 0)
    with OpCounter(torch.ops.aten.index_select.default) as counter:
        got = list(task.train_batches(0, SEED))
    assert len(got) == len(want) > block
    assert all(_same_bits(b, e) and n == len(e) for (b, n), e in zip(got, want, strict=True))
    assert counter.count == len(Batch._fields) * -(-len(want) // block)
    with OpCounter(torch.ops.aten.index_select.default) as counter:
        read = list(islice(task.train_batches(0, SEED), 5))
    assert all(_same_bits(b, e) for (b, _), e in zip(read, want, strict=False))
    assert counter.count == len(Batch._fields) * -(-5 // block)


def test_a_fit_switches_the_models_mode_once_per_evaluation_not_per_step(
    task: WorldModelTask, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Over a fit() validating every 4 steps, the model is put back in training mode once
    after each evaluation (validations and the final one), never by a step."""
    calls = {"train": 0, "eval": 0}
    roots: list[nn.Module] = []
    original = nn.Module.train

    def counted(module: nn.Module, mode: bool = True) -> nn.Module:
        if roots and module is roots[0]:
            calls["train" if mode else "eval"] += 1
        return original(module, mode)

    build = task.build_model

    def build_and_watch() -> nn.Module:
        model = build()
        roots.append(model)
        return model

    monkeypatch.setattr(nn.Module, "train", counted)
    monkeypatch.setattr(task, "build_model", build_and_watch)
    early = replace(task.early_stopping(stop=False), every_steps=4)
    options = FitOptions(steps=20, seed=SEED, early_stop=early)
    result = fit(task, options)
    assert result.steps_run == 20 and len(roots) == 1
    # 5 validations and the final evaluation, each an eval() and a train() back.
    assert calls == {"train": 6, "eval": 6}
    assert roots[0].training and all(m.training for m in roots[0].modules())
