"""The import path for agent plugins: what a plugin's code imports from genesis-fp16.

This name stays put when the library's modules move, and it is the one path a plugin
imports the contract from: the built-in agents (``agents/``), the docs and the daemon's
own code import each of these names from here, never from the library's module that
defines it (only the library itself does; ``tests/test_import_paths.py`` checks). The
names come through the library's door for the daemon, ``genesis_fp16_infrastructure.api``.
A third-party plugin::

    from genesis_fp16.plugin_api import API_VERSION, TrainRequest, TrainResult, fit

    class MyAgent:
        name = "my_agent"
        api_version = API_VERSION

        def train(self, request: TrainRequest) -> TrainResult:
            return TrainResult.from_fit(request, fit(MyTask(), request.fit_options()))

Everything a plugin needs is here: the contract (``AgentPlugin``, ``API_VERSION``), the
judged-model capability (``JUDGING_VERSION``, ``model_weights``: see
``genesis_fp16_infrastructure.contract.judging``; ``RecordLosses``, what ``score_records``
returns: ``contract.record_losses``), the request and result, the task
protocol (``TrainingTask``), ``fit`` and its options,
``to_device``, the errors (``TrainRequestError``, ``PrecisionError``, ``CheckpointError``)
and ``DEFAULT_STEPS``, the budget of a request that names none. ``API_VERSION`` versions
this list and the request's types: a name leaves it, or a field changes type, only with a
new version, and ``API_CHANGES`` says what each version changed.

Importing this module does not import torch, the daemon or its settings: the training
names (``fit``, ``to_device``, ...) are imported when first used.
"""

import importlib
from typing import TYPE_CHECKING

from genesis_fp16_infrastructure.api import (
    API_CHANGES,
    API_VERSION,
    DEFAULT_STEPS,
    JUDGING_VERSION,
    AgentOption,
    AgentPlugin,
    JudgedPlugin,
    PrecisionRequest,
    ProbeSetup,
    RecordLosses,
    RecordLossesError,
    TrainRequest,
    TrainRequestError,
    TrainResult,
    declared_options,
    model_weights,
    parse_options,
)

if TYPE_CHECKING:
    from genesis_fp16_infrastructure.api import (
        CheckpointError,
        FitOptions,
        FitResult,
        PrecisionError,
        TrainingTask,
        fit,
        to_device,
    )

__all__ = [
    "API_CHANGES",
    "API_VERSION",
    "DEFAULT_STEPS",
    "JUDGING_VERSION",
    "AgentOption",
    "AgentPlugin",
    "CheckpointError",
    "FitOptions",
    "FitResult",
    "JudgedPlugin",
    "PrecisionError",
    "PrecisionRequest",
    "ProbeSetup",
    "RecordLosses",
    "RecordLossesError",
    "TrainRequest",
    "TrainRequestError",
    "TrainResult",
    "TrainingTask",
    "declared_options",
    "fit",
    "model_weights",
    "parse_options",
    "to_device",
]


def __getattr__(name: str) -> object:
    # A name of __all__ not imported above (those under TYPE_CHECKING: each would import
    # torch) comes from the library's door on first use.
    if name in __all__:
        return getattr(importlib.import_module("genesis_fp16_infrastructure.api"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
