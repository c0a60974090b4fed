"""The Makefile's set-up targets do what the README says, read through make's dry run."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _dry_run(target: str, tmp_path: Path) -> str:
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    proc = subprocess.run(
        ["make", "-n", "-B", target, f"VENV={tmp_path / 'venv'}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    return proc.stdout


def test_setup_cuda_keeps_the_hosts_torch(tmp_path: Path) -> None:
    """setup-cuda checks for a CUDA torch, sees the system's packages, never pins torch."""
    commands = _dry_run("setup-cuda", tmp_path)
    assert "torch.cuda.is_available()" in commands
    assert "-m venv --system-site-packages" in commands
    assert "constraints.txt" not in commands and "torch==" not in commands
    assert f"touch {tmp_path / 'venv'}/.installed" in commands  # make test then reuses it


def test_setup_pins_the_cpu_wheel(tmp_path: Path) -> None:
    """The plain set-up installs with constraints.txt (torch pinned to the CPU wheel)."""
    commands = _dry_run("setup", tmp_path)
    assert "-c constraints.txt" in commands and "--system-site-packages" not in commands


def test_run_installs_only_what_running_needs(tmp_path: Path) -> None:
    """make run installs the package without the dev or bench extras; make test keeps dev."""
    run = _dry_run("run", tmp_path)
    assert "-c constraints.txt -e ." in run
    assert "[dev" not in run and "bench]" not in run
    assert "genesis-fp16 serve" in run
    assert "'.[dev,bench]'" in _dry_run("test", tmp_path)


def test_dist_builds_with_the_standard_front_end(tmp_path: Path) -> None:
    """make dist runs python -m build into dist/ (the wheel the unit and Dockerfile install)."""
    assert "-m build --outdir dist ." in _dry_run("dist", tmp_path)
