"""Run one training job under torchrun as a supervised child process.

An agent with ``nproc`` > 1 trains in N processes on this machine::

    python -P -m torch.distributed.run --standalone --nproc-per-node N \\
        -m genesis_fp16 train AGENT --request FILE --json --json-progress

(``python -m torch.distributed.run`` is the ``torchrun`` script, run with the daemon's own
interpreter.) ``FILE`` is the job's whole :class:`TrainRequest` as JSON, with the daemon's
log level (genesis_fp16/launch/handoff.py, written beside the agent's checkpoint folder): every
rank trains with the precision and its reason, the guard, the budget and the options the
daemon chose, and reads no ``.env`` or setting of its own. ``-P`` and ``PYTHONSAFEPATH``
keep the daemon's working directory (the state folder, under systemd) off every child's
``sys.path``; each child's stdin is a pipe the daemon holds, and a child whose daemon is
gone stops (:func:`genesis_fp16.launch.handoff.watch_daemon`). The daemon reads rank 0's
stdout: one ``{"progress": ...}`` line per log interval, which becomes a
:class:`TrainingSummary` for the metrics, and the final ``TrainResult`` JSON line.
Stopping (daemon shutdown, a precision switch, or the timeout) sends SIGTERM to torchrun,
which forwards it to every rank; the ranks agree to stop at the
next step boundary, rank 0 writes a checkpoint and prints its result. A child still
running ``kill_after`` seconds later is killed, with every rank below it.

The ranks' stderr (their JSON log records, torchrun's own text, tracebacks) is relayed
through the daemon's logging, the ``genesis_fp16.torchrun`` logger (:func:`relay_stderr`,
in a thread with the job's context), so each line carries the job's ``agent`` and
``run_id``.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import logging
import math
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import structlog

from genesis_fp16.launch.devices import check_layout
from genesis_fp16.launch.handoff import SAFE_PYTHON, child_env, write_run_file
from genesis_fp16.launch.kubeflow import torchrun
from genesis_fp16.launch.run_worker import ForkedChild, RunWorker, WorkerUnavailable
from genesis_fp16.plugin_api import TrainRequest, TrainResult
from genesis_fp16_infrastructure.api import (
    PRECISIONS,
    RUN_FILE,
    PrecisionName,
    SetAside,
    TrainingSummary,
)

log = logging.getLogger("genesis_fp16.launcher")
relay_log = structlog.get_logger("genesis_fp16.torchrun")

# How often a run's supervision looks at its memory, a stop request and its timeout. Its
# end is not waited for on this clock: each look waits on the child itself (_wait_a_look).
_POLL_SECONDS = 0.2


class RunStopped(RuntimeError):
    """The run was asked to stop (the daemon shutting down, a precision switch) and its
    process ended without a result: SIGTERM reached it before its command could act on it
    (``python -m genesis_fp16`` holds one that comes while it imports, see
    ``genesis_fp16.service.startup_signals``, so this is the interpreter's first moments). Not a
    failure: the job counts the run as ``stopped``, and the next run starts it again. A run
    that reaches its *timeout* without a result is a failure (``hung``), as one that
    ignores the SIGTERM is."""


class LaunchError(RuntimeError):
    """The torchrun job failed or ended without rank 0's result.

    ``reason`` says how, for ``genesis_fp16_run_failures_total``: ``exit`` (the child
    ended without a result: a crash, ``os._exit``, ``sys.exit``), ``hung`` (killed after
    its stop request went unanswered), ``memory`` (killed over its memory limit), or the
    kind the child reported itself (``refused``, ``storage``, ``error``).
    """

    def __init__(self, message: str, reason: str = "exit") -> None:
        super().__init__(message)
        self.reason = reason


def request_file(request: TrainRequest) -> Path:
    """Where the launcher writes ``request`` for its child (one process or torchrun's ranks):
    beside the checkpoint folder."""
    return RUN_FILE.at(Path(request.checkpoint_dir).parent)


def child_command(request: TrainRequest, nproc: int = 1, python: str = sys.executable) -> list[str]:
    """The command line that runs ``request`` (from :func:`request_file`): one child process
    (``nproc`` 1: what the resident run process or a child runs), or torchrun with ``nproc``
    local processes ("cuda" becomes cuda:<LOCAL_RANK> in each rank)."""
    if nproc < 1:
        raise ValueError(f"nproc={nproc!r}: must be at least 1")
    argv = ["train", request.agent, "--request", str(request_file(request)), "--json"]
    argv.append("--json-progress")
    if nproc > 1:
        return torchrun(python, ["--standalone", "--nproc-per-node", str(nproc)], argv, SAFE_PYTHON)
    return [python, *SAFE_PYTHON, "-m", "genesis_fp16", *argv]


def train_in_child(
    request: TrainRequest,
    timeout: float | None = None,
    kill_after: float = 60.0,
    memory_limit: int | None = None,
    env: Mapping[str, str] | None = None,
    log_level: str = "INFO",
    worker: RunWorker | None = None,
    processes: RunProcesses | None = None,
    nproc: int = 1,
    resident_max_mib: float | None = None,
) -> TrainResult:
    """Run ``request`` in one child process, or under torchrun with ``nproc`` > 1
    processes, and return its (rank 0's) result.

    ``request.should_stop`` and ``timeout`` (seconds, None: none) end the run cleanly
    through SIGTERM; ``request.on_log`` receives (rank 0's) summaries as they come. A
    plugin that hangs, calls ``os._exit``, crashes the interpreter or grows past
    ``memory_limit`` bytes of resident memory ends that child, not the daemon: the run
    fails with a :class:`LaunchError` naming how. A child costs a process start per run
    (an interpreter, torch and the plugin imported again: a few seconds), unless
    ``worker`` (genesis_fp16/commands/zygote.py) forks it from a process that has
    imported torch; torchrun's ranks are always started by exec. The child (or torchrun)
    is counted in ``processes`` (the daemon's, for its shutdown) while it lives. With
    ``resident_max_mib``, the worker's resident run process for the request's device serves
    the run (genesis_fp16/commands/resident.py), ending past that many MiB of its memory.
    """
    check_layout(request, nproc)
    handed = request_file(request)
    write_run_file(handed, request, log_level)
    try:
        command = child_command(request, nproc)
        environ = child_env(env if env is not None else os.environ)
        what = "the torchrun job" if nproc > 1 else "the run's process"
        resident = None
        if resident_max_mib is not None:
            resident = {"device": str(request.device), "max_mib": resident_max_mib}
        child = _start(command, environ, worker if nproc == 1 else None, nproc, resident)
        try:
            return _launch(request, child, timeout, kill_after, memory_limit, what, processes)
        except LaunchError as exc:
            if worker is not None and isinstance(child, ForkedChild):
                _renew_after(worker, exc)
            raise
    finally:
        handed.unlink(missing_ok=True)


# The failures after which the worker that forked the run is replaced before the next one.
_KILLED_REASONS = {"hung": "for time", "memory": "for memory"}


def _renew_after(worker: RunWorker, failed: LaunchError) -> None:
    """Replace ``worker`` before the next run when ``failed`` says its run was killed for time
    or memory, or hit a CUDA error: nothing of such a run is trusted, its worker included."""
    if failed.reason in _KILLED_REASONS:
        worker.renew(f"its last run was killed {_KILLED_REASONS[failed.reason]}")
    elif failed.reason == "device_unavailable" or "CUDA" in str(failed):
        worker.renew("its last run failed with a device error")


def _launch(
    request: TrainRequest,
    child: subprocess.Popen[str] | ForkedChild,
    timeout: float | None,
    kill_after: float,
    memory_limit: int | None,
    what: str,
    processes: RunProcesses | None,
) -> TrainResult:
    assert child.stdout is not None and child.stderr is not None
    ended = _Ended()
    # Both threads run in a copy of the job's context: the progress records the reader
    # logs and the lines the relay re-emits carry the job's agent and run_id.
    reader = threading.Thread(
        target=contextvars.copy_context().run,
        args=(_read_stdout, child.stdout, ended, request.on_log, request.on_diagnostics),
        kwargs={"on_precision": request.on_precision},
        daemon=True,
    )
    # Drained until EOF whatever happens here, or a chatty rank blocks on a full pipe;
    # the copied context carries the job's agent and run_id into the relay's thread.
    relay = threading.Thread(
        target=contextvars.copy_context().run, args=(relay_stderr, child.stderr), daemon=True
    )
    reader.start()
    relay.start()
    if processes is not None and not processes.add(child):  # the daemon ended its runs
        log.error("%s started after the daemon ended its runs: killing it", what)
        _kill_tree(child.pid)
    try:
        _supervise(child, ended, request.should_stop, timeout, kill_after, memory_limit, what)
    finally:
        if processes is not None:
            processes.discard(child)
    reader.join()
    relay.join()  # the ranks' last lines (a traceback) come before our verdict
    assert child.stdin is not None
    child.stdin.close()  # the daemon's end of the watched pipe: its child is gone
    code = child.returncode
    if ended.killed is not None:
        raise LaunchError(f"the run was killed: {ended.killed}", ended.kill_reason)
    if ended.error is not None:  # the child said why, in one line
        raise LaunchError(str(ended.error.get("error")), str(ended.error.get("kind", "error")))
    if ended.result is None and ended.stopped_by is not None:
        why = f"{what} ended (exit code {code}) on {ended.stopped_by} before a result"
        if ended.timed_out:  # past its timeout with no step to show: abandoned, as a hang is
            raise LaunchError(why, "hung")
        raise RunStopped(why)
    if ended.result is None:
        raise LaunchError(f"{what} exited with code {code} without a result")
    if code != 0 and ended.stopped_by is None and getattr(child, "exit_known", True):
        raise LaunchError(f"{what} exited with code {code}")
    log.info("%s ended (exit code %d, stopped by %s)", what, code, ended.stopped_by or "nothing")
    return TrainResult.from_json(ended.result)


def _start(
    command: list[str],
    environ: dict[str, str],
    worker: RunWorker | None,
    nproc: int,
    resident: dict[str, Any] | None = None,
) -> subprocess.Popen[str] | ForkedChild:
    """The run's process, forked by ``worker`` (``command`` minus ``python -P -m``) where
    there is one and it can (the reason logged where it cannot), else started by exec."""
    if worker is not None:
        try:
            forked = worker.start(command[len(SAFE_PYTHON) + 3 :], environ, resident=resident)
        except WorkerUnavailable as exc:
            log.warning("starting the run's process by exec, not from the run worker: %s", exc)
        else:
            if forked.resident_run is not None:
                log.info(
                    "the run worker's resident run process %d serves the run (its run %d): %s",
                    forked.pid,
                    forked.resident_run,
                    command[4:],
                )
                return forked
            log.info("the run worker forked the run's process %d: %s", forked.pid, command[4:])
            return forked
    started = f"torchrun with {nproc} process(es)" if nproc > 1 else "the run's process"
    log.info("launching %s: %s", started, " ".join(command))
    return subprocess.Popen(
        command,
        # Never written to: EOF there tells the child (and torchrun's ranks, which inherit
        # it) that the daemon is gone. Only this process holds the write end (O_CLOEXEC).
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        errors="replace",  # a decoding error would end a reader and leave its pipe full
        env=environ,
        start_new_session=True,  # a Ctrl-C at the daemon's terminal goes through us
    )


class RunProcesses:
    """The runs' processes now alive (a child, a torchrun job), for the daemon's shutdown:
    past its timeout it kills them all, and no run started later lives (the daemon's lock
    is released only once every one has ended)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._alive: dict[int, subprocess.Popen[str] | ForkedChild] = {}
        self._ended = False

    def add(self, child: subprocess.Popen[str] | ForkedChild) -> bool:
        """Count ``child`` in; False when :meth:`kill_all` came first (kill it)."""
        with self._lock:
            if not self._ended:
                self._alive[child.pid] = child
            return not self._ended

    def discard(self, child: subprocess.Popen[str] | ForkedChild) -> None:
        with self._lock:
            self._alive.pop(child.pid, None)

    def kill_all(self) -> list[int]:
        """SIGKILL every run's process tree, and any started from now on; their pids."""
        with self._lock:
            self._ended = True
            pids = sorted(self._alive)
        for pid in pids:
            _kill_tree(pid)
        return pids


@dataclass
class _Ended:
    """How a run's process ended: what it printed (the reader's) and what was sent to it
    (the supervision's)."""

    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None  # {"error": line, "kind": ...} from the child
    stopped_by: str | None = None  # why SIGTERM was sent, if it was
    killed: str | None = None  # why SIGKILL was sent, if it was
    kill_reason: str = "hung"  # its failure reason: hung or memory
    timed_out: bool = False  # SIGTERM came from the run's timeout, not a stop request


def _supervise(
    child: subprocess.Popen[str] | ForkedChild,
    ended: _Ended,
    should_stop: Callable[[], bool],
    timeout: float | None,
    kill_after: float,
    memory_limit: int | None,
    what: str,
) -> None:
    """Wait for ``child``; SIGTERM it on a stop request or the timeout, SIGKILL it when it
    has not ended ``kill_after`` seconds later or grows past ``memory_limit`` bytes (said
    in ``ended``)."""
    deadline = time.monotonic() + timeout if timeout is not None else math.inf
    sent_at = math.inf
    while child.poll() is None:
        now = time.monotonic()
        if memory_limit is not None and (resident := resident_bytes(child.pid) or 0) > memory_limit:
            limit_mib = memory_limit / 2**20
            ended.killed = (
                f"{resident / 2**20:.0f} MiB resident, over its {limit_mib:.0f} MiB limit"
            )
            ended.kill_reason = "memory"
            log.error("%s is over its memory limit: killing it (%s)", what, ended.killed)
            _kill_tree(child.pid)
        elif ended.stopped_by is None and (should_stop() or now >= deadline):
            ended.timed_out = now >= deadline
            ended.stopped_by = "a stop request" if now < deadline else f"the {timeout}s timeout"
            log.warning("stopping %s: %s (SIGTERM)", what, ended.stopped_by)
            child.send_signal(signal.SIGTERM)
            sent_at = now
        elif now >= sent_at + kill_after:
            ended.killed = f"still running {kill_after:g}s after SIGTERM ({ended.stopped_by})"
            log.error("%s still running %.0fs after SIGTERM: killing it", what, kill_after)
            _kill_tree(child.pid)
            sent_at = math.inf
        _wait_a_look(child, _POLL_SECONDS)


def _wait_a_look(child: subprocess.Popen[str] | ForkedChild, seconds: float) -> None:
    """Wait up to ``seconds`` for ``child`` to end, and no longer once it has: a run's end
    reaches the daemon as it happens, not at the next look (a sleep between looks said it
    up to 0.2 s late, 0.1 s on average, every run)."""
    with contextlib.suppress(subprocess.TimeoutExpired):
        child.wait(timeout=seconds)


def resident_bytes(pid: int) -> int | None:
    """Resident memory of ``pid`` and its children (Linux ``/proc``); None where unknown."""
    total = 0
    for member in _tree(pid):
        try:
            with open(f"/proc/{member}/statm") as handle:
                total += int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        except (OSError, ValueError, IndexError):
            continue
    return total or None


def _tree(pid: int) -> list[int]:
    """``pid`` and every process below it, the children of each of its threads (Linux
    only: from /proc)."""
    tree, i = [pid], 0
    while i < len(tree):
        for task in Path(f"/proc/{tree[i]}/task").glob("*"):
            with contextlib.suppress(OSError):  # it has just exited
                tree += [int(c) for c in (task / "children").read_text().split()]
        i += 1
    return tree


def _kill_tree(pid: int) -> None:
    """SIGKILL ``pid`` and every process below it.

    torchrun starts each rank in a session of its own, so neither killing torchrun nor
    its process group reaches them; a rank left alive would also hold our stdout pipe
    open, and the reader would never end.
    """
    for member in _tree(pid):  # collected before killing: an orphan is re-parented to init
        with contextlib.suppress(ProcessLookupError):
            os.kill(member, signal.SIGKILL)


def _read_stdout(
    stream: IO[str],
    output: _Ended,
    on_log: Callable[[TrainingSummary], None] | None,
    on_diagnostics: Callable[[Mapping[str, float]], object] | None = None,
    on_precision: Callable[[PrecisionName], object] | None = None,
) -> None:
    for line in stream:
        try:
            data = json.loads(line)
        except ValueError:
            data = None
        if not isinstance(data, dict):
            continue
        if "progress" in data:
            if on_log is not None:
                on_log(TrainingSummary.from_json(data["progress"]))
        elif set(data) == {"precision"}:  # decided, before the first step
            if on_precision is not None and data["precision"] in PRECISIONS:
                on_precision(data["precision"])
        elif set(data) == {"diagnostics"}:  # a live line; a result has a diagnostics field too
            if on_diagnostics is not None and isinstance(data["diagnostics"], dict):
                values = data["diagnostics"].items()
                on_diagnostics({k: math.nan if v is None else float(v) for k, v in values})
        elif set(data) == {"set_aside"}:  # a state file the child set aside: counted here
            SetAside.report_relayed(data["set_aside"])
        elif "error" in data and "kind" in data:
            output.error = data
        elif "agent" in data:
            output.result = data


_LEVELS = logging.getLevelNamesMapping() | {"EXCEPTION": logging.ERROR}
# A plain stderr line at warning: error words, or torchrun's own W/E/F records
# ("W0115 10:00:00.123 4242 torch/distributed/run.py:792] ...").
_LOOKS_LIKE_ERROR = re.compile(r"(?i:error|exception|traceback|fail|fatal)|^[WEF]\d{4} ")


def relay_stderr(stream: IO[str]) -> None:
    """Re-emit each line of ``stream`` through the ``genesis_fp16.torchrun`` logger, in order.

    A JSON object with an ``event`` is a rank's log record: it keeps its level and fields,
    its own ``timestamp`` and ``logger`` become ``child_timestamp`` and ``child_logger``.
    Any other line is one ``torchrun stderr`` record with ``line=``: at warning when it
    looks like an error (or belongs to a traceback), at info otherwise; blank lines are
    dropped.

    >>> import io, structlog.testing
    >>> with structlog.testing.capture_logs() as logs:  # the daemon's: in a thread, to EOF
    ...     relay_stderr(io.StringIO('{"event": "step 3", "logger": "x"}\\nOSError: full\\n'))
    >>> [(r["event"], r["log_level"], r.get("child_logger")) for r in logs]
    [('step 3', 'info', 'x'), ('torchrun stderr', 'warning', None)]
    """
    in_traceback = False
    for raw in stream:
        line = raw.rstrip("\n")
        if not line.strip():  # a blank record says nothing (the train command ends with one)
            continue
        try:
            record = _json_record(line)
            if record is not None:
                _relay_record(record)
            else:
                in_traceback = _relay_line(line, in_traceback)
        except Exception:  # one odd line must not stop the draining
            log.exception("could not relay a line of torchrun's stderr: %r", line)


def _json_record(line: str) -> dict[str, Any] | None:
    if not line.startswith("{"):
        return None
    try:
        data = json.loads(line)
    except ValueError:
        return None
    return data if isinstance(data, dict) and isinstance(data.get("event"), str) else None


def _relay_record(record: dict[str, Any]) -> None:
    fields = dict(record)
    event = fields.pop("event")
    level = _LEVELS.get(str(fields.pop("level", "info")).upper(), logging.INFO)
    for key in ("timestamp", "logger"):  # ours would overwrite them
        if key in fields:
            fields[f"child_{key}"] = fields.pop(key)
    relay_log.log(level, event, **fields)


def _relay_line(line: str, in_traceback: bool) -> bool:
    """Log one plain line; return whether the next line may still be in a traceback."""
    error = in_traceback or _LOOKS_LIKE_ERROR.search(line) is not None
    relay_log.log(logging.WARNING if error else logging.INFO, "torchrun stderr", line=line)
    # A traceback's frames are indented; its last line (the exception) is not.
    return line.startswith("Traceback") or (in_traceback and line[:1].isspace())
