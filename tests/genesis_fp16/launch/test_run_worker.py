"""The run worker (genesis_fp16/commands/zygote.py) forks children that get the run's
arguments, environment, directory and pipes, and the daemon's side falls back to exec,
saying why, when the worker cannot start."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from genesis_fp16.launch import cuda_fork_probe, launcher
from genesis_fp16.launch.handoff import child_env
from genesis_fp16.launch.run_worker import RunWorker, WorkerUnavailable


@pytest.fixture(scope="module")
def worker() -> Iterator[RunWorker]:
    started = RunWorker()
    yield started
    started.close()


def _env(**extra: str) -> dict[str, str]:
    return child_env({**os.environ, **extra})


@pytest.mark.timeout(300)
def test_forked_children_get_their_arguments_and_pipes_and_the_worker_reaps_them(
    worker: RunWorker, tmp_path: Path
) -> None:
    """`train --help` forked by the worker prints its usage on the run's stdout pipe and
    exits 0, and a bad command's usage error reaches the stderr pipe with exit 2; the
    worker (one thread, no CUDA context) forked both and reaped them, not the caller."""
    child = worker.start(["train", "--help"], _env(), cwd=str(tmp_path))
    out = child.stdout.read()
    assert child.wait(timeout=120) == 0
    assert "usage:" in out and "train" in out
    assert worker.ready["threads"] == 1 and worker.ready["cuda_initialized"] is False
    with pytest.raises(ChildProcessError):
        os.waitpid(child.pid, os.WNOHANG)  # the worker's child, reaped by the worker
    second = worker.start(["no-such-command"], _env(), cwd=str(tmp_path))
    assert second.wait(timeout=120) == 2
    assert "invalid choice" in second.stderr.read()
    for pipe in (child.stdin, child.stdout, child.stderr, second.stdin, second.stdout):
        pipe.close()
    second.stderr.close()


@pytest.mark.timeout(300)
def test_a_worker_started_without_thread_limits_serves(tmp_path: Path) -> None:
    """The daemon's own environment sets no thread limit (`make test` sets
    OMP_NUM_THREADS=1, `make run` does not): numpy's OpenBLAS would then start a thread
    per further core at import, and the worker, refusing to fork from several threads,
    sent every run to exec (seen on a 2-core host). It serves with one thread."""
    unlimited = {
        name: value
        for name, value in _env().items()
        if name not in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
    }
    started = RunWorker()
    try:
        child = started.start(["train", "--help"], unlimited, cwd=str(tmp_path))
        assert child.wait(timeout=120) == 0
        assert started.ready["threads"] == 1
        for pipe in (child.stdin, child.stdout, child.stderr):
            pipe.close()
    finally:
        started.close()


def test_a_worker_that_cannot_start_sends_the_run_to_exec_with_the_reason(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A worker whose interpreter exits at once (`false`): the run's process is started by
    exec, the warning names why, and the next run is not tried on it again."""
    broken = RunWorker(python="/bin/false")
    command = [sys.executable, "-P", "-c", "pass"]  # what the exec runs: nothing
    with caplog.at_level(logging.WARNING, logger="genesis_fp16.launcher"):
        child = launcher._start(command, dict(os.environ), broken, 1)
    assert isinstance(child, subprocess.Popen) and child.communicate(timeout=60)[0] == ""
    assert "by exec, not from the run worker" in caplog.text
    assert "exited before it was ready" in caplog.text
    with pytest.raises(WorkerUnavailable, match="could not start"):
        broken.start(["train"], {})


