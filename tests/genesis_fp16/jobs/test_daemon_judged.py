"""The real daemon and a judged agent (the scaffold's, which declares score_records): its
first model served through the gate, a better one promoted, a worse one not, the live
watch's rollback, the operator's pin held through three runs, and a broken pointer
repaired by `model promote`; `model list` shows it all."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from daemon_harness import DaemonFactory, DaemonProcess
from judged_daemon import (
    AGENT,
    gate_outcomes,
    gate_outcomes_since,
    install_scaffold,
    judged_env,
    model_command,
    runs,
    write_records,
)

from genesis_fp16_infrastructure.agent_folder.candidates import list_candidates, read_verdict
from genesis_fp16_infrastructure.agent_folder.layout import SERVED_POINTER
from genesis_fp16_infrastructure.agent_folder.pointer import read_pointer


def _folder(daemon: DaemonProcess, agent: str = AGENT) -> Path:
    return daemon.state_dir / "agents" / agent / "checkpoints"


def _served(daemon: DaemonProcess, agent: str = AGENT) -> str | None:
    pointer = read_pointer(_folder(daemon, agent))
    return None if pointer is None else str(pointer.served.id)


def _verdict(daemon: DaemonProcess, candidate: str) -> dict[str, object]:
    return read_verdict(_folder(daemon) / "candidates" / candidate).to_json()


def _next_gate(daemon: DaemonProcess, seen: int, what: str, agent: str = AGENT) -> str:
    """The outcome of the first gate verdict after the ``seen`` first ones."""
    daemon.wait_for(lambda: len(gate_outcomes(daemon, agent)) > seen, what, 180)
    return gate_outcomes(daemon, agent)[seen]


@pytest.mark.slow
def test_judged_agent_is_served_through_the_gate_and_rolled_back_by_the_watch(
    daemon_factory: DaemonFactory, tmp_path: Path
) -> None:
    """The first model is served (verdict promoted, how first); unchanged data is up to
    date; shifted labels train a better model, promoted over it; when later records have
    the old labels again, the watch finds the served model worse than its predecessor
    and rolls it back (verdict rolled_back, live_regression; the counter is 1), and
    `model list` shows the served model, the rolled-back one and the verdicts."""
    package = install_scaffold(tmp_path)
    data = tmp_path / "records.jsonl"
    write_records(data, 300, seed=1)
    daemon = daemon_factory(judged_env(package, data), fixtures=False)
    assert _next_gate(daemon, 0, "the first model") == "promoted"
    first = _served(daemon)
    pointer = read_pointer(_folder(daemon))
    assert first is not None and pointer is not None and pointer.served.how == "first"
    assert _verdict(daemon, first)["reason"] == "the first model"
    daemon.wait_for(lambda: runs(daemon, "up_to_date") >= 1, "an up-to-date run", 120)

    write_records(data, 300, seed=2, shift=1.0)
    assert _next_gate(daemon, 1, "a candidate on shifted labels") == "promoted"
    second = _served(daemon)
    pointer = read_pointer(_folder(daemon))
    assert second != first and pointer is not None and pointer.history[0].id == first
    assert "no worse than the served model" in str(_verdict(daemon, str(second))["reason"])

    write_records(data, 300, seed=3)
    daemon.wait_for(
        lambda: _verdict(daemon, str(second)).get("outcome") == "rolled_back", "a rollback", 180
    )
    verdict = _verdict(daemon, str(second))
    live = verdict["live"]
    assert verdict["reason"] == "live_regression" and verdict["gate_outcome"] == "promoted"
    assert isinstance(live, dict) and live["regression"] and live["primary"] == "loss"
    assert live["metrics"]["loss"]["lower"] > live["metrics"]["loss"]["margin"]
    assert live["records"] == 300 and live["against"] == first
    daemon.wait_for(
        lambda: daemon.sample("genesis_fp16_live_rollbacks_total", agent=AGENT) == 1,
        "the rollback counted",
        60,
    )
    (logged,) = daemon.events("served model rolled back: live regression")
    assert logged["agent"] == AGENT and logged["live"]["now_served"] == first
    listed = model_command(daemon, package, "list", AGENT)
    assert listed.returncode == 0, listed.stderr
    rows = {line.split()[0]: line.split()[1] for line in listed.stdout.splitlines()[1:]}
    assert rows[str(second)] == "rolled_back" and rows[first] in ("SERVED", "previous-1")
    as_json = json.loads(model_command(daemon, package, "list", AGENT, "--json").stdout)
    assert as_json["gate"] is True and as_json["served"] == _served(daemon)
    assert {m["verdict"] for m in as_json["models"]} >= {"promoted", "rolled_back"}


@pytest.mark.slow
def test_judged_candidate_on_shuffled_labels_is_not_served(
    daemon_factory: DaemonFactory, tmp_path: Path
) -> None:
    """With the operator's golden records set, a candidate trained on a file whose labels
    are shuffled is rejected (worse there), counted as a rejected run, and the first
    model keeps serving; the same file does not train it again (up to date)."""
    package = install_scaffold(tmp_path)
    data, golden = tmp_path / "records.jsonl", tmp_path / "golden.jsonl"
    write_records(data, 300, seed=1)
    write_records(golden, 200, seed=9)
    env = judged_env(package, data, GENESIS_FP16_AGENTS__MY_JUDGED__GOLDEN_DATA=str(golden))
    daemon = daemon_factory(env, fixtures=False)
    assert _next_gate(daemon, 0, "the first model") == "promoted"
    first = _served(daemon)

    write_records(data, 300, seed=4, shuffle=True)
    assert _next_gate(daemon, 1, "a candidate on shuffled labels") == "rejected"
    assert _served(daemon) == first
    rejected = next(c for c in list_candidates(_folder(daemon)) if c.name != first)
    verdict = read_verdict(rejected).to_json()
    assert verdict["outcome"] == "rejected" and "golden" in verdict["reason"]
    # The run is counted after its log line: the count is read once a later run is.
    ups = runs(daemon, "up_to_date")
    daemon.wait_for(lambda: runs(daemon, "up_to_date") >= ups + 1, "an up-to-date run", 120)
    assert len(list_candidates(_folder(daemon))) == 2 and runs(daemon, "rejected") == 1


@pytest.mark.slow
def test_judged_pin_holds_through_three_runs_and_a_broken_pointer_is_repaired(
    daemon_factory: DaemonFactory, tmp_path: Path
) -> None:
    """`model promote` pins the first model over the second: three runs on new data each
    train a candidate the gate would promote, held (verdict held) while the pinned model
    serves; a pointer broken by garbage degrades /healthz and `model promote` repairs it."""
    package = install_scaffold(tmp_path)
    data = tmp_path / "records.jsonl"
    write_records(data, 300, seed=1)
    daemon = daemon_factory(judged_env(package, data), fixtures=False)
    assert _next_gate(daemon, 0, "the first model") == "promoted"
    first = str(_served(daemon))
    write_records(data, 300, seed=2, shift=1.0)
    assert _next_gate(daemon, 1, "a second model") == "promoted"

    done = model_command(daemon, package, "promote", AGENT, first, "--json")
    assert done.returncode == 0 and json.loads(done.stdout)["pinned"] is True, done.stderr
    mark = len(daemon.logs())  # runs judged against the pinned model from here on
    for n in range(3):
        write_records(data, 300, seed=10 + n, shift=1.0)
        held = daemon.wait_for(
            lambda n=n: len(gate_outcomes_since(daemon, mark, first)) > n,
            f"held candidate {n + 1}",
            180,
        )
        assert held and gate_outcomes_since(daemon, mark, first)[n] == "held"
        pointer = read_pointer(_folder(daemon))
        assert pointer is not None and pointer.served.id == first and pointer.pinned
    assert daemon.sample("genesis_fp16_served_model_pinned", agent=AGENT) == 1

    SERVED_POINTER.at(_folder(daemon)).write_text("garbage")
    daemon.wait_for(lambda: daemon.get("/healthz")[0] == 503, "degraded health", 60)
    assert AGENT in daemon.get("/healthz")[1]
    repaired = model_command(daemon, package, "promote", AGENT, first)
    assert repaired.returncode == 0 and "unusable pointer is replaced" in repaired.stdout
    daemon.wait_for(lambda: daemon.get("/healthz")[0] == 200, "healthy again", 60)
    assert _served(daemon) == first


def _after_the_pin(daemon: DaemonProcess, mark: int, first: str, agent: str) -> list[str]:
    """The verdicts, after the first ``mark`` log lines, of the runs judged against
    ``first`` once it was pinned. ``first`` was served when it was pinned, so the one run
    in flight at the pin was judged against it too: if that run's promotion was committed
    before the pin (the pin then served ``first`` again), its line may come after ``mark``
    and is not counted. A promotion committed after the pin would leave another model
    served, which the caller's pointer check finds."""
    outcomes = gate_outcomes_since(daemon, mark, first, agent)
    return outcomes[1:] if outcomes[:1] == ["promoted"] else outcomes


