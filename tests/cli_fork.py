"""`python -m genesis_fp16 ARGS` as a child forked from a process that has imported torch.

The daemon does this for its runs (its run worker, genesis_fp16/commands/zygote.py); the
tests do it for the commands they run, with the run worker's own child set-up.

A command run as a fresh interpreter spends about 3 CPU-seconds importing torch before it
reads its first argument: for the suite's hundreds of commands, that import is most of
their cost. The tests whose subject is what a command does (its output, its exit code,
the files it leaves) run it through :func:`run_cli` instead. A server process per pytest
worker imports torch and the daemon's command-line module once; each call forks a child
of it that sets up what a fresh ``python -m genesis_fp16`` would have (the call's argv,
environment, working directory, sys.path with the working directory and PYTHONPATH first,
standard streams on the call's pipes, a session of its own as a run's child) and runs
the command-line's main as the run worker's child does. The child is a real process: its
exit code (or the signal that killed it), its stdout and stderr, and everything it writes
are its own, and nothing it does reaches the server or the next call.

What is not the same as a fresh interpreter, so that a test whose subject it is runs the
command with subprocess instead: the modules the server imported are not imported again
(import-time behaviour, the torch-free start, a module shadowing torch or the daemon's
package), resource limits and preexec hooks, and the child's parent (the server).
"""

from __future__ import annotations

import atexit
import contextlib
import importlib
import io
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
# What the server imports beyond the command-line module: the built-in agents' plugins
# (their entry points' modules) and the library's judged run.
PREIMPORTED = (
    "genesis_fp16_agents.se_darwin",
    "genesis_fp16_agents.rlhf_ppo",
    "genesis_fp16_infrastructure.judging.run",
)
_SERVER: dict[int, tuple[subprocess.Popen[bytes], str]] = {}
_LOCK = threading.Lock()


def run_cli(
    args: Sequence[str],
    *,
    cwd: str | os.PathLike[str],
    env: Mapping[str, str],
    timeout: float,
    stdout: int | None = subprocess.PIPE,
    stderr: int | None = subprocess.PIPE,
    stdin: int | None = subprocess.DEVNULL,
) -> subprocess.CompletedProcess[str]:
    """``subprocess.run([sys.executable, "-m", "genesis_fp16", *args], text=True, ...)``,
    run in a forked child of this worker's server: stdout and stderr are PIPE (captured),
    None (this process's own), DEVNULL, subprocess.STDOUT (stderr only) or a file
    descriptor, and stdin any of those but PIPE; a run past ``timeout`` is killed and
    raises subprocess.TimeoutExpired."""
    command = [sys.executable, "-m", "genesis_fp16", *args]
    ends: list[int] = []  # the child's ends, sent to the server, closed here once sent
    readers: dict[str, int] = {}
    null = os.open(os.devnull, os.O_RDWR)

    def end(kind: str, spec: int | None, own: int) -> int:
        if spec == subprocess.PIPE:
            read, write = os.pipe()
            readers[kind] = read
            ends.append(write)
            return write
        if spec is None:
            return own
        if spec == subprocess.DEVNULL:
            return null
        return spec

    if stdin == subprocess.PIPE:
        raise ValueError("run_cli gives a command no input: stdin is DEVNULL, None or an fd")
    child_in = end("stdin", stdin, 0)
    child_out = end("stdout", stdout, 1)
    child_err = child_out if stderr == subprocess.STDOUT else end("stderr", stderr, 2)
    request = {"args": list(args), "cwd": os.fspath(cwd), "env": dict(env)}
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(_server_address())
        socket.send_fds(conn, [json.dumps(request).encode()], [child_in, child_out, child_err])
    finally:
        for fd in (*ends, null):
            os.close(fd)
    replies = conn.makefile("r")
    pid = int(json.loads(replies.readline())["pid"])
    captured: dict[str, list[bytes]] = {kind: [] for kind in readers}

    def drain(kind: str) -> None:
        with os.fdopen(readers[kind], "rb") as pipe:
            while chunk := pipe.read1(65536):
                captured[kind].append(chunk)

    threads = [threading.Thread(target=drain, args=(kind,), daemon=True) for kind in readers]
    for thread in threads:
        thread.start()
    conn.settimeout(timeout)
    try:
        line = replies.readline()
    except TimeoutError:
        _kill(pid)
        for thread in threads:
            thread.join(10)
        out = b"".join(captured.get("stdout", []))
        err = b"".join(captured.get("stderr", []))
        raise subprocess.TimeoutExpired(command, timeout, out, err) from None
    finally:
        conn.settimeout(None)
    returncode = int(json.loads(line)["returncode"])
    conn.close()
    for thread in threads:
        thread.join()
    out_text = b"".join(captured["stdout"]).decode() if "stdout" in captured else None
    err_text = b"".join(captured["stderr"]).decode() if "stderr" in captured else None
    return subprocess.CompletedProcess(command, returncode, out_text, err_text)


