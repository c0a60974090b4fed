"""One scheduled job in-process: live RL diagnostics; how a refused run is logged, counted."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

import pytest
from daemon_harness import clear_daemon_env
from in_process import train_in_process
from prometheus_client import CollectorRegistry
from structlog.testing import capture_logs

from genesis_fp16.config.settings import Settings
from genesis_fp16.jobs.agent_job import DeviceSlots, JobContext, run_agent_job
from genesis_fp16.metrics.daemon_metrics import DaemonMetrics
from genesis_fp16.plugin_api import API_VERSION, TrainRequest, TrainRequestError, TrainResult
from genesis_fp16_infrastructure.agent_folder.files import newest_aside
from genesis_fp16_infrastructure.api import Capabilities
from genesis_fp16_infrastructure.folder import AgentFolder
from genesis_fp16_infrastructure.training.precision.decide import decide

AGENT = "refusing"


class _Refusing:
    api_version = API_VERSION
    name = AGENT

    def __init__(self, error: Exception) -> None:
        self.error = error

    def train(self, request: TrainRequest) -> Any:
        if request.on_diagnostics is not None:  # one live iteration before the refusal
            request.on_diagnostics({"mismatch_k3": 2e-7})
        raise self.error


@pytest.mark.parametrize(
    ("error", "traceback"),
    [(TrainRequestError("refusing: option 'x' is not known"), False), (RuntimeError("bug"), True)],
)
def test_refusal_is_one_line_a_bug_keeps_its_traceback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, error: Exception, traceback: bool
) -> None:
    """TrainRequestError logs its message, no traceback; a bug keeps its traceback under
    the same one-line error, which the run's record (``status``) holds too; both fail."""
    ctx = _context(tmp_path, monkeypatch)
    metrics = ctx.metrics
    with capture_logs() as logs:
        run_agent_job(ctx, AGENT, _Refusing(error), Capabilities())  # type: ignore[arg-type]
    (failed,) = [e for e in logs if e["event"] == "training run failed"]
    assert ("exc_info" in failed) == traceback
    assert failed["error"] == ("RuntimeError: bug" if traceback else str(error))
    record = AgentFolder(tmp_path, AGENT).last_run()
    assert record is not None and record.outcome == "failed"
    assert record.reason.endswith(failed["error"])
    runs = metrics.registry.get_sample_value(
        "genesis_fp16_training_runs_total", {"agent": AGENT, "outcome": "failed"}
    )
    assert runs == 1
    live = metrics.registry.get_sample_value(
        "genesis_fp16_rl_mismatch_kl_k3_nats", {"agent": AGENT}
    )
    assert live == 2e-7  # exported while the run trained, not only from a result


