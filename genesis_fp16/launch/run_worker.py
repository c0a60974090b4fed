"""The daemon's side of the run worker (genesis_fp16/commands/zygote.py): start it, ask it
for a run's child, supervise that child as ``subprocess.Popen`` would, replace the worker
when it is dead, stopped or outdated, and say why when a run has to start by exec instead::

    child = WORKER.start(["train", "se_darwin", "--request", path], env)  # a ForkedChild
    child.poll(), child.send_signal(signal.SIGTERM), child.returncode

The worker is never trusted blindly. Before each fork it is replaced, the reason logged,
when it has ended, is stopped (``SIGSTOP``: it would answer nothing), when the runs'
environment changed, when what is installed on its ``sys.path`` changed since it started
(genesis_fp16/launch/installed_state.py: a plugin installed or upgraded since would be
imported as it was, or not at all, by a child forked from it), or when :meth:`RunWorker.renew`
asked (a reload that changed a setting, a change of the plugin set, a run killed for
time or memory, a CUDA error).
A fork request it does not answer within :data:`FORK_SECONDS`, or while it is stopped,
costs a new worker, never the run. A run's end is read from the child's own pidfd, not
only from the worker's report, so a worker that stopped cannot hide it.
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
from genesis_fp16.launch.installed_state import installed_digest

log = logging.getLogger("genesis_fp16.launcher")

# Largest message on the control socket: the worker's ready message (its sys.path) and the
# answers. A run's request, whose environment may be of any size, travels in a memfd.
MAX_MESSAGE = 1 << 16
# A request's descriptors: stdin, stdout, stderr, the run's status socket, the request.
REQUEST_FDS = 5
# numpy's OpenBLAS starts a thread per further core when it loads, and a worker with
# threads must not fork: the worker's own environment pins it to one (its children keep that).
WORKER_ENV = {"OPENBLAS_NUM_THREADS": "1"}
# How long the worker may take to import torch and the library (a loaded 2-core host
# took 8 s) and to probe CUDA in a forked child (60 s at most:
# genesis_fp16/launch/cuda_fork_probe.py); past it the run starts by exec.
READY_SECONDS = 180.0
# How long a fork request may take to be answered (a worker answers in milliseconds; a
# loaded host may hold it up for a few seconds): past it, the worker is replaced.
FORK_SECONDS = 10.0
# How often a wait for the worker's answer looks whether it was stopped meanwhile.
ANSWER_POLL_SECONDS = 0.2
# After a child's pidfd says it ended, how long to wait for the worker's report of its exit
# code when the kernel no longer shows it (reaped by the worker, or its worker gone).
EXIT_REPORT_SECONDS = 2.0
# The longest one wait of ForkedChild.wait sleeps before it looks again; its pidfd or the
# worker's report wakes it sooner.
WAIT_SLICE_SECONDS = 0.05
# After a failed fork request, how long to wait for the worker's end (a SIGKILL is
# delivered while the request fails): the log then says how it ended.
ENDED_WAIT_SECONDS = 2.0


class WorkerUnavailable(RuntimeError):
    """The worker cannot start this run's child; the message says why (the run then
    starts by exec)."""


class ForkedChild:
    """A run's child forked by the worker, with the parts of ``subprocess.Popen`` the
    launcher uses: ``pid``, the three pipes, ``poll``, ``send_signal``, ``returncode``.

    Not the daemon's child: its signals go through a pidfd, and its end is read from that
    pidfd too. Its exit code is the worker's report (``{"exit": code}`` on the run's status
    socket) or, while the worker has not reaped it (a stopped worker), the kernel's record of
    the zombie. ``exit_known`` is False when neither is to be had (the worker died before
    the child did, and init reaped it): the child ran on, and its exit code is lost.
    """

    def __init__(
        self,
        pid: int,
        pidfd: int,
        status: socket.socket,
        pipes: list[IO[str]],
        resident_run: int | None = None,
    ) -> None:
        self.pid = pid
        # Served by the device's resident run process (genesis_fp16/commands/resident.py):
        # its Nth run; its end is the status message, its process's death a failed run.
        self.resident_run = resident_run
        self.stdin, self.stdout, self.stderr = pipes
        self.returncode: int | None = None
        self.exit_known = True
        self._pidfd = pidfd
        self._status: socket.socket | None = status  # None: the worker is gone
        self._ended_at: float | None = None  # when the pidfd first said the child ended

    def poll(self) -> int | None:
        if self.returncode is not None:
            return self.returncode
        reported = self._reported()
        if reported is not None:
            self._ended(reported)
        elif select.select([self._pidfd], [], [], 0)[0]:  # it ended: the worker may not say
            self._child_ended()
        return self.returncode

    def _reported(self) -> int | None:
        """The worker's report of the exit code, if it came; a closed socket: None for ever."""
        if self._status is None or not select.select([self._status], [], [], 0)[0]:
            return None
        try:
            data = self._status.recv(4096)
        except OSError:
            data = b""
        if data:
            return int(json.loads(data)["exit"])
        self._status.close()  # the worker is gone: the pidfd alone says when the child ends
        self._status = None
        return None

    def _child_ended(self) -> None:
        code = zombie_exit_code(self.pid)  # its worker has not reaped it: stopped, say
        if code is not None:
            self._ended(code)
            return
        now = time.monotonic()
        self._ended_at = self._ended_at if self._ended_at is not None else now
        if self._status is not None and now - self._ended_at < EXIT_REPORT_SECONDS:
            return  # reaped: the worker's report is on its way
        log.warning(
            "the run's process %d ended and its worker did not report its exit code: unknown",
            self.pid,
        )
        self.exit_known = False
        self._ended(0)

    def wait(self, timeout: float | None = None) -> int:
        """Its exit code, as soon as its end is known (the pidfd or the worker's report
        wakes the wait); ``subprocess.TimeoutExpired`` past ``timeout`` seconds."""
        deadline = time.monotonic() + (timeout if timeout is not None else math.inf)
        while self.poll() is None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise subprocess.TimeoutExpired(str(self.pid), timeout or 0)
            select.select(self._awaited(), [], [], min(left, WAIT_SLICE_SECONDS))
        assert self.returncode is not None
        return self.returncode

    def _awaited(self) -> list[int]:
        """What says its end is known: the pidfd until it has said the child ended (from
        then on it stays readable, and a wait on it would spin), and the worker's report."""
        pidfd = [self._pidfd] if self._ended_at is None else []
        return pidfd + ([] if self._status is None else [self._status.fileno()])

    def send_signal(self, signum: int) -> None:
        # poll() first: a resident run process whose run has ended serves the next one.
        if self.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                signal.pidfd_send_signal(self._pidfd, signum)

    def _ended(self, code: int) -> None:
        self.returncode = code
        os.close(self._pidfd)
        if self._status is not None:
            self._status.close()


