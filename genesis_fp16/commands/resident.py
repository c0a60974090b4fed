"""The resident run process: one per device, forked once by the run worker
(genesis_fp16/commands/zygote.py), serving that device's runs one after another.

A child forked per run starts from nothing on its device and throws it all away: the CUDA
context, the modules its agent imports, what module-level caches hold. So the worker forks
one process per device instead (every daemon run with ``nproc`` 1: the one isolation
model, docs/daemon.md "Where a run trains"), and hands it each run of that device; what a
run leaves in memory is there for the next one. Each run still comes with its own
descriptors (stdin, stdout, stderr, its status socket, its request in a memfd: zygote.py's
protocol), which this process takes
as 0, 1 and 2 for the run;
it applies the run's environment, directory and arguments, runs the command as
``python -m genesis_fp16`` would, and reports the exit code on the run's status socket.

Nothing is trusted blindly. After each run this process says whether it serves on, and it
ends, after its report, when the run:

- exited non-zero (it raised, or the command failed: what it left is not trusted);
- was stopped by SIGTERM (a stop request, the run's timeout, the daemon's shutdown);
- left a CUDA error (a ``torch.cuda.synchronize()`` that raises);
- left this process over its resident memory bound (:data:`MAX_MIB`, the setting
  ``GENESIS_FP16_RUN_RESIDENT_MAX_MIB``).

Killed (for time, for memory, by hand), it ends with its run: the worker reports its
exit status on the run's status socket. Before it takes a run it checks the source files
of every module it imported since it was forked (the agents' code, not the interpreter's
or its site-packages, which an install changes and the daemon watches: installed_state.py):
one edited since refuses the run, and the worker forks a fresh process for it, so an edited
plugin runs as its new code. Between runs the process-wide state a run may change is put
back: environment, directory, ``sys.argv``, ``sys.path``, signal handlers, logging's
handlers and structlog's context, ``sys.stdout``/``sys.stderr``, warning filters,
``atexit`` functions, the daemon watch, and torch's process-wide settings (threads,
default dtype, deterministic algorithms, float32 matmul precision, TF32, cuDNN benchmark).

Protocol on its channel to the worker (``SOCK_SEQPACKET``, JSON): the worker sends
``{"run": 1, "note": ...}`` with the run's five descriptors; it answers ``{"taken": N}`` (its
Nth run) or ``{"stale": why}`` (then exits, leaving the descriptors to the worker), and after
the run ``{"idle": 1}``, unless it exits.
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import json
import logging
import os
import signal
import socket
import sys
import threading
import traceback
import warnings
from dataclasses import dataclass, field
from typing import Any, NoReturn

from genesis_fp16.launch.run_worker import MAX_MESSAGE, REQUEST_FDS

# The default bound on a resident run process's memory, in MiB, past which it ends after
# its run: the CPU host's process after a se_darwin run holds about 0.6 GiB, a CUDA one a
# few GiB of libraries and context; 8 GiB leaves that room and stops a run that leaks.
MAX_MIB = 8192
# Python's young collections during a run, at the interpreter's threshold of 700 new
# container objects, each walk whatever large container the run holds at that moment (a
# pool's ids as a list, a tuple of 100,000 ids): about 13 ms of a later run at 100,000
# records on the 2-core CPU host, spent mostly inside judging and drift. During a run this
# process collects its young objects only after this many new ones, which such a run does
# not reach, and once the run's exit is reported it collects everything the run left,
# before it waits for the next (:func:`serve_runs`).
RUN_GC_THRESHOLD = 50_000
_MAIN = os.path.join(os.path.dirname(os.path.dirname(__file__)), "__main__.py")


def read_request(fds: list[int]) -> dict[str, Any]:
    """The request in the memfd that came as the fifth descriptor (closed here)."""
    if len(fds) != REQUEST_FDS:
        raise ValueError(f"{len(fds)} descriptors, not {REQUEST_FDS}")
    with os.fdopen(fds.pop(), "rb") as payload:
        payload.seek(0)
        request = json.loads(payload.read())
    if not isinstance(request, dict) or not {"args", "env", "cwd"} <= set(request):
        raise ValueError("not an object with args, env and cwd")
    return request


def exit_status(code: object) -> int:
    """``SystemExit(code)``'s exit status, as the interpreter computes it."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def run_command(args: list[str]) -> int:
    """``python -m genesis_fp16 ARGS`` after its imports: its exit status."""
    from genesis_fp16.cli import main as cli_main

    try:
        return exit_status(cli_main(list(args)))
    except SystemExit as exc:
        return exit_status(exc.code)
    except BaseException:
        traceback.print_exc()
        return 1


