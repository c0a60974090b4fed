"""The run worker (genesis_fp16/commands/zygote.py) forks children that get the run's
arguments, environment, directory and pipes, and the daemon's side falls back to exec,
saying why, when the worker cannot start."""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from genesis_fp16.launch import cuda_fork_probe, launcher, run_worker
from genesis_fp16.launch.handoff import child_env
from genesis_fp16.launch.run_worker import ForkedChild, RunWorker, WorkerUnavailable


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


def _watched(process: subprocess.Popen[bytes]) -> tuple[ForkedChild, socket.socket]:
    """``process`` as a forked run's child, and the worker's end of its status socket."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    pipes: list[Any] = [None, None, None]
    return ForkedChild(process.pid, os.pidfd_open(process.pid), ours, pipes), theirs


def test_a_child_whose_worker_died_first_is_watched_through_its_pidfd() -> None:
    """The worker's status socket closes (the worker died) while the child runs: poll()
    goes on saying it runs, and once it ends (reaped by another, as init reaps an orphan)
    says so, its exit code marked unknown."""
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    child, worker_end = _watched(process)
    try:
        worker_end.close()  # the worker is gone
        assert child.poll() is None and child.poll() is None
        process.kill()
        process.wait()  # reaped, as init reaps the orphan: no exit code to read
        assert child.wait(timeout=30) == 0 and child.exit_known is False
    finally:
        process.kill()
        process.wait()


@pytest.mark.timeout(120)
def test_a_resident_run_s_end_wakes_its_supervision_at_once(monkeypatch: Any) -> None:
    """The worker's report of a resident run's end (its process serves on: no pidfd says
    it) ends the run's supervision when it comes, not at the next look at memory and stop
    requests: with looks an hour apart, supervision still returns with the reported code.
    Before, a sleep between looks said every run's end up to 0.2 s late."""
    monkeypatch.setattr(launcher, "_POLL_SECONDS", 3600.0)
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    child, worker_end = _watched(process)
    report = threading.Timer(0.3, worker_end.send, args=(b'{"exit": 0}',))
    report.start()
    try:
        launcher._supervise(child, launcher._Ended(), lambda: False, None, 10.0, None, "run")
        assert child.returncode == 0 and process.poll() is None  # the process serves on
    finally:
        report.cancel()
        worker_end.close()
        process.kill()
        process.wait()


@pytest.mark.timeout(120)
def test_an_exec_d_run_s_end_wakes_its_supervision_at_once(monkeypatch: Any) -> None:
    """The same for a run started by exec (a ``subprocess.Popen``, torchrun's): its exit
    ends supervision with its code, with looks an hour apart."""
    monkeypatch.setattr(launcher, "_POLL_SECONDS", 3600.0)
    process = subprocess.Popen(
        [sys.executable, "-c", "import time, sys; time.sleep(0.3); sys.exit(4)"]
    )
    try:
        launcher._supervise(process, launcher._Ended(), lambda: False, None, 10.0, None, "run")
        assert process.returncode == 4
    finally:
        process.kill()
        process.wait()


@pytest.mark.timeout(120)
def test_a_wait_on_a_reaped_child_watches_the_worker_s_report_not_its_pidfd() -> None:
    """Once the pidfd said the child ended and the kernel holds no exit code (the worker
    reaped it), a wait watches the worker's report alone: the pidfd stays readable, and a
    wait on it would spin. The report, when it comes, gives the code."""
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    child, worker_end = _watched(process)
    try:
        process.wait()  # reaped by "the worker": the pidfd readable, no zombie to read
        assert child.poll() is None  # its end seen; the report awaited
        assert child._awaited() == [child._status.fileno()]
        report = threading.Timer(0.3, worker_end.send, args=(b'{"exit": 5}',))
        report.start()
        assert child.wait(timeout=60) == 5 and child.exit_known is True
    finally:
        worker_end.close()


def test_a_child_whose_worker_is_stopped_ends_with_its_own_exit_code() -> None:
    """The worker is stopped (its status socket open, nothing written, the child not
    reaped): the child's end is read from its pidfd and its exit code from the kernel's
    record of the zombie, at once. Before, poll() waited for the worker's report for ever."""
    process = subprocess.Popen([sys.executable, "-c", "import sys; sys.exit(3)"])
    child, worker_end = _watched(process)  # this test, the parent, plays the stopped worker
    try:
        assert child.wait(timeout=30) == 3 and child.exit_known is True
        killed = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        other, other_end = _watched(killed)
        killed.kill()
        assert other.wait(timeout=30) == -signal.SIGKILL
        other_end.close()
    finally:
        worker_end.close()
        process.wait()
        killed.wait()


