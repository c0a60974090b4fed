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
from in_process import train_in_process
from prometheus_client import CollectorRegistry
from structlog.testing import capture_logs

from genesis_fp16.config.plugins import load_plugin
from genesis_fp16.config.settings import Settings
from genesis_fp16.jobs.agent_job import DeviceSlots, JobContext, run_agent_job
from genesis_fp16.metrics.daemon_metrics import DaemonMetrics
from genesis_fp16_infrastructure.agent_folder.pointer import served_checkpoint
from genesis_fp16_infrastructure.folder import AgentFolder
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
    train_in_process(monkeypatch)  # the daemon's reads and the run's in one count
    loaded = load_plugin(AGENT)
    data = loaded.plugin.generate_sample_data(tmp_path / "data", 600, 0)
    settings = Settings(
        state_dir=tmp_path / "state",
        steps_per_run=8,
        auto_precision="rule",
        agents={AGENT: {"data_path": str(data)}},  # type: ignore[dict-item]
    )
    metrics = DaemonMetrics(CollectorRegistry(), "test")
    return JobContext(settings, metrics, DeviceSlots(1), threading.Event()), loaded


def _optimizer_steps(ctx: JobContext) -> float | None:
    return ctx.metrics.registry.get_sample_value(
        "genesis_fp16_optimizer_steps_total", {"agent": AGENT}
    )


def test_a_resumed_run_reads_its_checkpoint_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A forced second job continues the served model. Before its first step only the
    served model's bytes are read, twice: the judged run scores it (its held-out losses,
    which the gate reuses; the trained ids it names come from the same read) and the run
    resumes from its copy in the candidate's folder. After the run the gate reads the
    trained ids the candidate names and scores it, from one read: 2 reads of the served
    bytes and 1 of the candidate's in the job, as the recipe's own gate read them before
    issue 68 (its first one-lifecycle runs read them 3 and 2 times). The daemon's totals
    come from the checkpoint's summary file."""
    ctx, loaded = _job(tmp_path, monkeypatch)
    reads = _Reads(monkeypatch)
    run_agent_job(ctx, AGENT, *loaded)
    first = _optimizer_steps(ctx)
    served = served_checkpoint(AgentFolder(tmp_path / "state", AGENT).checkpoint_dir)
    assert served is not None
    served_bytes = hashlib.sha256(served.read_bytes()).hexdigest()
    reads.clear()
    force_jobs(monkeypatch)
    run_agent_job(ctx, AGENT, *loaded)
    assert reads.before_first_step == [served_bytes, served_bytes], reads.before_first_step
    assert reads.all.pop(served_bytes) == 2, reads.all
    assert list(reads.all.values()) == [1], reads.all  # the candidate's, after the run
    # The daemon's counters still start at the resumed checkpoint's totals: 8 more steps.
    assert first == 8 and _optimizer_steps(ctx) == 16


def test_a_cut_short_forced_run_is_continued_then_the_unchanged_pool_is_up_to_date_without_a_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A forced job stopped mid-run leaves its candidate without a verdict and the served
    model served; the next job (the daemon's own, on the same data) continues that
    candidate to its own target and judges it (issue 93: the manifest said up to date and
    the stopped candidate stayed undecided); the job after is up to date by the data
    manifest: no checkpoint read, no step."""
    ctx, loaded = _job(tmp_path, monkeypatch)
    run_agent_job(ctx, AGENT, *loaded)  # the served model, 8 steps
    folder = AgentFolder(tmp_path / "state", AGENT).checkpoint_dir
    step = trainer.Trainer.step

    def stop_at_step_10(this: Any, *args: Any, **kwargs: Any) -> Any:
        out = step(this, *args, **kwargs)
        if this.step_count >= 10:
            ctx.stopping.set()  # as a daemon shutdown does: the run stops with a checkpoint
        return out

    monkeypatch.setattr(trainer.Trainer, "step", stop_at_step_10)
    with monkeypatch.context() as patch, capture_logs() as logs:  # forced, cut at 10
        force_jobs(patch)
        run_agent_job(ctx, AGENT, *loaded)
    (stopped,) = [e for e in logs if e["event"] == "training run finished"]
    assert stopped["outcome"] == "stopped" and "not judged" in stopped["gate"]["reason"]
    cut = Path(stopped["checkpoint"]).parent
    monkeypatch.setattr(trainer.Trainer, "step", step)
    ctx.stopping.clear()
    with capture_logs() as logs:
        run_agent_job(ctx, AGENT, *loaded)
    (continued,) = [e for e in logs if e["event"] == "training run finished"]
    assert Path(continued["checkpoint"]) == cut / "ckpt-0000000016.pt"  # its own target
    assert continued["gate"]["outcome"] in ("promoted", "rejected", "inconclusive")
    served = served_checkpoint(folder)
    reads = _Reads(monkeypatch)
    with caplog.at_level("INFO", logger="genesis_fp16_infrastructure"), capture_logs() as logs:
        run_agent_job(ctx, AGENT, *loaded)
    assert "up to date by the data manifest" in caplog.text
    assert not reads.all, reads.all
    (finished,) = [e for e in logs if e["event"] == "training run finished"]
    assert finished["outcome"] == "up_to_date" and finished["steps"] == 0
    assert served_checkpoint(folder) == served


def test_a_corrupt_served_checkpoint_is_a_one_line_counted_refusal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Bytes that no longer match their digest: the daemon's summary read does not hide
    it; the run refuses in one line naming the file, and the job counts a failed run."""
    ctx, loaded = _job(tmp_path, monkeypatch)
    run_agent_job(ctx, AGENT, *loaded)
    served = served_checkpoint(AgentFolder(tmp_path / "state", AGENT).checkpoint_dir)
    assert served is not None
    served.write_bytes(served.read_bytes()[:-10] + b"0123456789")
    with capture_logs() as logs:
        run_agent_job(ctx, AGENT, *loaded)
    (failed,) = [e for e in logs if e["event"] == "training run failed"]
    assert "exc_info" not in failed
    assert failed["error"] == (  # the judged run scores the served model first
        f"{AGENT}: cannot score {served}: its bytes do not match the digest in "
        f"{served.name}.sha256 (changed after it was written: bit rot, a torn copy or an edit)"
    )
    runs = ctx.metrics.registry.get_sample_value(
        "genesis_fp16_training_runs_total", {"agent": AGENT, "outcome": "failed"}
    )
    assert runs == 1
