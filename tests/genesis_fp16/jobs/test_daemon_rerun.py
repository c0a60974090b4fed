"""A run stopped by a .env edit is rerun at once, and the gauge shows the rerun's precision
from the reload on: a real daemon, its file watcher, no SIGHUP."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from daemon_harness import DaemonFactory, DaemonProcess

GOOD = "fixture_good"
PRECISION = "genesis_fp16_precision"


def _edit_env(path: Path, value: str) -> None:
    """Write the rollback switch with an mtime of its own (the watcher compares mtimes)."""
    path.write_text(f"ENABLE_FP16_TRAINING={value}\n")
    stamp = time.time_ns() + 10**9 * len(value)  # true and false: never the same mtime
    os.utime(path, ns=(stamp, stamp))


def _shows(daemon: DaemonProcess, precision: str) -> bool:
    others = [p for p in ("fp32", "bf16", "fp16") if p != precision]
    return daemon.sample(PRECISION, agent=GOOD, precision=precision) == 1 and all(
        daemon.sample(PRECISION, agent=GOOD, precision=p) == 0 for p in others
    )


@pytest.mark.slow
def test_flapping_rollback_reruns_at_once_and_the_gauge_follows_each_reload(
    daemon_factory: DaemonFactory, tmp_path: Path
) -> None:
    """Four edits in a row (fp32, fp16, fp32, fp16): each stops the run, a new run starts in
    the edited precision within seconds (schedule: an hour), the gauge shows it first."""
    env_file = tmp_path / ".env"
    _edit_env(env_file, "true")
    daemon = daemon_factory(
        {
            "GENESIS_FP16_PLUGIN_ALLOWLIST": GOOD,
            "GENESIS_FP16_STEPS_PER_RUN": "100000",
            # No progress report in a run: only the reload (or a finished run) moves the gauge.
            "GENESIS_FP16_LOG_INTERVAL": "100000",
            "GENESIS_FP16_SAMPLE_COUNT": "64",
            "GENESIS_FP16_SCHEDULE": "3600",
            "FIXTURE_STEP_SECONDS": "0.05",
        }
    )
    daemon.wait_for(lambda: daemon.events("training run started"), "the first run")
    assert _shows(daemon, "fp16")
    for edit, (value, precision) in enumerate(
        [("false", "fp32"), ("true", "fp16"), ("false", "fp32"), ("true", "fp16")], start=1
    ):
        _edit_env(env_file, value)
        daemon.wait_for(lambda p=precision: _shows(daemon, p), f"gauge {precision}", timeout=20)
        started = daemon.wait_for(
            lambda n=edit: daemon.events("training run started")[n:],
            f"run {edit + 1} in {precision}",
            timeout=60,
        )
        assert started[0]["precision"] == precision
        assert _shows(daemon, precision)  # the stopped run's precision did not come back
    assert daemon.sample("genesis_fp16_config_reloads_total", outcome="success") == 4
    runs = "genesis_fp16_training_runs_total"
    assert daemon.sample(runs, agent=GOOD, outcome="failed") in (None, 0)
    assert len(daemon.events("training run started")) == 5
