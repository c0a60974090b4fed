"""Can a child forked from this process use CUDA? Found out by forking one that does.

A process that initialised the CUDA driver before a fork (made a context, or asked the
driver itself: ``cudaGetDeviceCount``) hands its children a driver they cannot use. One
that merely has the driver library mapped does not: importing a CUDA build of torch maps
``libcuda.so`` without calling ``cuInit``. Neither ``torch.cuda.is_initialized()`` (torch's
own context only) nor the process's maps (the library, called or not) tell the two apart
for certain, so the processes that fork without exec, the run worker
(genesis_fp16/commands/zygote.py) and gpu-check's warm parent (tests/gpu_fork_runner.py),
fork one probe child before they serve: where torch sees a CUDA device it puts a tiny
tensor on it, adds, synchronises and exits 0. A failure, an exit code other than 0 or a
probe still running after :data:`PROBE_SECONDS` (then killed) is why they refuse to fork::

    usable, said = probe_forked_cuda()  # (True, "no CUDA device") on a CPU host
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from typing import NoReturn

# How long the probe child may take: a first CUDA context is seconds at most (0.31 s on
# the H200 host); one still running after this is hung, and killed.
PROBE_SECONDS = 60.0
_POLL_SECONDS = 0.05
_SAID_BYTES = 2000  # what the child writes to its pipe: one write, whole


def cuda_driver_loaded() -> bool:
    """Whether this process has the CUDA driver library (``libcuda.so``) mapped: information
    only. A CUDA build of torch maps it at import without initialising the driver, and a
    library merely loaded is no obstacle to a forked child's CUDA (Linux; False elsewhere)."""
    try:
        with open("/proc/self/maps") as handle:
            return any("libcuda.so" in line for line in handle)
    except OSError:
        return False


def use_cuda() -> str:
    """In the probe child: a tiny op on the first CUDA device, synchronised; what it saw.
    Raises when CUDA fails. Where torch sees no device (through NVML where the caller set
    ``PYTORCH_NVML_BASED_CUDA_CHECK=1``), nothing is tried."""
    import torch

    if not torch.cuda.is_available():
        return "no CUDA device"
    ones = torch.ones(4, device="cuda")
    total = (ones + ones).sum()
    torch.cuda.synchronize()
    if float(total.item()) != 8.0:
        raise RuntimeError(f"2 * ones(4) summed to {total.item()} on {ones.device}")
    return f"used {ones.device} ({torch.cuda.get_device_name(ones.device)})"


def probe_forked_cuda(seconds: float | None = None) -> tuple[bool, str]:
    """Fork a child that runs :func:`use_cuda` and wait for it, ``seconds`` at most
    (:data:`PROBE_SECONDS` by default): ``(True, what it saw)`` when it exited 0, else
    ``(False, why not)`` (its error, its exit code, or that it hung and was killed). Call it
    from a single-threaded process."""
    seconds = PROBE_SECONDS if seconds is None else seconds
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_end)
        _probe_child(write_end)
    os.close(write_end)
    try:
        code = _wait(pid, seconds)
        said = _read_all(read_end)
    finally:
        os.close(read_end)
    if code is None:
        return False, f"the probe did not finish in {seconds:g} s (killed)"
    if code != 0:
        ended = f"killed by signal {-code}" if code < 0 else f"exit code {code}"
        return False, f"{said} ({ended})" if said else f"the probe ended with {ended}"
    return True, said


def _probe_child(write_end: int) -> NoReturn:
    """The forked probe: :func:`use_cuda`, what it saw or its error to ``write_end``, then
    ``os._exit`` (no interpreter teardown, no ``atexit``: the parent's, not its own)."""
    code = 1
    try:
        try:
            said = use_cuda()
            code = 0
        except BaseException as exc:
            said = f"{type(exc).__name__}: {exc}"
        os.write(write_end, said.encode(errors="replace")[:_SAID_BYTES])
    finally:
        os._exit(code)


def _wait(pid: int, seconds: float) -> int | None:
    """The child's exit code (negative: the signal), or None when it ran past ``seconds``
    and was killed (then reaped)."""
    deadline = time.monotonic() + seconds
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        if time.monotonic() >= deadline:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return None
        time.sleep(_POLL_SECONDS)


def _read_all(fd: int) -> str:
    """What the (ended) child wrote; never blocks on a pipe a stray grandchild holds open."""
    os.set_blocking(fd, False)
    chunks = []
    with contextlib.suppress(BlockingIOError):
        while chunk := os.read(fd, 4096):
            chunks.append(chunk)
    return b"".join(chunks).decode(errors="replace").strip()