def _pipes_closed(child: ForkedChild) -> None:
    for pipe in (child.stdin, child.stdout, child.stderr):
        pipe.close()


@pytest.mark.timeout(300)
def test_a_run_environment_larger_than_a_datagram_reaches_the_child(tmp_path: Path) -> None:
    """A request whose environment is 1 MiB, in eight variables of 128 KiB less a byte, as
    large as exec allows each (a datagram stops at about 208 KiB: 'message too long', which
    replaced a healthy worker at every run and sent the run to exec before): the child gets
    it whole (its COLUMNS=50 wraps the usage text, 80 wide otherwise), twice from the same
    worker."""
    worker = RunWorker()
    large = {f"LARGE_{i}": "x" * ((1 << 17) - len(f"LARGE_{i}=") - 1) for i in range(8)}
    big = _env(**large, COLUMNS="50")
    pids = []
    try:
        for _ in range(2):
            child = worker.start(["train", "--help"], big, cwd=str(tmp_path))
            out = child.stdout.read()
            assert child.wait(timeout=120) == 0
            _pipes_closed(child)
            # 80 columns hold the next option on the first line too
            assert out.splitlines()[0] == "usage: genesis-fp16 train [-h]"
            pids.append(worker.ready["pid"])
        assert pids[0] == pids[1]
    finally:
        worker.close()


@pytest.mark.timeout(300)
def test_a_stopped_worker_is_replaced_at_the_next_run_without_waiting_for_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A worker SIGSTOPped between runs: the next run's start sees it stopped, replaces it
    (saying why) and the new one forks the run; it never waits for an answer that cannot
    come (30 s and a failed request before)."""
    worker = RunWorker()
    try:
        first = worker.start(["train", "--help"], _env(), cwd=str(tmp_path))
        assert first.wait(timeout=120) == 0
        _pipes_closed(first)
        stopped = worker.ready["pid"]
        os.kill(stopped, signal.SIGSTOP)
        while not run_worker.is_stopped(stopped):  # a signal is delivered, not yet acted on
            time.sleep(0.01)
        with caplog.at_level(logging.INFO, logger="genesis_fp16.launcher"):
            child = worker.start(["train", "--help"], _env(), cwd=str(tmp_path))
            assert child.wait(timeout=120) == 0
        _pipes_closed(child)
        assert f"replacing the run worker (pid {stopped}) before this run: it is stopped" in (
            caplog.text
        )
        assert "failed a fork request" not in caplog.text
        assert worker.ready["pid"] != stopped and not _alive(stopped)
    finally:
        worker.close()


def test_a_fork_request_to_a_worker_stopped_meanwhile_fails_at_once() -> None:
    """A worker stopped after the run start looked at it: the wait for its answer sees it
    stopped within a fraction of a second and fails the request (the worker is replaced),
    rather than waiting out FORK_SECONDS."""
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    worker = RunWorker()
    worker._process, worker._control = process, ours
    try:
        os.kill(process.pid, signal.SIGSTOP)
        started = time.monotonic()
        with pytest.raises(OSError, match="stopped"):
            worker._await_answer()
        assert time.monotonic() - started < run_worker.FORK_SECONDS / 2
    finally:
        process.kill()
        process.wait()
        ours.close()
        theirs.close()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.timeout(300)
def test_a_worker_is_replaced_when_what_is_installed_on_its_path_changes(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A folder on the worker's path gains a distribution (a module and its dist-info, as
    pip leaves them) after the worker started: the next run is forked by a new worker, and
    the log says why; with nothing installed since, the same worker forks it."""
    folder = tmp_path / "site"
    folder.mkdir()
    worker = RunWorker()
    env = _env(PYTHONPATH=f"{folder}:{os.environ.get('PYTHONPATH', '')}")
    try:
        for _ in range(2):
            child = worker.start(["train", "--help"], env, cwd=str(tmp_path))
            assert child.wait(timeout=120) == 0
            _pipes_closed(child)
        first = worker.ready["pid"]
        (folder / "late_agent.py").write_text("plugin = None\n")
        (folder / "late_agent-0.1.dist-info").mkdir()
        with caplog.at_level(logging.INFO, logger="genesis_fp16.launcher"):
            child = worker.start(["train", "--help"], env, cwd=str(tmp_path))
            assert child.wait(timeout=120) == 0
        _pipes_closed(child)
        assert worker.ready["pid"] != first
        assert "what is installed on its path changed since it started" in caplog.text
    finally:
        worker.close()


