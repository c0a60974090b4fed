"""After the live watch rolls a model back, the gate judges later candidates on the records
newer than it too (issue 92): one trained on the same poisoned records is not served."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from test_run import OneNumber, _records, _request, _result

from genesis_fp16_infrastructure.agent_folder.candidates import read_verdict
from genesis_fp16_infrastructure.agent_folder.pointer import read_pointer
from genesis_fp16_infrastructure.contract.record_losses import RecordLosses
from genesis_fp16_infrastructure.contract.reports import TrainResult
from genesis_fp16_infrastructure.contract.train_request import TrainRequest
from genesis_fp16_infrastructure.judging.run import run_plugin

NEWEST = "newest"  # the gate's set after a rollback


class Grouped(OneNumber):
    """A model of one number per group: training writes each group's mean label; a group
    it never saw is predicted 0. A record's loss is its squared error."""

    name: str = "grouped"

    def train(self, request: TrainRequest) -> TrainResult:
        folder = Path(request.checkpoint_dir)
        folder.mkdir(parents=True, exist_ok=True)
        sums: dict[str, list[float]] = {}
        for record in _records(request):
            sums.setdefault(record["g"], []).append(record["y"])
        means = {g: sum(ys) / len(ys) for g, ys in sums.items()}
        (folder / "ckpt-0000000001.pt").write_text(json.dumps(means))
        return _result(request)

    def score_records(self, checkpoint: Path, request: TrainRequest) -> RecordLosses:
        means = json.loads(checkpoint.read_text())
        records = _records(request)
        losses = [(means.get(r["g"], 0.0) - r["y"]) ** 2 for r in records]
        return RecordLosses.of([r["id"] for r in records], losses)


def _pool(path: Path, batches: list[tuple[str, float, range]]) -> Path:
    """Every batch so far in one file (records accumulate): group, label about, ids."""
    rows = [
        {"id": f"r{i}", "g": group, "y": label + 0.01 * (i % 3)}
        for group, label, ids in batches
        for i in ids
    ]
    path.write_text(json.dumps(rows))
    return path


def _run(plugin: Grouped, tmp_path: Path, batches: list[Any]) -> TrainResult:
    return run_plugin(plugin, _request(tmp_path, _pool(tmp_path / "d.json", batches)))


def test_a_candidate_on_the_records_that_were_rolled_back_is_not_served(tmp_path: Path) -> None:
    """A served on group x; B learned a poisoned batch of group y (0.6) and was promoted;
    clean y records (0) then roll B back. The same run's candidate trains on every
    record, the poison included: better than A on all of them (it halves the poison's
    loss) and no worse on what A knew, but worse on the records newer than B, the
    watch's evidence. The gate asks there too and rejects it; A stays served."""
    plugin = Grouped()
    clean_x, poison_y, clean_y = (
        ("x", 0.0, range(40)),
        ("y", 0.6, range(40, 80)),
        ("y", 0.0, range(80, 140)),
    )
    _run(plugin, tmp_path, [clean_x])
    second = _run(plugin, tmp_path, [clean_x, poison_y])
    assert second.gate is not None and second.gate.outcome == "promoted"
    result = _run(plugin, tmp_path, [clean_x, poison_y, clean_y])
    assert result.live is not None and result.live.rolled_back
    gate = result.gate
    assert gate is not None and gate.outcome == "rejected", gate
    newest = [c for c in gate.comparisons if c.name == NEWEST]
    assert [c.finding for c in newest] == ["worse"] and "on 60 records" in newest[0].reason
    pointer = read_pointer(tmp_path / "checkpoints")
    assert pointer is not None and pointer.served.id == result.live.now_served
    assert pointer.served.id != str(result.extra.get("candidate"))


def test_clean_growth_asks_no_newest_question(
    tmp_path: Path,
) -> None:
    """Clean growth with no rollback asks no ``newest`` question: the existing cases
    keep their comparisons."""
    plugin = Grouped()
    clean_x, more_x = ("x", 0.0, range(40)), ("x", 0.0, range(40, 80))
    _run(plugin, tmp_path, [clean_x])
    grown = _run(plugin, tmp_path, [clean_x, more_x])
    assert grown.gate is not None and grown.gate.comparisons
    assert NEWEST not in {c.name for c in grown.gate.comparisons}


def test_a_later_clean_candidate_shown_no_worse_on_the_newer_records_is_served(
    tmp_path: Path,
) -> None:
    """After the rollback and the poisoned candidate's rejection, the poison removed from
    the data (the operator's fix): the next candidate is no worse on the newer records
    and is promoted; its verdict says which sets it was judged on, ``newest`` among them."""
    plugin = Grouped()
    clean_x, poison_y, clean_y = (
        ("x", 0.0, range(40)),
        ("y", 0.6, range(40, 80)),
        ("y", 0.0, range(80, 140)),
    )
    _run(plugin, tmp_path, [clean_x])
    _run(plugin, tmp_path, [clean_x, poison_y])
    rejected = _run(plugin, tmp_path, [clean_x, poison_y, clean_y]).gate
    assert rejected is not None and rejected.outcome == "rejected"
    fixed = _run(plugin, tmp_path, [clean_x, clean_y, ("y", 0.0, range(140, 160))])
    gate = fixed.gate
    assert gate is not None and gate.outcome == "promoted", gate
    assert [c.finding for c in gate.comparisons if c.name == NEWEST] == ["no_worse"]
    verdict = read_verdict(tmp_path / "checkpoints" / "candidates" / str(gate.candidate_id))
    assert verdict.outcome == "promoted"
