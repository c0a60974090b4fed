"""The Makefile's targets do what the README says, read through make's dry run (and
gpu-check's refusal on a host without CUDA, run for real)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]


def _outside_make() -> dict[str, str]:
    """The environment without a calling make's variables: under `make test` a nested make
    would print "Entering directory" lines and prefix its errors with make[1]."""
    drop = {"MAKEFLAGS", "MAKELEVEL", "MFLAGS", "MAKEOVERRIDES"}
    return {k: v for k, v in os.environ.items() if k not in drop}


def _dry_run(target: str, tmp_path: Path, *assignments: str) -> str:
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    proc = subprocess.run(
        ["make", "-n", "-B", target, f"VENV={tmp_path / 'venv'}", *assignments],
        cwd=ROOT,
        env=_outside_make(),
        capture_output=True,
        text=True,
        check=True,
    )
    return proc.stdout


def test_setup_cuda_keeps_the_hosts_torch(tmp_path: Path) -> None:
    """setup-cuda checks for a CUDA torch, sees the system's packages, pins torch to the host's."""
    commands = _dry_run("setup-cuda", tmp_path)
    assert "torch.cuda.is_available()" in commands
    assert "-m venv --system-site-packages" in commands
    assert "constraints.txt" not in commands
    assert "print('torch==' + torch.__version__)\" > " in commands
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


def test_test_runs_every_tier_and_test_fast_leaves_out_the_distributed_one(
    tmp_path: Path,
) -> None:
    """make test (CI's command) selects no marker; make test-fast deselects `distributed`,
    which pyproject registers (--strict-markers would refuse it otherwise)."""
    full, fast = (
        [line for line in _dry_run(target, tmp_path).splitlines() if "bin/pytest" in line]
        for target in ("test", "test-fast")
    )
    assert len(full) == len(fast) == 1 and " -m " not in full[0]
    assert fast[0].endswith(' -m "not distributed"') and fast[0].startswith(full[0].rstrip())
    markers = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]
    assert any(m.startswith("distributed:") for m in markers["ini_options"]["markers"])


def test_dist_builds_with_the_standard_front_end(tmp_path: Path) -> None:
    """make dist runs python -m build into dist/ (the wheel the unit and Dockerfile install)."""
    assert "-m build --outdir dist ." in _dry_run("dist", tmp_path)


def test_gpu_check_runs_the_venvs_python_or_the_bare_one(tmp_path: Path) -> None:
    """gpu-check installs nothing; it runs the venv's python, or python3 where none exists."""
    bare = _dry_run("gpu-check", tmp_path)
    assert bare.strip() == "python3 tests/gpu_check.py --out benchmarks/results"
    python = tmp_path / "venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.touch()
    assert _dry_run("gpu-check", tmp_path).startswith(f"{python} tests/gpu_check.py ")


def test_gpu_check_without_cuda_fails_in_one_line(tmp_path: Path) -> None:
    """make gpu-check on a host without CUDA: non-zero at once, one line saying why."""
    if torch.cuda.is_available():
        pytest.skip("this host has CUDA: make gpu-check would run the whole check")
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    out = tmp_path / "results"
    command = ["make", "gpu-check", f"PYTHON={sys.executable}", f"VENV={tmp_path / 'none'}"]
    proc = subprocess.run(
        [*command, f"GPU_CHECK_OUT={out}"],
        cwd=ROOT,
        env=_outside_make(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode != 0 and proc.stdout == ""
    ours = [line for line in proc.stderr.splitlines() if not line.startswith("make: ***")]
    assert len(ours) == 1, proc.stderr
    assert ours[0].startswith(f"gpu-check: no CUDA device: {sys.executable} has torch ")
    assert not out.exists()  # nothing ran, nothing written


def test_the_readme_says_what_make_run_downloads_and_torch_index_gets_the_cpu_wheel(
    tmp_path: Path,
) -> None:
    """Plain `make run` takes torch from pip's index (the README says: the CUDA build on
    Linux); the README's TORCH_INDEX line adds PyTorch's CPU index to both set-ups."""
    readme = (ROOT / "README.md").read_text()
    line = re.search(r"`make run (TORCH_INDEX=\S+)`", readme)
    assert line and "CUDA build" in readme
    assert "--extra-index-url" not in _dry_run("run", tmp_path)
    for target in ("run", "setup"):
        with_index = _dry_run(target, tmp_path, line.group(1))
        assert "--extra-index-url https://download.pytorch.org/whl/cpu -c constraints.txt" in (
            with_index
        )