def join_threads() -> None:
    """Wait for the non-daemon threads, as an interpreter's exit does."""
    for thread in threading.enumerate():
        if thread is not threading.current_thread() and not thread.daemon:
            thread.join()


@dataclass
class _Baseline:
    """What this process was before its first run, put back after each."""

    env: dict[str, str]
    cwd: str
    handlers: dict[int, Any]
    modules: set[str]
    streams: tuple[Any, Any]
    root: tuple[list[logging.Handler], int]
    excepthook: Any
    path: list[str] = field(default_factory=list)
    warning_filters: list[Any] = field(default_factory=list)
    torch_state: dict[str, Any] = field(default_factory=dict)
    gc_threshold: tuple[int, ...] = ()

    @classmethod
    def take(cls) -> _Baseline:
        handlers: dict[int, Any] = {}
        for signum in signal.valid_signals():
            with contextlib.suppress(OSError, ValueError, TypeError):
                handlers[signum] = signal.getsignal(signum)
        handlers = {k: v for k, v in handlers.items() if v is not None}
        root = logging.getLogger()
        return cls(
            dict(os.environ),
            os.getcwd(),
            handlers,
            set(sys.modules),
            (sys.stdout, sys.stderr),
            (list(root.handlers), root.level),
            threading.excepthook,
            list(sys.path),
            list(warnings.filters),
            _torch_state(),
            gc.get_threshold(),
        )

    def restore(self) -> None:
        for signum, handler in self.handlers.items():
            with contextlib.suppress(OSError, ValueError, TypeError):
                signal.signal(signum, handler)
        os.environ.clear()
        os.environ.update(self.env)
        with contextlib.suppress(OSError):
            os.chdir(self.cwd)
        sys.argv = [_MAIN]
        sys.stdout, sys.stderr = self.streams  # on descriptors 1 and 2: the next run's pipes
        root = logging.getLogger()
        root.handlers[:] = self.root[0]  # the run's (on its stderr) go: the next sets its own
        root.setLevel(self.root[1])
        logging.captureWarnings(False)
        threading.excepthook = self.excepthook
        structlog = sys.modules.get("structlog.contextvars")
        if structlog is not None:
            structlog.clear_contextvars()
        sys.path[:] = self.path
        warnings.filters[:] = self.warning_filters  # type: ignore[index]  # a list at run time
        # What filterwarnings calls (so modules' "once" registries are read again); private,
        # so absent from some Python versions: then a registry may keep a stale "seen".
        mutated = getattr(warnings, "_filters_mutated", None)
        if mutated is not None:
            mutated()
        _set_torch_state(self.torch_state)
        if self.gc_threshold:
            gc.set_threshold(*self.gc_threshold)


def _torch_state() -> dict[str, Any]:
    """torch's process-wide settings now (empty where torch is not imported). This process
    serves every agent of its device: one agent's float64 default or thread count must not
    reach the next agent's run."""
    torch = sys.modules.get("torch")
    if torch is None:
        return {}
    return {
        "num_threads": torch.get_num_threads(),
        "default_dtype": torch.get_default_dtype(),
        "deterministic": (
            torch.are_deterministic_algorithms_enabled(),
            torch.is_deterministic_algorithms_warn_only_enabled(),
        ),
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
        "tf32": (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32),
        "cudnn_benchmark": torch.backends.cudnn.benchmark,
    }


def _set_torch_state(state: dict[str, Any]) -> None:
    """Put back what :func:`_torch_state` read (where it changed: a set costs a call)."""
    torch = sys.modules.get("torch")
    if torch is None or not state or _torch_state() == state:
        return
    torch.set_num_threads(state["num_threads"])
    torch.set_default_dtype(state["default_dtype"])
    deterministic, warn_only = state["deterministic"]
    torch.use_deterministic_algorithms(deterministic, warn_only=warn_only)
    torch.set_float32_matmul_precision(state["float32_matmul_precision"])
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = state["tf32"]
    torch.backends.cudnn.benchmark = state["cudnn_benchmark"]


