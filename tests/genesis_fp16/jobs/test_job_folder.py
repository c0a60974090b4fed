"""A job builds its agent's folder once, in its plan (``Run.folder``): every step after
(the plan's reads, the probe, the served-model check, the guard's memory, the carried
scale, the history's bound, the run's record) takes the run's, whatever the outcome.

Counted on the real job: every ``AgentFolder.__init__`` call made while
``run_agent_job`` runs, in-process, on se_darwin's tiny run.
"""

from __future__ import annotations

import threading
import traceback
from pathlib import Path
from typing import Any

import pytest
from daemon_harness import clear_daemon_env
from in_process import train_in_process
from prometheus_client import CollectorRegistry

from genesis_fp16.config.plugins import load_plugin
from genesis_fp16.config.settings import Settings
from genesis_fp16.jobs.agent_job import DeviceSlots, JobContext, run_agent_job
from genesis_fp16.metrics.daemon_metrics import DaemonMetrics
from genesis_fp16_infrastructure.folder import AgentFolder

AGENT = "se_darwin"


def _counting(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Where each ``AgentFolder`` is built from now on: the caller's file and line."""
    built: list[str] = []
    init = AgentFolder.__init__

    def counted(self: AgentFolder, *args: Any, **kwargs: Any) -> None:
        caller = traceback.extract_stack(limit=2)[0]
        built.append(f"{Path(caller.filename).name}:{caller.lineno}")
        init(self, *args, **kwargs)

    monkeypatch.setattr(AgentFolder, "__init__", counted)
    return built


def _job(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, **own: Any) -> tuple[JobContext, Any]:
    clear_daemon_env(monkeypatch)
    train_in_process(monkeypatch)  # the job's every step in one count
    loaded = load_plugin(AGENT)
    data = loaded.plugin.generate_sample_data(tmp_path / "data", 600, 0)
    settings = Settings(
        state_dir=tmp_path / "state",
        steps_per_run=8,
        auto_precision="rule",
        agents={AGENT: {"data_path": str(data), **own}},  # type: ignore[dict-item]
    )
    metrics = DaemonMetrics(CollectorRegistry(), "test")
    return JobContext(settings, metrics, DeviceSlots(1), threading.Event()), loaded


def _runs(ctx: JobContext, outcome: str) -> float | None:
    return ctx.metrics.registry.get_sample_value(
        "genesis_fp16_training_runs_total", {"agent": AGENT, "outcome": outcome}
    )


def test_a_job_that_trains_builds_its_agent_folder_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A job that trains, is judged, remembers its scale, bounds its history and records
    its run builds one ``AgentFolder``, with the probe and the served-model check on."""
    ctx, loaded = _job(tmp_path, monkeypatch, probe_before_low_precision=True)
    built = _counting(monkeypatch)
    run_agent_job(ctx, AGENT, *loaded)
    assert _runs(ctx, "success") == 1
    assert len(built) == 1, built


def test_a_job_refused_for_its_unusable_pointer_builds_its_agent_folder_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A job whose plan sets an unusable served-model pointer aside, and whose run is
    refused for it, records its failure and bounds its history on the folder it built."""
    ctx, loaded = _job(tmp_path, monkeypatch)
    models = AgentFolder(tmp_path / "state", AGENT).checkpoint_dir
    models.mkdir(parents=True)
    (models / "served.json").write_text("{not json")
    built = _counting(monkeypatch)
    run_agent_job(ctx, AGENT, *loaded)
    assert AGENT in ctx.unusable_pointer and list(models.glob("served.json.unusable-*"))
    assert _runs(ctx, "failed") == 1
    assert len(built) == 1, built
