"""The import path for agent plugins: what a plugin's code imports from genesis-fp16.

This name stays put when the library's modules move; the implementation lives in the
training library (``genesis_fp16_infrastructure.plugin_api``), which the built-in agents
import directly because the library must not import the daemon. A third-party plugin::

    from genesis_fp16.plugin_api import API_VERSION, TrainRequest, TrainResult

    class MyAgent:
        name = "my_agent"
        api_version = API_VERSION

        def train(self, request: TrainRequest) -> TrainResult: ...

Importing this module does not import torch, the daemon or its settings.
"""

from genesis_fp16_infrastructure.plugin_api import (
    API_VERSION,
    AgentOption,
    AgentPlugin,
    ProbeSetup,
    TrainRequest,
    TrainRequestError,
    TrainResult,
    declared_options,
    parse_options,
)

__all__ = [
    "API_VERSION",
    "AgentOption",
    "AgentPlugin",
    "ProbeSetup",
    "TrainRequest",
    "TrainRequestError",
    "TrainResult",
    "declared_options",
    "parse_options",
]
