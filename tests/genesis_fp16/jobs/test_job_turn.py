"""A job's turn on its device slots (``JobContext.turn``): queued while it waits, running
while its block trains, its slots given back after it even when the block raises, and
never started once the daemon began to stop."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry
from structlog.testing import capture_logs

from genesis_fp16.config.settings import Settings
from genesis_fp16.jobs.job_state import DeviceSlots, JobContext
from genesis_fp16.metrics.daemon_metrics import DaemonMetrics

SLOTS = ("cuda:0",)
WAIT = 30.0  # seconds a thread may take to get going on a busy machine: a bound, not a timing


def _context(tmp_path: Path) -> JobContext:
    metrics = DaemonMetrics(CollectorRegistry(), "test")
    return JobContext(Settings(state_dir=tmp_path), metrics, DeviceSlots(1), threading.Event())


def test_a_turn_is_queued_then_running_and_gives_its_slots_back(tmp_path: Path) -> None:
    """Queued (``waiting``) while another job holds the GPU, running while its block runs,
    then neither, with the slot free again, though the block raised."""
    ctx = _context(tmp_path)
    seen: dict[str, object] = {}
    assert ctx.slots.acquire(SLOTS, lambda: False)  # another agent's run holds the GPU

    def job() -> None:
        with pytest.raises(RuntimeError), ctx.turn("a", SLOTS) as started:
            seen["started"], seen["running"] = started, dict(ctx.running)
            raise RuntimeError("the run's bug")

    thread = threading.Thread(target=job, daemon=True)
    thread.start()
    deadline = time.monotonic() + WAIT
    while not ctx.waiting and time.monotonic() < deadline:
        time.sleep(0.05)
    assert ctx.waiting == {"a": SLOTS} and not ctx.running
    ctx.slots.release(SLOTS)
    thread.join(WAIT)
    assert seen == {"started": True, "running": {"a": SLOTS}}
    assert not ctx.waiting and not ctx.running
    assert ctx.slots.acquire(SLOTS, lambda: True)  # given back: free at once


def test_a_turn_taken_as_the_daemon_stops_never_starts(tmp_path: Path) -> None:
    """A slot free while ``stopping`` is set: not started, logged, the slot given back."""
    ctx = _context(tmp_path)
    ctx.stopping.set()
    with capture_logs() as logs, ctx.turn("a", SLOTS) as started:
        assert started is False and not ctx.running
    assert [e["event"] for e in logs] == ["job not started: the daemon is shutting down"]
    assert ctx.slots.acquire(SLOTS, lambda: True)
