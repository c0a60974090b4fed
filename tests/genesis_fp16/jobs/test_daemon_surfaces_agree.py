"""Tried as a new user would (issue 92): after a promotion, the FP32 rollback and a
plugin's up_to_date run, the page, `status`, `model list` and /metrics never contradict
each other: the served model (id, precision, figures and the records they are on), the
last run (outcome, precision, loss scale), the run counts, the verdicts and the switch."""

from __future__ import annotations

import html
import json
import re
import signal
from pathlib import Path
from typing import Any

import pytest
from cli_fork import run_cli
from daemon_harness import DaemonFactory, DaemonProcess, daemon_env
from judged_daemon import (
    AGENT,
    finished,
    growth_env,
    install_scaffold,
    model_command,
    run_now,
    write_records,
)
from prometheus_client.parser import text_string_to_metric_families

from genesis_fp16.metrics.metric_names import PRECISION_LABELS

RUN_DEADLINE = 300.0  # a run's child on a loaded 2-core machine: a deadline


def _metrics(daemon: DaemonProcess) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """One /metrics render: each sample by name and labels (the agent's, and the daemon's)."""
    found = {}
    for family in text_string_to_metric_families(daemon.metrics_text()):
        for sample in family.samples:
            if sample.labels.get("agent", AGENT) == AGENT:
                labels = tuple(sorted((k, v) for k, v in sample.labels.items() if k != "agent"))
                found[(sample.name, labels)] = sample.value
    return found


def _page_text(daemon: DaemonProcess) -> str:
    """The page at / as a reader sees its words (markup, styles and scripts left out)."""
    page = daemon.get("/")[1]
    page = re.sub(r"<(style|script)\b.*?</\1>", " ", page, flags=re.S)
    return html.unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", page)))


def _run_once(daemon: DaemonProcess, env: dict[str, str], what: str) -> dict[str, Any]:
    """`genesis-fp16 run AGENT`, and the run's finished line once it is written."""
    seen = len(finished(daemon))
    run_now(daemon, env)
    daemon.wait_for(lambda: len(finished(daemon)) > seen, what, RUN_DEADLINE)
    # Settled: the run's job is over (its metrics, records and page written) when the
    # daemon says nothing runs.
    daemon.wait_for(lambda: _idle(daemon), "the run's job to end", 60)
    return finished(daemon)[seen]


def _idle(daemon: DaemonProcess) -> bool:
    agent = _status(daemon)["agents"][0]
    return agent["next_run"]["note"] != "running now"


def _status(daemon: DaemonProcess) -> dict[str, Any]:
    return json.loads(daemon.get("/status.json")[1])


