"""The run worker: one process that has imported torch once, and forks each run's child.

A fresh ``python -m genesis_fp16 train`` spends seconds importing torch and
``torch._dynamo`` (the first ``torch.optim`` optimizer imports it) before its first step:
benchmarks/results/run_start_cpu-amd-epyc-2-cores.md. So the daemon starts this worker
once, with an ordinary exec (``python -P -m genesis_fp16.commands.zygote FD``, the run's
environment), and it imports :data:`PRELOAD` and then waits. For each run the daemon
sends, over a Unix socket, the command's arguments, environment and working directory, and
the run's three standard descriptors (the watched stdin pipe, the stdout and stderr pipes)
with ``SCM_RIGHTS``; the worker forks, and the child, in a session of its own, takes those
descriptors as 0, 1 and 2 and runs the command as ``python -m genesis_fp16`` would, in the
same interpreter state a fresh one reaches after its imports. The daemon supervises it as
it supervises an exec'd child (:class:`ForkedChild`): a pidfd for signals and its end, the
exit status reported by the worker over a socket of the run's own.

Rules it keeps:

- **It forks from one thread.** The daemon has many threads (jobs, HTTP, relays); only
  this worker, single-threaded, forks without exec. It refuses to serve (and the daemon
  starts runs by exec, saying why) if it has more than one thread after its imports.
- **It never touches CUDA.** Importing torch creates no CUDA context (a CUDA build maps
  the driver library, ``libcuda.so``, without initialising the driver: no obstacle to a
  child). Before it serves, the worker checks that ``torch.cuda.is_initialized()`` is
  False, then forks one probe child that uses CUDA where there is a device
  (genesis_fp16/launch/cuda_fork_probe.py) and refuses with the probe's reason when it
  fails or hangs. Each run's child creates its own context as an exec'd one does.
- **Plugins are not pre-imported**: each forked child imports its agent afresh (a
  resident run process keeps it, and is replaced when an imported source file changed),
  so an edited plugin is picked up at the next run. What the interpreter read at its start (its
  ``.pth`` files: an editable install's path or finder) is the worker's for its life, so
  the daemon replaces the worker once anything on its path is installed or upgraded
  (genesis_fp16/launch/run_worker.py says when else).
- **A run costs only its own child**: a crash, a hang or a kill ends that child; the
  worker only forks and reaps. If the worker itself dies or stops, the daemon notices at
  the next run (or when a fork request fails), logs why, and starts another; if it
  cannot, the run is started by exec, with the reason logged.

- **A resident run process per device** (every daemon run with ``nproc`` 1: the request
  says ``{"run": 1, "resident": {"device", "max_mib"}}``): the worker forks one
  process per device at its first run and hands it that device's later runs, with the same
  five descriptors; it answers the daemon with that process's pid and pidfd
  (``{"pid": N, "resident": K}``, its Kth run). That process reports each run's exit code
  itself, and ends after a run it does not trust (genesis_fp16/commands/resident.py says
  when); one that dies mid-run is reaped here, and its run's end reported as a child's
  is. A device whose process is busy gets a child forked for the run, as above (a
  request without ``resident``, as the worker's own tests send, gets one too).

Protocol (``SOCK_SEQPACKET``, one small JSON object per message): the worker first sends
``{"ready": ...}`` (or ``{"error": ...}``), with its ``sys.path`` and the digest of what was
installed there when it started (genesis_fp16/launch/installed_state.py: the daemon
replaces a worker whose path changed since). Each request is ``{"run": 1}`` with five
descriptors: stdin, stdout, stderr, the run's status socket, and a memfd holding
``{"args", "env", "cwd"}`` as JSON (a run's environment may be far larger than a datagram:
the socket's buffer, about 208 KiB, is a datagram's limit). It is answered by
``{"pid": N}`` with the child's pidfd; when the child ends, the worker sends
``{"exit": code}`` (``subprocess``'s convention: negative for a signal) on its status socket.
The daemon does not rely on that last message alone: it watches the child's pidfd itself
(genesis_fp16/launch/run_worker.py), so a worker that stops answering cannot hide a run's end.
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import json
import os
import select
import signal
import socket
import sys
import time
from dataclasses import dataclass
from typing import Any, NoReturn

from genesis_fp16.commands.resident import (
    MAX_MIB,
    enter_request,
    join_threads,
    read_request,
    run_command,
    serve_runs,
)
from genesis_fp16.launch.cuda_fork_probe import cuda_driver_loaded, probe_forked_cuda
from genesis_fp16.launch.installed_state import installed_digest
from genesis_fp16.launch.run_worker import MAX_MESSAGE, REQUEST_FDS
from genesis_fp16.service.std_streams import whole_lines

# What the worker imports before it serves: what every run's child imports before it trains.
PRELOAD = (
    "torch",
    "torch._dynamo",  # the first torch.optim optimizer imports it: seconds
    "genesis_fp16.cli",
    "genesis_fp16.commands.train",
    "genesis_fp16_infrastructure.training",
)
_REAP_SECONDS = 0.05


def _threads() -> int:
    """OS threads of this process (Linux /proc); 1 where unknown."""
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return 1


def _memory_mib() -> dict[str, float]:
    """This process's resident, proportional (PSS) and private memory, in MiB (Linux's
    /proc/self/smaps_rollup; empty where unknown). Private is what it alone costs; the
    shared rest (torch's libraries) is shared with every run's child as well."""
    kib: dict[str, int] = {}
    try:
        with open("/proc/self/smaps_rollup") as handle:
            for line in handle:
                name, _, rest = line.partition(":")
                if rest.strip().endswith("kB"):
                    kib[name] = int(rest.split()[0])
    except (OSError, ValueError):
        return {}
    private = kib.get("Private_Clean", 0) + kib.get("Private_Dirty", 0)
    mib = {"resident_mib": kib.get("Rss", 0), "pss_mib": kib.get("Pss", 0), "private_mib": private}
    return {name: round(value / 1024, 1) for name, value in mib.items()}


def _preload() -> dict[str, Any]:
    """Import :data:`PRELOAD`; say what this process is now (and what a forked probe saw of
    CUDA), or why it must not serve."""
    import importlib

    # torch.cuda.is_available() and device_count() ask NVML, not the CUDA driver, should
    # an import call them (a forked child gets its own environment back).
    os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")
    started = time.perf_counter()
    for name in PRELOAD:
        importlib.import_module(name)
    import torch

    ready: dict[str, Any] = {
        "pid": os.getpid(),
        "seconds": round(time.perf_counter() - started, 3),
        "threads": _threads(),
        "cuda_initialized": bool(torch.cuda.is_initialized()),
        "cuda_driver_loaded": cuda_driver_loaded(),  # information: mapped, not initialised
        **_memory_mib(),
    }
    if ready["cuda_initialized"]:
        return {"error": "the worker's imports initialised CUDA: a forked child could not use it"}
    if ready["threads"] != 1:
        return {"error": f"the worker has {ready['threads']} threads after its imports"}
    probed = time.perf_counter()
    usable, said = probe_forked_cuda()
    if not usable:
        return {"error": f"a forked child could not use CUDA: {said}"}
    ready.update(cuda_probe=said, probe_seconds=round(time.perf_counter() - probed, 3))
    return {"ready": ready}


def _send(sock: socket.socket, message: dict[str, Any], fds: list[int] | None = None) -> None:
    data = json.dumps(message).encode()
    if fds:
        socket.send_fds(sock, [data], fds)
    else:
        sock.send(data)


@dataclass
class _Resident:
    """A resident run process of this worker (genesis_fp16/commands/resident.py): its pid,
    its channel, and the status socket of the run it is serving (None: idle)."""

    pid: int
    device: str
    channel: socket.socket
    status: socket.socket | None = None


# Resident run processes no longer served, not yet reaped: pid -> the status socket of the
# run they were serving (None: idle), on which the reaping reports their end.
_GOING: dict[int, socket.socket | None] = {}
# Why a device's resident run process ended after its run: said to the next one's first run.
_ENDED: dict[str, str] = {}
# How long a resident run process may take to take a run (it checks its modules' files).
_OFFER_SECONDS = 5.0


def serve(control: socket.socket) -> dict[str, Any] | None:
    """The worker's loop: fork a child per request (or hand it to the device's resident run
    process), report each child's end. Returns the request in a forked child (which then
    runs it); None in the worker when the daemon's end of ``control`` closes."""
    running: dict[int, socket.socket] = {}  # child pid -> its run's status socket
    residents: dict[str, _Resident] = {}  # device -> its resident run process
    while True:
        channels = {r.channel.fileno(): r for r in residents.values()}
        watched: list[Any] = [control, *channels]
        readable, _, _ = select.select(watched, [], [], _REAP_SECONDS)
        for fd in readable:
            if fd in channels:
                _heard(channels[fd], residents)
        _reap(running, residents)
        if control not in readable:
            continue
        try:
            data, fds, _, _ = socket.recv_fds(control, MAX_MESSAGE, REQUEST_FDS)
        except OSError:
            data, fds = b"", []
        if not data:  # the daemon is gone: its runs watch their own stdin
            return None
        options = json.loads(data).get("resident")
        if (
            options is not None
            and len(fds) == REQUEST_FDS
            and _hand_to_resident(options, fds, control, running, residents)
        ):
            continue  # else its device's process is busy: this run gets a child of its own
        try:
            request = read_request(fds)
        except (OSError, ValueError) as exc:
            for fd in fds:
                os.close(fd)
            _send(control, {"error": f"an unreadable request: {exc}"})
            continue
        status = socket.socket(fileno=fds[3])
        sys.stdout.flush()
        sys.stderr.flush()
        # SIGTERM is held from the fork until the child has its start-up handler (as
        # ``python -m genesis_fp16`` holds one that comes while it imports).
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
        pid = os.fork()
        if pid == 0:
            _become_child(request, fds, control, [status, *running.values(), *_held(residents)])
            return dict(request)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
        for fd in fds[:3]:
            os.close(fd)
        running[pid] = status
        pidfd = os.pidfd_open(pid)  # before any reaping: it names this child, race-free
        try:
            _send(control, {"pid": pid}, [pidfd])
        finally:
            os.close(pidfd)


