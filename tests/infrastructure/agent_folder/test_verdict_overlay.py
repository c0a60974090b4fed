"""A rollback's verdict is the candidate's verdict with what the rollback gives laid over
it (``KeptRecord.overlaid``), no JSON in between; its file is byte for byte the one the
writer before wrote by reading the merge of the two verdicts' JSON objects."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_lifecycle_records import GATE, INCONCLUSIVE, ROLLED_BACK

from genesis_fp16_infrastructure.agent_folder import files
from genesis_fp16_infrastructure.agent_folder.layout import VERDICT
from genesis_fp16_infrastructure.agent_folder.lifecycle_records import Verdict
from genesis_fp16_infrastructure.contract.reports import LiveFigures, LiveReport

FIGURES = LiveFigures(295, 0.63, 0.43, 0.84, 0.01, 0.025, True)
LIVE = LiveReport("m2", "m1", 295, 95, 0.05, True, rolled_back=True, now_served="m1",
                  primary="log_loss", metrics={"log_loss": FIGURES})  # fmt: skip
OLD = {
    "gate": GATE,
    "inconclusive": INCONCLUSIVE,
    "rolled back before": ROLLED_BACK,
    "a hand's scores": {**GATE, "candidate": {"set": 3}, "by_hand": [1, 2]},
    "an older file": {"outcome": "promoted", "served": {"loss": 0.4}, "comparisons": []},
}
GIVEN = {
    "the watch's": Verdict(reason="live_regression", live=LIVE, detail="worse by 0.05"),
    "the operator's": Verdict(reason="operator"),
    "read from JSON": Verdict.from_json({"reason": "r", "served": {"set": 1}, "note": "n"}),
    "nothing set": Verdict(),
}


@pytest.mark.parametrize("given", sorted(GIVEN))
@pytest.mark.parametrize("old", sorted(OLD))
def test_a_verdict_laid_over_another_writes_what_their_merged_json_read_wrote(
    old: str, given: str, tmp_path: Path
) -> None:
    base, top = Verdict.from_json(OLD[old]), GIVEN[given]
    before = Verdict.from_json({**base.to_json(), **top.to_json()})
    now = base.overlaid(top)
    assert now.to_json() == before.to_json()
    for name, verdict in (("before", before), ("now", now)):
        files.write_json(tmp_path / name / "verdict.json", VERDICT, verdict.to_json())
    assert (tmp_path / "now/verdict.json").read_bytes() == (
        tmp_path / "before/verdict.json"
    ).read_bytes()
