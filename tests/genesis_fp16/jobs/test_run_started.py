"""The start of a run is one event (jobs/run_started.py): its subscribers run in their
documented order after the plan and before the run trains; one that raises fails the run,
which still ends once; a run starts only once it is planned, in the settings of that
moment."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import msgspec
import pytest
from daemon_harness import clear_daemon_env
from fake_results import train_result
from in_process import train_in_process
from prometheus_client import CollectorRegistry
from structlog.testing import capture_logs

from genesis_fp16.config.settings import Settings
from genesis_fp16.jobs import run_started
from genesis_fp16.jobs.agent_job import DeviceSlots, JobContext, run_agent_job
from genesis_fp16.jobs.job_state import Run, slot_keys
from genesis_fp16.jobs.probe_gate import ProbeRecord
from genesis_fp16.jobs.run_started import RunStarted
from genesis_fp16.metrics.daemon_metrics import DaemonMetrics
from genesis_fp16.plugin_api import API_VERSION, TrainRequest, TrainResult
from genesis_fp16_infrastructure.api import AgentFolder, Capabilities

AGENT = "started"
# The documented order (jobs/run_started.py's docstring), each subscriber by its concern.
ORDER = ["probe", "tracker", "log_line", "start_record"]


class _Trains:
    """A plugin whose run finishes at once, noting the log lines that came before it."""

    api_version = API_VERSION
    name = AGENT

    def __init__(self, logs: list[dict[str, object]]) -> None:
        self.logs = logs
        self.seen: list[str] = []
        self.steps: int | None = None

    def train(self, request: TrainRequest) -> TrainResult:
        self.seen, self.steps = [str(e["event"]) for e in self.logs], request.steps
        asked = request.precision.requested
        return train_result(agent=AGENT, precision_used="bf16" if asked == "auto" else asked)


def _settings(state: Path, tracking: Path | None = None, **own: object) -> Settings:
    return Settings(  # in-process: a test's plugin object is no entry point for a child
        state_dir=state,
        tracking_dir=tracking,
        agents={AGENT: {"data_path": state, **own}},  # type: ignore[dict-item]
    )


def _context(state: Path, tracking: Path | None = None, **own: object) -> JobContext:
    settings = _settings(state, tracking, **own)
    metrics = DaemonMetrics(CollectorRegistry(), "test")
    metrics.add_agent(AGENT)
    return JobContext(settings, metrics, DeviceSlots(1), threading.Event())


@pytest.fixture(autouse=True)
def _no_daemon_env(monkeypatch: pytest.MonkeyPatch) -> None:
    clear_daemon_env(monkeypatch)
    train_in_process(monkeypatch)  # a test's plugin object is no entry point for a process


def test_the_subscribers_run_in_the_documented_order_before_the_run_trains(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each subscriber once, in the documented order, after the plan: the run trains with
    its curves open, after its started line, and with its counters set."""
    called: list[str] = []

    def traced(subscriber: run_started.Subscriber) -> run_started.Subscriber:
        def call(event: RunStarted) -> None:
            called.append(subscriber.__name__.lstrip("_"))
            assert event.run.request is event.request  # planned before it starts
            subscriber(event)

        call.__name__ = subscriber.__name__
        return call

    monkeypatch.setattr(run_started, "SUBSCRIBERS", tuple(map(traced, run_started.SUBSCRIBERS)))
    ctx = _context(tmp_path / "state", tracking=tmp_path / "runs")
    with capture_logs() as logs:
        plugin = _Trains(logs)
        run_agent_job(ctx, AGENT, plugin, Capabilities())  # type: ignore[arg-type]
    assert called == ORDER
    assert plugin.seen[-2:] == ["tracking the run", "training run started"]
    assert list((tmp_path / "runs" / AGENT).iterdir())  # its curves, opened at its start
    sample = ctx.metrics.registry.get_sample_value
    assert sample("genesis_fp16_training_runs_total", {"agent": AGENT, "outcome": "success"})


