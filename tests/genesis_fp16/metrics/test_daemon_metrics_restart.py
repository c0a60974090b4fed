"""Metrics that keep their meaning across a restart and before the first run (issue 31, item 4).

Real daemons over a real state folder: the last success time is read back from it, a bad
file there is skipped and counted, and with ``RUN_AT_START=false`` the precision and loss
scale series are on the very first scrape, saying what the next run starts with.
"""

from __future__ import annotations

import json
import math
import os
import urllib.error
from pathlib import Path

import pytest
import torch
from daemon_harness import DaemonFactory, DaemonProcess, launch
from prometheus_client.parser import text_string_to_metric_families

from genesis_fp16_infrastructure.agent_folder.files import UnusableStateFile
from genesis_fp16_infrastructure.api import Calibration
from genesis_fp16_infrastructure.folder import AgentFolder
from genesis_fp16_infrastructure.training import (
    CheckpointManager,
    PrecisionPolicy,
    ScalerConfig,
    Trainer,
)
from genesis_fp16_infrastructure.training.reports import Measured

GOOD = "fixture_good"
RAISING = "fixture_raising"  # loads, fails any run: none starts here (RUN_AT_START=false)
QUIET = {
    "GENESIS_FP16_STEPS_PER_RUN": "2",
    "GENESIS_FP16_SAMPLE_COUNT": "64",
    "GENESIS_FP16_SCHEDULE": "3600",
}
LAST_SUCCESS = "genesis_fp16_last_success_timestamp_seconds"
SKIPPED = "genesis_fp16_state_files_skipped_total"
# One scrape: {(series name, its labels): value}.
Scrape = dict[tuple[str, frozenset[tuple[str, str]]], float]


def _first_scrape(daemon: DaemonProcess) -> Scrape:
    """The first /metrics the daemon answers at all, as {(name, labels): value}."""

    def answered() -> str | None:
        try:
            status, body = daemon.get("/metrics", timeout=2.0)
        except (OSError, urllib.error.URLError):
            return None
        return body if status == 200 else None

    body = daemon.wait_for(answered, "the first answered /metrics", timeout=60.0)
    return {
        (sample.name, frozenset(sample.labels.items())): float(sample.value)
        for family in text_string_to_metric_families(body)
        for sample in family.samples
    }


def _value(scrape: Scrape, name: str, **labels: str) -> float | None:
    return scrape.get((name, frozenset(labels.items())))


def _precisions(scrape: Scrape, agent: str) -> dict[str, float | None]:
    return {
        p: _value(scrape, "genesis_fp16_precision", agent=agent, precision=p)
        for p in ("fp32", "bf16", "fp16")
    }


def _plant_checkpoint(state_dir: Path, agent: str, precision: str, scale: float) -> None:
    """A real core checkpoint, as fit() writes it, of a trainer in ``precision`` whose loss
    scaler stands at ``scale``."""
    model = torch.nn.Linear(4, 2)
    policy = PrecisionPolicy.create(precision, "cpu", ScalerConfig(init_scale=scale))
    trainer = Trainer(model, [torch.optim.SGD(model.parameters(), lr=0.1)], policy)
    CheckpointManager(AgentFolder(state_dir, agent).checkpoint_dir).save(trainer.state_dict())


def _stop(daemon: DaemonProcess) -> None:
    daemon.stop()
    assert daemon.process.returncode == 0, daemon.tail()


def test_last_success_time_survives_a_restart(
    daemon_factory: DaemonFactory, tmp_path: Path
) -> None:
    """A daemon restarted over the same state folder exports the last success time its
    predecessor set, from its first scrape, without running anything itself."""
    env = {"GENESIS_FP16_PLUGIN_ALLOWLIST": GOOD, **QUIET}
    first = daemon_factory(env)
    runs = "genesis_fp16_training_runs_total"
    first.wait_for(lambda: first.sample(runs, agent=GOOD, outcome="success"), "a success")
    succeeded = first.sample(LAST_SUCCESS, agent=GOOD)
    assert succeeded is not None and succeeded > 0
    _stop(first)

    second = launch(tmp_path, {**env, "GENESIS_FP16_RUN_AT_START": "false"})
    try:
        scrape = _first_scrape(second)
        assert _value(scrape, LAST_SUCCESS, agent=GOOD) == succeeded
        assert _value(scrape, runs, agent=GOOD, outcome="success") == 0  # not a run of its own
        assert _value(scrape, SKIPPED, agent=GOOD, file="last_success") == 0
    finally:
        _stop(second)


