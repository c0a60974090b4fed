"""``TrainingTask``: what an agent gives :func:`~genesis_fp16_infrastructure.training.run.fit`.

Its own module so that everything that takes a task (``fit``, calibration) imports the
protocol from here rather than from each other: ``fit`` uses calibration, and calibration
runs a task's steps.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import torch
from torch import nn
from torch.optim import Optimizer
from torch.optim.lr_scheduler import LRScheduler

if TYPE_CHECKING:
    from genesis_fp16_infrastructure.training.step.trainer import Trainer


@runtime_checkable
class TrainingTask(Protocol):
    """What ``fit()`` needs from an agent.

    ``train_batches(epoch, seed)`` yields ``(batch, num_samples)`` pairs and must yield
    the same sequence for the same arguments: that is what makes resume exact. A task
    may also define ``load_extra_state(state)``; on resume it receives what
    ``extra_state()`` returned when the checkpoint was written (plain Python values and
    tensors only, so that the checkpoint stays ``weights_only``-loadable).

    Devices: ``fit()`` resolves the run's device (``auto`` is cuda on a GPU host), moves
    the model there, and moves every tensor of each training batch there before
    ``loss`` sees it (:func:`~genesis_fp16_infrastructure.training.run.batches.to_device`: a
    no-op for a tensor already there, non-blocking from pinned memory). A task may yield its
    batches on the CPU and needs no device of its own. ``evaluate(model)`` gets the
    model on the run's device; it reads its own held-out data, so it moves that data
    to the model's device (``to_device(data, next(model.parameters()).device)``).

    Random numbers in ``loss``: on CUDA the step may be captured into a CUDA graph and
    replayed (:mod:`~genesis_fp16_infrastructure.training.step.cuda_graph`), which repeats
    whatever the host computed at capture. Draw on the device: the default CUDA
    generator (dropout, ``torch.rand(..., device=...)``) moves on at every replay by
    itself. A ``torch.Generator`` of the task's own, on CUDA, must be returned by an
    optional ``cuda_generators()`` method (a sequence of them), which ``fit()`` registers
    with every graph; one used but not listed fails the capture with an error saying so
    (a torch that registers generators lazily, pytorch#176753, does it by itself), and so
    does drawing from torch's default CPU generator inside ``loss``. A task's own
    CPU generator, ``random`` and numpy cannot be detected: never draw from them in
    ``loss`` (drawing in ``train_batches`` is fine: batches are inputs, copied in).
    """

    def build_model(self) -> nn.Module:
        """A fresh fp32 model (``fit`` moves it to the device)."""
        ...

    def build_optimizers(self, model: nn.Module) -> Sequence[Optimizer]:
        """The optimizers over ``model``'s parameters (``fused=True`` avoids host syncs)."""
        ...

    def build_schedulers(self, optimizers: Sequence[Optimizer]) -> Sequence[LRScheduler]:
        """LR schedulers for those optimizers; may be ``()``."""
        ...

    def train_batches(self, epoch: int, seed: int) -> Iterable[tuple[Any, int]]:
        """One epoch of ``(batch, num_samples)``, in an order fixed by ``(epoch, seed)``."""
        ...

    def loss(self, model: nn.Module, batch: Any) -> torch.Tensor:
        """The forward on one batch, already on the run's device, under the policy's autocast."""
        ...

    def evaluate(self, model: nn.Module) -> dict[str, float]:
        """Held-out metrics, including ``"loss"``; run under ``torch.no_grad()``.

        ``model`` is on the run's device: move the held-out data to it first.
        """
        ...

    def extra_state(self) -> dict[str, Any]:
        """Task state saved into every checkpoint under ``extra`` (e.g. a feature encoder)."""
        ...


@runtime_checkable
class IterationHooks(TrainingTask, Protocol):
    """A task whose epochs are iterations: optional hooks around each group of steps.

    A task that defines both methods is run by
    :func:`~genesis_fp16_infrastructure.training.run.iterations.run_iterations`: each
    epoch of ``train_batches`` is one iteration, which no stop, checkpoint or rollback
    divides (PPO: roll out with the current weights, then K steps over the rollouts).
    Every other task runs as before; ``isinstance(task, IterationHooks)`` tells which.
    """

    def begin_iteration(self, trainer: Trainer, epoch: int) -> None:
        """Before ``train_batches(epoch, seed)`` is read: the trainer that will step it
        (after a demotion, a new one in the next precision)."""
        ...

    def end_iteration(self, trainer: Trainer, epoch: int) -> None:
        """After the iteration's last step (or the run's last, when its target falls
        inside), before the guard's check and any checkpoint."""
        ...
