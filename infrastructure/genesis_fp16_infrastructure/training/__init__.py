"""The training library: precision policies, loss scaling, trainer, checkpoints, world model, data.

Imports torch, pydantic and the standard library only.

The names below load on first use (PEP 562), so that importing a torch-free submodule
(``guard_config``, ``loss_scaler_config``, ``precision_names``) does
not pay for torch through this package: a CLI's ``--help`` should not take two seconds.
``from genesis_fp16_infrastructure.training import fit`` works as before.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from genesis_fp16_infrastructure.errors import CheckpointError, PrecisionError
    from genesis_fp16_infrastructure.training.checkpoint import CheckpointManager
    from genesis_fp16_infrastructure.training.precision.capabilities import DeviceCapabilities
    from genesis_fp16_infrastructure.training.precision.decide import (
        ResolvedPrecision,
        decide,
        resolve_precision,
    )
    from genesis_fp16_infrastructure.training.precision.guard_config import (
        GuardConfig,
        PrecisionMemory,
    )
    from genesis_fp16_infrastructure.training.precision.loss_scaler import LossScaler
    from genesis_fp16_infrastructure.training.precision.loss_scaler_config import ScalerConfig
    from genesis_fp16_infrastructure.training.precision.precision import (
        PrecisionPolicy,
        autocast_to,
        dtype_of,
    )
    from genesis_fp16_infrastructure.training.precision.precision_names import (
        PRECISIONS,
        REQUESTABLE,
    )
    from genesis_fp16_infrastructure.training.reports import TrainingSummary
    from genesis_fp16_infrastructure.training.run.early_stop import EarlyStopping
    from genesis_fp16_infrastructure.training.run.fit import fit
    from genesis_fp16_infrastructure.training.run.options import FitOptions, FitResult
    from genesis_fp16_infrastructure.training.run.task import (
        IterationHooks,
        TrainingTask,
        to_device,
    )
    from genesis_fp16_infrastructure.training.step.trainer import Trainer
    from genesis_fp16_infrastructure.training.step.trainer_config import StepTuning, TrainerConfig

# Exported name -> the submodule that defines it.
_EXPORTS: dict[str, str] = {
    "to_device": "run.task",
    "CheckpointError": "checkpoint",
    "CheckpointManager": "checkpoint",
    "EarlyStopping": "run.early_stop",
    "FitOptions": "run.options",
    "FitResult": "run.options",
    "TrainingTask": "run.task",
    "IterationHooks": "run.task",
    "fit": "run.fit",
    "GuardConfig": "precision.guard_config",
    "LossScaler": "precision.loss_scaler",
    "ScalerConfig": "precision.loss_scaler_config",
    "DeviceCapabilities": "precision.capabilities",
    "PrecisionError": "precision.capabilities",
    "PrecisionPolicy": "precision.precision",
    "ResolvedPrecision": "precision.decide",
    "decide": "precision.decide",
    "resolve_precision": "precision.decide",
    "autocast_to": "precision.precision",
    "dtype_of": "precision.precision",
    "PrecisionMemory": "precision.guard_config",
    "PRECISIONS": "precision.precision_names",
    "REQUESTABLE": "precision.precision_names",
    "TrainingSummary": "reports",
    "Trainer": "step.trainer",
    "TrainerConfig": "step.trainer_config",
    "StepTuning": "step.trainer_config",
}

__all__ = [
    "PRECISIONS",
    "REQUESTABLE",
    "CheckpointError",
    "CheckpointManager",
    "DeviceCapabilities",
    "EarlyStopping",
    "FitOptions",
    "FitResult",
    "GuardConfig",
    "IterationHooks",
    "LossScaler",
    "PrecisionError",
    "PrecisionMemory",
    "PrecisionPolicy",
    "ResolvedPrecision",
    "ScalerConfig",
    "StepTuning",
    "Trainer",
    "TrainerConfig",
    "TrainingSummary",
    "TrainingTask",
    "autocast_to",
    "decide",
    "dtype_of",
    "fit",
    "resolve_precision",
    "to_device",
]


def __getattr__(name: str) -> object:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value
