"""genesis_fp16_infrastructure.api, the daemon's door: its one list (the TYPE_CHECKING
imports) is what it exports, each name loaded on first use from the module that defines it."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

from genesis_fp16_infrastructure import api
from genesis_fp16_infrastructure.lazy_exports import exports_of


@pytest.mark.parametrize("name", sorted(exports_of(api.__file__)))
def test_every_listed_name_is_the_defining_modules_own(name: str) -> None:
    """Each name of the list loads from the door and is its defining module's object."""
    module = importlib.import_module(exports_of(api.__file__)[name])
    assert getattr(api, name) is getattr(module, name)


def test_a_name_not_listed_is_no_attribute() -> None:
    """A name outside the list raises AttributeError (the door exports nothing else)."""
    with pytest.raises(AttributeError, match="no attribute 'AgentPaths'"):
        _ = api.AgentPaths


def test_a_torch_free_name_does_not_import_torch() -> None:
    """Taking the contract's types from the door leaves torch unloaded (run_plugin's does not)."""
    code = (
        "import sys\n"
        "from genesis_fp16_infrastructure.api import AgentPlugin, GateReport, TrainResult\n"
        "assert 'torch' not in sys.modules\n"
        "from genesis_fp16_infrastructure.api import run_plugin\n"
        "assert 'torch' in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=300)
