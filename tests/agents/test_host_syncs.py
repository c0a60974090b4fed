"""Both built-in agents' real runs read the device only at the loop's cadences: a
steady-state step reads nothing (on a GPU, a read is a host sync).

On the CPU a read is a call of ``.item()``, ``.tolist()``, ``.cpu()``, ``.numpy()`` or a
Python conversion (``bool``, ``float``, ``int``) of a tensor: on a GPU each one waits for
the device. Each read is put on the step the run had reached (the trainer's step count).
A step is a cadence step when one of the loop's reading events ran there (a guard
check, progress, a validation or evaluation, a ``state_dict`` for a checkpoint or a
snapshot, a range-statistics sample's window, an iteration's rollout or diagnostics);
every other step must read nothing. On CUDA (gpu-marked) the reads are
``torch.cuda.set_sync_debug_mode("warn")``'s warnings, counted the same way, on the
captured path.
"""

from __future__ import annotations

import warnings
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import torch

from genesis_fp16.plugin_api import TrainRequest, TrainResult
from genesis_fp16_agents.rlhf_ppo import plugin as rlhf_ppo
from genesis_fp16_agents.rlhf_ppo.task import PPOTask
from genesis_fp16_agents.se_darwin import plugin as se_darwin
from genesis_fp16_infrastructure.data.readers import read_trajectories
from genesis_fp16_infrastructure.recipes.retrain.options import TaskOptions
from genesis_fp16_infrastructure.recipes.retrain.task import WorldModelTask
from genesis_fp16_infrastructure.training.flight.range_stats import RangeStats, SampleClock
from genesis_fp16_infrastructure.training.run.guard import PrecisionGuard
from genesis_fp16_infrastructure.training.step.cuda_graph import StepGraphs
from genesis_fp16_infrastructure.training.step.trainer import Trainer

READS = ("item", "tolist", "cpu", "numpy", "__bool__", "__float__", "__int__")
STEPS = 120
# Where the loop may read: each of these marks the step it runs at.
CADENCE: tuple[tuple[type, str], ...] = (
    (Trainer, "summary"),
    (Trainer, "state_dict"),
    (PrecisionGuard, "_read"),
    (RangeStats, "_report"),
    (SampleClock, "start"),
    (SampleClock, "open"),
    (SampleClock, "close"),
    (WorldModelTask, "validate"),
    (WorldModelTask, "evaluate"),
    (PPOTask, "begin_iteration"),
    (PPOTask, "end_iteration"),
    (PPOTask, "evaluate"),
    # Once per batch signature, never in the steady state: a capture (torch.cuda.graph
    # synchronizes as it begins) and the eager warm-ups before it.
    (StepGraphs, "_capture"),
    (StepGraphs, "_on_side_stream"),
)


@dataclass
class StepReads:
    """Reads and cadence events per step of the trainer that stepped last (the run's:
    a trainer that verifies a capture before the run steps too, and is kept apart)."""

    trainer: Trainer | None = None
    reads: Counter[tuple[int, int]] = field(default_factory=Counter)
    kinds: dict[tuple[int, int], list[str]] = field(default_factory=dict)
    cadence: set[tuple[int, int]] = field(default_factory=set)

    @property
    def step(self) -> int:
        return self.trainer.step_count if self.trainer is not None else -1

    @property
    def at(self) -> tuple[int, int]:
        return id(self.trainer), self.step

    def read(self, kind: str) -> None:
        self.reads[self.at] += 1
        self.kinds.setdefault(self.at, []).append(kind)

    def steady(self, last: int) -> list[int]:
        """The run's steps 1..last-1 at which no cadence event ran."""
        run = id(self.trainer)
        return [s for s in range(1, last) if (run, s) not in self.cadence]

    def off_cadence(self, last: int) -> dict[int, list[str]]:
        run = id(self.trainer)
        return {s: self.kinds[run, s] for s in self.steady(last) if self.reads[run, s]}


def _counted(monkeypatch: pytest.MonkeyPatch, reads: StepReads, count_reads: bool) -> None:
    step = Trainer.step

    def stepping(self: Trainer, *args: Any, **kwargs: Any) -> None:
        reads.trainer = self
        step(self, *args, **kwargs)

    monkeypatch.setattr(Trainer, "step", stepping)
    for owner, name in CADENCE:
        monkeypatch.setattr(owner, name, _marking(getattr(owner, name), reads))
    if count_reads:
        for name in READS:
            monkeypatch.setattr(torch.Tensor, name, _reading(getattr(torch.Tensor, name), reads))


def _marking(method: Callable[..., Any], reads: StepReads) -> Callable[..., Any]:
    def marked(*args: Any, **kwargs: Any) -> Any:
        reads.cadence.add(reads.at)
        try:
            return method(*args, **kwargs)
        finally:
            reads.cadence.add(reads.at)  # a step that ran inside it (none should)

    return marked


def _reading(method: Callable[..., Any], reads: StepReads) -> Callable[..., Any]:
    name = method.__name__

    def read(*args: Any, **kwargs: Any) -> Any:
        reads.read(name)
        return method(*args, **kwargs)

    return read


def _request(plugin: Any, tmp: Path, device: str, **fields: Any) -> TrainRequest:
    return TrainRequest(
        agent=plugin.name,
        precision="fp32",
        precision_reason="test",
        state_dir=tmp,
        checkpoint_dir=tmp / "checkpoints",
        device=device,
        seed=1,
        steps=STEPS,
        log_interval=40,
        cuda_graph="on" if device == "cuda" else "auto",
        **fields,
    )


