"""The training library: precision policies, loss scaling, trainer, checkpoints, world model, data.

Imports torch, pydantic and the standard library only.
"""

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

__all__ = [
    "PRECISIONS",
    "REQUESTABLE",
    "DeviceCapabilities",
    "LossScaler",
    "PrecisionError",
    "PrecisionPolicy",
    "ResolvedPrecision",
    "ScalerConfig",
    "resolve_precision",
]
