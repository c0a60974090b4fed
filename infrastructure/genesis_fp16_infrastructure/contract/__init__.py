"""The library's contract layer: what a plugin and the daemon exchange, and the one
place the daemon imports it from.

``plugin_api`` (the names a plugin imports), ``train_request`` (what a run is asked to
do), ``agent_snapshot`` (the agent's state folder as a job's plan read it, once, which
the request carries), ``agent_state`` (reading it), ``train_result`` (what a run
reports), ``reports`` (the typed records a result carries, one codec: ``record_codec``)
and ``result_check`` (a plugin's result checked field by field), ``judging`` (the optional
judged-model capability) and ``run_plugin`` (the one call that trains any plugin, from
the judged run beside the contract, ``judging/``). It imports the
components below it and names no agent.

This package is the contract's API: every name of those modules that a caller uses,
``from genesis_fp16_infrastructure.contract import TrainResult, check_result``. The
names load on first use (PEP 562), as ``training``'s do, so that a component importing
the torch-free ``contract.reports`` does not load the rest of the contract (which imports
components: a cycle).
"""

from __future__ import annotations

import importlib
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
        DEFAULT_STEPS,
        LEARNING_FAILURES,
        SCALER_CALIBRATION_SKIPS,
        SUPPORTED_API_VERSIONS,
        AgentOption,
        AgentPlugin,
        OptionValue,
        PrecisionRequest,
        ProbeSetup,
        TrainRequest,
        TrainRequestError,
        TrainResult,
        api_version_error,
        declared_options,
        ignored_request_fields,
        learning_failure,
        min_useful_steps,
        parse_options,
    )
    from genesis_fp16_infrastructure.contract.reports import (
        CACHE_VERSION,
        Calibration,
        DataReport,
        Demotion,
        DriftReport,
        EarlyStopReport,
        FaultBundle,
        GateComparison,
        GateReport,
        GateScores,
        LiveReport,
        Measured,
        ScoresOn,
    )
    from genesis_fp16_infrastructure.contract.result_check import (
        TrainResultError,
        check_result,
    )
    from genesis_fp16_infrastructure.judging.run import run_plugin
    from genesis_fp16_infrastructure.outcome import Outcome
    from genesis_fp16_infrastructure.record_codec import Record, ReportError

# Exported name -> the module of the library that gives it.
_EXPORTS: dict[str, str] = {
    "API_CHANGES": "contract.plugin_api",
    "API_VERSION": "contract.plugin_api",
    "AgentOption": "contract.plugin_api",
    "AgentPlugin": "contract.plugin_api",
    "DEFAULT_STEPS": "contract.plugin_api",
    "LEARNING_FAILURES": "contract.plugin_api",
    "OptionValue": "contract.plugin_api",
    "PrecisionRequest": "contract.plugin_api",
    "ProbeSetup": "contract.plugin_api",
    "SCALER_CALIBRATION_SKIPS": "contract.plugin_api",
    "TrainRequest": "contract.plugin_api",
    "TrainRequestError": "contract.plugin_api",
    "TrainResult": "contract.plugin_api",
    "api_version_error": "contract.plugin_api",
    "declared_options": "contract.plugin_api",
    "ignored_request_fields": "contract.plugin_api",
    "learning_failure": "contract.plugin_api",
    "min_useful_steps": "contract.plugin_api",
    "parse_options": "contract.plugin_api",
    "SUPPORTED_API_VERSIONS": "contract.plugin_api",
    "JUDGING_VERSION": "contract.judging",
    "JudgedPlugin": "contract.judging",
    "RecordLosses": "contract.judging",
    "RecordLossesError": "contract.judging",
    "judging_of": "contract.judging",
    "model_weights": "contract.judging",
    # The one call that trains any plugin (a judged run for a judged plugin): judging/.
    "run_plugin": "judging.run",
    "CACHE_VERSION": "contract.reports",
    "Calibration": "contract.reports",
    "DataReport": "contract.reports",
    "Demotion": "contract.reports",
    "DriftReport": "contract.reports",
    "EarlyStopReport": "contract.reports",
    "FaultBundle": "contract.reports",
    "GateComparison": "contract.reports",
    "GateReport": "contract.reports",
    "GateScores": "contract.reports",
    "LiveReport": "contract.reports",
    "Measured": "contract.reports",
    "ScoresOn": "contract.reports",
    "TrainResultError": "contract.result_check",
    "check_result": "contract.result_check",
    "AgentSnapshot": "contract.agent_snapshot",
    "AgentState": "contract.agent_snapshot",
    "AgentStateFiles": "contract.agent_snapshot",
    "DataCheck": "contract.agent_snapshot",
    "ResumePoint": "contract.agent_snapshot",
    "read_agent_state": "contract.agent_state",
    "read_resume_point": "contract.agent_state",
    "read_snapshot": "contract.agent_state",
    "Outcome": "outcome",
    "Record": "record_codec",
    "ReportError": "record_codec",
}

__all__ = [
    "API_CHANGES",
    "API_VERSION",
    "CACHE_VERSION",
    "DEFAULT_STEPS",
    "JUDGING_VERSION",
    "LEARNING_FAILURES",
    "SCALER_CALIBRATION_SKIPS",
    "SUPPORTED_API_VERSIONS",
    "AgentOption",
    "AgentPlugin",
    "AgentSnapshot",
    "AgentState",
    "AgentStateFiles",
    "Calibration",
    "DataCheck",
    "DataReport",
    "Demotion",
    "DriftReport",
    "EarlyStopReport",
    "FaultBundle",
    "GateComparison",
    "GateReport",
    "GateScores",
    "JudgedPlugin",
    "LiveReport",
    "Measured",
    "OptionValue",
    "Outcome",
    "PrecisionRequest",
    "ProbeSetup",
    "Record",
    "RecordLosses",
    "RecordLossesError",
    "ReportError",
    "ResumePoint",
    "ScoresOn",
    "TrainRequest",
    "TrainRequestError",
    "TrainResult",
    "TrainResultError",
    "api_version_error",
    "check_result",
    "declared_options",
    "ignored_request_fields",
    "judging_of",
    "learning_failure",
    "min_useful_steps",
    "model_weights",
    "parse_options",
    "read_agent_state",
    "read_resume_point",
    "read_snapshot",
    "run_plugin",
]


def __getattr__(name: str) -> object:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"genesis_fp16_infrastructure.{module}"), name)
    globals()[name] = value
    return value
