"""The real daemon and the operator's `model` commands: a pin sticks, an operator racing the
daemon's promotions and prunes loses nothing, a broken pointer is reported and repaired,
and `model` knows every agent."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest
from daemon_harness import DaemonFactory, DaemonProcess
from se_darwin_daemon import AGENT, RUNS
from se_darwin_daemon import model_command as _model
from se_darwin_daemon import runs as _runs
from se_darwin_daemon import se_darwin_env as _env
from se_darwin_daemon import write_pool as _write

from genesis_fp16_infrastructure.agent_folder.candidates import list_candidates, read_verdict
from genesis_fp16_infrastructure.agent_folder.layout import SERVED_POINTER
from genesis_fp16_infrastructure.agent_folder.pointer import read_pointer
from genesis_fp16_infrastructure.data.synthetic import generate_pool
from genesis_fp16_infrastructure.errors import ServedPointerError
from genesis_fp16_infrastructure.world_model.predict import WorldModelPredictor


def _folder(daemon: DaemonProcess) -> Path:
    return daemon.state_dir / "agents" / AGENT / "checkpoints"


def _gate_outcomes(daemon: DaemonProcess) -> list[str]:
    return [
        str((e.get("gate") or {}).get("outcome"))
        for e in daemon.events("training run finished")
        if e.get("outcome") != "up_to_date" and e.get("gate")
    ]


@pytest.mark.slow
def test_a_pinned_model_survives_unchanged_data_and_holds_a_better_candidate(
    daemon_factory: DaemonFactory, tmp_path: Path
) -> None:
    """`model promote` of the first model over the second pins it: three scheduled runs
    on the unchanged pool are up to date (no retrain, no new candidate), and new data
    trains a candidate the gate would promote, which is held (verdict held, reason
    pinned) while the pinned model keeps serving; the pin is a gauge; `model list`'s pin
    line names no held candidate before it, then it; unpin names it."""
    pool = tmp_path / "pool"
    pool.mkdir()
    _write(pool / "se_darwin.json", generate_pool(300, seed=4))
    daemon = daemon_factory(_env(pool), fixtures=False)
    daemon.wait_for(lambda: _runs(daemon, "success") >= 1, "the first model", 180)
    # 600 new records: enough for the gate to show the second model no worse (with 300,
    # since the generator's pools span 13 generations, it is held inconclusive)
    _write(pool / "qa.json", generate_pool(600, seed=5, agent="qa"))
    daemon.wait_for(lambda: _runs(daemon, "success") >= 2, "a promoted second model", 240)
    folder = _folder(daemon)
    pointer = read_pointer(folder)
    assert pointer is not None and len(pointer.history) == 1
    first = pointer.history[0].id

    done = _model(daemon, "promote", AGENT, first, "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["pinned"] is True
    ups = _runs(daemon, "up_to_date")
    daemon.wait_for(lambda: _runs(daemon, "up_to_date") >= ups + 3, "3 up-to-date runs", 180)
    pointer = read_pointer(folder)
    assert pointer is not None and pointer.served.id == first and pointer.pinned
    assert _runs(daemon, "success") == 2 and len(list_candidates(folder)) == 2
    assert daemon.sample("genesis_fp16_served_model_pinned", agent=AGENT) == 1
    listed = _model(daemon, "list", AGENT)
    assert "pinned by `model promote`" in listed.stdout and "SERVED,pinned" in listed.stdout
    assert "no candidate held by the pin yet" in listed.stdout  # it said "(held)", none was

    _write(pool / "docs.json", generate_pool(300, seed=6, agent="docs"))
    daemon.wait_for(lambda: _runs(daemon, "success") >= 3, "a candidate of the new data", 240)
    assert _gate_outcomes(daemon)[-1] == "held"
    held = next(c for c in list_candidates(folder) if c.name not in (first, pointer.history[0].id))
    verdict = read_verdict(held).to_json()
    assert verdict["outcome"] == "held"
    assert verdict["reason"].startswith("pinned by the operator: ") and verdict["comparisons"]
    pointer = read_pointer(folder)
    assert pointer is not None and pointer.served.id == first and pointer.pinned
    ups = _runs(daemon, "up_to_date")
    daemon.wait_for(lambda: _runs(daemon, "up_to_date") >= ups + 1, "an up-to-date run", 120)
    assert len(list_candidates(folder)) == 3  # the held candidate's data is not retrained
    listed = _model(daemon, "list", AGENT)
    assert f"held by the pin: {held.name} (" in listed.stdout.splitlines()[0], listed.stdout

    unpinned = _model(daemon, "unpin", AGENT)
    assert unpinned.returncode == 0 and held.name in unpinned.stdout
    pointer = read_pointer(folder)
    assert pointer is not None and pointer.served.id == first and pointer.pinned is None


@pytest.mark.slow
def test_an_operator_racing_the_daemons_promotions_and_prunes_loses_no_update(
    daemon_factory: DaemonFactory, tmp_path: Path
) -> None:
    """While the pool grows every second (the daemon trains, promotes and prunes with a
    history of 1), the operator promotes a kept model and unpins it, again and again:
    each promote is what the pointer says when the command returns, pinned, and each
    unpin leaves no pin; the daemon promotes meanwhile too."""
    pool = tmp_path / "pool"
    pool.mkdir()
    _write(pool / "se_darwin.json", generate_pool(200, seed=4))
    env = _env(
        pool,
        GENESIS_FP16_AGENTS__SE_DARWIN__OPTIONS__MAX_EPOCHS="1",
        GENESIS_FP16_SERVED_HISTORY_KEEP="1",
        GENESIS_FP16_REJECTED_KEEP_DAYS="0",
    )
    daemon = daemon_factory(env, fixtures=False)
    daemon.wait_for(lambda: _runs(daemon, "success") >= 1, "the first model", 180)
    folder = _folder(daemon)
    stop = threading.Event()

    def grow() -> None:
        n = 0
        while not stop.wait(1.0):
            n += 1
            _write(pool / f"grow{n % 3}.json", generate_pool(40 + n, seed=200 + n, agent="qa"))

    grower = threading.Thread(target=grow, daemon=True)
    grower.start()
    promoted_before = _runs(daemon, "success")
    rounds = 0
    try:
        # Round after round, each one daemon run apart, until the operator has raced it five
        # times and the daemon has promoted a model of its own meanwhile (a candidate may be
        # rejected: at most 30 runs).
        for _ in range(30):
            if rounds >= 5 and _runs(daemon, "success") > promoted_before:
                break
            seen = len(daemon.events("training run finished"))
            kept = [
                c.name for c in list_candidates(folder) if read_verdict(c).outcome == "promoted"
            ]
            done = _model(daemon, "promote", AGENT, kept[0]) if kept else None
            if done is not None and done.returncode != 0:
                assert "no candidate" in done.stderr, done.stderr  # pruned meanwhile
            elif done is not None:
                pointer = read_pointer(folder)
                assert pointer is not None and pointer.served.id == kept[0] and pointer.pinned
                assert _model(daemon, "unpin", AGENT).returncode == 0
                pointer = read_pointer(folder)
                assert pointer is not None and pointer.pinned is None
                rounds += 1
            daemon.wait_for(
                lambda n=seen: len(daemon.events("training run finished")) > n, "the next run", 180
            )
    finally:
        stop.set()
        grower.join()
    outcomes = [e["outcome"] for e in daemon.events("training run finished")]
    assert rounds >= 5, outcomes
    assert _runs(daemon, "success") > promoted_before, outcomes  # the daemon promoted meanwhile


def _dangling(folder: Path) -> None:
    data = json.loads(SERVED_POINTER.at(folder).read_text())
    data["served"]["checkpoint"] = "candidates/gone/ckpt-0000000001.pt"
    SERVED_POINTER.at(folder).write_text(json.dumps(data))


def _wrong_version(folder: Path) -> None:
    data = json.loads(SERVED_POINTER.at(folder).read_text())
    SERVED_POINTER.at(folder).write_text(json.dumps({**data, "version": 7}))


BREAK = {
    "garbage": lambda folder: SERVED_POINTER.at(folder).write_text("{not json"),
    "wrong_version": _wrong_version,
    "dangling": _dangling,
}


@pytest.mark.slow
def test_each_broken_pointer_degrades_health_and_is_repaired_by_the_model_command(
    daemon_factory: DaemonFactory, tmp_path: Path
) -> None:
    """Garbage, another version, a missing checkpoint: each is set aside and counted,
    /healthz answers 503 naming the agent, the gauge is 1, `model list` says so in one
    line above the kept candidates, the prediction API names the repair, and `model
    promote` (or `rollback`) repairs it: /healthz 200 again at the next run."""
    pool = tmp_path / "pool"
    pool.mkdir()
    _write(pool / "se_darwin.json", generate_pool(300, seed=4))
    daemon = daemon_factory(_env(pool), fixtures=False)
    daemon.wait_for(lambda: _runs(daemon, "success") >= 1, "the first model", 180)
    folder = _folder(daemon)
    pointer = read_pointer(folder)
    assert pointer is not None
    served = pointer.served.id
    skipped = "genesis_fp16_state_files_skipped_total"
    for n, kind in enumerate(sorted(BREAK)):
        BREAK[kind](folder)
        daemon.wait_for(lambda: daemon.get("/healthz")[0] == 503, f"degraded ({kind})", 60)
        body = daemon.get("/healthz")[1]
        assert "degraded" in body and AGENT in body, body
        daemon.wait_for(
            lambda n=n: daemon.sample(skipped, agent=AGENT, file="served_pointer") == n + 1,
            f"the {kind} pointer counted",
            30,
        )
        assert daemon.sample("genesis_fp16_served_pointer_unusable", agent=AGENT) == 1
        listed = _model(daemon, "list", AGENT)
        lines = listed.stdout.splitlines()
        assert listed.returncode == 0 and "unusable" in lines[0] and served in listed.stdout
        as_json = json.loads(_model(daemon, "list", AGENT, "--json").stdout)
        assert as_json["pointer_error"] and as_json["served"] is None
        with pytest.raises(ServedPointerError, match=f"model promote {AGENT}|model promote"):
            WorldModelPredictor.load(folder)
        repair = ("rollback", AGENT) if kind == "wrong_version" else ("promote", AGENT, served)
        done = _model(daemon, *repair)
        assert done.returncode == 0 and "unusable pointer is replaced" in done.stdout, done
        assert len(done.stdout.strip().splitlines()) == 1
        daemon.wait_for(lambda: daemon.get("/healthz")[0] == 200, f"healthy ({kind})", 60)
        assert WorldModelPredictor.load(folder).checkpoint is not None
        assert daemon.sample("genesis_fp16_served_pointer_unusable", agent=AGENT) == 0


@pytest.mark.slow
def test_model_lists_a_judged_agent_and_refuses_an_unknown_one(
    daemon_factory: DaemonFactory,
) -> None:
    """After the daemon trained rlhf_ppo (a judged agent: it scores its evaluation
    episodes), `model list rlhf_ppo` shows its first model served through the gate, its
    verdict and its loss; `model list nope` is one line and exit code 2 (with --json an
    error object)."""
    env = {
        "GENESIS_FP16_PLUGIN_ALLOWLIST": "rlhf_ppo",
        "GENESIS_FP16_AGENTS__RLHF_PPO__STEPS": "4",
        "GENESIS_FP16_AGENTS__RLHF_PPO__OPTIONS__BATCH_SIZE": "16",
        "GENESIS_FP16_SAMPLE_COUNT": "16",
        "GENESIS_FP16_SCHEDULE": "3600",
    }
    daemon = daemon_factory(env, fixtures=False)
    daemon.wait_for(
        lambda: daemon.sample(RUNS, agent="rlhf_ppo", outcome="success"), "an rlhf_ppo run", 120
    )
    listed = _model(daemon, "list", "rlhf_ppo")
    assert listed.returncode == 0, listed.stderr
    row = json.loads(_model(daemon, "list", "rlhf_ppo", "--json").stdout)
    (model,) = row["models"]
    assert row["gate"] is True and row["served"] == model["id"] and model["state"] == "SERVED"
    assert model["verdict"] == "promoted" and model["reason"] == "the first model"
    assert 0.0 <= model["losses"]["loss"] <= 1.0 and model["id"] in listed.stdout
    unknown = _model(daemon, "list", "nope")
    assert unknown.returncode == 2 and len(unknown.stderr.strip().splitlines()) == 1
    assert "unknown agent 'nope'" in unknown.stderr
    as_json = _model(daemon, "list", "nope", "--json")
    assert as_json.returncode == 2 and "unknown agent" in json.loads(as_json.stdout)["error"]