def _held(residents: dict[str, _Resident]) -> list[socket.socket]:
    """The sockets this worker holds for its resident run processes (a child closes them)."""
    held = [r.channel for r in residents.values()]
    held += [r.status for r in residents.values() if r.status is not None]
    return held + [sock for sock in _GOING.values() if sock is not None]


def _heard(resident: _Resident, residents: dict[str, _Resident]) -> None:
    """A message from a resident run process: its run ended and it is idle, or it is going
    (EOF: the reaping reports its run's end)."""
    try:
        data = resident.channel.recv(MAX_MESSAGE)
    except OSError:
        data = b""
    said = json.loads(data) if data else {}
    if resident.status is not None and ("idle" in said or "ending" in said):
        resident.status.close()  # it reports the run's end itself
        resident.status = None
    if "ending" in said:
        _ENDED[resident.device] = f"{resident.pid}, the one before, ended: {said['ending']}"
    if not data or "ending" in said:
        _forget(resident, residents)


def _forget(resident: _Resident, residents: dict[str, _Resident]) -> None:
    """Stop handing runs to ``resident`` (ending or ended); the status socket of a run it
    serves goes to the reaping, which reports that run's end."""
    for device, known in list(residents.items()):
        if known is resident:
            del residents[device]
    resident.channel.close()
    _GOING[resident.pid] = resident.status


