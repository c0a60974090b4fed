"""A real daemon's measured ``auto`` is reused after a restart (issue 66 item 1): the
first daemon's run measures and keeps the table; a second daemon, started afresh on the
same state folder, reuses it (its winner timed again, nothing else), and says so. Within
one daemon, a later run served by the same resident run process reuses it without timing
its winner again (issue 91), and says so.

rlhf_ppo on its generated data, in the daemon's default precision (auto, measured). This
CPU may have no native bf16, where ``auto`` times nothing: a ``sitecustomize`` hook in
the run's interpreter takes bf16 as native (its arithmetic is real either way) and
widens the winner's re-timing tolerance and the load bound, so that this test is about
the key surviving a restart and not about a shared host's noise (the 10% check and the
load verdict have their own tests: test_calibration_clock.py, test_calibration.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from daemon_harness import DaemonFactory, DaemonProcess, daemon_env

from genesis_fp16_infrastructure.folder import AgentFolder

pytestmark = pytest.mark.usefixtures("clean_env")

AGENT = "rlhf_ppo"
HOOK = textwrap.dedent(
    """
    from genesis_fp16_infrastructure.training.precision import choice, decide
    from genesis_fp16_infrastructure.training.run import calibration

    _native = decide.DeviceCapabilities("cpu", True, False, "test hook: bf16 as native")
    _detect = decide.detect_capabilities

    def _detect_bf16(device):
        found = _detect(device)
        return _native if found.device_type == "cpu" else found

    decide.detect_capabilities = _detect_bf16
    decide.cpu_capabilities = lambda: _native
    calibration.REVALIDATE = 100.0
    choice.LOAD_BOUND = 1e9  # read where it is defined (reports only re-exports it)
    """
)


def _first_run(daemon: DaemonProcess) -> dict[str, Any]:
    """The daemon's first `training run finished` line."""
    found: list[dict[str, Any]] = daemon.wait_for(
        lambda: daemon.events("training run finished"), "the first run", timeout=240.0
    )
    return found[0]


def test_a_kept_measurement_is_reused_after_a_daemon_restart(
    daemon_factory: DaemonFactory, tmp_path: Path
) -> None:
    """First daemon: its run measures fp32 and bf16 and keeps the table. Second daemon
    on the same state folder: its run reuses the table (the file is not rewritten), and
    its precision_reason says it was a cached measurement, its winner timed again."""
    hooks = tmp_path / "hooks"
    hooks.mkdir()
    (hooks / "sitecustomize.py").write_text(HOOK)
    env = {
        "GENESIS_FP16_PLUGIN_ALLOWLIST": AGENT,
        "GENESIS_FP16_STEPS_PER_RUN": "4",
        "PYTHONPATH": os.pathsep.join([str(hooks), os.environ.get("PYTHONPATH", "")]),
    }
    first = daemon_factory(env, fixtures=False)
    reason = _first_run(first)["precision_reason"]
    first.stop()
    # bf16 is timed, or skipped past the 1 s deadline on a slow host (said either way)
    assert "timed, median (p10-p90): fp32 eager" in reason and "bf16 eager" in reason, reason
    assert "cached measurement" not in reason, reason
    path = AgentFolder(first.state_dir, AGENT).calibration_path
    kept = json.loads(path.read_text())
    assert kept["rows"][0]["precision"] == "fp32"
    assert kept["seconds"] > 0 and set(kept["phases"]) >= {"build", "warmup", "timed"}

    first.log_path.rename(first.log_path.with_suffix(".first.log"))  # the second's log alone
    second = daemon_factory(env, fixtures=False)
    again = _first_run(second)["precision_reason"]
    assert f"cached measurement (the kept {kept['chosen']} eager" in again, again
    assert json.loads(path.read_text()) == kept  # reused, not measured and written again


def test_a_later_run_in_the_same_resident_process_does_not_time_the_winner_again(
    daemon_factory: DaemonFactory, tmp_path: Path
) -> None:
    """One daemon, its runs served by the CPU's resident run process: the first run
    measures; the second, asked by `run`, reuses the kept measurement untimed (this
    process timed it, its file unchanged) and the file is not rewritten; the resident
    process's line names the calibration among what its memory store gave back."""
    hooks = tmp_path / "hooks"
    hooks.mkdir()
    (hooks / "sitecustomize.py").write_text(HOOK)
    env = {
        "GENESIS_FP16_PLUGIN_ALLOWLIST": AGENT,
        "GENESIS_FP16_STEPS_PER_RUN": "4",
        "PYTHONPATH": os.pathsep.join([str(hooks), os.environ.get("PYTHONPATH", "")]),
    }
    daemon = daemon_factory(env, fixtures=False)
    try:
        first = _first_run(daemon)["precision_reason"]
        assert "cached measurement" not in first, first
        path = AgentFolder(daemon.state_dir, AGENT).calibration_path
        kept = json.loads(path.read_text())
        asked = subprocess.run(
            [sys.executable, "-m", "genesis_fp16", "run", AGENT],
            cwd=daemon.workdir,
            env=daemon_env({**env, "GENESIS_FP16_METRICS_PORT": str(daemon.port)}, False),
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert asked.returncode == 0, asked.stderr
        finished = daemon.wait_for(
            lambda: daemon.events("training run finished")[1:], "the second run", 240.0
        )
        said = [str(r.get("event")) for r in daemon.logs()]
    finally:
        daemon.stop()
    again = finished[0]["precision_reason"]
    untimed = f"cached measurement (the kept {kept['chosen']} eager "
    assert untimed in again and "not timed again: this process timed it " in again, again
    assert json.loads(path.read_text()) == kept  # reused, not measured and written again
    assert any("reused: run 2 in it" in line for line in said), said
    store = [line for line in said if "reused: run 2 took from its memory store: " in line]
    timed = f"calibration state/agents/{AGENT}/{path.name}'s winner as timed here "
    assert store and timed in store[0], said