@dataclass
class Resident:
    """This process's state across runs: what it reports and checks."""

    device: str
    max_mib: float
    baseline: _Baseline
    runs: int = 0
    sources: dict[str, tuple[int, int]] = field(default_factory=dict)

    def stale(self) -> str | None:
        """Why this process must not take the next run: a module it imported changed."""
        for path, seen in self.sources.items():
            try:
                stat = os.stat(path)
                now = (stat.st_mtime_ns, stat.st_size)
            except OSError:
                now = (-1, -1)
            if now != seen:
                return f"{path} changed since it was imported (an edited plugin)"
        return None

    def note_sources(self) -> None:
        """The source files of the modules imported since this process was forked,
        outside the interpreter's own directories (whose installs the daemon watches)."""
        prefixes = tuple({sys.prefix, sys.base_prefix, sys.exec_prefix})
        for name, module in list(sys.modules.items()):
            path = getattr(module, "__file__", None)
            if name in self.baseline.modules or not path or path.startswith(prefixes):
                continue
            with contextlib.suppress(OSError):
                stat = os.stat(path)
                self.sources.setdefault(path, (stat.st_mtime_ns, stat.st_size))


def serve_runs(channel: socket.socket, device: str, max_mib: float) -> NoReturn:
    """The resident process's loop: take a run, run it, report, serve on or end. Ends the
    process (``os._exit``) when the worker's end of ``channel`` closes or a run says so."""
    # What the worker's imports registered would run at the end of every run here: this
    # process never exits through them (os._exit), so it starts with none.
    atexit._clear()
    resident = Resident(device, max_mib, _Baseline.take())
    while True:
        # Idle, a SIGTERM ends this process (the next run gets a fresh one); from a run's
        # arrival to its command's handler, it is held (genesis_fp16.service.startup_signals).
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
        try:
            data, fds, _, _ = socket.recv_fds(channel, MAX_MESSAGE, REQUEST_FDS)
        except OSError:
            data, fds = b"", []
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
        if not data:  # the worker is gone (replaced, the daemon ended): so is this process
            os._exit(0)
        if (why := resident.stale()) is not None:
            for fd in fds:
                os.close(fd)
            channel.send(json.dumps({"stale": why}).encode())
            os._exit(0)
        resident.runs += 1
        channel.send(json.dumps({"taken": resident.runs}).encode())
        status = socket.socket(fileno=fds[3])
        code, ending = _serve_one(resident, fds, json.loads(data).get("note"))
        # The worker hears first, the daemon then: its next run finds this process's state known.
        try:
            channel.send(json.dumps({"idle": 1} if ending is None else {"ending": ending}).encode())
        except OSError:  # the worker is gone (replaced, killed): the run's end is still said
            ending = ending or "its run worker is gone"
        with contextlib.suppress(OSError):  # the daemon gave up on this run
            status.send(json.dumps({"exit": code}).encode())
        status.close()
        if ending is not None:
            os._exit(0)
        # What the run left in reference cycles (a traceback's frames, a model's hooks),
        # every generation, now that its exit is reported: the young collections it put
        # off (RUN_GC_THRESHOLD) happen here, off its time, and the next starts with none.
        gc.collect()


def _serve_one(resident: Resident, fds: list[int], note: str | None) -> tuple[int, str | None]:
    """One run in this process (its descriptors ``fds``, the status socket's left to the
    caller): its exit code, and why this process must end after it (None: it serves on)."""
    try:
        request = read_request(fds)
    except (OSError, ValueError) as exc:
        for fd in fds[:3]:
            os.close(fd)
        return 1, f"an unreadable request: {exc}"
    for target, fd in zip((0, 1, 2), fds[:3], strict=True):
        os.dup2(fd, target)
        os.close(fd)
    code, ending = _run(resident, request, note)
    _say_given(resident)
    _say(resident, ending, code)
    with contextlib.suppress(OSError):
        sys.stdout.flush()
        sys.stderr.flush()
    from genesis_fp16.launch.handoff import stop_watching

    stop_watching()
    devnull = os.open(os.devnull, os.O_RDWR)
    for target in (0, 1, 2):  # the run's pipes end here: its relay reads EOF
        os.dup2(devnull, target)
    os.close(devnull)
    resident.baseline.restore()
    return code, ending


def enter_request(request: dict[str, Any]) -> None:
    """This process takes on ``request``'s run, as a forked child or a resident process:
    its directory, environment and arguments, SIGTERM held until the command takes it."""
    from genesis_fp16.service.startup_signals import hold_sigterm

    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    sys.argv = [_MAIN, *request["args"]]
    # Python reseeds ``random`` at a fork; numpy's global generator, seeded from entropy
    # when the worker imported it, would otherwise start every run in the same state.
    numpy_random = sys.modules.get("numpy.random")
    if numpy_random is not None:
        numpy_random.seed()
    hold_sigterm()
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})


