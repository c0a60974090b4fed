"""Checks the one direction of imports: infrastructure <- agents <- genesis_fp16."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# What each room may import, besides the standard library.
ALLOWED = {
    "infrastructure": {"torch", "pydantic", "numpy", "genesis_fp16_infrastructure"},
    "agents": {"torch", "pydantic", "numpy", "genesis_fp16_infrastructure", "genesis_fp16_agents"},
}
FORBIDDEN_CALLS = {"os.environ", "os.getenv", "logging.basicConfig", "logging.config"}


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def _sources(room: str) -> list[Path]:
    return sorted((ROOT / room).rglob("*.py"))


@pytest.mark.parametrize("room", sorted(ALLOWED))
def test_room_imports_only_what_it_may(room: str) -> None:
    """infrastructure/ and agents/ import no daemon packages (prometheus, structlog, ...)."""
    import sys

    stdlib = set(sys.stdlib_module_names)
    offenders = {
        f"{path.relative_to(ROOT)}: {name}"
        for path in _sources(room)
        for name in _imports(path)
        if name not in stdlib and name not in ALLOWED[room]
    }
    assert not offenders, sorted(offenders)


def test_infrastructure_reads_no_environment_and_configures_no_logging() -> None:
    """The library takes typed config objects; only the daemon reads the environment."""
    offenders = [
        str(path.relative_to(ROOT))
        for path in _sources("infrastructure") + _sources("agents")
        for call in FORBIDDEN_CALLS
        if call in path.read_text()
    ]
    assert not offenders, offenders


def test_layering_check_catches_a_forbidden_import(tmp_path: Path) -> None:
    """The import scanner sees a daemon import, so the tests above can fail."""
    bad = tmp_path / "bad.py"
    bad.write_text("import prometheus_client\nfrom structlog import get_logger\n")
    assert {"prometheus_client", "structlog"} <= _imports(bad)
