"""Fixtures for the whole suite: the real external tools, skipped or failed.

A test that needs a tool asks for its fixture (``promtool``, ``systemd_analyze``, ...).
Without the tool the test skips and says why, except when the environment variable CI is
set: CI installs every tool (see .ci/run), so there a missing tool is a failure.

Under pytest-xdist on a CUDA host, the tests that use CUDA run one at a time (cuda_serial.py).
A gpu test that leaves the CUDA generator stuck in capture state fails by name, and the
generator is healed for the tests after it (cuda_generator.py).
"""

from __future__ import annotations

import logging
import os
import shutil
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import structlog
from cuda_generator import left_stuck
from cuda_serial import cuda_lock_path, exclusive, uses_cuda

VENV_BIN = Path(__file__).resolve().parents[1] / ".venv" / "bin"


def require_tool(name: str, *, extra_dirs: tuple[Path, ...] = ()) -> str:
    """Return the path of tool ``name``; skip without it, or fail when CI is set."""
    for folder in extra_dirs:
        candidate = folder / name
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    found = shutil.which(name)
    if found:
        return found
    reason = f"{name} is not installed (CI installs it through .ci/run)"
    if os.environ.get("CI"):
        pytest.fail(f"{reason}; CI is set, so this is a failure, not a skip")
    pytest.skip(reason)


@pytest.fixture(scope="session")
def promtool() -> str:
    return require_tool("promtool")


@pytest.fixture(scope="session")
def prometheus_server() -> str:
    return require_tool("prometheus")


@pytest.fixture(scope="session")
def systemd_analyze() -> str:
    return require_tool("systemd-analyze")


@pytest.fixture(scope="session")
def kubernetes_validate() -> str:
    return require_tool("kubernetes-validate", extra_dirs=(VENV_BIN,))


@pytest.fixture(scope="session")
def jq() -> str:
    """jq, which the ConfigMap's documented rollback command pipes through."""
    return require_tool("jq")


@pytest.fixture(scope="session")
def chromium() -> str:
    """Debian's Chromium, for the status page's headless-browser test."""
    return require_tool("chromium")


@pytest.fixture(scope="session")
def hadolint() -> str:
    return require_tool("hadolint", extra_dirs=(VENV_BIN,))


# tryfirst: outside pytest-timeout's wrapper, so the wait for the lock is not the test's time.
@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item) -> Iterator[None]:
    """Under xdist on a CUDA host, a test that uses CUDA holds the run's lock throughout."""
    path = cuda_lock_path()
    if path is None or not uses_cuda(item.nodeid, item.get_closest_marker("gpu") is not None):
        yield
        return
    with exclusive(path):
        yield


@pytest.fixture(autouse=True)
def _cuda_generator_left_usable(request: pytest.FixtureRequest) -> Iterator[None]:
    """After a gpu test that used CUDA: one eager draw; a stuck generator fails the test."""
    yield
    torch = sys.modules.get("torch")
    if request.node.get_closest_marker("gpu") is None or torch is None:
        return
    if not torch.cuda.is_available() or not torch.cuda.is_initialized():
        return
    problem = left_stuck(torch, request.node.nodeid)
    if problem is not None:
        pytest.fail(problem)


@pytest.fixture(autouse=True)
def _no_process_store_left() -> Iterator[None]:
    """Each test starts without this process's memory store (``kept_in_memory``) and
    leaves none: an in-process run's store kept by the worker would let a later test's
    calibration or cache read trust what an earlier test kept (a CI run failed so)."""
    module = sys.modules.get("genesis_fp16_infrastructure.kept_in_memory")
    if module is not None:
        module._PROCESS.clear()
    yield
    module = sys.modules.get("genesis_fp16_infrastructure.kept_in_memory")
    if module is not None:
        module._PROCESS.clear()


@pytest.fixture(autouse=True)
def _logging_restored() -> Iterator[None]:
    """A test that configures logging in-process (a command's main, configure_logging)
    leaves no handler on its closed capture stream and no pipeline for the tests after it."""
    config = structlog.get_config()
    processors = list(config["processors"])
    root = logging.getLogger()
    handlers, level, hook = list(root.handlers), root.level, threading.excepthook
    yield
    config["processors"][:] = processors  # in place: cached loggers hold this list
    structlog.configure(**config)
    root.handlers[:] = handlers
    root.setLevel(level)
    threading.excepthook = hook
