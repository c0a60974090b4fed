"""The page's memory and pictures on a real daemon, in a real headless Chromium: a judged
agent's promotions, a rejection and an operator's rollback on its quality chart, a
fault agent's demotion on its loss-scale chart; the DOM holds each mark in its agent's
chart, and the screenshot shows each in its colour. The same daemon posts each of those
events to a loopback webhook receiver, signed and in order per agent."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from daemon_harness import FIXTURE_PLUGINS, DaemonProcess, daemon_env, start_daemon
from judged_daemon import AGENT, gate_outcomes, install_scaffold, judged_env, write_records
from status_pages import CHROMIUM_FLAGS, colour_count, png_pixels
from webhook_receiver import Receiver

from genesis_fp16.events import posting
from genesis_fp16.status.svg import KINDS

GUARD_PLUGINS = Path(__file__).resolve().parents[2] / "fixtures" / "guard_plugins"
FAULT = "fixture_fault"
SECRET = "pictures-test-secret"


def _env(package: Path, data: Path, golden: Path, url: str) -> dict[str, str]:
    """The judged scaffold agent on ``data`` judged on ``golden``, beside the guard's
    fault agent, whose fp16 overflows from step 12 on (one run: demoted to bf16); the
    events posted to ``url``."""
    path = os.pathsep.join([str(package), str(GUARD_PLUGINS), str(FIXTURE_PLUGINS)])
    return judged_env(
        package,
        data,
        PYTHONPATH=path,
        GENESIS_FP16_PLUGIN_ALLOWLIST=f"{AGENT},{FAULT}",
        GENESIS_FP16_AGENTS__MY_JUDGED__GOLDEN_DATA=str(golden),
        GENESIS_FP16_AGENTS__FIXTURE_FAULT__SCHEDULE="3600",
        # Every 3 s, not 1: the up-to-date runs between the events stay few (the charts
        # draw the last 30 runs).
        GENESIS_FP16_AGENTS__MY_JUDGED__SCHEDULE="3",
        GENESIS_FP16_AGENTS__FIXTURE_FAULT__STEPS="30",
        ENABLE_FP16_TRAINING="true",
        GENESIS_FP16_GUARD_CHECK_INTERVAL="5",
        GENESIS_FP16_GUARD_OVERFLOW_WINDOW="5",
        GENESIS_FP16_GUARD_OVERFLOW_WARMUP="0",
        GENESIS_FP16_GUARD_BF16_NEEDS_NATIVE="false",
        FIXTURE_FAULT_STEP="12",
        GENESIS_FP16_EVENTS_URLS=url,
        GENESIS_FP16_EVENTS_SECRET=SECRET,
    )


def _next_gate(daemon: DaemonProcess, seen: int, what: str) -> str:
    daemon.wait_for(lambda: len(gate_outcomes(daemon)) > seen, what, 240)
    return gate_outcomes(daemon)[seen]


def _rollback(daemon: DaemonProcess, package: Path) -> None:
    """`genesis-fp16 model rollback my_judged`, as the operator types it."""
    done = subprocess.run(
        [sys.executable, "-m", "genesis_fp16", "model", "rollback", AGENT],
        cwd=daemon.workdir,
        env=daemon_env({"PYTHONPATH": str(package)}, fixtures=False),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr


@pytest.fixture(scope="module")
def receiver() -> Iterator[Receiver]:
    """One receiver for the module's one daemon."""
    with Receiver() as found:
        yield found


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory, receiver: Receiver) -> Iterator[DaemonProcess]:
    """A daemon whose judged agent had its first model promoted, a second promoted, a
    third (trained on shuffled labels) rejected on the golden set, then the operator's
    rollback; and whose fault agent's one run was demoted from fp16 to bf16."""
    workdir = tmp_path_factory.mktemp("pictures")
    package = install_scaffold(workdir)
    data, golden = workdir / "records.jsonl", workdir / "golden.jsonl"
    write_records(data, 300, seed=1)
    write_records(golden, 200, seed=9)
    daemon = start_daemon(workdir, _env(package, data, golden, receiver.url), fixtures=False)
    try:
        assert _next_gate(daemon, 0, "the first model") == "promoted"
        write_records(data, 300, seed=2)
        assert _next_gate(daemon, 1, "a second model on new records") == "promoted"
        write_records(data, 300, seed=4, shuffle=True)
        assert _next_gate(daemon, 2, "a candidate on shuffled labels") == "rejected"
        _rollback(daemon, package)
        daemon.wait_for(
            lambda: daemon.events("precision demoted"), "the fault agent's demotion", 240
        )
        daemon.wait_for(
            lambda: daemon.sample(
                "genesis_fp16_training_runs_total", agent=FAULT, outcome="success"
            ),
            "the fault agent's run counted",
            120,
        )
        yield daemon
    finally:
        daemon.stop()