def _context(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> JobContext:
    clear_daemon_env(monkeypatch)
    train_in_process(monkeypatch)  # a test's plugin object is no entry point for a process
    settings = Settings(state_dir=tmp_path, agents={AGENT: {"data_path": tmp_path}})  # type: ignore[dict-item]
    return JobContext(
        settings, DaemonMetrics(CollectorRegistry(), "test"), DeviceSlots(1), threading.Event()
    )


def _failed_runs(ctx: JobContext) -> float | None:
    return ctx.metrics.registry.get_sample_value(
        "genesis_fp16_training_runs_total", {"agent": AGENT, "outcome": "failed"}
    )


def test_a_plugin_calling_sys_exit_is_a_counted_failed_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SystemExit from a plugin's train() does not escape the job: one failed run, one line."""
    ctx = _context(tmp_path, monkeypatch)
    with capture_logs() as logs:
        run_agent_job(ctx, AGENT, _Refusing(SystemExit(3)), Capabilities())  # type: ignore[arg-type]
    (failed,) = [e for e in logs if e["event"] == "training run failed"]
    assert failed["error"] == "the plugin called sys.exit(3)"
    assert _failed_runs(ctx) == 1


@pytest.mark.parametrize("kind", ["folder", "fifo", "link", "oversize", "not_utf8", "torn"])
def test_an_unusable_precision_state_is_set_aside_counted_and_floors_at_fp32(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    """A folder, FIFO, link, oversize, non-UTF-8 or torn precision_state.json: the run is
    not failed; the file is set aside, counted once under file=precision_state, and the
    agent trains in fp32 (its floor written back) until `precision reset`."""
    from genesis_fp16_infrastructure.agent_folder import files

    skipped: list[tuple[str, str]] = []
    monkeypatch.setattr(files, "_listeners", [lambda e: skipped.append((e.agent, e.label))])
    ctx = _context(tmp_path, monkeypatch)
    path = AgentFolder(tmp_path, AGENT).precision_state_path
    path.parent.mkdir(parents=True, exist_ok=True)
    if kind == "folder":
        path.mkdir()
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "link":
        path.symlink_to(tmp_path / "elsewhere.json")
    elif kind == "oversize":
        path.write_text(" " * (64 * 1024 + 1))
    elif kind == "not_utf8":
        path.write_bytes(b"\xff\xfe{")
    else:
        path.write_text('{"version": 1, "demoted_to": "bf')
    plugin = _Recording()
    with capture_logs() as logs:
        run_agent_job(ctx, AGENT, plugin, Capabilities())  # type: ignore[arg-type]
        run_agent_job(ctx, AGENT, plugin, Capabilities())  # type: ignore[arg-type]
    assert plugin.precisions == ["fp32", "fp32"]  # auto asked, the fp32 floor decided
    assert skipped == [(AGENT, "precision_state")]
    assert [e["event"] for e in logs].count("training run finished") == 2
    assert newest_aside(path) is not None
    memory = AgentFolder(tmp_path, AGENT).precision_memory()
    assert memory is not None and memory.demoted_to == "fp32"


def test_a_full_disk_fails_the_run_in_one_line_and_marks_the_daemon_degraded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ENOSPC naming a path: one line with the path and the setting, and degraded health."""
    import errno

    ctx = _context(tmp_path, monkeypatch)
    full = OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "ckpt.pt"))
    with capture_logs() as logs:
        run_agent_job(ctx, AGENT, _Refusing(full), Capabilities())  # type: ignore[arg-type]
    (failed,) = [e for e in logs if e["event"] == "training run failed"]
    assert "exc_info" not in failed
    assert (
        str(tmp_path / "ckpt.pt") in failed["error"] and "GENESIS_FP16_STATE_DIR" in failed["error"]
    )
    assert AGENT in ctx.degraded and _failed_runs(ctx) == 1


def test_health_reports_degraded_with_the_reason_until_a_run_succeeds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A storage failure turns /healthz's check to 503 naming agent and path; clearing it heals."""
    from genesis_fp16.service.daemon import Daemon

    ctx = _context(tmp_path, monkeypatch)
    daemon = Daemon(ctx.settings, tmp_path / ".env", CollectorRegistry(), notifier=None)
    daemon.context = ctx
    daemon.beat()
    assert daemon.health()[0] is True
    ctx.degraded[AGENT] = "cannot write /x/ckpt.pt: No space left on device"
    ok, reason = daemon.health()
    assert not ok and reason.startswith("degraded: refusing: cannot write /x/ckpt.pt")
    ctx.degraded.clear()
    assert daemon.health()[0] is True


def test_liveness_ignores_a_degraded_disk_and_fails_on_a_stale_heartbeat(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """/livez's check stays alive on a full disk (no restart loop), not on a stale heartbeat."""
    from genesis_fp16.service.daemon import Daemon

    ctx = _context(tmp_path, monkeypatch)
    daemon = Daemon(ctx.settings, tmp_path / ".env", CollectorRegistry(), notifier=None)
    daemon.context = ctx
    daemon.beat()
    ctx.degraded[AGENT] = "cannot write /x/ckpt.pt: No space left on device"
    assert daemon.health()[0] is False
    assert daemon.liveness() == (True, "alive: scheduler heartbeat is fresh")
    daemon._heartbeat -= 10 * ctx.settings.heartbeat_seconds
    ok, reason = daemon.liveness()
    assert not ok and reason.startswith("not alive: scheduler heartbeat is")


class _FellBack:
    """An fp16 run that resolved a captured step and ran eagerly: what it reports."""

    api_version = API_VERSION
    name = AGENT

    def train(self, request: TrainRequest) -> TrainResult:
        assert request.initial_loss_scale is None  # nothing carried yet
        return TrainResult(
            agent=AGENT,
            precision_requested=request.precision.requested,
            precision_used="fp16",
            precision_reason="test",
            device="cpu",
            steps=5,
            skipped_steps=0,
            overflow_rate=0.0,
            loss_scale=4096.0,
            final_train_loss=1.0,
            eval={},
            samples_per_second=1.0,
            wall_seconds=1.0,
            checkpoint=None,
            quarantined=0,
            execution="eager",
            execution_reason="cuda_graph resolved, eager instead: the capture at step 4 raised",
            execution_fallback="capture_failed",
        )


def test_a_fallback_is_counted_and_logged_and_an_fp16_scale_carried(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The job counts execution_fallbacks_total{reason}, logs the fallback with the run,
    and carries the run's fp16 loss scale into the agent's state for its next run."""
    ctx = _context(tmp_path, monkeypatch)
    with capture_logs() as logs:
        run_agent_job(ctx, AGENT, _FellBack(), Capabilities())  # type: ignore[arg-type]
    labels = {"agent": AGENT, "reason": "capture_failed"}
    counted = ctx.metrics.registry.get_sample_value(
        "genesis_fp16_execution_fallbacks_total", labels
    )
    assert counted == 1
    (finished,) = [e for e in logs if e["event"] == "training run finished"]
    assert finished["execution_fallback"] == "capture_failed"
    carried = AgentFolder(tmp_path, AGENT).carried_scale()
    assert carried is not None and carried.scale == 4096.0


# A run whose end's recording raises (one subscriber of its RunEnded) is no bare traceback
# and loses no record: tests/genesis_fp16/jobs/test_run_ended.py (the subscriber isolated).


class _EndsAsTheReloadLands:
    """An fp16 run during which ENABLE_FP16_TRAINING=false lands after its last step."""

    api_version = API_VERSION
    name = AGENT

    def __init__(self, ctx: JobContext) -> None:
        self.ctx = ctx

    def train(self, request: TrainRequest) -> TrainResult:
        self.ctx.settings = self.ctx.settings.model_copy(update={"enable_fp16_training": False})
        return TrainResult(
            agent=AGENT, precision_requested="fp16", precision_used="fp16",
            precision_reason="test", device="cpu", steps=1, skipped_steps=0,
            overflow_rate=0.0, loss_scale=1.0, final_train_loss=0.5, eval={},
            samples_per_second=1.0, wall_seconds=0.1, checkpoint=None, quarantined=0,
        )  # fmt: skip


def test_a_reload_landing_as_a_run_ends_shows_the_next_runs_precision(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The rollback lands after the run's last step: the gauge reads fp32, not fp16."""
    ctx = _context(tmp_path, monkeypatch)
    run_agent_job(ctx, AGENT, _EndsAsTheReloadLands(ctx), Capabilities())  # type: ignore[arg-type]
    gauge = ctx.metrics.registry.get_sample_value
    success = gauge("genesis_fp16_training_runs_total", {"agent": AGENT, "outcome": "success"})
    assert success == 1
    fp16 = gauge("genesis_fp16_precision", {"agent": AGENT, "precision": "fp16"})
    fp32 = gauge("genesis_fp16_precision", {"agent": AGENT, "precision": "fp32"})
    assert (fp16, fp32) == (0, 1)


class _Reporting:
    """Returns the result it is given: each run a TrainResult with the counts set."""

    api_version = API_VERSION
    name = AGENT

    def __init__(self, steps: int, skipped: int) -> None:
        self.steps, self.skipped = steps, skipped

    def train(self, request: TrainRequest) -> TrainResult:
        return TrainResult(
            agent=AGENT,
            precision_requested="bf16",
            precision_used="bf16",
            precision_reason="test",
            device="cpu",
            steps=self.steps,
            skipped_steps=self.skipped,
            overflow_rate=1.0,
            loss_scale=1.0,
            final_train_loss=0.5,
            eval={"loss": 0.5},
            samples_per_second=1.0,
            wall_seconds=0.1,
            checkpoint=None,
            quarantined=0,
            up_to_date=self.steps == 0,
        )


def test_a_run_whose_every_step_was_skipped_is_failed_counted_and_degrades_health(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """200 of 200 steps skipped: `failed` with nonfinite_gradients, counted under its reason,
    /healthz degraded; an up_to_date run keeps it degraded, the next real success heals."""
    from genesis_fp16.service.daemon import Daemon

    ctx = _context(tmp_path, monkeypatch)
    daemon = Daemon(ctx.settings, tmp_path / ".env", CollectorRegistry(), notifier=None)
    daemon.context = ctx
    daemon.beat()
    with capture_logs() as logs:
        run_agent_job(ctx, AGENT, _Reporting(200, 200), Capabilities())  # type: ignore[arg-type]
    (line,) = [e for e in logs if e["event"] == "training run finished"]
    assert (line["outcome"], line["failure"], line["skipped_steps"]) == (
        "failed",
        "nonfinite_gradients",
        200,
    )
    assert _failed_runs(ctx) == 1
    reasons = {"agent": AGENT, "reason": "nonfinite_gradients"}
    sample = ctx.metrics.registry.get_sample_value("genesis_fp16_run_failures_total", reasons)
    assert sample == 1
    ok, reason = daemon.health()
    assert not ok and "learned nothing (nonfinite_gradients)" in reason
    run_agent_job(ctx, AGENT, _Reporting(0, 0), Capabilities())  # type: ignore[arg-type]
    assert daemon.health()[0] is False  # up to date is not a success of learning
    run_agent_job(ctx, AGENT, _Reporting(200, 16), Capabilities())  # type: ignore[arg-type]
    assert daemon.health()[0] is True


class _Recording(_Reporting):
    def __init__(self) -> None:
        super().__init__(20, 0)
        self.precisions: list[str] = []

    def train(self, request: TrainRequest) -> TrainResult:
        # What decide() answers the request the job planned (the floor applied there).
        self.precisions.append(decide(request.precision, request.device).used)
        return super().train(request)
