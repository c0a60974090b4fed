"""The test tree mirrors the product: each folder of tests names a package of the code.

tests/genesis_fp16/X tests genesis_fp16/X, tests/infrastructure/X tests
infrastructure/genesis_fp16_infrastructure/X, tests/agents/X tests
agents/genesis_fp16_agents/X, at any depth. A folder with no test file of its own (a
fixture plugin, a data folder) is no test folder and is not checked.
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# tests/<first folder>: where the package it mirrors lives.
MIRRORS = {
    "genesis_fp16": Path("genesis_fp16"),
    "infrastructure": Path("infrastructure/genesis_fp16_infrastructure"),
    "agents": Path("agents/genesis_fp16_agents"),
}


def stray_test_folders(root: Path) -> list[str]:
    """The test folders under ``root``/tests whose mirror in ``root`` is no package."""
    stray = []
    for tests, product in MIRRORS.items():
        for folder in sorted((root / "tests" / tests).rglob("*")):
            if not folder.is_dir() or not any(folder.glob("test_*.py")):
                continue
            package = root / product / folder.relative_to(root / "tests" / tests)
            if not (package / "__init__.py").is_file():
                stray.append(f"{folder.relative_to(root)} (no package {package.relative_to(root)})")
    return stray


def test_every_test_folder_names_a_product_package() -> None:
    """Each folder of tests under tests/genesis_fp16, infrastructure and agents mirrors one."""
    assert stray_test_folders(ROOT) == []


def test_a_test_folder_without_its_package_is_named(tmp_path: Path) -> None:
    """The check can fail: a tests folder whose package is missing is reported, by name,
    while a mirrored one and a folder without test files (fixtures) are not."""
    for package in ("genesis_fp16/jobs", "infrastructure/genesis_fp16_infrastructure/rl"):
        (tmp_path / package).mkdir(parents=True)
        (tmp_path / package / "__init__.py").write_text("")
    for folder in ("jobs", "runs", "probe_plugin"):
        (tmp_path / "tests/genesis_fp16" / folder).mkdir(parents=True)
    (tmp_path / "tests/genesis_fp16/jobs/test_tick.py").write_text("")
    (tmp_path / "tests/genesis_fp16/runs/test_tick.py").write_text("")
    (tmp_path / "tests/genesis_fp16/probe_plugin/toy.py").write_text("")
    (tmp_path / "tests/infrastructure/rl/diagnostics").mkdir(parents=True)
    (tmp_path / "tests/infrastructure/rl/diagnostics/test_gauges.py").write_text("")

    assert stray_test_folders(tmp_path) == [
        "tests/genesis_fp16/runs (no package genesis_fp16/runs)",
        "tests/infrastructure/rl/diagnostics "
        "(no package infrastructure/genesis_fp16_infrastructure/rl/diagnostics)",
    ]
