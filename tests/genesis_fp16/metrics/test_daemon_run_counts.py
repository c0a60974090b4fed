"""A real daemon's run counts and step counts agree at every scrape (issue 60 part 3).

GenesisFp16TrainingStalled fires when ``training_runs_started_total`` grew over a window
and ``optimizer_steps_total`` did not. Any scrape may be a Prometheus's first, so this
scrapes a real daemon training se_darwin on its generated data as fast as it answers,
from before its first step to after its next (up-to-date) run, and checks every pair of
scrapes: a start seen after scrape i comes with steps seen after scrape i.
"""

from __future__ import annotations

import time

import pytest
from daemon_harness import DaemonFactory, DaemonProcess
from prometheus_client.parser import text_string_to_metric_families

pytestmark = pytest.mark.usefixtures("clean_env")

AGENT = "se_darwin"
STARTED = "genesis_fp16_training_runs_started_total"
STEPS = "genesis_fp16_optimizer_steps_total"
RUNS = "genesis_fp16_training_runs_total"
# One scrape of the agent: runs started, steps taken, runs finished by outcome.
Counts = tuple[float, float, dict[str, float]]


def _counts(daemon: DaemonProcess) -> Counts | None:
    """The agent's counters in one /metrics answer (None: not answered)."""
    status, body = daemon.get("/metrics", timeout=5.0)
    if status != 200:
        return None
    found: dict[str, float] = {}
    finished: dict[str, float] = {}
    for family in text_string_to_metric_families(body):
        for sample in family.samples:
            if sample.labels.get("agent") != AGENT:
                continue
            if sample.name == RUNS:
                finished[sample.labels["outcome"]] = sample.value
            elif sample.name in (STARTED, STEPS):
                found[sample.name] = sample.value
    return found.get(STARTED, 0.0), found.get(STEPS, 0.0), finished


def _scrape_until_second_run(daemon: DaemonProcess, timeout: float) -> list[Counts]:
    """Every scrape from now until the agent's second run is counted as finished."""
    scrapes: list[Counts] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        counts = _counts(daemon)
        if counts is not None:
            scrapes.append(counts)
            if sum(counts[2].values()) >= 2:
                return scrapes
        time.sleep(0.05)  # a scrape every ~50 ms: every phase of the run, without flooding it
    raise AssertionError(f"no second run in {timeout} s:\n{daemon.tail()}")


def test_every_scrape_sees_a_runs_start_with_its_steps(daemon_factory: DaemonFactory) -> None:
    """From any scrape on, a run counted as started brings steps too (the stall rule holds
    for a first scrape at every phase), and the up-to-date second run counts no start."""
    daemon = daemon_factory(
        {
            "GENESIS_FP16_PLUGIN_ALLOWLIST": AGENT,
            "ENABLE_FP16_TRAINING": "false",
            "GENESIS_FP16_STEPS_PER_RUN": "40",
            "GENESIS_FP16_LOG_INTERVAL": "10",
            "GENESIS_FP16_SAMPLE_COUNT": "300",
            "GENESIS_FP16_SCHEDULE": "5",
            "GENESIS_FP16_RUN_AT_START": "false",  # the first scrapes come before any step
        },
        fixtures=False,
    )
    scrapes = _scrape_until_second_run(daemon, timeout=300.0)
    started, steps, finished = scrapes[-1]
    assert (started, finished.get("success"), finished.get("up_to_date")) == (1, 1, 1)
    assert steps > 0
    # Both counters only grow, so for scrape i the first later scrape with more starts is
    # the one to check: every later one has at least its steps.
    first_above = {
        value: next((j for j, (s, _, _) in enumerate(scrapes) if s > value), None)
        for value in {s for s, _, _ in scrapes}
    }
    for i, (started_i, steps_i, _) in enumerate(scrapes):
        j = first_above[started_i]
        if j is not None:
            assert scrapes[j][1] > steps_i, (scrapes[i], scrapes[j])
