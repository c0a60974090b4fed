"""One test on the GPU at a time, even under pytest-xdist (tests/conftest.py applies it).

On the H100 (benchmarks/results/h100-2026-11-23.md) 5-15 pytest processes time-slicing one GPU
took an 11 s test past 200 s. `make test` runs the suite under pytest-xdist (``-n auto``):
on a CUDA host every test that uses CUDA holds an exclusive lock file for its setup, call
and teardown, so such tests run one after another over all workers while the
others go on in parallel. A lock rather than an ``xdist_group``: with pytest 9.2, xdist
3.8's ``--dist loadgroup`` adds the group to ``item._nodeid``, which pytest no longer
reads, so the groups are silently ignored (checked here on 2026-11-23 by collecting under
``-n 2 --dist loadgroup``). With ``-n 0`` the suite runs in one process anyway, and
`make gpu-check` runs the gpu-marked tests with ``-p no:xdist``.

Tests that use CUDA: the ``gpu``-marked ones, and every test under CUDA_WHEN_PRESENT, which
train on ``auto`` (the CLI's and the daemon's default: cuda where there is one) or start a
daemon or a CLI child that does. A folder is listed whole: its pure tests lose some
parallelism, never correctness.
"""

from __future__ import annotations

import fcntl
import functools
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

CUDA_WHEN_PRESENT = (
    "tests/agents/",  # the agents' plugins and tasks train on their request's device
    "tests/infrastructure/recipes/",  # the retrain recipe, run through the se_darwin plugin
    "tests/genesis_fp16/",  # the CLI, the daemon, the launcher, the bench
    "tests/deploy/test_grafana.py",  # a real daemon scraped by a real Prometheus
    "tests/test_readme.py",  # the README's `genesis-fp16 train ...` commands
    "tests/test_doc_blocks.py",  # every docs block run as written: make run's daemon, train
    "tests/test_doc_claims.py",  # a docs plugin trained by `genesis-fp16 train`
)


def uses_cuda(nodeid: str, gpu_marked: bool) -> bool:
    """Whether a test uses CUDA on a host that has it: gpu-marked, or under CUDA_WHEN_PRESENT.

    >>> uses_cuda("tests/genesis_fp16/commands/test_cli_train.py::test_x", gpu_marked=False)
    True
    """
    return gpu_marked or nodeid.startswith(CUDA_WHEN_PRESENT)


def cuda_lock_path(environ: dict[str, str] | None = None) -> Path | None:
    """The lock file shared by one xdist run's workers on a CUDA host; None elsewhere."""
    env = os.environ if environ is None else environ
    run = env.get("PYTEST_XDIST_TESTRUNUID")  # xdist sets it, the same in every worker
    if not env.get("PYTEST_XDIST_WORKER") or not run or not _cuda_present():
        return None
    return Path(tempfile.gettempdir()) / f"genesis-fp16-cuda-tests-{run}.lock"


@functools.cache
def _cuda_present() -> bool:
    import torch  # here: only xdist workers pay for the import before their first test

    return torch.cuda.is_available()


@contextmanager
def exclusive(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``path`` (created if absent); waits while another holds it."""
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)  # released when the file closes
        yield