def test_a_start_subscriber_that_raises_fails_the_run_which_still_ends_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The start record raising (a bug): the run does not train, the subscribers after it
    do not run, and the run ends once, failed: counted, recorded, one failed line."""
    from genesis_fp16.jobs import run_started as module

    def broken(run: Run) -> None:
        raise RuntimeError("cannot record the start")

    monkeypatch.setattr(module, "record_start", broken)
    ctx = _context(tmp_path / "state")
    with capture_logs() as logs:
        plugin = _Trains(logs)
        run_agent_job(ctx, AGENT, plugin, Capabilities())  # type: ignore[arg-type]
    assert plugin.seen == []  # never trained
    events = [e["event"] for e in logs]
    assert events.count("training run started") == 1
    (failed,) = [e for e in logs if e["event"] == "training run failed"]
    assert "cannot record the start" in str(failed["error"])
    sample = ctx.metrics.registry.get_sample_value
    assert sample("genesis_fp16_training_runs_total", {"agent": AGENT, "outcome": "failed"}) == 1
    record = AgentFolder(tmp_path / "state", AGENT).last_run()
    assert record is not None and record.outcome == "failed"


def test_a_run_starts_only_once_it_is_planned(tmp_path: Path) -> None:
    """``RunStarted.of`` a run with no request (not planned) is a bug, said at once."""
    ctx = _context(tmp_path / "state")
    with pytest.raises(RuntimeError, match="once it is planned"):
        RunStarted.of(Run(ctx, AGENT, ctx.settings, ctx.settings.agent(AGENT)))


def test_the_probe_is_shown_at_the_start_before_the_started_line(tmp_path: Path) -> None:
    """An agent probed before its fp16 runs, with a red fp16 verdict kept: its gauges and
    the red warning come with the run's start, before the started line, and the run goes
    ahead in fp16 as configured."""
    state = tmp_path / "state"
    red = ProbeRecord(
        at=1.0,
        device="cpu",
        steps=2,
        seed=0,
        precision="fp16",
        recommended="bf16_autocast",
        verdict={"fp32": "green", "bf16_autocast": "green", "fp16_autocast": "red"},
        reasons={"fp16_autocast": ["activation headroom: red"]},
    )
    AgentFolder(state, AGENT).save_probe_record(msgspec.to_builtins(red))
    ctx = _context(state, probe_before_low_precision=True, precision="fp16")
    with capture_logs() as logs:
        plugin = _Trains(logs)
        run_agent_job(ctx, AGENT, plugin, Capabilities())  # type: ignore[arg-type]
    red_line = next(e for e in plugin.seen if e.startswith("precision probe verdict is red"))
    assert plugin.seen.index(red_line) < plugin.seen.index("training run started")
    sample = ctx.metrics.registry.get_sample_value
    assert sample("genesis_fp16_probe_timestamp_seconds", {"agent": AGENT}) == 1.0
    labels = {"agent": AGENT, "precision": "fp16"}
    assert sample("genesis_fp16_probe_precision_verdict", labels) == 2
    assert sample("genesis_fp16_training_runs_total", {"agent": AGENT, "outcome": "success"})


def test_a_reload_while_the_job_waits_for_its_slot_is_the_runs_settings(
    tmp_path: Path,
) -> None:
    """The job queued behind another agent's run: the settings reloaded meanwhile are the
    ones its run is planned, started and trained in, its config read from them."""
    state = tmp_path / "state"
    ctx = _context(state, steps=3)
    slots = slot_keys("cpu")
    assert ctx.slots.acquire(slots, lambda: False)  # another agent's run holds the CPU
    plugin = _Trains([])
    job = threading.Thread(
        target=run_agent_job, args=(ctx, AGENT, plugin, Capabilities()), daemon=True
    )
    job.start()
    deadline = time.monotonic() + 30.0  # a bound for a busy machine, not a timing
    while not ctx.waiting and time.monotonic() < deadline:
        time.sleep(0.05)
    assert ctx.waiting == {AGENT: slots}
    ctx.settings = _settings(state, steps=5)  # the reload, as the daemon swaps it
    ctx.slots.release(slots)
    job.join(30.0)
    assert not job.is_alive() and plugin.steps == 5
