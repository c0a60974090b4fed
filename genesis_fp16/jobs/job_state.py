"""What a scheduled job shares with the daemon (:class:`JobContext`) and what one run of
it carries from its plan to its record (:class:`Run`).

A job (genesis_fp16/jobs/agent_job.py) walks one run forward through four modules, each
taking the ``Run``: planning.py builds its request once and keeps it on the run
(``Run.request``, with the agent's state it was planned from, and ``Run.probe``), its start
is one event, ``RunStarted`` (run_started.py: the probe shown, the curves opened, the
started line, the start recorded), supervising.py trains it where the settings say, and
its end is one event, ``RunEnded`` (run_ended.py), whose subscribers turn its result (or
its failure) into records, metrics and one log line. The
``Run`` is the only state they pass along, the agent's folder with it (``Run.folder``,
made once with the run: no step of the job builds its own).

Which GPUs a run occupies (:func:`slot_keys`), and a counting slot per device that every
agent's jobs share (:class:`DeviceSlots`, the context's ``slots``). Two agents' runs on
one GPU at once cost more than they save. Each child process makes a CUDA context of its
own (some hundreds of MB of the GPU's memory before any tensor), the GPU time-slices
between contexts rather than running them side by side, and one run's memory peak can
make the other fail out of memory. On the H100 (benchmarks/results/h100-2026-11-23.md)
test runs that each took seconds alone took over 200 s with 5-15 processes on one GPU.
So a run waits for its devices' slots (``GENESIS_FP16_DEVICE_CONCURRENCY``, 1 by
default); an operator who knows two small agents fit side by side raises it.

The slot is the GPU, not the setting's spelling: ``cuda`` is ``cuda:0`` (the current
device of every process started with the daemon's ``CUDA_VISIBLE_DEVICES``), and a
torchrun job of N ranks on ``cuda`` holds ``cuda:0`` to ``cuda:N-1``, one per rank.

>>> slot_keys("cuda", nproc=2)
('cuda:0', 'cuda:1')
>>> slot_keys("cuda:0") == slot_keys("cuda")
True
"""

from __future__ import annotations

import contextlib
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

import structlog

from genesis_fp16.config.settings import (
    AgentConfig,
    Settings,
    precision_switched,
    resolve_device,
)
from genesis_fp16.jobs.probe_gate import ProbeGate
from genesis_fp16.launch.launcher import RunProcesses
from genesis_fp16.metrics.daemon_metrics import DaemonMetrics
from genesis_fp16.metrics.tracking import RunTracker
from genesis_fp16.plugin_api import TrainRequest
from genesis_fp16_infrastructure.api import AgentFolder

log = structlog.get_logger("genesis_fp16.jobs")

# Device kinds with numbered devices; "cpu" and "mps" are one device each.
_INDEXED = ("cuda", "xpu")


def slot_keys(device: str, nproc: int = 1) -> tuple[str, ...]:
    """The devices a run on ``device`` with ``nproc`` processes occupies, sorted."""
    kind, _, index = device.partition(":")
    if kind not in _INDEXED:
        return (kind,)
    if index:  # cuda:N: every rank on GPU N (torchrun refuses NPROC > 1 there)
        return (f"{kind}:{int(index)}",)
    return tuple(f"{kind}:{rank}" for rank in range(max(nproc, 1)))


class DeviceSlots:
    """A counting semaphore per device, shared by every agent's jobs.

    A run that needs several devices takes them in sorted order, so two such runs cannot
    each hold one the other waits for.
    """

    def __init__(self, concurrency: int) -> None:
        self._concurrency = concurrency
        self._slots: dict[str, threading.BoundedSemaphore] = {}
        self._lock = threading.Lock()

    def acquire(self, devices: Iterable[str], give_up: Callable[[], bool]) -> bool:
        """Wait for a slot on each of ``devices``; False (holding none) when ``give_up()``
        turns true first."""
        held: list[str] = []
        for device in sorted(set(devices)):
            with self._lock:
                slot = self._slots.setdefault(device, threading.BoundedSemaphore(self._concurrency))
            while not slot.acquire(timeout=0.2):
                if give_up():
                    self.release(held)
                    return False
            held.append(device)
        return True

    def release(self, devices: Iterable[str]) -> None:
        for device in sorted(set(devices)):
            self._slots[device].release()