def test_a_worker_whose_imports_initialised_cuda_refuses_to_serve(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Preloading where torch ends up with a CUDA context (faked: no GPU here) answers an
    error, not ready: a forked child could not use CUDA, so the runs go to exec."""
    import torch

    from genesis_fp16.commands import zygote

    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(zygote, "PRELOAD", ("torch",))
    monkeypatch.setenv("PYTORCH_NVML_BASED_CUDA_CHECK", "0")  # restored after the test
    answer = zygote._preload()
    assert "ready" not in answer and "initialised CUDA" in answer["error"]


def test_a_worker_with_the_driver_library_mapped_serves_when_its_probe_passes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``libcuda.so`` mapped (faked: a CUDA build of torch maps it at import) is reported,
    not refused: the forked probe passes (no CUDA device here), so the worker is ready."""
    from genesis_fp16.commands import zygote

    assert zygote.cuda_driver_loaded() is False  # the CPU test host: torch never mapped it
    monkeypatch.setattr(zygote, "cuda_driver_loaded", lambda: True)
    monkeypatch.setattr(zygote, "_threads", lambda: 1)  # pytest's own threads aside
    monkeypatch.setattr(zygote, "PRELOAD", ("torch",))
    monkeypatch.setenv("PYTORCH_NVML_BASED_CUDA_CHECK", "0")
    ready = zygote._preload()["ready"]
    assert ready["cuda_driver_loaded"] is True and ready["cuda_probe"] == "no CUDA device"


def test_a_worker_whose_cuda_probe_fails_refuses_with_the_probes_reason(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A forked probe that cannot use CUDA (faked: it raises) makes preloading answer an
    error naming what the probe saw, not ready."""
    from genesis_fp16.commands import zygote

    def broken() -> str:
        raise RuntimeError("CUDA error: initialization error (faked)")

    monkeypatch.setattr(cuda_fork_probe, "use_cuda", broken)
    monkeypatch.setattr(zygote, "_threads", lambda: 1)
    monkeypatch.setattr(zygote, "PRELOAD", ("torch",))
    monkeypatch.setenv("PYTORCH_NVML_BASED_CUDA_CHECK", "0")
    answer = zygote._preload()
    assert "ready" not in answer
    assert answer["error"].startswith("a forked child could not use CUDA: RuntimeError")
    assert "initialization error (faked)" in answer["error"]


FAILING_PROBE = """import sys
from genesis_fp16.commands import zygote
from genesis_fp16.launch import cuda_fork_probe
zygote.PRELOAD = ("torch",)
cuda_fork_probe.PROBE_SECONDS = {seconds}
def probe():
    {body}
cuda_fork_probe.use_cuda = probe
sys.exit(zygote.main(sys.argv[-1:]))
"""


@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    ("seconds", "body", "reason"),
    [
        (60, "import os; os._exit(1)", "the probe ended with exit code 1"),
        (1, "import time; time.sleep(600)", "the probe did not finish in 1 s (killed)"),
    ],
    ids=["exits-1", "hangs"],
)
def test_a_worker_whose_probe_fails_or_hangs_sends_the_run_to_exec_with_the_reason(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, seconds: int, body: str, reason: str
) -> None:
    """A real worker process whose forked probe exits 1, or hangs past its time and is
    killed (faked in a wrapper script): the daemon starts the run's process by exec and its
    warning says so because a forked child could not use CUDA, and why."""
    python = tmp_path / "python"
    python.write_text(f"#!{sys.executable}\n" + FAILING_PROBE.format(seconds=seconds, body=body))
    python.chmod(0o755)
    worker = RunWorker(python=str(python))
    command = [sys.executable, "-P", "-c", "pass"]  # what the exec runs: nothing
    with caplog.at_level(logging.WARNING, logger="genesis_fp16.launcher"):
        child = launcher._start(command, dict(os.environ), worker, 1)
    assert isinstance(child, subprocess.Popen) and child.communicate(timeout=60)[0] == ""
    assert "by exec, not from the run worker" in caplog.text
    assert f"a forked child could not use CUDA: {reason}" in caplog.text
    worker.close()


def test_a_fork_request_that_fails_on_a_killed_worker_says_how_it_ended(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A worker killed after the run start's check saw it alive: the failed fork request
    waits for its end, and the retry's check logs it (its pid and code -9), so the log
    says it was killed, not only that a request failed."""
    import signal
    import subprocess

    worker = RunWorker(python="/bin/false")  # the one started next fails at once
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    worker._process, worker._env = process, {}  # the worker, as the daemon holds it
    try:
        os.kill(process.pid, signal.SIGKILL)
        with caplog.at_level(logging.WARNING, logger="genesis_fp16.launcher"):
            worker._drop(BrokenPipeError(32, "Broken pipe"))
            with pytest.raises(WorkerUnavailable):
                worker._ensure({})
        want = f"the run worker (pid {process.pid}) ended with code -9: starting another"
        assert want in caplog.messages
    finally:
        process.kill()
        process.wait()


def test_a_child_whose_worker_died_first_is_watched_through_its_pidfd() -> None:
    """The worker's status socket closes (the worker died) while the child runs: poll()
    goes on saying it runs, and once it ends says so, its exit code marked unknown."""
    import signal
    import socket
    import subprocess

    from genesis_fp16.launch.run_worker import ForkedChild

    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    child = ForkedChild(process.pid, os.pidfd_open(process.pid), ours, [None, None, None])  # type: ignore[list-item]
    try:
        theirs.close()  # the worker is gone
        assert child.poll() is None and child.poll() is None
        os.kill(process.pid, signal.SIGKILL)
        assert child.wait(timeout=30) == 0 and child.exit_known is False
    finally:
        process.kill()
        process.wait()
