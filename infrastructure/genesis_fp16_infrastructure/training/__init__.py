"""The training library: precision policies, loss scaling, trainer, checkpoints, world model, data.

Imports torch, pydantic and the standard library only.

The names under ``TYPE_CHECKING`` below, its one list of exports, load on first use (PEP
562, ``lazy_exports``), so that importing a torch-free submodule
(``loss_scaler_config``, ``guard_config``) does not pay for torch through this package:
a CLI's ``--help`` should not take two seconds. ``from genesis_fp16_infrastructure.training
import fit`` works as before.
"""

# ruff: noqa: F401  (the imports under TYPE_CHECKING are this package's exports)

from __future__ import annotations

from typing import TYPE_CHECKING

from genesis_fp16_infrastructure.lazy_exports import lazy_exports

if TYPE_CHECKING:
    from genesis_fp16_infrastructure.errors import CheckpointError, PrecisionError
    from genesis_fp16_infrastructure.precision_names import PRECISIONS, REQUESTABLE
    from genesis_fp16_infrastructure.training.checkpoint import CheckpointManager
    from genesis_fp16_infrastructure.training.precision.decide import DeviceCapabilities
    from genesis_fp16_infrastructure.training.precision.guard_config import GuardConfig
    from genesis_fp16_infrastructure.training.precision.loss_scaler import LossScaler
    from genesis_fp16_infrastructure.training.precision.loss_scaler_config import ScalerConfig
    from genesis_fp16_infrastructure.training.precision.precision import (
        PrecisionPolicy,
        autocast_to,
        dtype_of,
    )
    from genesis_fp16_infrastructure.training.precision.precision_memory import PrecisionMemory
    from genesis_fp16_infrastructure.training.reports import TrainingSummary
    from genesis_fp16_infrastructure.training.run.early_stop import EarlyStopping
    from genesis_fp16_infrastructure.training.run.fit import fit
    from genesis_fp16_infrastructure.training.run.task import (
        FitOptions,
        FitResult,
        TrainingTask,
        to_device,
    )
    from genesis_fp16_infrastructure.training.step.trainer import StepTuning, Trainer, TrainerConfig

__getattr__, __dir__ = lazy_exports(__name__, __file__)