def _check_agreement(
    daemon: DaemonProcess, env: dict[str, str], package: Path, rollback: bool
) -> None:
    """Every surface, read with nothing running, says the same."""
    report = _status(daemon)
    # `status` beside the daemon's settings (its port among them) asks the daemon.
    beside = {**env, "GENESIS_FP16_METRICS_PORT": str(daemon.port)}
    cli = run_cli(
        ["status", "--json"],
        cwd=daemon.workdir,
        env=daemon_env(beside, fixtures=False),
        timeout=120,
    )
    assert cli.returncode == 0, cli.stderr
    told = json.loads(cli.stdout)
    listed = model_command(daemon, package, "list", AGENT, "--json")
    assert listed.returncode == 0, listed.stderr
    models = json.loads(listed.stdout)
    metrics = _metrics(daemon)
    page = _page_text(daemon)
    (agent,) = report["agents"]

    # `status` is the page's report: the same agent, served model and last run.
    (told_agent,) = told["agents"]
    for key in ("served", "last_run", "last_success_at"):
        assert told_agent[key] == agent[key], key
    assert told["daemon"]["rollback"] == report["daemon"]["rollback"]

    # The served model: one id, one precision, one figure on one set of records.
    served = agent["served"]
    (row,) = [m for m in models["models"] if m["served"]]
    assert models["served"] == served["id"] == row["id"]
    assert f"served {served['id']} ({served['precision']}," in page
    assert row["precision"] == served["precision"]
    quality = served["quality"]
    assert (row["scores_set"], row["scores_records"]) == (quality["set"], quality["records"])
    assert f"records {quality['records']}, set {quality['set']}" in page
    for score, value in row["losses"].items():
        assert quality[score] == value
        assert metrics[("genesis_fp16_served_model_quality", (("score", score),))] == value

    # The last run: its outcome and precision on the page; /metrics' precision and loss
    # scale are the next run's, which with nothing changed since is the last run's.
    last, runs = agent["last_run"], agent["history"]["runs"]
    assert runs[0]["run"] == last or runs[-1]["run"] == last  # newest first or last
    newest = runs[0] if runs[0]["run"] == last else runs[-1]
    assert f"last run {last['outcome']} in {last['precision']}" in page
    gauge = {p: metrics[("genesis_fp16_precision", (("precision", p),))] for p in PRECISION_LABELS}
    assert gauge == {p: float(p == last["precision"]) for p in PRECISION_LABELS}
    assert metrics[("genesis_fp16_loss_scale", ())] == newest["loss_scale"]
    # The page's loss-scale chart draws each run's stored scale: 1 for every run without
    # a scaler, as /metrics said while it ran (an up_to_date fp32 run once stored 65536).
    assert {r["loss_scale"] for r in runs if r["run"]["precision"] != "fp16"} == {1.0}
    assert metrics[("genesis_fp16_last_success_timestamp_seconds", ())] == pytest.approx(
        agent["last_success_at"], abs=1e-3
    )
    # Every run of this daemon is in the page's history: the counts agree by outcome.
    for outcome in ("success", "up_to_date", "failed", "rejected"):
        counted = metrics[("genesis_fp16_training_runs_total", (("outcome", outcome),))]
        assert counted == sum(r["run"]["outcome"] == outcome for r in runs), outcome
    promoted = metrics[("genesis_fp16_recent_verdicts", (("verdict", "promoted"),))]
    assert f"{int(promoted)} promoted" in page

    # The rollback switch: said on the page and by `status`, exported, and what trains.
    assert metrics[("genesis_fp16_fp32_rollback", ())] == float(rollback)
    said = report["daemon"]["rollback"]
    if rollback:
        assert said is not None and said.startswith("on:") and f"rollback {said}" in page
        assert last["precision"] == "fp32"
    else:
        assert said is None and "rollback on" not in page


@pytest.mark.slow
def test_after_a_promotion_a_rollback_and_an_up_to_date_run_every_surface_agrees(
    daemon_factory: DaemonFactory, tmp_path: Path
) -> None:
    """The page, `status --json`, `model list --json` and /metrics agree after each step:
    a first model, a promoted successor (bf16), ENABLE_FP16_TRAINING=false by a reload,
    then an up_to_date run in fp32."""
    package = install_scaffold(tmp_path / "plugin")
    data = tmp_path / "records.jsonl"
    write_records(data, 300, seed=1)
    env = {**growth_env(package, data), "GENESIS_FP16_AGENTS__MY_JUDGED__PRECISION": "bf16"}
    (tmp_path / ".env").write_text("ENABLE_FP16_TRAINING=true\n")
    daemon = daemon_factory(env, fixtures=False)

    assert _run_once(daemon, env, "the first model")["gate"]["outcome"] == "promoted"
    write_records(data, 300, seed=2, shift=1.0)
    assert _run_once(daemon, env, "a promotion")["gate"]["outcome"] == "promoted"
    _check_agreement(daemon, env, package, rollback=False)

    (tmp_path / ".env").write_text("ENABLE_FP16_TRAINING=false\n")
    daemon.signal(signal.SIGHUP)
    daemon.wait_for(lambda: _status(daemon)["daemon"]["rollback"], "the rollback on the page", 60)
    assert _run_once(daemon, env, "an up-to-date run")["outcome"] == "up_to_date"
    _check_agreement(daemon, env, package, rollback=True)
