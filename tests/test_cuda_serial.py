"""cuda_serial.py: which tests use CUDA, and the lock that runs them one at a time."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import cuda_serial
import pytest
from cuda_serial import CUDA_WHEN_PRESENT, cuda_lock_path, exclusive, uses_cuda

ROOT = Path(__file__).resolve().parents[1]
# Exit 0 when the lock on argv[1] is free, 1 when someone holds it: never waits.
TRY_LOCK = """
import fcntl, sys
with open(sys.argv[1], "a") as handle:
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        sys.exit(1)
"""


def test_gpu_marked_and_listed_tests_use_cuda_and_every_listed_path_exists() -> None:
    """gpu-marked or under CUDA_WHEN_PRESENT: uses CUDA; others not; no listed path is stale."""
    assert uses_cuda("tests/infrastructure/training/step/test_cuda.py::test_x", gpu_marked=True)
    assert uses_cuda("tests/genesis_fp16/service/test_daemon_serve.py::test_x", gpu_marked=False)
    assert not uses_cuda("tests/infrastructure/training/step/test_trainer.py::test_x", False)
    assert all((ROOT / path).exists() for path in CUDA_WHEN_PRESENT), CUDA_WHEN_PRESENT


def test_the_lock_exists_only_on_an_xdist_worker_of_a_cuda_host(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No lock outside xdist; on a worker, one per run where CUDA is present, none without."""
    worker = {"PYTEST_XDIST_WORKER": "gw1", "PYTEST_XDIST_TESTRUNUID": "abc"}
    monkeypatch.setattr(cuda_serial, "_cuda_present", lambda: True)
    assert cuda_lock_path({}) is None
    path = cuda_lock_path(worker)
    assert path is not None and path.name == "genesis-fp16-cuda-tests-abc.lock"
    monkeypatch.setattr(cuda_serial, "_cuda_present", lambda: False)
    assert cuda_lock_path(worker) is None


def test_a_held_lock_keeps_another_process_out_until_released(tmp_path: Path) -> None:
    """While this process holds the lock another cannot take it; after release it can."""
    path = tmp_path / "cuda.lock"
    command = [sys.executable, "-c", TRY_LOCK, str(path)]
    with exclusive(path):
        assert subprocess.run(command, timeout=60).returncode == 1
    assert subprocess.run(command, timeout=60).returncode == 0
