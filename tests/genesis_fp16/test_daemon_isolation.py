"""A plugin that hangs in train(): abandoned after its timeout, counted, health degraded,
and the other agent keeps its schedule (a real daemon subprocess)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from daemon_harness import FIXTURE_PLUGINS, start_daemon

HANG_PLUGINS = Path(__file__).resolve().parents[1] / "fixtures" / "hang_plugins"


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_a_hung_plugin_is_abandoned_and_the_other_agent_keeps_training(tmp_path: Path) -> None:
    """fixture_hanging never returns: after its 1 s timeout and 1 s grace it is a counted
    'hung' failure, /healthz says degraded naming it, its next jobs are skipped and counted,
    and fixture_good (sharing the one device slot) goes on succeeding."""
    daemon = start_daemon(
        tmp_path,
        {
            "PYTHONPATH": os.pathsep.join([str(FIXTURE_PLUGINS), str(HANG_PLUGINS)]),
            "GENESIS_FP16_PLUGIN_ALLOWLIST": "fixture_hanging,fixture_good",
            "GENESIS_FP16_AGENTS__FIXTURE_HANGING__RUN_TIMEOUT_SECONDS": "1",
            "GENESIS_FP16_SHUTDOWN_TIMEOUT_SECONDS": "1",
            "GENESIS_FP16_SCHEDULE": "2",
            "GENESIS_FP16_STEPS_PER_RUN": "2",
            "GENESIS_FP16_SAMPLE_COUNT": "16",
            "FIXTURE_STEP_SECONDS": "0.01",
        },
    )
    try:
        s = daemon.sample
        daemon.wait_for(
            lambda: s("genesis_fp16_run_failures_total", agent="fixture_hanging", reason="hung"),
            "the hung run abandoned",
        )
        status, body = daemon.get("/healthz")
        assert status == 503 and "degraded" in body and "fixture_hanging" in body
        assert s("genesis_fp16_runs_overdue", agent="fixture_hanging") == 1
        daemon.wait_for(
            lambda: (
                (
                    s("genesis_fp16_training_runs_total", agent="fixture_good", outcome="success")
                    or 0
                )
                >= 3
            ),
            "three runs of the healthy agent",
            timeout=60,
        )
        daemon.wait_for(
            lambda: s("genesis_fp16_jobs_skipped_total", agent="fixture_hanging", reason="hung"),
            "a skipped job of the hung agent",
        )
        assert s("genesis_fp16_training_runs_total", agent="fixture_hanging", outcome="failed") == 1
        assert daemon.get("/metrics")[0] == 200
    finally:
        daemon.stop()
