"""The training package's lazy exports: torch-free config modules, every name still there."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

import genesis_fp16_infrastructure.training as training

TORCH_FREE = (
    "genesis_fp16_infrastructure.training.precision.guard_config",
    "genesis_fp16_infrastructure.training.precision.loss_scaler_config",
    "genesis_fp16_infrastructure.training.precision.precision_names",
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


def test_all_lists_exactly_the_lazy_exports() -> None:
    """__all__ and the lazy-export table name the same set: neither can drift alone."""
    assert sorted(training.__all__) == sorted(training._EXPORTS)


@pytest.mark.parametrize("name", training.__all__)
def test_every_exported_name_resolves(name: str) -> None:
    """Each name in __all__ loads from the package and is its submodule's own object."""
    module = importlib.import_module(
        f"genesis_fp16_infrastructure.training.{training._EXPORTS[name]}"
    )
    assert getattr(training, name) is getattr(module, name)
