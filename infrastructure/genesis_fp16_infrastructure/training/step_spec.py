"""The fields every step shares, however the run is asked for: :class:`StepSpec` (the log
interval, and how the step executes: ``cuda_graph`` and ``compile``, whose names are the
execution vocabulary of
:mod:`~genesis_fp16_infrastructure.training.precision.execution_names`). The trainer's
``TrainerConfig`` and the run's ``RunSpec`` inherit it; torch-free::

    >>> StepSpec(log_interval=10)
    StepSpec(log_interval=10, cuda_graph='auto', compile='off')
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class StepSpec:
    """How each step reports and executes, declared once, however the run is asked for:
    the trainer's own ``TrainerConfig`` and the run's ``RunSpec`` (so the plugin API's
    ``TrainRequest`` and the library's ``FitOptions``) inherit these fields, and ``fit()``
    hands them to its trainer without renaming one.

    - ``log_interval``: every this many steps the trainer reads its statistics (a host
      sync) and calls ``on_log`` with a ``TrainingSummary``.
    - ``cuda_graph``: ``auto``, ``on`` or ``off``: replay the whole step from a captured
      CUDA graph where the run allows it
      (:mod:`genesis_fp16_infrastructure.training.step.execution` says when).
    - ``compile``: ``off`` or ``on``: the model compiled inside the captured step
      (execution ``cuda_graph_compiled``); an error before the first step where the step
      cannot be captured.
    """

    log_interval: int = 50
    cuda_graph: str = "auto"
    compile: str = "off"
