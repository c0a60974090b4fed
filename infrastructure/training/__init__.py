"""The training library: precision policies, loss scaling, trainer, checkpoints, world model, data.

Imports torch, pydantic and the standard library only.
"""

from infrastructure.training.checkpoint import CheckpointError, CheckpointManager
from infrastructure.training.fit import FitOptions, FitResult, TrainingTask, fit
from infrastructure.training.guard import GuardConfig, PrecisionMemory
from infrastructure.training.loss_scaler import LossScaler, ScalerConfig
from infrastructure.training.precision import (
    PRECISIONS,
    REQUESTABLE,
    DeviceCapabilities,
    PrecisionError,
    PrecisionPolicy,
    ResolvedPrecision,
    resolve_precision,
)
from infrastructure.training.summary import TrainingSummary
from infrastructure.training.trainer import Trainer, TrainerConfig

__all__ = [
    "PRECISIONS",
    "REQUESTABLE",
    "CheckpointError",
    "CheckpointManager",
    "DeviceCapabilities",
    "FitOptions",
    "FitResult",
    "GuardConfig",
    "LossScaler",
    "PrecisionError",
    "PrecisionMemory",
    "PrecisionPolicy",
    "ResolvedPrecision",
    "ScalerConfig",
    "Trainer",
    "TrainerConfig",
    "TrainingSummary",
    "TrainingTask",
    "fit",
    "resolve_precision",
]
