"""The daemon carries an agent's last fp16 loss scale to its next run: recorded after a
run, put in the next request for the same precision, forgotten on a demotion, another
precision or `precision reset`, and shown by `precision show`."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from daemon_harness import daemon_env

from genesis_fp16.config.settings import AgentSettings, Settings
from genesis_fp16.jobs.recording import record_scale
from genesis_fp16.jobs.run_request import plan_request
from genesis_fp16.plugin_api import TrainResult
from genesis_fp16_agents.rlhf_ppo import plugin
from genesis_fp16_infrastructure.api import capabilities_of, read_snapshot
from genesis_fp16_infrastructure.folder import AgentFolder
from genesis_fp16_infrastructure.training.reports import Demotion
from genesis_fp16_infrastructure.training.run.verify_capture import CaptureVerdict, write_verdict

AGENT = "rlhf_ppo"
DECLARED = capabilities_of(plugin)  # what the loader reads of it, once


pytestmark = pytest.mark.usefixtures("clean_env")  # conftest.py


def _settings(tmp_path: Path, precision: str = "fp16") -> Settings:
    spec = AgentSettings(precision=precision)  # type: ignore[arg-type]
    return Settings(state_dir=tmp_path, sample_count=8, agents={AGENT: spec})  # type: ignore[call-arg]


def carried_scale(settings: Settings, agent: str, requested: str) -> float | None:
    """The scale the agent's next run asking ``requested`` starts at, as its plan reads it."""
    return read_snapshot(AgentFolder(settings.state_dir, agent)).state.initial_scale(requested)


def _result(used: str = "fp16", scale: float = 2048.0, **more: object) -> TrainResult:
    return TrainResult(
        agent=AGENT,
        precision_requested="fp16",
        precision_used=used,
        precision_reason="test",
        device="cpu",
        steps=10,
        skipped_steps=0,
        overflow_rate=0.0,
        loss_scale=scale,
        final_train_loss=1.0,
        eval={},
        samples_per_second=1.0,
        wall_seconds=1.0,
        checkpoint=None,
        quarantined=0,
        **more,  # type: ignore[arg-type]
    )


def test_an_fp16_runs_scale_reaches_the_next_request(tmp_path: Path) -> None:
    """After an fp16 run, the next fp16 request starts at its last scale."""
    settings = _settings(tmp_path)
    assert plan_request(settings, AGENT, plugin, DECLARED, "cpu").initial_loss_scale is None
    record_scale(settings, AGENT, _result(scale=2048.0))
    assert plan_request(settings, AGENT, plugin, DECLARED, "cpu").initial_loss_scale == 2048.0


def test_a_demotion_or_another_precision_forgets_it(tmp_path: Path) -> None:
    """A demoted run, or a run that ended in bf16, deletes the carried scale; a run that
    took no step leaves it; a changed request does not use it."""
    settings = _settings(tmp_path)
    record_scale(settings, AGENT, _result())
    record_scale(settings, AGENT, replace(_result(), steps=0, loss_scale=1.0))
    assert carried_scale(settings, AGENT, "fp16") == 2048.0
    assert carried_scale(settings, AGENT, "auto") is None  # another request
    demotion = Demotion("fp16", "bf16", "overflow_rate", 10, 5)
    record_scale(settings, AGENT, _result(demotions=(demotion,)))
    assert carried_scale(settings, AGENT, "fp16") is None
    record_scale(settings, AGENT, _result())
    record_scale(settings, AGENT, _result(used="bf16", scale=1.0))
    assert carried_scale(settings, AGENT, "fp16") is None
    bf16 = _settings(tmp_path, "bf16")
    record_scale(settings, AGENT, _result())
    assert plan_request(bf16, AGENT, plugin, DECLARED, "cpu").initial_loss_scale is None


def _cli(state: Path, *args: str) -> str:
    env = daemon_env({"GENESIS_FP16_STATE_DIR": str(state)}, fixtures=False)
    done = subprocess.run(
        [sys.executable, "-m", "genesis_fp16", *args],
        cwd=state,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_precision_show_prints_it_and_reset_forgets_it(tmp_path: Path) -> None:
    """`precision show` names the carried scale (text and --json); `reset` deletes it."""
    settings = _settings(tmp_path)
    record_scale(settings, AGENT, _result(scale=512.0))
    assert "loss scale: 512 carried from the last fp16 run" in _cli(
        tmp_path, "precision", "show", AGENT
    )
    shown = json.loads(_cli(tmp_path, "precision", "show", AGENT, "--json"))
    assert shown["carried_loss_scale"]["scale"] == 512.0
    assert "carried loss scale forgotten" in _cli(tmp_path, "precision", "reset", AGENT)
    assert not AgentFolder(tmp_path, AGENT).loss_scale_path.exists()
    assert "none carried" in _cli(tmp_path, "precision", "show", AGENT)


def test_precision_show_lists_the_captured_step_verdicts_and_reset_forgets_them(
    tmp_path: Path,
) -> None:
    """A failed verdict is shown as not trusted, with its first difference; reset deletes
    the file so that the next captured run verifies again."""
    paths = AgentFolder(tmp_path, AGENT)
    key = {"precision": "fp16", "execution": "cuda_graph", "device": "cuda X", "torch": "2"}
    write_verdict(
        paths.verification_path, CaptureVerdict(False, "step 5: parameters differ", key, 8)
    )
    shown = _cli(tmp_path, "precision", "show", AGENT)
    assert "NOT trusted, runs eager (step 5: parameters differ)" in shown
    assert "captured-step verdicts forgotten" in _cli(tmp_path, "precision", "reset", AGENT)
    assert not paths.verification_path.exists()
    # With nothing remembered, a CUDA host awaits its first captured run; a CPU host says
    # that it has no captured step at all (CUDA graphs need a CUDA device).
    unverified = (
        "not verified on this host yet"
        if torch.cuda.is_available()
        else "captured step: none here (CUDA graphs need a CUDA device"
    )
    assert unverified in _cli(tmp_path, "precision", "show", AGENT)
