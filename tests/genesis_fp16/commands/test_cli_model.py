"""`genesis-fp16 model` on a state folder, without a daemon: what each action prints and
answers in JSON, the pin, the repair of an unusable pointer, and `status` naming it."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from cli_fork import run_cli

from genesis_fp16_infrastructure.agent_folder import outbox
from genesis_fp16_infrastructure.agent_folder.candidates import (
    read_verdict,
    served_entry,
    write_verdict,
)
from genesis_fp16_infrastructure.agent_folder.layout import SERVED_POINTER
from genesis_fp16_infrastructure.agent_folder.pointer import read_pointer
from genesis_fp16_infrastructure.agent_folder.transitions import rollback, serve

ROOT = Path(__file__).resolve().parents[3]
AGENT = "se_darwin"


def _cli(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GENESIS_FP16_")}
    env.update(GENESIS_FP16_STATE_DIR=str(cwd / "state"), PYTHONPATH=str(ROOT))
    return run_cli(
        [*args],
        cwd=cwd,
        env=env,
        timeout=120,
    )


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """se_darwin's checkpoints: candidates a (first) and b (gate) promoted, b served."""
    root = tmp_path / "state" / "agents" / AGENT / "checkpoints"
    for name, auc in (("a", 0.91), ("b", 0.92)):
        path = root / "candidates" / name
        path.mkdir(parents=True)
        (path / "candidate.json").write_text(json.dumps({"id": name, "records": 300}))
        (path / "ckpt-0000000010.pt").write_bytes(b"weights")
        scores = {"set": "its run's evaluation", "auc": auc, "log_loss": 0.4}
        write_verdict(path, {"outcome": "promoted", "candidate": scores})
        entry = served_entry(root, path)
        assert entry is not None
        serve(root, entry, "gate")
    return root


def test_a_hand_promoted_model_reads_as_pinned_with_the_gates_own_verdict(
    folder: Path, tmp_path: Path
) -> None:
    """rollback serves a (pinned); promote b brings it back saying the gate's verdict on it
    was promoted, not rolled_back; list shows the pin and the first model's AUC; unpin
    lifts it; each action answers one JSON object."""
    back = json.loads(_cli(tmp_path, "model", "rollback", AGENT, "--json").stdout)
    assert (back["served"], back["pinned"], back["repaired"]) == ("a", True, False)
    done = _cli(tmp_path, "model", "promote", AGENT, "b")
    assert done.returncode == 0, done.stderr
    assert "verdict on it: promoted" in done.stdout and "rolled_back" not in done.stdout
    listed = _cli(tmp_path, "model", "list", AGENT)
    assert "pinned by `model promote`" in listed.stdout.splitlines()[0]
    assert " log_loss 0.400 auc 0.910 " in listed.stdout  # a verdict from before columns
    rows = {
        r["id"]: r
        for r in json.loads(_cli(tmp_path, "model", "list", AGENT, "--json").stdout)["models"]
    }
    assert rows["b"]["state"] == "SERVED,pinned" and rows["b"]["gate_verdict"] == "promoted"
    assert rows["a"]["reported"] == {"auc": 0.91}  # the first model's figure, from its run
    # Which records those scores are on: the set (and its records, unknown in this verdict)
    assert rows["a"]["scores_set"] == "its run's evaluation"
    assert rows["a"]["scores_records"] is None
    assert "  its run's evaluation  " in listed.stdout  # the ON column
    unpinned = json.loads(_cli(tmp_path, "model", "unpin", AGENT, "--json").stdout)
    assert unpinned == {**unpinned, "served": "b", "pinned": False}
    pointer = read_pointer(folder)
    assert pointer is not None and pointer.pinned is None


def test_a_model_command_first_settles_what_a_killed_writer_left(
    folder: Path, tmp_path: Path
) -> None:
    """A rollback killed after its pointer's commit (b's verdict and the event not written
    yet): `model unpin`, which changes nothing here, writes b's rolled_back verdict and
    puts the rollback's event in the agent's outbox before it answers."""
    rollback(folder, verdict={"reason": "live_regression"})
    lost = outbox.read_events(folder.parent)[-1]
    assert lost.kind == "rollback"
    lost.path.unlink()  # the state the kill left: no event, b still says promoted
    write_verdict(folder / "candidates" / "b", {"outcome": "promoted"})
    done = _cli(tmp_path, "model", "unpin", AGENT)
    assert done.returncode == 0, done.stderr
    assert read_verdict(folder / "candidates" / "b").outcome == "rolled_back"
    assert [e.id for e in outbox.read_events(folder.parent)][-1] == lost.id