@pytest.mark.slow
def test_rlhf_ppo_is_judged_pinned_and_repaired_like_any_judged_agent(
    daemon_factory: DaemonFactory, tmp_path: Path
) -> None:
    """rlhf_ppo (judged on its evaluation episodes): its first model is served through the
    gate; pinned by `model promote`, it keeps serving through three runs that each train
    a candidate (every run trains: held or rejected, never served); a pointer broken by
    garbage degrades /healthz and `model promote` repairs it."""
    agent = "rlhf_ppo"
    env = {
        "GENESIS_FP16_PLUGIN_ALLOWLIST": agent,
        "GENESIS_FP16_AGENTS__RLHF_PPO__STEPS": "4",
        "GENESIS_FP16_AGENTS__RLHF_PPO__PRECISION": "fp32",
        "GENESIS_FP16_AGENTS__RLHF_PPO__OPTIONS__BATCH_SIZE": "16",
        "GENESIS_FP16_SAMPLE_COUNT": "32",
        "GENESIS_FP16_SCHEDULE": "1",
    }
    daemon = daemon_factory(env, fixtures=False)
    assert _next_gate(daemon, 0, "the first policy", agent) == "promoted"
    first = str(_served(daemon, agent))
    package = tmp_path  # nothing to install: rlhf_ppo is built in
    done = model_command(daemon, package, "promote", agent, first, "--json")
    assert done.returncode == 0 and json.loads(done.stdout)["pinned"] is True, done.stderr
    mark = len(daemon.logs())

    for n in range(3):
        done_runs = daemon.wait_for(
            lambda n=n: (
                len(_after_the_pin(daemon, mark, first, agent)) > n
                and _after_the_pin(daemon, mark, first, agent)
            ),
            f"run {n + 1} after the pin",
            180,
        )
        assert done_runs[n] in ("held", "rejected"), done_runs
        pointer = read_pointer(_folder(daemon, agent))
        assert pointer is not None and pointer.served.id == first and pointer.pinned

    SERVED_POINTER.at(_folder(daemon, agent)).write_text("garbage")
    daemon.wait_for(lambda: daemon.get("/healthz")[0] == 503, "degraded health", 60)
    repaired = model_command(daemon, package, "promote", agent, first)
    assert repaired.returncode == 0 and "unusable pointer is replaced" in repaired.stdout
    daemon.wait_for(lambda: daemon.get("/healthz")[0] == 200, "healthy again", 60)
    assert _served(daemon, agent) == first
