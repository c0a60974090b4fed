"""Stop on validation: evaluate a validation split as training goes, keep the best weights.

A fixed step count does not scale with the data: on a few thousand records the world
model's held-out AUC peaks after a few epochs and falls after (over-fitting), while a
large pool needs many more steps. With ``FitOptions(early_stop=EarlyStopping(...))``,
``fit()`` calls the task's ``validate(model)`` every ``every_steps`` steps of the run's
step count (never off that cadence, so where a run was cut does not matter), keeps a
copy of the weights of the best evaluation, and stops when ``patience`` evaluations in a
row have not improved on it by ``min_delta``::

    result = fit(task, FitOptions(epochs=50, early_stop=EarlyStopping(every_steps=20)))
    result.early_stop.best_step, result.early_stop.stop_reason

- **The budget stays a cap**: ``steps``/``epochs`` still end the run ("budget spent");
  patience usually ends it first ("no improvement in N evaluations").
- **Best weights served**: at the end the model holds the best weights, which the final
  evaluation measures; checkpoints keep the last training weights under ``model`` (so a
  resumed run continues exactly) and the best ones under ``early_stop``, which
  :func:`served_weights` returns for prediction.
- **Exact resume**: the whole state (best metric and step, the patience count, the best
  weights, the stop reason) is in every checkpoint, and an evaluation draws no random
  numbers, so an interrupted and resumed run stops where the uninterrupted one does.
- **New data, new window**: ``key`` names what the validation metric is comparable over
  (e.g. a hash of the data); a checkpoint with another key starts a fresh record. A run
  that already stopped on the same key takes no more steps, unless this run never stops
  early (``patience=None``, an explicit budget): it runs its budget from there.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

import torch
from torch import nn

from genesis_fp16_infrastructure.config_bounds import Bounded, bounded
from genesis_fp16_infrastructure.training import checkpoint_keys as keys
from genesis_fp16_infrastructure.training.reports import EarlyStopReport

logger = logging.getLogger(__name__)

STATE_VERSION = 1
MODES = ("min", "max")


@dataclass(frozen=True)
class EarlyStopping(Bounded):
    """When ``fit()`` validates and when it gives up.

    ``metric`` is a key of the task's ``validate()`` result; ``mode`` says whether lower
    (``min``, e.g. a loss) or higher (``max``, e.g. an AUC) is better.

    >>> EarlyStopping(metric="loss", patience=3, every_steps=10).mode
    'min'
    """

    SETTING = "early-stopping"
    metric: str = "loss"
    mode: Literal["min", "max"] = "min"
    patience: int | None = bounded(5, ge=1)  # None: never stop early, only keep and serve the best
    every_steps: int = bounded(50, ge=1)
    min_delta: float = bounded(0.0, ge=0.0)
    key: str = ""

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"early stopping mode={self.mode!r}: choose from min, max")
        super().__post_init__()


class EarlyStopTracker:
    """The running record: best value and step, evaluations since, best weights, stop."""

    def __init__(self, config: EarlyStopping) -> None:
        self.config = config
        self.best: float | None = None
        self.best_step: int | None = None
        self.since_best = 0
        self.evaluations = 0
        self.stop_reason: str | None = None
        self.best_weights: dict[str, torch.Tensor] | None = None
        self.last: dict[str, float] = {}
        self.history: list[tuple[int, float]] = []  # (step, metric) of every validation

    @property
    def stopped(self) -> bool:
        return self.stop_reason is not None

    def record(self, step: int, metrics: Mapping[str, float], model: nn.Module) -> bool:
        """Take one validation result; True when patience has run out."""
        if self.config.metric not in metrics:
            raise ValueError(
                f"early stopping metric {self.config.metric!r} is not in validate()'s "
                f"result ({', '.join(sorted(metrics))})"
            )
        value = float(metrics[self.config.metric])
        self.evaluations += 1
        self.last = {k: float(v) for k, v in metrics.items()}
        self.history.append((step, value))
        if self._improves(value):
            self.best, self.best_step, self.since_best = value, step, 0
            self.best_weights = _cpu_copy(model)
        else:
            self.since_best += 1
        # Every validation: DEBUG (at INFO it scrolled over the progress bar); the run's
        # result carries the best step and why it stopped.
        patience = self.config.patience
        logger.debug(
            "validation at step %d: %s %.6g (best %.6g at step %s, %s without improvement)",
            step,
            self.config.metric,
            value,
            self.best if self.best is not None else math.nan,
            self.best_step,
            self.since_best if patience is None else f"{self.since_best}/{patience}",
        )
        if self.config.patience is not None and self.since_best >= self.config.patience:
            self.stop_reason = (
                f"no improvement in {self.config.patience} validations "
                f"(best {self.config.metric} {self.best:.6g} at step {self.best_step})"
            )
            return True
        return False

    def _improves(self, value: float) -> bool:
        if not math.isfinite(value):
            return False
        if self.best is None:
            return True
        if self.config.mode == "min":
            return value < self.best - self.config.min_delta
        return value > self.best + self.config.min_delta

    def forget_after(self, step: int) -> None:
        """A precision-guard rollback to ``step``: a best found after it came from the
        troubled trajectory, so the record starts again from the rolled-back state."""
        self.stop_reason = None  # training goes on from the rollback
        if self.best_step is not None and self.best_step > step:
            logger.info("early stopping: best at step %s is after the rollback", self.best_step)
            self.best, self.best_step, self.best_weights = None, None, None
            self.since_best = 0
        self.history = [h for h in self.history if h[0] <= step]

    def restore_best(self, model: nn.Module) -> None:
        """Load the best weights into ``model`` (nothing when there were none)."""
        if self.best_weights is not None:
            getattr(model, "module", model).load_state_dict(self.best_weights)

    def report(self, budget_spent: bool) -> EarlyStopReport:
        """What ``FitResult.early_stop`` (and ``train --json``) says."""
        reason = self.stop_reason or ("budget spent" if budget_spent else "interrupted")
        return EarlyStopReport(
            metric=self.config.metric,
            mode=self.config.mode,
            best=self.best,
            best_step=self.best_step,
            evaluations=self.evaluations,
            since_best=self.since_best,
            patience=self.config.patience,
            every_steps=self.config.every_steps,
            stop_reason=reason,
            last=dict(self.last),
            history=tuple(self.history),
        )

    def state_dict(self) -> dict[str, Any]:
        return {
            "version": STATE_VERSION,
            "key": self.config.key,
            "metric": self.config.metric,
            "best": self.best,
            "best_step": self.best_step,
            "since_best": self.since_best,
            "evaluations": self.evaluations,
            "stop_reason": self.stop_reason,
            "best_weights": self.best_weights,
            "last": dict(self.last),
            "history": [list(h) for h in self.history],
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continue a saved record, unless it was kept over other data or another metric."""
        if state.get("version") != STATE_VERSION:
            raise ValueError(f"early-stopping state version {state.get('version')!r} unknown")
        if state.get("key") != self.config.key or state.get("metric") != self.config.metric:
            logger.info(
                "early stopping: the checkpoint's record (key %r, metric %r) is not this "
                "run's (key %r, metric %r); starting a new one",
                state.get("key"),
                state.get("metric"),
                self.config.key,
                self.config.metric,
            )
            return
        self.best = state["best"]
        self.best_step = state["best_step"]
        self.since_best = int(state["since_best"])
        self.evaluations = int(state["evaluations"])
        # A tracker that never stops (patience None: the caller gave an explicit budget)
        # continues a record that had stopped: the budget is run in full, and the best
        # weights over both runs are still the ones served.
        self.stop_reason = state["stop_reason"] if self.config.patience is not None else None
        self.best_weights = state["best_weights"]
        self.last = dict(state.get("last", {}))
        self.history = [(int(s), float(v)) for s, v in state.get("history", [])]


def served_weights(checkpoint: Mapping[str, Any]) -> Mapping[str, Any]:
    """The weights to predict with: the best validated ones when the run kept them."""
    record = checkpoint.get(keys.EARLY_STOP)
    if isinstance(record, Mapping) and record.get("best_weights") is not None:
        best: Mapping[str, Any] = record["best_weights"]
        return best
    model: Mapping[str, Any] = checkpoint[keys.MODEL]
    return model


def _cpu_copy(model: nn.Module) -> dict[str, torch.Tensor]:
    # One copy per improvement, kept off the device: the model is small next to its
    # optimizer state, and a CPU copy survives a CUDA-graph replay overwriting the live one.
    state = getattr(model, "module", model).state_dict()
    return {k: v.detach().to("cpu", copy=True) for k, v in state.items()}
