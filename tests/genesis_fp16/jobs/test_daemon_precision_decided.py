"""The precision gauge shows a run's precision from the moment the run decides it, before
its first step, not from its first progress report (issue 92): a real daemon, a measured
``auto`` with nothing kept, read through /metrics while the run trains and has reported
nothing yet."""

from __future__ import annotations

import os
from pathlib import Path

from daemon_harness import DaemonFactory, DaemonProcess
from judged_daemon import AGENT, install_scaffold, judged_env, write_records
from prometheus_client.parser import text_string_to_metric_families

from genesis_fp16.metrics.metric_names import PRECISION_LABELS

# No progress report before this many steps, and a budget the run never reaches before
# the test stops the daemon: the only way onto the gauge mid-run is the decision's message.
NEVER = "1000000"


def _scrape(daemon: DaemonProcess) -> dict[tuple[str, str], float]:
    """The agent's precision series and its optimizer steps, from one /metrics render."""
    found: dict[tuple[str, str], float] = {}
    for family in text_string_to_metric_families(daemon.metrics_text()):
        for sample in family.samples:
            if sample.labels.get("agent") != AGENT:
                continue
            if sample.name == "genesis_fp16_precision":
                found[("precision", sample.labels["precision"])] = sample.value
            elif sample.name == "genesis_fp16_loss_scale":
                found[("loss_scale", "")] = sample.value
            elif sample.name == "genesis_fp16_optimizer_steps_total":
                found[("steps", "")] = sample.value
    return found


def _decided(daemon: DaemonProcess) -> dict[tuple[str, str], float] | None:
    scrape = _scrape(daemon)
    shown = [name for name in PRECISION_LABELS if scrape.get(("precision", name)) == 1]
    return scrape if shown else None


def test_a_measured_auto_run_shows_its_precision_before_its_first_report(
    daemon_factory: DaemonFactory, tmp_path: Path
) -> None:
    """A first auto run (no measurement kept: every precision 0 and the scale NaN at
    start-up) puts the precision it measured on genesis_fp16_precision while it trains,
    before any report, and outside fp16 the loss scale 1 with it."""
    package = install_scaffold(tmp_path / "plugin")
    data = tmp_path / "records.jsonl"
    write_records(data, 200, seed=0)
    env = judged_env(package, data)
    env.update(
        {
            # The worktree's packages, not only the scaffold's (as an installed one would be).
            "PYTHONPATH": os.pathsep.join(
                filter(None, [env["PYTHONPATH"], os.environ.get("PYTHONPATH")])
            ),
            "ENABLE_FP16_TRAINING": "true",
            "GENESIS_FP16_AUTO_PRECISION": "measure",
            "GENESIS_FP16_AGENTS__MY_JUDGED__PRECISION": "auto",
            "GENESIS_FP16_AGENTS__MY_JUDGED__STEPS": NEVER,
            "GENESIS_FP16_LOG_INTERVAL": NEVER,
            "GENESIS_FP16_SCHEDULE": "3600",
        }
    )
    daemon = daemon_factory(env, fixtures=False)
    scrape = daemon.wait_for(lambda: _decided(daemon), "the run's precision on the gauge", 180)
    shown = [name for name in PRECISION_LABELS if scrape[("precision", name)] == 1]
    assert len(shown) == 1 and all(
        scrape[("precision", n)] == 0 for n in PRECISION_LABELS if n not in shown
    )
    # No report came: the run's steps are not counted yet, and it has not finished.
    assert scrape.get(("steps", ""), 0.0) == 0.0
    assert not daemon.events("training run finished")
    if shown != ["fp16"]:  # no scaler: 1 with the decision (start-up said NaN: undecided)
        assert scrape[("loss_scale", "")] == 1.0
    # The precision it measured is the one it trains in: its one report, at the end, agrees.
    daemon.stop()
    ended = [e for e in daemon.events("training run finished") if e.get("agent") == AGENT]
    assert [e["precision_used"] for e in ended] == shown


def test_the_launcher_hands_a_childs_decided_precision_to_on_precision() -> None:
    """A child's ``{"precision": name}`` line reaches ``on_precision``; a name that is not a
    precision, or a result line that carries a precision field among others, does not."""
    import io
    import json

    from genesis_fp16.launch.launcher import _Ended, _read_stdout

    seen: list[str] = []
    lines = [
        json.dumps({"precision": "bf16"}),
        json.dumps({"precision": "fp64"}),
        json.dumps({"precision": "fp16", "agent": AGENT}),
    ]
    stream = io.StringIO("\n".join(lines) + "\n")
    _read_stdout(stream, _Ended(), None, None, on_precision=seen.append)
    assert seen == ["bf16"]