def _hand_to_resident(
    options: dict[str, Any],
    fds: list[int],
    control: socket.socket,
    running: dict[int, socket.socket],
    residents: dict[str, _Resident],
) -> bool:
    """Hand a run to its device's resident run process (forked now if there is none, or
    none it can trust), and answer the daemon with its pid; False when that process is
    busy with another run (the caller forks a child for this one)."""
    device = str(options.get("device", "cpu"))
    resident = residents.get(device)
    if resident is not None and select.select([resident.channel], [], [], 0)[0]:
        _heard(resident, residents)  # said before its run's end reached the daemon
        resident = residents.get(device)
    if resident is not None and resident.status is not None:
        return False
    note = None
    for _ in range(2):
        if resident is None:
            note = note or _ENDED.pop(device, None)
            resident = _fork_resident(device, options, fds, control, running, residents)
        answer = _offer(resident, fds, note)
        if "taken" in answer:
            resident.status = socket.socket(fileno=os.dup(fds[3]))
            for fd in fds:
                os.close(fd)
            pidfd = os.pidfd_open(resident.pid)  # not reaped: it names this process
            try:
                _send(control, {"pid": resident.pid, "resident": answer["taken"]}, [pidfd])
            finally:
                os.close(pidfd)
            return True
        note = f"{resident.pid}, the one before, was replaced: {answer.get('stale')}"
        print(f"genesis-fp16 run worker: resident run process {note}", file=sys.stderr)
        with contextlib.suppress(ProcessLookupError):
            os.kill(resident.pid, signal.SIGKILL)
        _forget(resident, residents)
        resident = None
    for fd in fds:
        os.close(fd)
    _send(control, {"error": f"no resident run process took the run: {note}"})
    return True


