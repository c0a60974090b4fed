"""What the daemon hands a run's child process, and how the child ends with the daemon.

A run, which always trains outside the daemon's process (in its device's resident run
process, or torchrun's ranks), gets three things from the daemon and nothing from anywhere else:

- **The run file** (:func:`write_run_file`, :func:`read_run_file`): the whole
  :class:`TrainRequest` and the daemon's log level. The child reads no ``.env`` and no
  setting from its environment (:func:`child_env` removes them): a rejected edit of
  ``.env`` is the daemon's to report, and its runs go on with the configuration it kept.
- **An interpreter that imports nothing from its working directory**: ``python -P``
  (:data:`SAFE_PYTHON`), and ``PYTHONSAFEPATH=1`` in its environment for the processes it
  starts (torchrun starts its ranks as ``python -u -m genesis_fp16``). The systemd unit
  and the container run the daemon in its state folder; a ``structlog.py`` or an
  ``agents/`` folder there must not run inside every child.
- **A pipe on its standard input** whose write end only the daemon holds, and never
  writes to. EOF on it means the daemon is gone, however it went (``kill -9``, an OOM
  kill, a crash): :func:`watch_daemon` then stops the run as SIGTERM does (at its next
  step, with a checkpoint) and ends the process :data:`ORPHAN_GRACE_SECONDS` later if it
  is still there (a plugin hung in ``train()``). A pipe, not ``PR_SET_PDEATHSIG``: that is
  Linux-only, and fires when the *thread* that started the child ends, not the daemon.

>>> write_run_file(path, request, log_level="INFO")     # the daemon  # doctest: +SKIP
>>> request, log_level = read_run_file(path)             # the child   # doctest: +SKIP
"""

from __future__ import annotations

import os
import select
import signal
import threading
import time
from collections.abc import Mapping
from pathlib import Path

from genesis_fp16.config.settings_sources import ours
from genesis_fp16.plugin_api import TrainRequest
from genesis_fp16_infrastructure.api import RUN_FILE

# Before the interpreter's first import: no working directory (or script folder) on sys.path.
SAFE_PYTHON = ("-P",)
# How long an orphaned run has to reach its next step and checkpoint before it ends
# anyway; the systemd unit restarts a crashed daemon 10 s later (RestartSec).
ORPHAN_GRACE_SECONDS = 5.0
# Exit code of a child ended by the watch: the daemon that would read it is gone.
ORPHAN_EXIT_CODE = 3


def write_run_file(path: Path, request: TrainRequest, log_level: str) -> None:
    """Write what a child needs for ``request``, atomically: the request and the log level.

    The child watches its standard input for the daemon's end (:func:`watch_daemon`), so
    the launcher must start it with ``stdin=subprocess.PIPE`` and keep that pipe open.
    """
    run = {"request": request.to_json(), "log_level": log_level}
    RUN_FILE.write(path, run)  # a folder or FIFO in the way: set aside


def read_run_file(path: Path) -> tuple[TrainRequest, str]:
    """``(request, log_level)`` from a file :func:`write_run_file` wrote.

    Raises ``OSError``, ``ValueError`` (``UnusableStateFile``: a folder, a FIFO, over its
    bound), ``TypeError`` or ``KeyError`` for a file that is not one (the caller names it
    in one line).
    """
    run = RUN_FILE.read(path)
    if run is None:
        raise FileNotFoundError(2, "no run file", str(path))
    level = run["log_level"]
    if not isinstance(level, str):
        raise TypeError(f"log_level {level!r} is not a level name")
    return TrainRequest.from_json(run["request"]), level


def child_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The environment of a run's child: ``environ`` without the daemon's settings (the
    run file carries what the child needs) or a Kubeflow pod's ``PET_*`` layout (which
    would become torchrun's flags: the daemon's ranks stay on this host), with
    ``PYTHONSAFEPATH=1``, and without empty ``PYTHONPATH`` entries (an empty entry means
    the working directory: ``PYTHONPATH=/opt/plugins:`` is a classic way to get one)."""
    names = (k for k in environ if not ours(k))  # the daemon's settings: none reaches a child
    env = {k: environ[k] for k in names if not k.startswith("PET_")}
    env["PYTHONSAFEPATH"] = "1"
    if "PYTHONPATH" in env:
        kept = [entry for entry in env["PYTHONPATH"].split(os.pathsep) if entry]
        if kept:
            env["PYTHONPATH"] = os.pathsep.join(kept)
        else:
            del env["PYTHONPATH"]
    return env


def watch_daemon(fd: int = 0, grace: float = ORPHAN_GRACE_SECONDS) -> threading.Thread:
    """Watch ``fd`` (the daemon's pipe) in a thread: at EOF, SIGTERM this process, which
    stops the run at its next step with a checkpoint; ``grace`` seconds later, if it has
    not ended, end it at once (exit code :data:`ORPHAN_EXIT_CODE`). :func:`stop_watching`
    ends the watch without acting (a resident run process, whose run ended, serves on).

    >>> watch_daemon()  # in the child, before it trains  # doctest: +SKIP
    """
    wake_r, wake_w = os.pipe()
    thread = threading.Thread(
        target=_wait_for_eof, args=(fd, grace, wake_r), name="daemon-watch", daemon=True
    )
    _WATCHES.append((thread, wake_w))
    thread.start()
    return thread


# The watches now running, each with the write end of the pipe that ends it quietly.
_WATCHES: list[tuple[threading.Thread, int]] = []


def stop_watching() -> None:
    """End every watch :func:`watch_daemon` started, without acting, and wait for them:
    the run they watched ended, and its process goes on (genesis_fp16/commands/resident.py)."""
    while _WATCHES:
        thread, wake_w = _WATCHES.pop()
        os.close(wake_w)  # EOF on the wake pipe: the watch returns
        thread.join()


def _wait_for_eof(fd: int, grace: float, wake: int) -> None:
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    poller.register(wake, select.POLLIN)
    try:
        while True:
            ready = dict(poller.poll())
            if wake in ready:  # stop_watching(): the run ended, the process serves on
                return
            if not os.read(fd, 4096):  # the daemon never writes: anything read is ignored
                break
    except OSError:  # a closed or broken descriptor says the same thing as EOF
        pass
    finally:
        os.close(wake)
    # Nobody reads our stdout or stderr any more: a print to them would raise
    # BrokenPipeError and end the run before its checkpoint. /dev/null takes both.
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(grace)
    os._exit(ORPHAN_EXIT_CODE)
