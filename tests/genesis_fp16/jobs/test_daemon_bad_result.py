"""A plugin whose result has a field of the wrong type fails its daemon run in one line
naming the field, from the run's process: no json.dumps traceback."""

from __future__ import annotations

from pathlib import Path

from daemon_harness import FIXTURE_PLUGINS, DaemonFactory

API1 = "fixture_api1"
SOURCE = f'''"""Reports as plugin API 1 did: precision_requested is the request's precision."""

import dataclasses

from fixture_agents.good import FixtureAgent


class Api1Agent(FixtureAgent):
    def train(self, request):
        result = super().train(request)
        return dataclasses.replace(result, precision_requested=request.precision)


plugin = Api1Agent({API1!r})
'''


def test_a_result_with_a_wrong_field_fails_the_run_in_one_line(
    daemon_factory: DaemonFactory, tmp_path: Path
) -> None:
    """The run is counted failed (refused), its log line names the field and what to report
    instead, and no traceback reaches the daemon's log."""
    plugins = tmp_path / "plugins"
    info = plugins / f"{API1}-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {API1}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[genesis_fp16.agents]\n{API1} = api1_agent:plugin\n")
    (plugins / "api1_agent.py").write_text(SOURCE)
    daemon = daemon_factory(
        {
            "PYTHONPATH": f"{plugins}:{FIXTURE_PLUGINS}",
            "GENESIS_FP16_PLUGIN_ALLOWLIST": API1,
            "GENESIS_FP16_SCHEDULE": "3600",
            "GENESIS_FP16_STEPS_PER_RUN": "4",
            "GENESIS_FP16_SAMPLE_COUNT": "64",
            "FIXTURE_STEP_SECONDS": "0.01",
        },
        fixtures=False,
    )
    daemon.wait_for(
        lambda: daemon.sample("genesis_fp16_run_failures_total", agent=API1, reason="refused"),
        "the run's failure",
        timeout=90,
    )
    (failed,) = daemon.events("training run failed")
    assert failed["error"].endswith(
        f"{API1}'s TrainResult.precision_requested: Literal['auto', 'fp32', 'bf16', 'fp16'] "
        "expected, got PrecisionRequest; report request.precision.requested (plugin API 2)"
    ), failed
    log = daemon.log_path.read_text()
    assert "Traceback" not in log and "json.dumps" not in log and "not JSON serializable" not in log