def _stat_fields(pid: int) -> list[str]:
    """``/proc/PID/stat`` from its third field on (the state); empty where unreadable."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            text = handle.read().decode(errors="replace")
    except OSError:
        return []
    return text[text.rfind(")") + 2 :].split()  # the command name may hold spaces


def zombie_exit_code(pid: int) -> int | None:
    """The exit code of ``pid`` if it is a zombie (ended, not yet reaped by its parent), in
    ``subprocess``'s convention; None otherwise. Linux's ``exit_code`` field (proc(5),
    field 52, since 3.5) is the wait status its parent would get."""
    fields = _stat_fields(pid)
    if len(fields) < 50 or fields[0] != "Z":
        return None
    return os.waitstatus_to_exitcode(int(fields[49]))


def is_stopped(pid: int) -> bool:
    """Whether ``pid`` is stopped by a signal (``SIGSTOP``, ``SIGTSTP``) or a tracer."""
    fields = _stat_fields(pid)
    return bool(fields) and fields[0] in ("T", "t")


class RunWorker:
    """One worker process for the daemon's runs, started at the first run and replaced
    before a run when it is dead, stopped or outdated (the module's docstring);
    thread-safe (runs of several agents ask for children at once)."""

    def __init__(self, python: str = sys.executable, ready_seconds: float = READY_SECONDS):
        self._python = python
        self._ready_seconds = ready_seconds
        self._lock = threading.Lock()
        self._process: subprocess.Popen[bytes] | None = None
        self._control: socket.socket | None = None
        self._env: dict[str, str] | None = None
        self._broken: str | None = None  # why it could not start: runs start by exec
        self._renewal: str | None = None  # why renew() asked for a new one
        self._retry: str | None = None  # why renew() gave a broken one another try
        self._renewal_lock = threading.Lock()  # renew() never waits for a worker's start
        self.ready: dict[str, Any] = {}

    def start(
        self,
        args: list[str],
        env: Mapping[str, str],
        cwd: str | None = None,
        resident: Mapping[str, Any] | None = None,
    ) -> ForkedChild:
        """A child running ``python -m genesis_fp16 ARGS`` in ``env`` (forked by the worker).
        With ``resident`` (``{"device": ..., "max_mib": ...}``), the run is served by the
        worker's resident run process for that device (genesis_fp16/commands/resident.py).
        Raises :class:`WorkerUnavailable` when there is no worker to fork it."""
        with self._lock:
            renewal, retry = self._take_renewal(), self._take_retry()
            if (renewal or retry) is not None and self._broken is not None:
                log.info("trying a run worker again: %s", renewal or retry)
                self._broken = None
            if self._broken is not None:
                raise WorkerUnavailable(self._broken)
            self._ensure(dict(env), renewal)
            try:
                return self._fork(args, dict(env), cwd or os.getcwd(), resident)
            except OSError as exc:  # it died or stopped since: once more, with a new one
                self._drop(exc)
            self._ensure(dict(env))  # says how an ended worker ended
            try:
                return self._fork(args, dict(env), cwd or os.getcwd(), resident)
            except OSError as again:
                raise WorkerUnavailable(f"a new worker failed too: {again}") from None

    def renew(self, reason: str, live: bool = True) -> None:
        """Replace the worker before the next run (``reason`` is logged then); its running
        children go on. Also gives a worker that could not start another try: with
        ``live`` False, only that (a live worker, and its resident run processes, stay)."""
        with self._renewal_lock:
            if live:
                self._renewal = self._renewal or reason
            else:
                self._retry = self._retry or reason

    def _take_retry(self) -> str | None:
        with self._renewal_lock:
            retry, self._retry = self._retry, None
            return retry

    def close(self, wait: float = 0.0) -> None:
        """End the worker (its running children go on: they watch the daemon's pipe): it
        exits at the end of its control socket, killed if it has not ``wait`` s later."""
        with self._lock:
            self._stop(wait)

    def _take_renewal(self) -> str | None:
        with self._renewal_lock:
            renewal, self._renewal = self._renewal, None
            return renewal

    def _drop(self, failed: OSError) -> None:
        """A fork request failed: wait for the worker's end (a kill the last run start did
        not yet see: :meth:`_ensure` says how it ended), or stop it, failed for ``failed``
        alive."""
        assert self._process is not None
        if not is_stopped(self._process.pid):  # a stopped one never ends by itself
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._process.wait(timeout=ENDED_WAIT_SECONDS)
        if self._process.poll() is None:
            log.warning("the run worker failed a fork request (%s): starting another", failed)
            self._stop()

    def _ensure(self, env: dict[str, str], renewal: str | None = None) -> None:
        if self._process is not None and self._process.poll() is not None:
            log.warning(
                "the run worker (pid %d) ended with code %s: starting another",
                self._process.pid,
                self._process.returncode,
            )
            self._stop()
        if self._process is not None and (why := self._outdated(env, renewal)) is not None:
            log.warning(
                "replacing the run worker (pid %d) before this run: %s", self._process.pid, why
            )
            self._stop()
        if self._process is None:
            self._launch(env)

    def _outdated(self, env: dict[str, str], renewal: str | None) -> str | None:
        """Why the live worker must not fork this run, or None."""
        assert self._process is not None
        if self._env != env:
            return "the runs' environment changed"
        if is_stopped(self._process.pid):
            return "it is stopped (SIGSTOP?) and would answer nothing"
        if renewal is not None:
            return renewal
        if installed_digest(self.ready.get("sys_path", [])) != self.ready.get("installed"):
            return "what is installed on its path changed since it started (an install, an upgrade)"
        return None

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
        except OSError as exc:  # an environment exec refuses (too large), say: this run's
            ours.close()
            raise WorkerUnavailable(f"the run worker could not be started: {exc}") from None
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

    def _fork(
        self,
        args: list[str],
        env: dict[str, str],
        cwd: str,
        resident: Mapping[str, Any] | None = None,
    ) -> ForkedChild:
        assert self._control is not None
        in_r, in_w = os.pipe()
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        status, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        theirs_fd = theirs.fileno()
        payload = _request_file({"args": args, "env": env, "cwd": cwd})
        try:
            descriptors = [in_r, out_w, err_w, theirs_fd, payload]
            asked = {"run": 1, **({"resident": dict(resident)} if resident else {})}
            socket.send_fds(self._control, [json.dumps(asked).encode()], descriptors)
            self._await_answer()
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
            for fd in (in_r, out_w, err_w, payload):
                os.close(fd)
            theirs.close()
        pipes: list[IO[str]] = [
            open(in_w, "w"),  # noqa: SIM115  (closed by the launcher, as Popen's are)
            open(out_r, errors="replace"),  # noqa: SIM115
            open(err_r, errors="replace"),  # noqa: SIM115
        ]
        return ForkedChild(int(message["pid"]), fds[0], status, pipes, message.get("resident"))

    def _await_answer(self) -> None:
        """Wait for the worker's answer to a fork request; OSError when it ends, is stopped
        or takes longer than :data:`FORK_SECONDS` (the worker is then replaced)."""
        assert self._control is not None and self._process is not None
        deadline = time.monotonic() + FORK_SECONDS
        while not select.select([self._control], [], [], ANSWER_POLL_SECONDS)[0]:
            if self._process.poll() is not None:
                raise OSError(f"the worker ended (code {self._process.returncode}) unanswering")
            if is_stopped(self._process.pid):
                raise OSError("the worker was stopped (SIGSTOP?) before it answered")
            if time.monotonic() >= deadline:
                raise OSError(f"the worker did not answer within {FORK_SECONDS:g} s")

    def _stop(self, wait: float = 0.0) -> None:  # see close()
        if self._control is not None:
            self._control.close()
            self._control = None
            if self._process is not None and not is_stopped(self._process.pid):
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self._process.wait(timeout=wait)
        if self._process is not None:
            if self._process.poll() is None:
                self._process.kill()  # a stopped process too
            self._process.wait()
            self._process = None
        self._env = None


def _request_file(request: dict[str, Any]) -> int:
    """A memfd holding ``request`` as JSON, for the worker: a run's environment has no size
    limit of its own, where a datagram has the socket's buffer (about 208 KiB)."""
    fd = os.memfd_create("genesis-fp16-run-request", os.MFD_CLOEXEC)
    try:
        with open(fd, "wb", closefd=False) as handle:
            handle.write(json.dumps(request).encode())
    except BaseException:
        os.close(fd)
        raise
    return fd


# The daemon's one worker (genesis_fp16/launch/launcher.py: train_in_child).
WORKER = RunWorker()