def _offer(resident: _Resident, fds: list[int], note: str | None) -> dict[str, Any]:
    """Send the run to ``resident``; its answer (a ``stale`` one when it gave none in time)."""
    try:
        socket.send_fds(resident.channel, [json.dumps({"run": 1, "note": note}).encode()], fds)
        if not select.select([resident.channel], [], [], _OFFER_SECONDS)[0]:
            return {"stale": f"no answer within {_OFFER_SECONDS:g} s"}
        data = resident.channel.recv(MAX_MESSAGE)
    except OSError as exc:
        return {"stale": f"its channel failed: {exc}"}
    return json.loads(data) if data else {"stale": "it ended"}


def _fork_resident(
    device: str,
    options: dict[str, Any],
    fds: list[int],
    control: socket.socket,
    running: dict[int, socket.socket],
    residents: dict[str, _Resident],
) -> _Resident:
    """Fork ``device``'s resident run process (which never returns here)."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    sys.stdout.flush()
    sys.stderr.flush()
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    pid = os.fork()
    if pid == 0:
        os.setsid()  # as Popen(start_new_session=True): a Ctrl-C at the daemon goes through it
        for fd in fds:  # the worker sends them again, over the channel
            os.close(fd)
        for sock in [ours, control, *running.values(), *_held(residents)]:
            sock.close()
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        serve_runs(theirs, device, float(options.get("max_mib") or MAX_MIB))
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
    theirs.close()
    residents[device] = _Resident(pid, device, ours)
    return residents[device]


def _reap(running: dict[int, socket.socket], residents: dict[str, _Resident]) -> None:
    while running or residents or _GOING:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        for resident in list(residents.values()):  # ended before a word (killed)
            if resident.pid == pid:
                _forget(resident, residents)
        sock = running.pop(pid) if pid in running else _GOING.pop(pid, None)
        if sock is not None:
            with contextlib.suppress(OSError):  # the daemon gave up on this run
                _send(sock, {"exit": os.waitstatus_to_exitcode(status)})
            sock.close()


def _become_child(
    request: dict[str, Any], fds: list[int], control: socket.socket, others: list[socket.socket]
) -> None:
    """In the forked child: the run's descriptors as 0, 1, 2, its environment and
    directory, a session of its own, SIGTERM held until the command takes it over."""
    os.setsid()  # as Popen(start_new_session=True): a Ctrl-C at the daemon goes through it
    for target, fd in zip((0, 1, 2), fds[:3], strict=True):
        os.dup2(fd, target)
    for fd in fds[:3]:
        os.close(fd)
    control.close()
    for sock in others:  # other runs' status sockets, and this run's: the worker's
        sock.close()
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    enter_request(request)


def run_child(request: dict[str, Any]) -> NoReturn:
    """What ``python -m genesis_fp16 ARGS`` does after its imports, and how it ends: its
    non-daemon threads joined, its ``atexit`` functions run and its output flushed, as an
    interpreter's exit does; then ``os._exit``, without tearing down every module. That
    teardown would write to every object the worker imported (seconds of copy-on-write
    page copies under load) for nothing: the process is about to end."""
    code = run_command(list(request["args"]))
    try:
        join_threads()
        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(code)


def main(argv: list[str]) -> int:
    """``python -P -m genesis_fp16.commands.zygote FD``: preload, say so on FD, serve."""
    whole_lines()  # the streams its forked runs write their lines through
    control = socket.socket(fileno=int(argv[0]))
    # Before the imports: an install made while they run is seen as a change.
    installed = {"sys_path": list(sys.path), "installed": installed_digest(sys.path)}
    try:
        ready = _preload()
        if "ready" in ready:
            ready["ready"].update(installed)
    except Exception as exc:  # an import that fails: the daemon starts runs by exec
        ready = {"error": f"preloading failed: {type(exc).__name__}: {exc}"}
    _send(control, ready)
    if "error" in ready:
        return 1
    gc.freeze()  # what the imports made is never collected: a child's GC leaves it shared
    request = serve(control)
    if request is None:
        return 0
    run_child(request)  # in a forked child, which ends there


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
