"""Two agents' runs never share one GPU at once unless GENESIS_FP16_DEVICE_CONCURRENCY says so."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest
from in_process import train_in_process
from prometheus_client import CollectorRegistry

from genesis_fp16.config.settings import Settings
from genesis_fp16.jobs.agent_job import JobContext, run_agent_job
from genesis_fp16.jobs.job_state import DeviceSlots, slot_keys
from genesis_fp16.metrics.daemon_metrics import DaemonMetrics
from genesis_fp16.plugin_api import API_VERSION, TrainRequest
from genesis_fp16_infrastructure.api import Capabilities

WAIT = 30.0  # seconds a thread may take to get going on a busy machine: a bound, not a timing


def test_slot_keys_name_the_gpu_not_the_settings_spelling() -> None:
    """cuda is cuda:0; N torchrun ranks on cuda hold N GPUs; cuda:N is one; the CPU is one slot."""
    assert slot_keys("cuda") == slot_keys("cuda:0") == ("cuda:0",)
    assert slot_keys("cuda", nproc=3) == ("cuda:0", "cuda:1", "cuda:2")
    assert slot_keys("cuda:2", nproc=1) == ("cuda:2",)
    assert slot_keys("xpu") == ("xpu:0",)
    assert slot_keys("cpu", nproc=4) == ("cpu",)
    assert slot_keys("mps") == ("mps",)


def _waiter(slots: DeviceSlots, devices: Iterable[str]) -> tuple[threading.Thread, dict[str, Any]]:
    """A thread acquiring ``devices``; ``state['waiting']`` is set once it had to wait."""
    state: dict[str, Any] = {"waiting": threading.Event(), "release": threading.Event()}

    def give_up() -> bool:  # called only while the slot is taken
        state["waiting"].set()
        return state["release"].is_set()

    def run() -> None:
        state["got"] = slots.acquire(tuple(devices), give_up)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, state


def test_an_agent_on_cuda_waits_for_another_on_cuda_0() -> None:
    """Concurrency 1: cuda and cuda:0 are one GPU, so the second run waits until the first ends."""
    slots = DeviceSlots(1)
    assert slots.acquire(slot_keys("cuda:0"), lambda: pytest.fail("the GPU was free"))
    thread, state = _waiter(slots, slot_keys("cuda"))
    assert state["waiting"].wait(WAIT)  # it asked to give up: it had no slot
    assert "got" not in state
    slots.release(slot_keys("cuda:0"))
    thread.join(WAIT)
    assert state["got"] is True
    other, free = _waiter(slots, slot_keys("cuda:1"))  # another GPU: no wait
    other.join(WAIT)
    assert free["got"] is True and not free["waiting"].is_set()


def test_the_operator_may_let_two_runs_share_a_gpu() -> None:
    """DEVICE_CONCURRENCY=2: a second run on the same GPU starts without waiting; a third waits."""
    slots = DeviceSlots(2)
    assert slots.acquire(slot_keys("cuda"), lambda: pytest.fail("the GPU was free"))
    second, state = _waiter(slots, slot_keys("cuda:0"))
    second.join(WAIT)
    assert state["got"] is True and not state["waiting"].is_set()
    third, waiting = _waiter(slots, slot_keys("cuda"))
    assert waiting["waiting"].wait(WAIT)
    waiting["release"].set()  # the daemon stops: the waiting job gives up, holding nothing
    third.join(WAIT)
    assert waiting["got"] is False


def test_a_torchrun_job_waits_for_each_of_its_gpus_and_gives_all_back_on_giving_up() -> None:
    """Two ranks need cuda:0 and cuda:1; one of them busy: it waits, and giving up frees cuda:0."""
    slots = DeviceSlots(1)
    assert slots.acquire(("cuda:1",), lambda: False)
    thread, state = _waiter(slots, slot_keys("cuda", nproc=2))
    assert state["waiting"].wait(WAIT)
    state["release"].set()
    thread.join(WAIT)
    assert state["got"] is False
    assert slots.acquire(("cuda:0",), lambda: pytest.fail("cuda:0 was kept by a job that gave up"))


class _Recording(DeviceSlots):
    def __init__(self) -> None:
        super().__init__(1)
        self.taken: list[tuple[str, ...]] = []

    def acquire(self, devices: Any, give_up: Any) -> bool:
        self.taken.append(tuple(devices))
        return super().acquire(devices, give_up)


class _Quick:
    api_version = API_VERSION
    name = "quick"

    def train(self, request: TrainRequest) -> Any:
        raise RuntimeError("not reached in this test's assertions")


@pytest.mark.parametrize(
    ("device", "nproc", "taken"),
    [("cuda", 1, ("cuda:0",)), ("cuda:1", 1, ("cuda:1",)), ("cuda", 2, ("cuda:0", "cuda:1"))],
)
def test_a_job_takes_the_slots_of_the_gpus_its_run_occupies(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, device: str, nproc: int, taken: tuple[str, ...]
) -> None:
    """run_agent_job asks for the GPUs, not the setting's text, and gives them back after."""
    for key in [k for k in os.environ if k.startswith("GENESIS_FP16_")]:
        monkeypatch.delenv(key)
    train_in_process(monkeypatch)  # a test's plugin object is no entry point for a process
    settings = Settings(
        state_dir=tmp_path,
        agents={"quick": {"device": device, "nproc": nproc, "data_path": tmp_path}},  # type: ignore[dict-item]
    )
    slots = _Recording()
    ctx = JobContext(settings, DaemonMetrics(CollectorRegistry(), "test"), slots, threading.Event())
    run_agent_job(ctx, "quick", _Quick(), Capabilities())  # type: ignore[arg-type]
    assert slots.taken == [taken]
    assert slots.acquire(taken, lambda: pytest.fail("the job kept a slot"))
