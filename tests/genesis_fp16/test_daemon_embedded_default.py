"""The embedded default with the real SE-Darwin plugin: sample data, runs at once, resumes."""

from __future__ import annotations

import pytest
from daemon_harness import DaemonFactory, DaemonProcess

from genesis_fp16_infrastructure.served import served_checkpoint

AGENT = "se_darwin"


@pytest.mark.slow
def test_embedded_default_trains_se_darwin_and_resumes(daemon_factory: DaemonFactory) -> None:
    """No data configured: sample data is generated, a run starts at once, the next resumes."""
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
        lambda: (daemon.sample(runs, agent=AGENT, outcome="success") or 0) >= 2,
        "two se_darwin runs",
        timeout=120,
    )
    assert daemon.sample(runs, agent=AGENT, outcome="failed") == 0
    # Resumed totals are not counted twice: 2 runs x 10 steps (skipped ones included).
    steps = daemon.sample("genesis_fp16_optimizer_steps_total", agent=AGENT) or 0
    skipped = daemon.sample("genesis_fp16_skipped_steps_total", agent=AGENT) or 0
    assert steps + skipped >= 20 and (steps + skipped) % 10 == 0
    finished = daemon.events("training run finished")
    assert finished[1]["precision_used"] == finished[0]["precision_used"]
    assert (daemon.state_dir / "agents" / AGENT / "data" / ".generated").is_file()
    # What is served is what served.json names: the second run's candidate, which went on
    # from the first's checkpoint (issue 35's candidates).
    served = served_checkpoint(daemon.state_dir / "agents" / AGENT / "checkpoints")
    assert served is not None and served.name.endswith(f"{int(steps + skipped):010d}.pt")
    assert daemon.events("daemon ready")[0]["address"] == "127.0.0.1"
