"""An se_darwin agent folder written by its own lifecycle (before it was a judged plugin)
keeps its served model, its pin and its journal when the judged run takes over.

``fixtures/se_darwin_0357b12.tar.gz`` is the ``checkpoints/`` folder that
``genesis-fp16`` at 0357b12 wrote (its recipe's own gate and watch), with the older
checkpoints of each candidate left out: ``train se_darwin --precision fp32 --steps 20
--seed 3`` on the first 400 records of ``generate_pool(700, seed=4)``, the same with
``--steps 40`` once the other 300 were added (promoted by that gate), then ``model
rollback se_darwin``: the first model served again, pinned.
"""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

import pytest

from genesis_fp16.commands.model import list_models
from genesis_fp16.plugin_api import TrainRequest, TrainResult
from genesis_fp16_agents.se_darwin import plugin
from genesis_fp16_infrastructure.agent_folder.pointer import read_pointer
from genesis_fp16_infrastructure.agent_folder.transitions import unpin
from genesis_fp16_infrastructure.api import run_plugin
from genesis_fp16_infrastructure.data.synthetic import generate_pool

FIXTURE = Path(__file__).with_name("fixtures") / "se_darwin_0357b12.tar.gz"
FIRST, SECOND = "20261126T063259Z-37187fb7", "20261126T063339Z-34cfb18b"


def _old_folder(tmp: Path) -> tuple[Path, Path]:
    """The fixture's checkpoint folder and its pool (the same records), plus 300 new."""
    with tarfile.open(FIXTURE) as archive:
        archive.extractall(tmp, filter="data")
    data = tmp / "data"
    data.mkdir()
    pool = generate_pool(700, seed=4)
    ids = list(pool["trajectories"])
    more = generate_pool(300, seed=9)
    for name, part in (
        ("a", {k: pool["trajectories"][k] for k in ids[:400]}),
        ("b", {k: pool["trajectories"][k] for k in ids[400:]}),
        ("c", {f"new-{k}": v for k, v in more["trajectories"].items()}),
    ):
        (data / f"{name}.json").write_text(json.dumps({**pool, "trajectories": part}))
    return tmp / "checkpoints", data


def _run(folder: Path, data: Path) -> TrainResult:
    request = TrainRequest(
        agent="se_darwin",
        precision="fp32",
        precision_reason="test",
        state_dir=folder.parent,
        checkpoint_dir=folder,
        data_path=data,
        steps=20,
        seed=3,
    )
    return run_plugin(plugin, request)


def test_the_pinned_served_model_and_the_journal_survive_a_judged_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The old pointer is read as it was: the judged run scores the old served model
    (no refusal), trains a candidate on new records, and whatever the gate says the
    pinned model stays served, its pin and every old journal entry unchanged; `model
    list` shows both old models and the new candidate."""
    folder, data = _old_folder(tmp_path)
    before = read_pointer(folder)
    assert before is not None and before.served.id == FIRST and before.pinned is not None
    result = _run(folder, data)
    assert result.gate is not None and result.gate.outcome != "promoted", result.gate
    after = read_pointer(folder)
    assert after is not None and after.served == before.served
    assert after.pinned == before.pinned
    assert after.journal[: len(before.journal)] == before.journal
    assert list_models(folder, "se_darwin", as_json=True) == 0
    rows = {r["id"]: r for r in json.loads(capsys.readouterr().out)["models"]}
    assert {FIRST, SECOND, result.gate.candidate_id} <= set(rows)
    assert rows[FIRST]["state"] == "SERVED,pinned"


def test_unpinned_the_old_served_model_is_judged_on_held_out_records(tmp_path: Path) -> None:
    """Unpinned, the old served model (it names no records it trained on) is compared
    with the candidate on the held-out records, and the verdict says it may know them:
    the comparison can only favour the old model. The candidate is served only if the
    gate promotes it; the old models stay in the pointer's history either way."""
    folder, data = _old_folder(tmp_path)
    unpin(folder)
    result = _run(folder, data)
    gate = result.gate
    assert gate is not None and gate.comparisons and gate.comparisons[0].name == "held_out"
    assert "it may know these" in gate.reason, gate.reason
    after = read_pointer(folder)
    assert after is not None
    served = after.served.id
    assert served == (gate.candidate_id if gate.outcome == "promoted" else FIRST)
    kept = {served, *(e.id for e in after.history)}
    assert FIRST in kept
