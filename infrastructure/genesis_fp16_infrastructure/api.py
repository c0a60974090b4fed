"""The library's one door for the daemon: the names ``genesis_fp16`` imports from it.

``from genesis_fp16_infrastructure.api import TrainResult, check_result``. The library's
own modules never import this one: each imports a name from the module that defines it.
A plugin imports the contract through the daemon's ``genesis_fp16.plugin_api``, which
takes its names from here.

The imports under ``TYPE_CHECKING`` below are the one list of what this module exports:
a type checker reads them, and ``__getattr__`` reads the same block from this file to
load each name on first use (PEP 562), so that importing a torch-free name
(``AgentPlugin``, ``Outcome``) does not import torch through ``run_plugin``.
"""

# ruff: noqa: F401  (the imports under TYPE_CHECKING are this module's exports)

from __future__ import annotations

import ast
import importlib
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from genesis_fp16_infrastructure.contract.agent_snapshot import (
        AgentSnapshot,
        AgentState,
        AgentStateFiles,
        DataCheck,
        ResumePoint,
    )
    from genesis_fp16_infrastructure.contract.agent_state import (
        read_agent_state,
        read_resume_point,
        read_snapshot,
    )
    from genesis_fp16_infrastructure.contract.judging import (
        JUDGING_VERSION,
        JudgedPlugin,
        RecordLosses,
        RecordLossesError,
        judging_of,
        model_weights,
    )
    from genesis_fp16_infrastructure.contract.plugin_api import (
        API_CHANGES,
        API_VERSION,
        SUPPORTED_API_VERSIONS,
        AgentOption,
        AgentPlugin,
        OptionValue,
        ProbeSetup,
        TrainRequestError,
        api_version_error,
        declared_options,
        ignored_request_fields,
        parse_options,
    )
    from genesis_fp16_infrastructure.contract.reports import (
        DataReport,
        DriftReport,
        GateComparison,
        GateReport,
        GateScores,
        LiveReport,
        ScoresOn,
    )
    from genesis_fp16_infrastructure.contract.result_check import TrainResultError, check_result
    from genesis_fp16_infrastructure.contract.train_request import DEFAULT_STEPS, TrainRequest
    from genesis_fp16_infrastructure.contract.train_result import (
        LEARNING_FAILURES,
        SCALER_CALIBRATION_SKIPS,
        TrainResult,
        learning_failure,
        min_useful_steps,
    )
    from genesis_fp16_infrastructure.judging.run import run_plugin
    from genesis_fp16_infrastructure.outcome import Outcome
    from genesis_fp16_infrastructure.record_codec import Record, ReportError
    from genesis_fp16_infrastructure.training.precision.precision_request import (
        PrecisionRequest,
    )
    from genesis_fp16_infrastructure.training.reports import (
        CACHE_VERSION,
        Calibration,
        Demotion,
        EarlyStopReport,
        FaultBundle,
        Measured,
        ModuleRange,
        RangeSummary,
    )


@cache
def _exports() -> dict[str, str]:
    """Each exported name -> the module that defines it: the block above, read once."""
    tree = ast.parse(Path(__file__).read_text(encoding="utf-8"))
    block = next(
        node
        for node in tree.body
        if isinstance(node, ast.If)
        and isinstance(node.test, ast.Name)
        and node.test.id == "TYPE_CHECKING"
    )
    return {
        alias.asname or alias.name: str(node.module)
        for node in block.body
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
    }


def __getattr__(name: str) -> object:
    module = _exports().get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_exports()})