def _chromium(chromium: str, profile: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [chromium, *CHROMIUM_FLAGS, "--hide-scrollbars", f"--user-data-dir={profile}", *args],
        capture_output=True,
        text=True,
        timeout=180,
    )


def _agent_part(dom: str, agent: str) -> str:
    """The page's section of ``agent``: from its title to the next section."""
    start = dom.index(f"<h2>{agent}</h2>")
    end = dom.find("<section>", start)
    return dom[start : None if end < 0 else end]


def _charts(part: str) -> list[str]:
    """The agent's three charts' markup: quality, loss scale, live watch."""
    charts = part.split('<svg class="chart"')[1:]
    assert len(charts) == 3, part[-3000:]
    return charts


def test_the_dom_holds_each_mark_in_its_agents_chart(
    daemon: DaemonProcess, chromium: str, tmp_path: Path
) -> None:
    """Chromium's DOM of the live page: the judged agent's quality chart marks two
    promotions, each rejection and the operator's rollback, its runs table lists the
    runs; the fault agent's loss-scale chart marks its demotion, and its rows say why it
    trains in bf16. No script anywhere."""
    done = _chromium(
        chromium, tmp_path / "profile", "--dump-dom", f"http://127.0.0.1:{daemon.port}/"
    )
    assert done.returncode == 0, done.stderr[-2000:]
    dom = done.stdout
    assert "<script" not in dom
    judged = _agent_part(dom, AGENT)
    quality = _charts(judged)[0]
    assert quality.count('class="mark promoted"') >= 2
    # The rejection, and any later run's: after the rollback the pinned first model is
    # served, and a run that trains on the shuffled records again is rejected again.
    rejected = gate_outcomes(daemon).count("rejected")  # read after the dump: an upper bound
    assert 1 <= quality.count('class="mark rejected"') <= rejected
    assert quality.count('class="mark rolled_back"') == 1
    assert "rolled back to" in quality and ": operator" in quality
    assert '<table class="runs">' in judged and "rejected" in judged
    fault = _agent_part(dom, FAULT)
    scale = _charts(fault)[1]
    assert scale.count('class="mark demoted"') == 1 and "fp16 to bf16 at step" in scale
    assert '<th scope="row">demoted</th><td>fp16 to bf16 at step' in fault


def test_the_screenshot_shows_each_mark_in_its_colour(
    daemon: DaemonProcess, chromium: str, tmp_path: Path
) -> None:
    """A screenshot of the live page is no blank page, and each mark's colour (which
    nothing else on the page uses) covers at least a mark's worth of pixels: two
    promotions, a rejection, a rollback, a demotion."""
    shot = tmp_path / "page.png"
    done = _chromium(
        chromium,
        tmp_path / "profile",
        f"--screenshot={shot}",
        "--window-size=1280,4000",
        f"http://127.0.0.1:{daemon.port}/",
    )
    assert done.returncode == 0 and shot.is_file(), done.stderr[-2000:]
    pixels = png_pixels(shot)
    colours = {tuple(p) for p in pixels[::7, ::7, :3].reshape(-1, 3).tolist()}
    assert len(colours) > 20 and colour_count(pixels, "#ffffff") < 0.98 * pixels[..., 0].size
    one_mark = 30  # a mark is ~13 px across: its fill alone covers more than this
    counts = {kind: colour_count(pixels, KINDS[kind][0]) for kind in KINDS}
    assert counts["promoted"] >= 2 * one_mark, counts
    assert counts["rejected"] >= one_mark, counts
    assert counts["rolled_back"] >= one_mark, counts
    assert counts["demoted"] >= one_mark, counts


@pytest.mark.slow
def test_the_receiver_gets_each_event_signed_and_in_order(
    daemon: DaemonProcess, receiver: Receiver
) -> None:
    """The gate's two promotions, its rejection and the operator's rollback of the judged
    agent, and the fault agent's demotion and fault bundle, each posted signed under its
    own id, in the order each agent's events happened."""

    def kinds(agent: str) -> list[str]:
        return [e["kind"] for e in receiver.events() if e["agent"] == agent]

    judged = ["promote", "promote", "reject", "rollback"]
    receiver.wait_for(lambda: kinds(AGENT)[:4] == judged, "the judged agent's events", 120)
    receiver.wait_for(lambda: kinds(FAULT) == ["demotion", "fault_bundle"], "the demotion", 120)
    events = [e for e in receiver.events() if e["agent"] == AGENT]
    assert [e["data"].get("kind") for e in events[:2]] == ["first", "gate"]
    assert events[3]["data"]["reason"] == "operator"
    assert all(r.signed_by(SECRET.encode()) for r in receiver.received)
    keys = [r.headers[posting.IDEMPOTENCY_HEADER] for r in receiver.received]
    assert keys == [r.event["id"] for r in receiver.received]
