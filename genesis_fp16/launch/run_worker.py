"""The daemon's side of the run worker (genesis_fp16/commands/zygote.py): start it, ask it
for a run's child, supervise that child as ``subprocess.Popen`` would, restart the worker
when it dies, and say why when a run has to start by exec instead::

    child = WORKER.start(["train", "se_darwin", "--request", path], env)  # a ForkedChild
    child.poll(), child.send_signal(signal.SIGTERM), child.returncode
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from typing import IO, Any

from genesis_fp16.launch.handoff import SAFE_PYTHON

log = logging.getLogger("genesis_fp16.launcher")

# Largest message between the daemon and the worker: a request carries the run's whole
# environment.
MAX_MESSAGE = 1 << 20
# numpy's OpenBLAS starts a thread per further core when it loads, and a worker with
# threads must not fork: the worker's own environment pins it to one (its children keep that).
WORKER_ENV = {"OPENBLAS_NUM_THREADS": "1"}
# How long the worker may take to import torch and the library (a loaded 2-core host
# took 8 s) and to probe CUDA in a forked child (60 s at most:
# genesis_fp16/launch/cuda_fork_probe.py); past it the run starts by exec.
READY_SECONDS = 180.0
# How long a fork request may take to be answered.
FORK_SECONDS = 30.0
# After a failed fork request, how long to wait for the worker's end (a SIGKILL is
# delivered while the request fails): the log then says how it ended.
ENDED_WAIT_SECONDS = 2.0


class WorkerUnavailable(RuntimeError):
    """The worker cannot start this run's child; the message says why (the run then
    starts by exec)."""


class ForkedChild:
    """A run's child forked by the worker, with the parts of ``subprocess.Popen`` the
    launcher uses: ``pid``, the three pipes, ``poll``, ``send_signal``, ``returncode``.

    Not the daemon's child, so its status comes from the worker (``{"exit": code}`` on the
    run's status socket) and its signals go through a pidfd. ``exit_known`` is False when
    the worker died before the child did: the child ran on, and its exit code is lost.
    """

    def __init__(self, pid: int, pidfd: int, status: socket.socket, pipes: list[IO[str]]) -> None:
        self.pid = pid
        self.stdin, self.stdout, self.stderr = pipes
        self.returncode: int | None = None
        self.exit_known = True
        self._pidfd = pidfd
        self._status: socket.socket | None = status  # None: the worker is gone

    def poll(self) -> int | None:
        if self.returncode is not None:
            return self.returncode
        if self._status is not None and select.select([self._status], [], [], 0)[0]:
            try:
                data = self._status.recv(4096)
            except OSError:
                data = b""
            if data:
                self._ended(int(json.loads(data)["exit"]))
                return self.returncode
            self._status.close()  # the worker is gone: watch the child itself
            self._status = None
        if self._status is None and select.select([self._pidfd], [], [], 0)[0]:
            log.warning(
                "the run's process %d ended after its worker did: its exit code is unknown",
                self.pid,
            )
            self.exit_known = False
            self._ended(0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = time.monotonic() + (timeout if timeout is not None else math.inf)
        while self.poll() is None:
            if time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(str(self.pid), timeout or 0)
            select.select([self._status or self._pidfd], [], [], 0.05)
        assert self.returncode is not None
        return self.returncode

    def send_signal(self, signum: int) -> None:
        if self.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                signal.pidfd_send_signal(self._pidfd, signum)

    def _ended(self, code: int) -> None:
        self.returncode = code
        os.close(self._pidfd)
        if self._status is not None:
            self._status.close()


class RunWorker:
    """One worker process for the daemon's runs, started at the first run and again after
    it dies; thread-safe (runs of several agents ask for children at once)."""

    def __init__(self, python: str = sys.executable, ready_seconds: float = READY_SECONDS):
        self._python = python
        self._ready_seconds = ready_seconds
        self._lock = threading.Lock()
        self._process: subprocess.Popen[bytes] | None = None
        self._control: socket.socket | None = None
        self._env: dict[str, str] | None = None
        self._broken: str | None = None  # why it could not start: runs start by exec
        self.ready: dict[str, Any] = {}

    def start(self, args: list[str], env: Mapping[str, str], cwd: str | None = None) -> ForkedChild:
        """A child running ``python -m genesis_fp16 ARGS`` in ``env`` (forked by the worker).
        Raises :class:`WorkerUnavailable` when there is no worker to fork it."""
        with self._lock:
            if self._broken is not None:
                raise WorkerUnavailable(self._broken)
            self._ensure(dict(env))
            try:
                return self._fork(args, dict(env), cwd or os.getcwd())
            except OSError as exc:  # it died since: once more, with a new one
                self._drop(exc)
            self._ensure(dict(env))  # says how an ended worker ended
            try:
                return self._fork(args, dict(env), cwd or os.getcwd())
            except OSError as again:
                raise WorkerUnavailable(f"a new worker failed too: {again}") from None

    def close(self, wait: float = 0.0) -> None:
        """End the worker (its running children go on: they watch the daemon's pipe): it
        exits at the end of its control socket, killed if it has not ``wait`` s later."""
        with self._lock:
            self._stop(wait)

    def _drop(self, failed: OSError) -> None:
        """A fork request failed: wait for the worker's end (a kill the last run start did
        not yet see: :meth:`_ensure` says how it ended), or stop it, failed for ``failed``
        alive."""
        assert self._process is not None
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._process.wait(timeout=ENDED_WAIT_SECONDS)
        if self._process.poll() is None:
            log.warning("the run worker failed a fork request (%s): starting another", failed)
            self._stop()

    def _ensure(self, env: dict[str, str]) -> None:
        if self._process is not None and self._env != env:
            log.info("the runs' environment changed: starting a new run worker")
            self._stop()
        if self._process is not None and self._process.poll() is not None:
            log.warning(
                "the run worker (pid %d) ended with code %s: starting another",
                self._process.pid,
                self._process.returncode,
            )
            self._stop()
        if self._process is None:
            self._launch(env)

    def _launch(self, env: dict[str, str]) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            command = [self._python, *SAFE_PYTHON, "-m", "genesis_fp16.commands.zygote"]
            self._process = subprocess.Popen(
                [*command, str(theirs.fileno())],
                pass_fds=[theirs.fileno()],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,  # stderr: the daemon's, for a traceback
                env={**env, **WORKER_ENV},
                start_new_session=True,
            )
        finally:
            theirs.close()
        self._control, self._env = ours, env
        ours.settimeout(self._ready_seconds)
        try:
            data = ours.recv(MAX_MESSAGE)
        except OSError as exc:
            data = json.dumps({"error": f"no answer in {self._ready_seconds:g} s ({exc})"}).encode()
        message: dict[str, Any] = (
            json.loads(data) if data else {"error": "it exited before it was ready"}
        )
        if "ready" not in message:
            self._stop()
            self._broken = f"the run worker could not start: {message.get('error')}"
            log.warning("%s; runs start by exec", self._broken)
            raise WorkerUnavailable(self._broken)
        self.ready = message["ready"]
        log.info(
            "run worker ready (pid %d): torch and the library imported in %.2f s, "
            "%s MiB resident (%s MiB its own), CUDA not initialised; a forked probe: %s",
            self.ready["pid"],
            self.ready["seconds"],
            self.ready.get("resident_mib", "?"),
            self.ready.get("private_mib", "?"),
            self.ready.get("cuda_probe", "?"),
        )

    def _fork(self, args: list[str], env: dict[str, str], cwd: str) -> ForkedChild:
        assert self._control is not None
        in_r, in_w = os.pipe()
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        status, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        theirs_fd = theirs.fileno()
        try:
            request = json.dumps({"args": args, "env": env, "cwd": cwd}).encode()
            self._control.settimeout(FORK_SECONDS)
            socket.send_fds(self._control, [request], [in_r, out_w, err_w, theirs_fd])
            data, fds, _, _ = socket.recv_fds(
                self._control, MAX_MESSAGE, 1, socket.MSG_CMSG_CLOEXEC
            )
            message = json.loads(data) if data else {}
            if "pid" not in message or len(fds) != 1:
                for fd in fds:
                    os.close(fd)
                raise OSError(f"the worker answered {message or 'nothing'}")
        except BaseException:  # our ends too: no child will use them
            for fd in (in_w, out_r, err_r):
                os.close(fd)
            status.close()
            raise
        finally:  # the child's ends: only it (and the worker, until the fork) hold them
            for fd in (in_r, out_w, err_w):
                os.close(fd)
            theirs.close()
        pipes: list[IO[str]] = [
            open(in_w, "w"),  # noqa: SIM115  (closed by the launcher, as Popen's are)
            open(out_r, errors="replace"),  # noqa: SIM115
            open(err_r, errors="replace"),  # noqa: SIM115
        ]
        return ForkedChild(int(message["pid"]), fds[0], status, pipes)

    def _stop(self, wait: float = 0.0) -> None:  # see close()
        if self._control is not None:
            self._control.close()
            self._control = None
            if self._process is not None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self._process.wait(timeout=wait)
        if self._process is not None:
            if self._process.poll() is None:
                self._process.kill()
            self._process.wait()
            self._process = None
        self._env = None


# The daemon's one worker (genesis_fp16/launch/launcher.py: train_in_child).
WORKER = RunWorker()