@pytest.mark.parametrize("hazard", ["torn", "fifo"])
def test_an_unusable_last_success_file_is_skipped_and_counted(
    daemon_factory: DaemonFactory, tmp_path: Path, hazard: str
) -> None:
    """A torn last-success file, or a FIFO in its place (a blocking read would hang
    start-up), is logged and counted; the daemon starts with 0 for that agent, and the
    other agent keeps its stored time."""
    state_dir = tmp_path / "state"
    path = AgentFolder(state_dir, GOOD).last_success_path
    path.parent.mkdir(parents=True)
    if hazard == "torn":
        path.write_text('{"version": 1, "last_success_timestamp_sec')
    else:
        os.mkfifo(path)
    AgentFolder(state_dir, RAISING).save_last_success(1_700_000_000.5)
    daemon = daemon_factory(
        {
            "GENESIS_FP16_PLUGIN_ALLOWLIST": f"{GOOD},{RAISING}",
            "GENESIS_FP16_RUN_AT_START": "false",
            **QUIET,
        }
    )
    assert daemon.sample(LAST_SUCCESS, agent=GOOD) == 0
    assert daemon.sample(SKIPPED, agent=GOOD, file="last_success") == 1
    assert daemon.sample(LAST_SUCCESS, agent=RAISING) == 1_700_000_000.5
    assert daemon.sample(SKIPPED, agent=RAISING, file="last_success") == 0
    warnings = daemon.events("skipping the last-success file: the agent starts at 0")
    assert [w["agent"] for w in warnings] == [GOOD]
    assert f"agents/{GOOD}/last_success.json" in warnings[0]["error"]


# Per agent: the per-agent precision setting (None: auto, measured by default), a planted
# checkpoint (precision, scale) or None, and what the first scrape must show.
NEXT_RUNS = {
    "explicit": (
        (GOOD, "fp16", None, "fp16", 65536.0),  # fp16 asked, fresh: the initial scale
        (RAISING, "bf16", ("fp16", 512.0), "bf16", 1.0),  # no scaling outside fp16
    ),
    "auto": (
        # auto is what decide() answers, never the newest checkpoint's precision: with
        # nothing measured yet, undecided
        (GOOD, None, ("fp16", 2048.0), None, math.nan),
        (RAISING, None, None, None, math.nan),  # auto, never run: undecided
    ),
    "kept": (
        # a kept measurement (bf16 twice as fast): decide() answers from it
        (GOOD, None, ("fp16", 2048.0), "bf16", 1.0),
        (RAISING, None, None, None, math.nan),
    ),
}


def _keep_measurement(state_dir: Path, agent: str) -> None:
    """A measured auto's kept rows, as calibrate() writes them: bf16 twice fp32's speed."""
    rows = (
        Measured("fp32", "eager", 2.0, 2.0, 2.0, 3),
        Measured("bf16", "eager", 1.0, 1.0, 1.0, 3),
    )
    path = AgentFolder(state_dir, agent).calibration_path
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(Calibration("bf16", "measured", rows, {}, {}, 0.1).to_json()))


@pytest.mark.parametrize("case", sorted(NEXT_RUNS))
def test_precision_and_loss_scale_are_exported_from_the_first_scrape(
    tmp_path: Path, case: str
) -> None:
    """With RUN_AT_START=false, the first scrape already has every agent's precision and
    loss scale: what decide() answers its next run's request, and the scale it resumes
    with; undecided (all 0, NaN) for a measured auto with no kept measurement."""
    env = {
        "GENESIS_FP16_PLUGIN_ALLOWLIST": f"{GOOD},{RAISING}",
        "GENESIS_FP16_RUN_AT_START": "false",
        **QUIET,
    }
    for agent, setting, planted, _, _ in NEXT_RUNS[case]:
        if setting is not None:
            env[f"GENESIS_FP16_AGENTS__{agent.upper()}__PRECISION"] = setting
        if planted is not None:
            _plant_checkpoint(tmp_path / "state", agent, *planted)
    if case == "kept":
        _keep_measurement(tmp_path / "state", GOOD)
    daemon = launch(tmp_path, env)
    try:
        scrape = _first_scrape(daemon)
        for agent, _, _, precision, scale in NEXT_RUNS[case]:
            expected = {p: float(p == precision) for p in ("fp32", "bf16", "fp16")}
            assert _precisions(scrape, agent) == expected, agent
            shown = _value(scrape, "genesis_fp16_loss_scale", agent=agent)
            assert shown is not None, agent
            assert shown == scale or (math.isnan(scale) and math.isnan(shown)), (agent, shown)
    finally:
        _stop(daemon)


def test_store_round_trip_and_what_it_refuses(tmp_path: Path) -> None:
    """The store reads back what it wrote, None when there is nothing, and refuses (one
    line naming the file) a wrong version, a non-number, a non-positive time and a folder."""
    store = AgentFolder(tmp_path, "a")
    assert store.last_success() is None
    store.save_last_success(1_763_900_000.25)
    assert store.last_success() == 1_763_900_000.25
    path = store.last_success_path
    for bad in (
        {"version": 2, "last_success_timestamp_seconds": 1.0},
        {"version": 1, "last_success_timestamp_seconds": "yesterday"},
        {"version": 1, "last_success_timestamp_seconds": True},
        {"version": 1, "last_success_timestamp_seconds": 0},
        [1],
    ):
        path.write_text(json.dumps(bad))
        with pytest.raises(UnusableStateFile, match=r"last_success\.json"):
            store.last_success()
    path.unlink()
    path.mkdir()
    with pytest.raises(UnusableStateFile, match=r"last_success\.json"):
        store.last_success()
