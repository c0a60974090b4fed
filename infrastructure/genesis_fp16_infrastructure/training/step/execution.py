"""Eager steps or one captured CUDA graph per step: decided once per run, with the reason.

``resolve_execution`` looks at what a run is made of and answers like
``decide`` does: what was asked, what will run, and why::

    resolved = resolve_execution("auto", torch.device("cpu"), optimizers, schedulers=())
    resolved.used    # 'eager'
    resolved.reason  # 'CUDA graphs need a CUDA device; this run is on cpu'

A step can be captured only when everything it does stays on the device: a CUDA
device, one process (no DDP/FSDP collectives to capture), optimizers that keep their
step counters on the device (``capturable=True``) and skip an overflowing fp16 step by
themselves (``fused=True``: no host read of the overflow flag), and no LR scheduler
(a scheduler advances on the host, only after taken steps, which a replayed graph
cannot tell it without a host read). ``on`` where a condition fails is an error before
the first step, never a silent fallback; ``auto`` runs eagerly and reports the reason.

``compile="on"`` asks for the model compiled inside the captured step: the same
conditions, with no eager way out (``cuda_graph`` ``auto`` or ``on`` both capture), and
its own mode, ``cuda_graph_compiled``::

    resolve_execution("auto", torch.device("cpu"), optimizers, compile="on")
    # ExecutionError: compile=on runs the compiled model inside the captured step, but
    # this run cannot be captured: CUDA graphs need a CUDA device; this run is on cpu; ...
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch.optim import Optimizer

from genesis_fp16_infrastructure.errors import ExecutionError
from genesis_fp16_infrastructure.training.precision.execution_names import (
    COMPILE_MODE,
    EXECUTION_MODES,
    FALLBACK_REASONS,
)


@dataclass(frozen=True)
class MeasuredExecution:
    """What a measured ``auto`` found faster for this run (``used``), and the timing that
    says so (``reason``); ``resolve_execution`` follows it for an ``auto`` request."""

    used: str
    reason: str

    def __post_init__(self) -> None:
        if self.used not in EXECUTION_MODES:
            raise ValueError(f"measured execution {self.used!r}: one of {EXECUTION_MODES}")


@dataclass(frozen=True)
class ResolvedExecution:
    """``used`` is one of ``EXECUTION_MODES``; ``reason`` says why, for the run's report.

    ``fallback`` is one of ``FALLBACK_REASONS`` when a captured step was resolved but the
    run went eager (``verification_mismatch``, ``capture_failed``), else None."""

    requested: str
    used: str
    reason: str
    fallback: str | None = None


def fell_back(resolved: ResolvedExecution, fallback: str, why: str) -> ResolvedExecution:
    """``resolved`` after the run left its captured step for eager ones, and why."""
    if fallback not in FALLBACK_REASONS:
        raise ValueError(f"fallback {fallback!r}: one of {FALLBACK_REASONS}")
    reason = f"{resolved.used} resolved ({resolved.reason}), eager instead: {why}"
    return ResolvedExecution(resolved.requested, "eager", reason, fallback)


def resolve_execution(
    requested: str,
    device: torch.device,
    optimizers: Sequence[Optimizer],
    schedulers: Sequence[object] = (),
    *,
    host_sync_per_step: bool = False,
    world_size: int = 1,
    measured: MeasuredExecution | None = None,
    compile: str = "off",
) -> ResolvedExecution:
    """Decide eager, ``cuda_graph`` or ``cuda_graph_compiled`` for a run, once; see the
    module docstring. ``requested`` and ``compile`` come checked (``TrainerConfig``).

    ``measured`` is a measured ``auto``'s finding: a capturable run that timed faster
    eagerly runs eagerly, and the reason gives the two timings. ``compile="on"`` does
    not follow it (that timing was of the uncompiled step): the run is captured or fails.

    >>> model = torch.nn.Linear(2, 1)
    >>> opt = torch.optim.AdamW(model.parameters())
    >>> resolve_execution("off", torch.device("cpu"), [opt]).used
    'eager'
    """
    if requested == "off" and compile == "off":
        return ResolvedExecution(requested, "eager", "cuda_graph=off: eager steps requested")
    obstacle = _capture_obstacle(device, optimizers, schedulers, host_sync_per_step, world_size)
    if compile == "on":
        # Compiled but eager is not offered: compiling costs seconds to minutes per run,
        # paid for the captured step's speed (issue 28: 2.3 ms against 4.0 ms on an H100,
        # measured by hand); a run that cannot be captured is told so instead.
        if requested == "off":
            obstacle = "cuda_graph=off asks for eager steps (set cuda_graph to auto or on)"
        if obstacle is not None:
            raise ExecutionError(
                "compile=on runs the compiled model inside the captured step, but this run "
                f"cannot be captured: {obstacle}; set compile to off",
                obstacle,
            )
        return ResolvedExecution(
            requested,
            "cuda_graph_compiled",
            f"compile=on: the model compiled (torch.compile mode {COMPILE_MODE}) inside the "
            f"whole step captured on {device}",
        )
    if obstacle is not None:
        if requested == "on":
            raise ExecutionError(
                f"cuda_graph=on, but this run cannot be captured: {obstacle}; "
                "set cuda_graph to auto (eager here, with this reason) or off",
                obstacle,
            )
        return ResolvedExecution(requested, "eager", obstacle)
    if requested == "auto" and measured is not None:
        return ResolvedExecution(requested, measured.used, f"auto: {measured.reason}")
    return ResolvedExecution(
        requested, "cuda_graph", f"cuda_graph={requested}: whole step captured on {device}"
    )


def _capture_obstacle(
    device: torch.device,
    optimizers: Sequence[Optimizer],
    schedulers: Sequence[object],
    host_sync_per_step: bool,
    world_size: int,
) -> str | None:
    """Why a step of this run cannot be captured, or None when it can."""
    if device.type != "cuda":
        return f"CUDA graphs need a CUDA device; this run is on {device.type}"
    if world_size > 1:
        return (
            f"{world_size} ranks under torchrun: the DDP/FSDP collectives are not captured, "
            "steps run eagerly"
        )
    for index, optimizer in enumerate(optimizers):
        name = type(optimizer).__name__
        if not all(group.get("capturable", False) for group in optimizer.param_groups):
            return (
                f"optimizer {index} ({name}) is not capturable: build it with "
                "capturable=True (and fused=True) so its step counters stay on the device"
            )
    if schedulers:
        return (
            f"{len(schedulers)} LR scheduler(s): a scheduler advances on the host after taken "
            "steps only, which a replayed graph cannot tell it without a host read"
        )
    if host_sync_per_step:
        return (
            "the step reads the overflow flag on the host (an optimizer without "
            "fused=True cannot skip on the device)"
        )
    return None