def _se_darwin(tmp: Path, device: str = "cpu", **fields: Any) -> TrainResult:
    data = se_darwin.generate_sample_data(tmp / "data", 400, seed=0)
    options = {"batch_size": 16, "cross_validation": False}
    return se_darwin.train(_request(se_darwin, tmp, device, data_path=data, options=options))


def _rlhf_ppo(tmp: Path, device: str = "cpu") -> TrainResult:
    options = {"batch_size": 16, "preset": "fp32_baseline", "ppo_epochs": 3, "minibatches": 4}
    return rlhf_ppo.train(_request(rlhf_ppo, tmp, device, options=options))


def _fused(self: PPOTask, model: torch.nn.Module) -> list[torch.optim.Optimizer]:
    """rlhf_ppo's optimizer on CUDA, fused (there also capturable, which a CPU refuses).
    On the CPU the task keeps torch's default AdamW, which reads its step count on the
    host, and the trainer then reads the overflow flag at every step: by design, and not
    the captured path this test stands in for."""
    groups = [
        {"params": model.policy.parameters(), "lr": self.cfg.lr},  # type: ignore[union-attr]
        {"params": model.critic.parameters(), "lr": self.cfg.critic_lr},  # type: ignore[union-attr]
    ]
    return [torch.optim.AdamW(groups, weight_decay=0.0, fused=True)]


AGENTS: dict[str, Callable[..., TrainResult]] = {"se_darwin": _se_darwin, "rlhf_ppo": _rlhf_ppo}


@pytest.mark.parametrize("agent", AGENTS)
def test_a_steady_state_step_reads_nothing_on_the_cpu(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, agent: str
) -> None:
    """A real run of the agent (guard, range statistics, checkpoints, validation on):
    the steps no cadence event ran at read the device 0 times; the reads counted at the
    cadence steps show the counter sees reads."""
    if agent == "rlhf_ppo":  # its CUDA optimizer: see _fused
        monkeypatch.setattr(PPOTask, "build_optimizers", _fused)
    reads = StepReads()
    _counted(monkeypatch, reads, count_reads=True)
    result = AGENTS[agent](tmp_path)
    assert result.steps == STEPS and reads.step == STEPS
    assert len(reads.steady(STEPS)) >= STEPS // 3  # most steps are steady: not vacuous
    assert sum(reads.reads.values()) > 0
    assert reads.off_cadence(STEPS) == {}


def test_the_count_sees_a_read_in_the_loss(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same count fails a loss that reads its value on every step (``float(loss)``)."""
    loss = WorldModelTask.loss

    def reading_loss(self: WorldModelTask, model: Any, batch: Any) -> torch.Tensor:
        value = loss(self, model, batch)
        float(value.detach())  # a host sync a step on a GPU
        return value

    monkeypatch.setattr(WorldModelTask, "loss", reading_loss)
    reads = StepReads()
    _counted(monkeypatch, reads, count_reads=True)
    _se_darwin(tmp_path)
    off = reads.off_cadence(STEPS)
    assert len(off) == len(reads.steady(STEPS)) and all("__float__" in k for k in off.values())


def test_se_darwin_uploads_its_batch_index_once_an_epoch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An epoch's batches take one Tensor.to (the whole permutation, pinned on a GPU),
    not one per batch (a pageable copy each, a host sync a step on a GPU)."""
    data = se_darwin.generate_sample_data(tmp_path / "data", 400, seed=0)
    options = TaskOptions.from_mapping({"batch_size": 16, "cross_validation": False})
    task = WorldModelTask(read_trajectories(data), options, seed=1)
    moves = [0]
    to = torch.Tensor.to

    def counted_to(self: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        moves[0] += 1
        return to(self, *args, **kwargs)

    monkeypatch.setattr(torch.Tensor, "to", counted_to)
    batches = list(task.train_batches(epoch=0, seed=1))
    assert len(batches) == task.steps_per_epoch > 1
    assert moves[0] == 1


# ---------------------------------------------------------------- on a GPU

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


@contextmanager
def _sync_warnings(reads: StepReads) -> Iterator[None]:
    """``set_sync_debug_mode("warn")``: each synchronizing CUDA call is counted as a read
    of the step the run had reached."""
    show = warnings.showwarning

    def shown(message: Any, category: Any, *args: Any, **kwargs: Any) -> None:
        if "synchroniz" in str(message):
            reads.read("cuda sync")
        else:
            show(message, category, *args, **kwargs)

    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.showwarning = shown
        torch.cuda.set_sync_debug_mode("warn")
        try:
            yield
        finally:
            torch.cuda.set_sync_debug_mode("default")
            warnings.showwarning = show


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("agent", AGENTS)
def test_a_steady_state_captured_step_syncs_nothing_on_cuda(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, agent: str
) -> None:
    """On CUDA, the captured path (cuda_graph on): the steps no cadence event ran at
    make 0 synchronizing CUDA calls (sync debug mode's warnings); the syncs counted at
    the cadence steps show the count sees them."""
    reads = StepReads()
    _counted(monkeypatch, reads, count_reads=False)
    with _sync_warnings(reads):
        result = AGENTS[agent](tmp_path, device="cuda")
    assert result.steps == STEPS
    assert result.execution == "cuda_graph", result.execution_reason
    assert len(reads.steady(STEPS)) >= STEPS // 3 and sum(reads.reads.values()) > 0
    assert reads.off_cadence(STEPS) == {}
