"""The knobs of one SE-Darwin run (``TrainRequest.options``), checked once, at the start."""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from genesis_fp16_infrastructure.contract.plugin_api import AgentOption, TrainRequestError
from genesis_fp16_infrastructure.world_model.model import PRESETS

FINAL_FITS = ("split", "whole")
EVAL_TARGET = 1000  # held-out records for a stable AUC (about +-0.03 at 95%)
EVAL_BOUNDS = (0.1, 0.3)
# Under this many labelled records a 30% held-out part holds fewer than EVAL_TARGET, and
# the pool is cross-validated instead (module docstring).
CROSS_VALIDATION_BELOW = round(EVAL_TARGET / EVAL_BOUNDS[1]) + 1


@dataclass(frozen=True)
class TaskOptions:
    """Knobs of one world-model run (SE-Darwin's, or any agent on the retrain loop);
    ``TrainRequest.options`` may set any of them."""

    preset: str = "default"
    hidden: int | None = None  # None: the preset's, narrower on small pools (_model_config)
    depth: int | None = None
    dropout: float | None = None
    batch_size: int | None = None  # None: 256, fewer on small pools (at least 8 steps an epoch)
    learning_rate: float = 3e-3
    weight_decay: float = 0.01
    eval_fraction: float | None = None  # None: the judged run's fifth alone (split.py)
    # Early stopping on the validation success log-loss (STOP_METRIC): validate every
    # epoch, or every `validate_every` steps when an epoch is longer; stop after
    # `patience` validations without improvement; `max_epochs` caps a run that gives
    # neither steps nor epochs.
    early_stopping: bool = True
    patience: int = 8
    validate_every: int = 50
    max_epochs: int = 100
    # What is served: "split", the best validated weights of the run on the training part;
    # "whole", a second model trained on every labelled record for the split run's best
    # step count (the reported eval stays the split model's; docs/se-darwin.md).
    final_fit: str = "split"
    # Evaluation: None picks by the pool's size (cross-validated under CROSS_VALIDATION_
    # BELOW records, held-out from there); True or False forces it. An explicit
    # eval_fraction or final_fit="whole" asks for a held-out split.
    cross_validation: bool | None = None
    folds: int = 5
    # Networks a held-out run trains together and serves the mean of (a cross-validated
    # run has one per fold, ``folds``): one fresh network's log-loss on a Genesis agent's
    # few hundred judged records moves by about the gate's margin from one fit to the next,
    # and a mean of five moves by a third of it (docs/se-darwin.md, "Clean growth").
    members: int = 5
    # The most bytes of pool files a run reads (checked before reading: parsed records
    # cost several times their bytes, all held at once). None: the run's memory limit
    # (TrainRequest.memory_limit_bytes; without one, this machine's memory or its cgroup
    # limit) / POOL_MEMORY_FACTOR; 0: no limit.
    max_pool_bytes: int | None = None

    @classmethod
    def from_mapping(cls, options: Mapping[str, Any]) -> TaskOptions:
        known = set(cls.__dataclass_fields__)
        unknown = sorted(set(options) - known)
        if unknown:
            raise TrainRequestError(
                f"unknown world-model option(s) {', '.join(unknown)}; "
                f"valid: {', '.join(sorted(known))}"
            )
        out = cls(**options)
        if out.final_fit not in FINAL_FITS:
            raise TrainRequestError(
                f"final_fit={out.final_fit!r}: choose from {', '.join(FINAL_FITS)}"
            )
        if out.cross_validation and (out.eval_fraction is not None or out.final_fit != "split"):
            raise TrainRequestError(
                "cross_validation=true trains on every record: eval_fraction and "
                "final_fit='whole' are held-out options; leave them out"
            )
        if out.folds < 2:
            raise TrainRequestError(f"folds={out.folds!r}: must be at least 2")
        if out.eval_fraction is not None and not 0.0 < out.eval_fraction < 1.0:
            raise TrainRequestError(f"eval_fraction={out.eval_fraction!r}: must be between 0 and 1")
        if out.max_pool_bytes is not None and out.max_pool_bytes < 0:
            raise TrainRequestError(
                f"max_pool_bytes={out.max_pool_bytes!r}: must be at least 0 (0: no limit)"
            )
        for name in ("batch_size", "patience", "validate_every", "max_epochs", "members"):
            if getattr(out, name) is not None and getattr(out, name) < 1:
                raise TrainRequestError(f"{name}={getattr(out, name)!r}: must be at least 1")
        return out

    def cross_validated(self, examples: int) -> bool:
        """Whether a pool of ``examples`` labelled records trains a cross-validated ensemble."""
        if self.cross_validation is not None:
            return self.cross_validation
        if self.eval_fraction is not None or self.final_fit != "split":
            return False
        return examples < CROSS_VALIDATION_BELOW


# One line each for `genesis-fp16 agents --json`; a TaskOptions field missing here is
# still declared, pointing at docs/se-darwin.md.
_OPTION_HELP = {
    "preset": "world-model size preset (hidden and depth; hidden/depth override it)",
    "hidden": "hidden width of the world model (default: the preset's)",
    "depth": "hidden layers of the world model (default: the preset's)",
    "batch_size": "examples per step (default 256, fewer on small pools: 8+ steps an epoch)",
    "learning_rate": "AdamW learning rate",
    "weight_decay": "AdamW weight decay",
    "eval_fraction": "a further held-out share, beside the judged fifth (default: none)",
    "early_stopping": "validate and stop when validation stops improving",
    "patience": "validations without improvement before stopping",
    "validate_every": "validate every N steps when an epoch is longer",
    "max_epochs": "epoch cap of a run with no steps/epochs budget",
    "final_fit": "split: serve the split run's best weights; whole: refit on every record",
    "cross_validation": "ensemble of one member per fold, out-of-fold eval "
    "(default: on under 3,334 records)",
    "folds": "folds (and ensemble members) of a cross-validated run",
    "members": "networks a held-out run averages (cross-validated: one per fold)",
}


def agent_options() -> tuple[AgentOption, ...]:
    """TaskOptions' fields as an agent's declared options (``AgentPlugin.options``: their
    defaults and types, one source)."""
    hints = typing.get_type_hints(TaskOptions)
    declared = []
    for f in dataclasses.fields(TaskOptions):
        args = typing.get_args(hints[f.name]) or (hints[f.name],)
        kind = next(a for a in args if a in (str, int, float, bool))  # X | None: X
        choices = {"preset": tuple(PRESETS), "final_fit": FINAL_FITS}.get(f.name)
        text = _OPTION_HELP.get(f.name, "see docs/se-darwin.md")
        default = getattr(TaskOptions(), f.name)
        declared.append(AgentOption(f.name, kind.__name__, default, text, choices))
    return tuple(declared)
