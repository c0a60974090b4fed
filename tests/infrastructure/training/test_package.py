"""The training package's lazy exports: torch-free config modules, every name still there."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

import genesis_fp16_infrastructure.training as training
from genesis_fp16_infrastructure.lazy_exports import exports_of

TORCH_FREE = (
    "genesis_fp16_infrastructure.precision_names",
    "genesis_fp16_infrastructure.training.precision.loss_scaler_config",
    "genesis_fp16_infrastructure.training.precision.execution_names",
    "genesis_fp16_infrastructure.training.precision.guard_config",
    "genesis_fp16_infrastructure.training.precision.precision_memory",
    "genesis_fp16_infrastructure.training.precision.precision_request",
    "genesis_fp16_infrastructure.training.run.spec",
    "genesis_fp16_infrastructure.contract.plugin_api",
)


def _run(code: str) -> str:
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    return result.stdout.strip()


def test_config_modules_import_without_torch() -> None:
    """The guard config, precision memory, scaler config, the run spec and the plugin API
    load without importing torch."""
    code = (
        "import sys\n"
        + "".join(f"import {name}\n" for name in TORCH_FREE)
        + "from genesis_fp16_infrastructure.training import "
        + "GuardConfig, PrecisionMemory, ScalerConfig\n"
        + "GuardConfig(); ScalerConfig()\n"
        + "print('torch' in sys.modules)\n"
    )
    assert _run(code) == "False"


@pytest.mark.parametrize("name", sorted(exports_of(training.__file__)))
def test_every_exported_name_resolves(name: str) -> None:
    """Each name of the package's list loads from the package and is its module's own object."""
    module = importlib.import_module(exports_of(training.__file__)[name])
    assert getattr(training, name) is getattr(module, name)


def test_a_name_not_listed_is_no_attribute() -> None:
    """A name outside the list raises AttributeError naming the package."""
    with pytest.raises(AttributeError, match="no attribute 'AgentFolder'"):
        _ = training.AgentFolder
