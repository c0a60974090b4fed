"""Issue 62: a candidate the records cannot judge yet is ``inconclusive``: kept, listed
as such, never pruned as a rejected one, and judged again when records arrive, without
a step of training."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from se_darwin_runs import train

from genesis_fp16.commands.model import list_models
from genesis_fp16_agents.se_darwin import plugin
from genesis_fp16_infrastructure.agent_folder.candidates import (
    list_candidates,
    prune,
    read_verdict,
)
from genesis_fp16_infrastructure.agent_folder.pointer import read_pointer
from genesis_fp16_infrastructure.data.synthetic import generate_pool


def _write(folder: Path, pool: dict[str, Any], keys: list[str], name: str) -> None:
    part = {**pool, "trajectories": {k: pool["trajectories"][k] for k in keys}}
    (folder / name).write_text(json.dumps(part))


def test_an_inconclusive_candidate_is_kept_and_decided_later_without_training(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Served on 400 records; with no margin (so that the held-out records of 80 new
    ones cannot show a candidate about as good no worse, nor worse) the next candidate
    is inconclusive, with the records it needs (`model list` says so; prune keeps it);
    520 more arrive, and with se_darwin's margin the next run judges that same candidate
    again through the judged run, decides, takes no step and trains no candidate."""
    data, ck = tmp_path / "data", tmp_path / "ck"
    data.mkdir()
    pool = generate_pool(1000, seed=1)
    ids = list(pool["trajectories"])
    _write(data, pool, ids[:400], "a.json")
    assert train(data, ck, resume=True, steps=40).outcome == "success"
    _write(data, pool, ids[400:480], "b.json")
    with monkeypatch.context() as patched:
        patched.setattr(plugin, "judging_margin", 0.0)
        second = train(data, ck, resume=True, steps=40)
    gate = second.gate
    assert gate is not None and gate.outcome == "inconclusive", gate and gate.reason
    assert second.outcome == "success" and not second.rejected  # never reported as worse
    assert gate.records_needed is not None and gate.records_needed > 80
    kept = gate.candidate_id
    assert kept is not None and read_pointer(ck).served.id != kept  # type: ignore[union-attr]
    assert list_models(ck, "se_darwin", as_json=True) == 0
    row = next(r for r in json.loads(capsys.readouterr().out)["models"] if r["id"] == kept)
    assert row["state"] == "inconclusive" and row["records_needed"] == gate.records_needed
    assert prune(ck, keep_served=1, rejected_days=0.0)[0] == []  # kept, however old
    before = [c.name for c in list_candidates(ck)]

    _write(data, pool, ids[480:], "c.json")
    third = train(data, ck, resume=True, steps=40)
    decided = third.gate
    assert decided is not None and decided.candidate_id == kept
    assert decided.outcome in ("promoted", "rejected"), decided.reason
    assert third.steps == 0 and [c.name for c in list_candidates(ck)] == before
    verdict = read_verdict(ck / "candidates" / kept).to_json()
    assert verdict is not None and verdict["outcome"] == decided.outcome
    # judged again on held-out records, and its verdict still says so
    assert gate.evidence == decided.evidence == verdict["evidence"] == "held_out"
    served = read_pointer(ck)
    assert served is not None and (served.served.id == kept) == (decided.outcome == "promoted")