def _run(resident: Resident, request: dict[str, Any], note: str | None) -> tuple[int, str | None]:
    from genesis_fp16.service.startup_signals import sigterm_received

    enter_request(request)
    store = memory_store()
    if store is not None:
        store.take_given()  # this run's from here
    _say_start(resident, note)
    # Put back with the rest after the run (_Baseline.restore), whatever the run set.
    gc.set_threshold(RUN_GC_THRESHOLD, *gc.get_threshold()[1:])
    code = run_command(request["args"])
    join_threads()
    atexit._run_exitfuncs()  # the run's own (serve_runs cleared the rest), as at an exit
    atexit._clear()
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})  # the handlers go back first
    resident.note_sources()
    return code, _why_end(resident, code, sigterm_received())


def _why_end(resident: Resident, code: int, stopped: bool) -> str | None:
    """Why this process must not serve another run after one that ended with ``code``."""
    if code != 0:
        return f"its run exited with code {code}"
    if stopped:
        return "its run was stopped by SIGTERM"
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        try:
            torch.cuda.synchronize()
        except Exception as exc:  # a sticky CUDA error poisons the context for good
            return f"a CUDA error: {type(exc).__name__}: {str(exc)[:200]}"
    mib = resident_mib()
    if mib is not None and mib > resident.max_mib:
        return (
            f"its resident memory, {mib:.0f} MiB, is over its bound of {resident.max_mib:g} MiB "
            "(GENESIS_FP16_RUN_RESIDENT_MAX_MIB)"
        )
    return None


def resident_mib() -> float | None:
    """This process's resident memory in MiB (Linux's /proc), None where unknown."""
    try:
        with open("/proc/self/status") as handle:
            for line in handle:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except (OSError, ValueError):
        return None
    return None


def memory_store() -> Any | None:
    """This process's memory store (``kept_in_memory.current()``), None until a run made
    one; read where a run imported it, never imported here (this process imports nothing
    a run does not)."""
    module = sys.modules.get("genesis_fp16_infrastructure.kept_in_memory")
    return None if module is None else module.current()


def kept_in_memory() -> list[str]:
    """What earlier runs left in this process that a run may use again."""
    kept = [f"{len(sys.modules)} modules imported"]
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        kept.append("the CUDA context")
    store = memory_store()
    if store is not None:
        kept.append(f"its memory store ({store.describe()})")
    scoring = sys.modules.get("genesis_fp16_infrastructure.recipes.retrain.scoring")
    if scoring is not None and getattr(scoring, "_RUN_POOL", None):
        kept.append("the last run's scoring pool")
    return kept


def _log(event: str, level: str = "info", **fields: Any) -> None:
    """One JSON record on the run's stderr (relayed into the daemon's log with the run's
    agent and run id)."""
    record = {"event": event, "level": level, "logger": "genesis_fp16.resident", **fields}
    with contextlib.suppress(OSError):  # nobody reads the run's stderr any more
        sys.stderr.write(json.dumps(record) + "\n")
        sys.stderr.flush()


def _say_start(resident: Resident, note: str | None) -> None:
    pid = os.getpid()
    if resident.runs == 1:
        event = f"resident run process {pid} ({resident.device}): a fresh process for this run"
        _log(
            event + (f" ({note})" if note else ""), resident_pid=pid, reused=False, run_in_process=1
        )
        return
    kept = kept_in_memory()
    _log(
        f"resident run process {pid} ({resident.device}) reused: run {resident.runs} in it, "
        f"with what earlier runs left in memory: {', '.join(kept)}; "
        f"{len(resident.sources)} source files of modules they imported checked unchanged",
        resident_pid=pid,
        sources_checked=len(resident.sources),
        reused=True,
        run_in_process=resident.runs,
        kept=kept,
    )


GIVEN_SAID = 4  # the entries a run took from the store named in its line, then a count


def _say_given(resident: Resident) -> None:
    """What the run took from this process's memory store (nothing said: nothing taken)."""
    store = memory_store()
    given = [] if store is None else store.take_given()
    if store is None or not given:
        return
    pid = os.getpid()
    more = len(given) - GIVEN_SAID
    shown = "; ".join(given[:GIVEN_SAID]) + (f"; and {more} more" if more > 0 else "")
    _log(
        f"resident run process {pid} ({resident.device}) reused: run {resident.runs} took "
        f"from its memory store: {shown} ({store.describe()})",
        resident_pid=pid,
        run_in_process=resident.runs,
        given=given,
    )


def _say(resident: Resident, ending: str | None, code: int) -> None:
    pid = os.getpid()
    if ending is None:
        return
    _log(
        f"resident run process {pid} ends after this run: {ending}; the next run gets a fresh one",
        level="warning" if code == 0 else "error",
        resident_pid=pid,
    )
