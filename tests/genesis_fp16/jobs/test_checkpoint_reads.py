"""A daemon job reads the checkpoint it resumes once: the daemon not at all, the run once."""

from __future__ import annotations

import hashlib
import io
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import torch
from daemon_harness import clear_daemon_env, force_jobs
from prometheus_client import CollectorRegistry
from structlog.testing import capture_logs

from genesis_fp16.config.plugins import load_plugin
from genesis_fp16.config.settings import Settings
from genesis_fp16.jobs.agent_job import DeviceSlots, JobContext, run_agent_job
from genesis_fp16.metrics.daemon_metrics import DaemonMetrics
from genesis_fp16_infrastructure.agent_folder.folder import AgentFolder
from genesis_fp16_infrastructure.agent_folder.lifecycle import served_checkpoint
from genesis_fp16_infrastructure.training.step import trainer

AGENT = "se_darwin"


class _Reads:
    """Every checkpoint read (``torch.load`` of a file's bytes), by the bytes' digest, and
    whether the run had taken its first step."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.before_first_step: list[str] = []
        self.all: Counter[str] = Counter()
        self.stepped = False
        load, step = torch.load, trainer.Trainer.step

        def counting_load(source: Any, *args: Any, **kwargs: Any) -> Any:
            if isinstance(source, io.BytesIO):
                digest = hashlib.sha256(source.getvalue()).hexdigest()
                self.all[digest] += 1
                if not self.stepped:
                    self.before_first_step.append(digest)
            return load(source, *args, **kwargs)

        def first_step(this: Any, *args: Any, **kwargs: Any) -> Any:
            self.stepped = True
            return step(this, *args, **kwargs)

        monkeypatch.setattr(torch, "load", counting_load)
        monkeypatch.setattr(trainer.Trainer, "step", first_step)

    def clear(self) -> None:
        self.before_first_step.clear()
        self.all.clear()
        self.stepped = False


def _job(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[JobContext, Any]:
    clear_daemon_env(monkeypatch)
    plugin = load_plugin(AGENT)
    data = plugin.generate_sample_data(tmp_path / "data", 600, 0)
    settings = Settings(  # in-process: the daemon's reads and the run's in one count
        state_dir=tmp_path / "state",
        run_isolation="thread",
        steps_per_run=8,
        auto_precision="rule",
        agents={AGENT: {"data_path": str(data)}},  # type: ignore[dict-item]
    )
    metrics = DaemonMetrics(CollectorRegistry(), "test")
    return JobContext(settings, metrics, DeviceSlots(1), threading.Event()), plugin


def _optimizer_steps(ctx: JobContext) -> float | None:
    return ctx.metrics.registry.get_sample_value(
        "genesis_fp16_optimizer_steps_total", {"agent": AGENT}
    )


def test_a_resumed_run_reads_its_checkpoint_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A forced second job continues the served model: before its first step one
    checkpoint is read (the run's; the daemon's totals come from the checkpoint's summary
    file), and no checkpoint's bytes are read twice in the job (the gate reuses the served
    model's)."""
    ctx, plugin = _job(tmp_path, monkeypatch)
    reads = _Reads(monkeypatch)
    run_agent_job(ctx, AGENT, plugin)
    first = _optimizer_steps(ctx)
    reads.clear()
    force_jobs(monkeypatch)
    run_agent_job(ctx, AGENT, plugin)
    assert len(reads.before_first_step) == 1, reads.before_first_step
    assert max(reads.all.values()) == 1, reads.all
    # The daemon's counters still start at the resumed checkpoint's totals: 8 more steps.
    assert first == 8 and _optimizer_steps(ctx) == 16


def test_a_run_resuming_a_cut_short_candidate_reads_one_checkpoint_before_its_first_step(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A job stopped mid-run leaves its candidate unjudged; the next job (the daemon's own,
    on the same data: the manifest does not call it up to date) resumes it and,
    before its first step, reads only that candidate's checkpoint: the served model's is
    read once after the run (Plan.compared_to_served), for the data record and the gate,
    and no bytes twice in the job."""
    ctx, plugin = _job(tmp_path, monkeypatch)
    run_agent_job(ctx, AGENT, plugin)  # the served model, 8 steps
    step = trainer.Trainer.step

    def stop_at_step_10(this: Any, *args: Any, **kwargs: Any) -> Any:
        out = step(this, *args, **kwargs)
        if this.step_count >= 10:
            ctx.stopping.set()  # as a daemon shutdown does: the run stops with a checkpoint
        return out

    monkeypatch.setattr(trainer.Trainer, "step", stop_at_step_10)
    with monkeypatch.context() as patch:  # forced: continues the served model, cut at 10
        force_jobs(patch)
        run_agent_job(ctx, AGENT, plugin)
    monkeypatch.setattr(trainer.Trainer, "step", step)
    ctx.stopping.clear()
    served = served_checkpoint(AgentFolder(tmp_path / "state", AGENT).checkpoint_dir)
    assert served is not None
    served_bytes = hashlib.sha256(served.read_bytes()).hexdigest()
    reads = _Reads(monkeypatch)
    with caplog.at_level("INFO", logger="genesis_fp16_infrastructure"), capture_logs() as logs:
        run_agent_job(ctx, AGENT, plugin)
    assert "cut short earlier" in caplog.text  # it resumed the candidate, not the served
    assert len(reads.before_first_step) == 1, reads.before_first_step
    assert served_bytes not in reads.before_first_step  # the candidate's, not the served
    assert reads.all[served_bytes] == 1  # the served model's, read after the run
    assert max(reads.all.values()) == 1, reads.all
    # What the late read feeds: the data compared with the served model's, and the gate.
    (finished,) = [e for e in logs if e["event"] == "training run finished"]
    assert finished["data"]["change"] == "unchanged", finished["data"]
    assert finished["gate"]["served"] is not None, finished["gate"]
    assert finished["steps"] == 6  # from the candidate's step 10 to 16


def test_a_corrupt_served_checkpoint_is_a_one_line_counted_refusal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Bytes that no longer match their digest: the daemon's summary read does not hide
    it; the run refuses in one line naming the file, and the job counts a failed run."""
    ctx, plugin = _job(tmp_path, monkeypatch)
    run_agent_job(ctx, AGENT, plugin)
    served = served_checkpoint(AgentFolder(tmp_path / "state", AGENT).checkpoint_dir)
    assert served is not None
    served.write_bytes(served.read_bytes()[:-10] + b"0123456789")
    with capture_logs() as logs:
        run_agent_job(ctx, AGENT, plugin)
    (failed,) = [e for e in logs if e["event"] == "training run failed"]
    assert "exc_info" not in failed
    assert failed["error"] == (
        f"checkpoint {str(served)!r} unusable: its bytes do not match the digest in "
        f"{served.name}.sha256 (changed after it was written: bit rot, a torn copy or an edit)"
    )
    runs = ctx.metrics.registry.get_sample_value(
        "genesis_fp16_training_runs_total", {"agent": AGENT, "outcome": "failed"}
    )
    assert runs == 1