def _kill(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


def _server_address() -> str:
    """This worker's server, started on first use and stopped at its exit."""
    with _LOCK:
        found = _SERVER.get(os.getpid())
        if found is not None and found[0].poll() is None:
            return found[1]
        folder = tempfile.mkdtemp(prefix="cli-fork-")
        address = os.path.join(folder, "socket")
        # This checkout's source roots first: in a git worktree the venv's editable install
        # points at another checkout, whose library the server would otherwise preimport.
        roots = [ROOT, ROOT / "agents", ROOT / "infrastructure", ROOT / "tests"]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(map(str, roots))}
        server = subprocess.Popen(
            [sys.executable, "-c", f"import cli_fork; cli_fork.serve({address!r})"],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
        )
        assert server.stdout is not None
        ready = server.stdout.readline()
        if ready.strip() != b"ready":
            server.kill()
            raise RuntimeError(f"the command server did not start: {ready!r}")
        _SERVER[os.getpid()] = (server, address)
        atexit.register(_stop, server, folder)
        return address


def _stop(server: subprocess.Popen[bytes], folder: str) -> None:
    server.kill()
    server.wait()
    shutil.rmtree(folder, ignore_errors=True)


# --- the server --------------------------------------------------------------------


def serve(address: str) -> None:
    """Import what every command imports, then fork a child per connection (module
    docstring); each connection's waiter reports the child's pid, then its return code."""
    import gc

    from genesis_fp16.cli import build_parser
    from genesis_fp16.commands.zygote import PRELOAD

    for name in PRELOAD:  # what the daemon's run worker imports: torch, torch._dynamo, ...
        importlib.import_module(name)
    build_parser()  # imports every command's module, as each command's parse does
    # The built-in agents, and the library they train through: the library reads no
    # environment at import (tests/test_layering.py), so importing it here changes no call.
    for name in PREIMPORTED:
        importlib.import_module(name)
    gc.freeze()  # as the run worker: a child's collections leave the imports' pages shared

    parent = os.getppid()
    base_path = [entry for entry in sys.path if entry not in _pythonpath(os.environ)]
    base_path = [entry for entry in base_path if entry not in ("", os.getcwd())]
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the kernel reaps the waiters
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(address)
    listener.listen(64)
    listener.settimeout(1.0)
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    while os.getppid() == parent:
        try:
            conn, _ = listener.accept()
        except TimeoutError:
            continue
        conn.settimeout(None)
        message, fds, _flags, _address = socket.recv_fds(conn, 1 << 22, 3)
        request = json.loads(message)
        if os.fork() == 0:  # the waiter: forks the command, reports on it, exits
            listener.close()
            _wait_for_command(conn, fds, request, base_path)
        for fd in fds:
            os.close(fd)
        conn.close()


def _wait_for_command(
    conn: socket.socket, fds: list[int], request: dict[str, Any], base_path: list[str]
) -> None:
    code = 1
    try:
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # this one waits for its command
        pid = os.fork()
        if pid == 0:
            _command(fds, request, base_path, [conn])
        for fd in fds:
            os.close(fd)
        conn.sendall(json.dumps({"pid": pid}).encode() + b"\n")
        _, status = os.waitpid(pid, 0)
        returncode = os.waitstatus_to_exitcode(status)
        conn.sendall(json.dumps({"returncode": returncode}).encode() + b"\n")
        code = 0
    finally:
        os._exit(code)


def _pythonpath(env: Mapping[str, str]) -> list[str]:
    return [entry for entry in env.get("PYTHONPATH", "").split(os.pathsep) if entry]


def _command(
    fds: list[int], request: dict[str, Any], base_path: list[str], sockets: list[socket.socket]
) -> None:
    """The child: the daemon's run worker's own child set-up and run (zygote.py's
    ``_become_child`` and ``run_child``: descriptors, session, directory, environment,
    argv, numpy's generator reseeded, SIGTERM held; the CLI's main, its non-daemon threads
    joined, atexit, flushed, ``os._exit``), then what a fresh ``python -m genesis_fp16``
    has and a run's child does not: the working directory and this call's PYTHONPATH first
    on sys.path, and standard streams made for the call's descriptors."""
    try:
        from genesis_fp16.commands import zygote

        zygote._become_child(request, fds, sockets[0], sockets[1:])
        env = request["env"]
        sys.path[:] = [os.getcwd(), *_pythonpath(env), *base_path]
        importlib.invalidate_caches()
        unbuffered = bool(env.get("PYTHONUNBUFFERED"))
        sys.stdin = io.TextIOWrapper(io.BufferedReader(io.FileIO(0, "rb", closefd=False)))
        sys.stdout = _text(1, line=os.isatty(1), through=unbuffered)
        sys.stderr = _text(2, line=True, through=unbuffered, errors="backslashreplace")
        signal.signal(signal.SIGINT, signal.default_int_handler)
        zygote.run_child(request)
    finally:
        os._exit(1)  # run_child ends the process; this only if the set-up failed


def _text(fd: int, *, line: bool, through: bool, errors: str = "strict") -> io.TextIOWrapper:
    """A standard stream as Python's start-up makes it (PYTHONUNBUFFERED: written through)."""
    raw = io.BufferedWriter(io.FileIO(fd, "wb", closefd=False))
    return io.TextIOWrapper(raw, errors=errors, line_buffering=line, write_through=through)