@dataclass
class JobContext:
    """What every job shares with the daemon; ``settings`` is swapped on reload."""

    settings: Settings
    metrics: DaemonMetrics
    slots: DeviceSlots
    stopping: threading.Event
    # The running agents, each with the device slots its run holds, and the slots each
    # agent waits for (its job queued behind another's run): the status says whose run a
    # queued one waits for.
    running: dict[str, tuple[str, ...]] = field(default_factory=dict)
    waiting: dict[str, tuple[str, ...]] = field(default_factory=dict)
    running_changed: threading.Condition = field(default_factory=threading.Condition)
    # Why the daemon is degraded, by agent (a full or read-only disk): /healthz says so.
    degraded: dict[str, str] = field(default_factory=dict)
    # Runs past their timeout, by agent, with why; and abandoned runs' threads (hung in
    # the plugin's train()): the agent starts no new run while its thread lives.
    overdue: dict[str, str] = field(default_factory=dict)
    hung: dict[str, threading.Thread] = field(default_factory=dict)
    # Agents whose last run with steps learned nothing (every step skipped), with why:
    # degraded until the agent's next run that succeeds (an up_to_date run clears nothing).
    unlearned: dict[str, str] = field(default_factory=dict)
    # Agents whose served-model pointer is unusable (jobs/recording.py), with why.
    unusable_pointer: dict[str, str] = field(default_factory=dict)
    # Held while a reload swaps the settings and sets the precision gauge, and while a
    # run's progress decides whether to set it: a step logged between the two would put
    # back the precision the reload just replaced.
    gauge_lock: threading.Lock = field(default_factory=threading.Lock)
    # The runs' processes alive now: a shutdown past its timeout kills them.
    processes: RunProcesses = field(default_factory=RunProcesses)

    def problems(self) -> dict[str, str]:
        """What makes the daemon degraded, by agent (empty: healthy)."""
        return {**self.unlearned, **self.overdue, **self.unusable_pointer, **self.degraded}

    @contextlib.contextmanager
    def turn(self, agent: str, slots: tuple[str, ...]) -> Iterator[bool]:
        """The job's turn on ``slots`` (:func:`slot_keys`): queued for them meanwhile (the
        status names whose run it waits for), then running (a shutdown waits for it) while
        the block trains, the slots given back after it. False, holding none, when the
        daemon began to stop first: a job queued at SIGTERM never starts."""
        self.waiting[agent] = slots
        try:
            taken = self.slots.acquire(slots, self.stopping.is_set)
        finally:
            self.waiting.pop(agent, None)
        # A slot freed by the run a SIGTERM stopped is taken without a look at ``stopping``:
        # look here, under the lock the shutdown waits on ``running`` with, so a job queued
        # at SIGTERM never starts, and one that does start is one the shutdown waits for.
        with self.running_changed:
            starts = taken and not self.stopping.is_set()
            if starts:
                self.running[agent] = slots
        if not starts:
            if taken:
                self.slots.release(slots)
                log.info("job not started: the daemon is shutting down", agent=agent)
            yield False
            return
        try:
            yield True
        finally:
            self.slots.release(slots)
            with self.running_changed:
                self.running.pop(agent, None)
                self.running_changed.notify_all()


@dataclass
class Run:
    """One run of a job: its id, clock and deadline, the agent's folder (``folder``, in the
    run's ``settings``' state folder), whether a reload stopped it, its request (with the
    agent's state it was built from) and the probe gate's decision, both set by planning,
    and its curves (opened at its start, closed on every outcome). Planning, its start,
    supervising and its end each read it; ``should_stop`` is the callback the run asks at
    every step."""

    ctx: JobContext
    agent: str
    settings: Settings
    config: AgentConfig  # the agent's settings, from ``settings``: read once, by the job
    device: str = ""  # where it trains: ``config.device`` as the job resolved it ("": here)
    id: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    started: float = field(default_factory=time.monotonic)
    deadline: float = float("inf")
    changed: threading.Event = field(default_factory=threading.Event)
    request: TrainRequest | None = None
    probe: ProbeGate | None = None
    tracker: RunTracker | None = None
    folder: AgentFolder = field(init=False)

    def __post_init__(self) -> None:
        # The run's one: its plan, its guard memory, scale, history and record all take it.
        self.folder = AgentFolder(self.settings.state_dir, self.agent)
        self.device = self.device or resolve_device(self.config.device)
        # Past it an in-process run checkpoints at its next step and ends ("stopped"); a
        # torchrun job gets SIGTERM from its launcher at the same limit.
        if self.config.own.nproc == 1:
            self.deadline = self.started + self.config.run_timeout_seconds

    def precision_changed(self) -> bool:
        """Whether a reload changed what the agent's planned request asks for (the
        settings the run was planned with against the reloaded ones)."""
        # Worked out again only after a reload swapped the settings, not at every step.
        current = self.ctx.settings
        if current is self.settings or self.request is None:
            return False
        return precision_switched(self.settings, current, self.agent)

    def reloaded(self) -> bool:
        """Whether a reload changed this run's precision (seen by a step already, or in
        the settings now); only ``should_stop`` marks the run ``changed``."""
        return self.changed.is_set() or self.precision_changed()

    def should_stop(self) -> bool:
        if self.ctx.stopping.is_set() or time.monotonic() > self.deadline:
            return True
        if self.reloaded():
            self.changed.set()  # a reload stopped the run: rerun whatever came since
            return True
        return False

    def rerun(self) -> bool:
        """A reload that changed the precision stopped it, and the daemon is not stopping."""
        return self.changed.is_set() and not self.ctx.stopping.is_set()

    def duration(self) -> float:
        return time.monotonic() - self.started
