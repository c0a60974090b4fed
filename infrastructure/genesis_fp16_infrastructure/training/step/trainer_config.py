"""What a :class:`~genesis_fp16_infrastructure.training.step.trainer.Trainer` is told: its
own settings (:class:`StepTuning`) and, with the step fields every run shares, the whole
:class:`TrainerConfig`, checked when it is built::

    TrainerConfig(max_grad_norm=1.0, log_interval=50, cuda_graph="off")
"""

from __future__ import annotations

from dataclasses import dataclass

from genesis_fp16_infrastructure.training.precision.precision_names import (
    COMPILE_REQUESTS,
    CUDA_GRAPH_REQUESTS,
)
from genesis_fp16_infrastructure.training.step.execution import MeasuredExecution
from genesis_fp16_infrastructure.training.step.step_spec import StepSpec


@dataclass(frozen=True, kw_only=True)
class StepTuning:
    """The trainer's own settings, beside the step fields every run shares (``StepSpec``):
    ``fit()`` takes these as ``FitOptions.trainer`` and the step fields from the run.

    - ``max_grad_norm``: clip the global norm of the *unscaled* gradients; None: off.
    - ``grad_accum_steps``: micro-batches per optimizer step. ``Trainer.step`` accumulates
      over however many micro-batches it is given (and divides the loss by that count);
      this setting tells ``fit()`` how many consecutive batches to group into one step.
    - ``overflow_window``: the number of recent steps ``overflow_rate_window`` covers.
    - ``measured_execution``: under ``cuda_graph="auto"``, what calibration timed faster
      for this run (set by ``fit()``; None keeps the rule: captured wherever the run can
      be). ``Trainer.execution`` says what ran and why.
    """

    max_grad_norm: float | None = 1.0
    grad_accum_steps: int = 1
    overflow_window: int = 100
    measured_execution: MeasuredExecution | None = None

    def __post_init__(self) -> None:
        if self.max_grad_norm is not None and not self.max_grad_norm > 0:
            raise ValueError(f"max_grad_norm={self.max_grad_norm!r}: must be > 0, or None")
        for name in ("grad_accum_steps", "overflow_window"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}={getattr(self, name)!r}: must be >= 1")


@dataclass(frozen=True, kw_only=True)
class TrainerConfig(StepSpec, StepTuning):
    """How each step runs and how often it reports: the step fields
    (:class:`~genesis_fp16_infrastructure.training.step.step_spec.StepSpec`'s
    ``log_interval``, ``cuda_graph``, ``compile``, shared with the run's ``RunSpec``) and
    the trainer's own (:class:`StepTuning`'s).

    With ``compile="on"`` the model is compiled with
    ``torch.compile(mode="max-autotune-no-cudagraphs")``; the model itself stays
    uncompiled (its state dict keys, its eval): the trainer steps a compiled view of it.
    """

    def __post_init__(self) -> None:
        StepTuning.__post_init__(self)
        if self.compile not in COMPILE_REQUESTS:
            raise ValueError(f"compile={self.compile!r}: choose from {', '.join(COMPILE_REQUESTS)}")
        if self.cuda_graph not in CUDA_GRAPH_REQUESTS:
            raise ValueError(
                f"cuda_graph={self.cuda_graph!r}: choose from {', '.join(CUDA_GRAPH_REQUESTS)}"
            )
        if self.log_interval < 1:
            raise ValueError(f"log_interval={self.log_interval!r}: must be >= 1")