@pytest.mark.timeout(300)
def test_renew_replaces_the_worker_before_the_next_run_and_retries_a_broken_one(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """``renew(reason)`` (a reload that changed a setting, a changed plugin set, a poisoned
    run): the next run's worker is a new one and the log names the reason; with ``live``
    False (a reload that changed none) the live worker forks it. A worker that could not
    start is tried again after either rather than never."""
    worker = RunWorker()
    try:
        pids = []
        for renewed in (None, "the daemon reloaded"):  # the second: a reload, no change
            if renewed is not None:
                worker.renew(renewed, live=False)
            child = worker.start(["train", "--help"], _env(), cwd=str(tmp_path))
            assert child.wait(timeout=120) == 0
            _pipes_closed(child)
            pids.append(worker.ready["pid"])
        first = pids[0]
        assert pids == [first, first]  # kept
        worker.renew("the plugin set changed")
        with caplog.at_level(logging.INFO, logger="genesis_fp16.launcher"):
            child = worker.start(["train", "--help"], _env(), cwd=str(tmp_path))
            assert child.wait(timeout=120) == 0
        _pipes_closed(child)
        assert worker.ready["pid"] != first
        assert f"replacing the run worker (pid {first}) before this run: the plugin set" in (
            caplog.text
        )
    finally:
        worker.close()
    broken = RunWorker(python="/bin/false")
    with pytest.raises(WorkerUnavailable, match="could not start"):
        broken.start(["train"], {})
    broken._python = sys.executable  # fixed (say, reinstalled) since
    broken.renew("the daemon reloaded", live=False)  # a reload that changed nothing
    try:
        child = broken.start(["train", "--help"], _env(), cwd=str(tmp_path))
        assert child.wait(timeout=120) == 0
        _pipes_closed(child)
    finally:
        broken.close()


@pytest.mark.timeout(300)
def test_a_run_killed_for_memory_replaces_its_worker_before_the_next_run(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A forked run killed over its memory limit fails with reason memory, and the next
    run's child comes from a new worker, the log saying why: nothing of a killed run is
    trusted, its worker included."""
    import json

    from genesis_fp16.plugin_api import TrainRequest
    from genesis_fp16_infrastructure.data.synthetic import generate_pool

    pool = tmp_path / "pool.json"
    pool.write_text(json.dumps(generate_pool(100, seed=0)))
    request = TrainRequest(
        agent="se_darwin",
        precision="fp32",
        precision_reason="test",
        state_dir=tmp_path,
        checkpoint_dir=tmp_path / "ck",
        data_path=pool,
        steps=5,
    )
    worker = RunWorker()
    try:
        with pytest.raises(launcher.LaunchError) as failed:
            launcher.train_in_child(request, timeout=120, memory_limit=1, worker=worker)
        assert failed.value.reason == "memory"
        killed_in = worker.ready["pid"]
        with caplog.at_level(logging.INFO, logger="genesis_fp16.launcher"):
            child = worker.start(["train", "--help"], _env(), cwd=str(tmp_path))
            assert child.wait(timeout=120) == 0
        _pipes_closed(child)
        assert worker.ready["pid"] != killed_in
        replaced = f"replacing the run worker (pid {killed_in}) before this run: its last run"
        assert f"{replaced} was killed for memory" in caplog.text
    finally:
        worker.close()


class _Renewals:
    def __init__(self) -> None:
        self.reasons: list[str] = []

    def renew(self, reason: str, live: bool = True) -> None:
        self.reasons.append(reason)


@pytest.mark.parametrize(
    ("message", "reason", "renewed"),
    [
        ("killed: still running 30s after SIGTERM", "hung", "its last run was killed for time"),
        ("killed: 900 MiB resident", "memory", "its last run was killed for memory"),
        ("RuntimeError: CUDA error: an illegal memory access", "error", "a device error"),
        ("AcceleratorError: device lost", "device_unavailable", "a device error"),
        ("ValueError: bad record", "error", None),
        ("the run's process exited with code 1", "exit", None),
    ],
)
def test_which_failures_replace_the_worker(message: str, reason: str, renewed: str | None) -> None:
    """A run killed for time or memory, or failed with a CUDA or device error, replaces its
    worker; a plugin's own error or exit does not (its worker is as good as before)."""
    worker = _Renewals()
    launcher._renew_after(worker, launcher.LaunchError(message, reason))  # type: ignore[arg-type]
    if renewed is None:
        assert worker.reasons == []
    else:
        assert len(worker.reasons) == 1 and renewed in worker.reasons[0]