def test_an_unusable_pointer_is_listed_repaired_and_named_by_status(
    folder: Path, tmp_path: Path
) -> None:
    """Garbage in served.json: list says so in its first line and still lists a and b;
    `status` names the repair; a failed promote is one line (an error object with --json);
    promote b repairs it."""
    SERVED_POINTER.at(folder).write_text("{garbage")
    listed = _cli(tmp_path, "model", "list", AGENT)
    first, *rest = listed.stdout.splitlines()
    assert "unusable" in first and "model promote se_darwin ID" in first
    assert any(line.startswith("a ") for line in rest) and any(
        line.startswith("b ") for line in rest
    )
    bad = _cli(tmp_path, "model", "promote", AGENT, "zzz")
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1
    bad_json = _cli(tmp_path, "model", "promote", AGENT, "zzz", "--json")
    assert bad_json.returncode == 2 and "no candidate 'zzz'" in json.loads(bad_json.stdout)["error"]
    fixed = json.loads(_cli(tmp_path, "model", "promote", AGENT, "b", "--json").stdout)
    assert fixed["repaired"] is True
    pointer = read_pointer(folder)
    assert pointer is not None and pointer.served.id == "b"
    (folder / "served.json").rename(folder / "served.json.unusable")  # as the daemon sets it aside
    status = _cli(tmp_path, "status")
    assert "unusable" in status.stdout and "model promote se_darwin ID" in status.stdout


def test_an_agent_without_a_gate_or_a_name_unknown_is_one_line_and_exit_2(
    tmp_path: Path,
) -> None:
    """`model rollback rlhf_ppo` (no gate) and `model list nope` (no such agent): one line
    on stderr and exit code 2; `model list rlhf_ppo` before any run says it has no gate."""
    for args, words in (
        (("rollback", "rlhf_ppo"), "no promotion gate"),
        (("list", "nope"), "unknown agent 'nope'"),
    ):
        done = _cli(tmp_path, "model", *args)
        assert done.returncode == 2 and words in done.stderr, done.stderr
        assert len(done.stderr.strip().splitlines()) == 1
    listed = _cli(tmp_path, "model", "list", "rlhf_ppo")
    assert listed.returncode == 0 and "no promotion gate" in listed.stdout


def _held(folder: Path, name: str) -> None:
    """Candidate ``name`` trained and held by the gate (a better model, the pointer pinned)."""
    path = folder / "candidates" / name
    path.mkdir(parents=True)
    (path / "candidate.json").write_text(json.dumps({"id": name, "records": 300}))
    (path / "ckpt-0000000010.pt").write_bytes(b"weights")
    scores = {"set": "its run's evaluation", "auc": 0.95, "log_loss": 0.3}
    write_verdict(path, {"outcome": "held", "candidate": scores, "served_id": "a"})


def _pin_rows(tmp_path: Path) -> tuple[str, str, list[str]]:
    """`model list`'s pin line, `status`'s pinned row, and the held ids `list --json` names."""
    listed = _cli(tmp_path, "model", "list", AGENT).stdout.splitlines()[0]
    status = _cli(tmp_path, "status").stdout
    row = next(line for line in status.splitlines() if line.strip().startswith("pinned:"))
    held = json.loads(_cli(tmp_path, "model", "list", AGENT, "--json").stdout)["held"]
    return listed, row, held


def test_the_pin_lines_name_the_pinned_model_and_only_the_candidates_held(
    folder: Path, tmp_path: Path
) -> None:
    """After a rollback no candidate is held yet, and neither `model list` nor `status`
    says one is; a held c is named by both; once `model promote c` serves it, c is named
    as held by neither, nor by `model unpin` (they said "better candidates (held)" with
    none held, and unpin called the served c "held by the pin")."""
    assert _cli(tmp_path, "model", "rollback", AGENT).returncode == 0
    listed, row, held = _pin_rows(tmp_path)
    assert listed.startswith(f"{AGENT}: a pinned by `model rollback`"), listed
    assert "no candidate held" in listed and "(held)" not in listed, listed
    assert "no candidate held" in row and held == [], row
    _held(folder, "c")
    listed, row, held = _pin_rows(tmp_path)
    assert "held by the pin: c " in listed and "model promote se_darwin ID" in listed, listed
    assert row.endswith("held by the pin: c") and held == ["c"], row
    assert _cli(tmp_path, "model", "promote", AGENT, "c").returncode == 0
    listed, row, held = _pin_rows(tmp_path)
    assert listed.startswith(f"{AGENT}: c pinned by `model promote`"), listed
    assert "no candidate held" in listed and "no candidate held" in row and held == []
    unpinned = _cli(tmp_path, "model", "unpin", AGENT, "--json")
    answer = json.loads(unpinned.stdout)
    assert answer["served"] == "c" and answer["held"] == [], answer
    assert "held by the pin" not in answer["message"], answer["message"]
