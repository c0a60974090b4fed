"""The embedded default with the real SE-Darwin plugin: sample data, runs at once, then
up to date on the same pool whatever the budget."""

from __future__ import annotations

import pytest
from daemon_harness import DaemonFactory, DaemonProcess

from genesis_fp16_infrastructure.agent_folder.pointer import served_checkpoint

AGENT = "se_darwin"


@pytest.mark.slow
def test_embedded_default_trains_se_darwin_then_is_up_to_date(
    daemon_factory: DaemonFactory,
) -> None:
    """No data configured: sample data is generated and a run starts at once; with a budget
    (STEPS_PER_RUN=10) the next scheduled runs on the same pool are up to date, by the data
    manifest, not 10 more steps each (a budget sizes a run on new data)."""
    # Only the size of the run and the interval are shrunk; everything else is the default.
    daemon: DaemonProcess = daemon_factory(
        {
            "GENESIS_FP16_PLUGIN_ALLOWLIST": AGENT,
            "GENESIS_FP16_STEPS_PER_RUN": "10",
            "GENESIS_FP16_LOG_INTERVAL": "5",
            "GENESIS_FP16_SAMPLE_COUNT": "300",
            "GENESIS_FP16_SCHEDULE": "2",
        },
        fixtures=False,
    )
    runs = "genesis_fp16_training_runs_total"
    daemon.wait_for(
        lambda: (daemon.sample(runs, agent=AGENT, outcome="up_to_date") or 0) >= 2,
        "a se_darwin run, then two up to date",
        timeout=120,
    )
    assert daemon.sample(runs, agent=AGENT, outcome="failed") == 0
    assert daemon.sample(runs, agent=AGENT, outcome="success") == 1
    # One run's 10 steps (skipped ones included), none since.
    steps = daemon.sample("genesis_fp16_optimizer_steps_total", agent=AGENT) or 0
    skipped = daemon.sample("genesis_fp16_skipped_steps_total", agent=AGENT) or 0
    assert steps + skipped == 10
    finished = daemon.events("training run finished")
    assert [e["outcome"] for e in finished[:3]] == ["success", "up_to_date", "up_to_date"]
    assert finished[1]["data"]["checked_by"] == "manifest"
    assert (daemon.state_dir / "agents" / AGENT / "data" / ".generated").is_file()
    served = served_checkpoint(daemon.state_dir / "agents" / AGENT / "checkpoints")
    assert served is not None and served.name.endswith(f"{10:010d}.pt")
    assert daemon.events("daemon ready")[0]["address"] == "127.0.0.1"
