"""gpu-check's warm parent: each gpu test file's pytest process, forked from one that has
already imported torch, instead of started afresh.

Each gpu test file runs in a pytest process of its own, so that no test can leave the next
file a stuck generator or a poisoned stream. Started afresh, each of those processes paid the
same imports again: torch, ``torch._dynamo`` (which the first optimizer pulls in: 3.55 s on
the H200 host, benchmarks/results/gpu_probe_capture_heal_h200.json), pytest and hypothesis:
9-12 s a file on the H200 on 2026-11-26, most of a file's time, 14 files in all. This
parent pays them once and forks one child per file.

It never touches CUDA: a process that forks after initialising CUDA hands its children a
driver they cannot use (one that merely has ``libcuda.so`` mapped, as importing a CUDA build
of torch leaves it, does not). After its imports it checks that it has one thread and that
torch has not initialised CUDA, then forks one probe child that uses CUDA where there is a
device (genesis_fp16/launch/cuda_fork_probe.py); if a check or the probe fails, or the
probe hangs, it refuses (``{"refused": why}``) and gpu-check starts each file's process
afresh, as before. What a child shares with the parent is imported code and nothing the
tests make: every CUDA object, generator state and test module is made in the child, after
the fork.

Protocol, JSON lines: it prints ``{"ready": true}`` or ``{"refused": "..."}``; then for
each line it reads, ``{"args": [...pytest arguments], "log": path, "cwd": dir}``, it forks
a child that runs ``pytest.main(args)`` in a session of its own with its output in ``log``,
prints ``{"pid": N}`` at once and ``{"pid": N, "exit": code}`` when the child ends. The
caller kills a child that outlives its timeout with ``os.killpg(N, SIGKILL)``. End of input
ends it.

    python tests/gpu_fork_runner.py
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import threading
from pathlib import Path

# What every gpu test file's process imports first; importing them here is the point.
WARM_MODULES = ("torch", "torch._dynamo", "numpy", "pytest", "hypothesis")


def warm_up() -> str | None:
    """Import what the children need; the reason to refuse forking, or None."""
    for name in WARM_MODULES:
        try:
            importlib.import_module(name)
        except ImportError:
            continue  # the child will say so itself, as a fresh process would
    import torch

    if threading.active_count() != 1:
        return f"{threading.active_count()} threads after the imports: a fork copies one"
    if torch.cuda.is_initialized():
        return "torch initialised CUDA during the imports"
    # Imported here, not at the top: run as a script, tests/genesis_fp16/ shadows the
    # package until main() has taken tests/ off sys.path.
    from genesis_fp16.launch import cuda_fork_probe

    usable, said = cuda_fork_probe.probe_forked_cuda()
    if not usable:
        return f"a forked child could not use CUDA: {said}"
    return None


def run_child(args: list[str], log: str, cwd: str) -> int:
    """In the forked child: its own session, its output to ``log``, pytest, the exit code."""
    os.setsid()
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    sys.stdout = open(1, "w", buffering=1, closefd=False)  # noqa: SIM115  lives as the child
    sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115
    os.chdir(cwd)
    sys.path.insert(0, cwd)
    import pytest

    code = int(pytest.main(args))
    sys.stdout.flush()
    sys.stderr.flush()
    return code


def serve(stdin=sys.stdin, stdout=sys.stdout) -> None:  # type: ignore[no-untyped-def]
    """Answer requests until end of input (see the module docstring)."""
    for line in stdin:
        if not line.strip():
            continue
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                code = run_child(list(request["args"]), str(request["log"]), str(request["cwd"]))
            finally:
                os._exit(code)  # no interpreter teardown in a forked child
        print(json.dumps({"pid": pid}), file=stdout, flush=True)
        _, status = os.waitpid(pid, 0)
        print(
            json.dumps({"pid": pid, "exit": os.waitstatus_to_exitcode(status)}),
            file=stdout,
            flush=True,
        )


def main() -> int:
    # Run as a script, sys.path[0] is tests/, whose genesis_fp16/ folder would shadow the
    # package (see gpu_check.py's __main__); the children put their cwd first instead.
    if sys.path and Path(sys.path[0]).resolve() == Path(__file__).resolve().parent:
        del sys.path[0]
    refused = warm_up()
    if refused is not None:
        print(json.dumps({"refused": refused}), flush=True)
        return 0
    print(json.dumps({"ready": True}), flush=True)
    serve()
    return 0


if __name__ == "__main__":
    sys.exit(main())
