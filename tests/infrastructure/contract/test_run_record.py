"""A run's result read into the agent folder's records: its last run (whose one-line
reason reads the result's typed fields, never its extra) and its history entry."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

from genesis_fp16_infrastructure.contract.reports import (
    DriftReport,
    GateReport,
    ScoresOn,
    TrainResult,
)
from genesis_fp16_infrastructure.folder import AgentFolder
from genesis_fp16_infrastructure.training.reports import Demotion

UP_TO_DATE = TrainResult(
    agent="se_darwin", precision_requested="auto", precision_used="fp32",
    precision_reason="r", device="cpu", steps=0, skipped_steps=0, overflow_rate=0.0,
    loss_scale=1.0, final_train_loss=0.1, eval={}, samples_per_second=0.0,
    wall_seconds=0.1, checkpoint=None, quarantined=0, up_to_date=True,
)  # fmt: skip
RAN = replace(UP_TO_DATE, up_to_date=False, steps=10, eval={"loss": 0.1})


def test_an_up_to_date_run_says_why_from_its_typed_field() -> None:
    """``up_to_date_against`` gives the reason; an agent's extra with the same key does
    not (the daemon reads no extra); without it the reason is plain."""
    why = replace(UP_TO_DATE, up_to_date_against="the served model saw every record")
    assert why.reason() == "up to date: the served model saw every record"
    only_extra = replace(UP_TO_DATE, extra={"up_to_date_against": "from extra"})
    assert only_extra.reason() == UP_TO_DATE.reason() == "up to date"


def _folder(tmp_path: Path) -> AgentFolder:
    folder = AgentFolder(tmp_path, "se_darwin")
    folder.root.mkdir(parents=True)
    return folder


def test_a_run_with_its_reports_reads_back(tmp_path: Path) -> None:
    """A run's gate scores (every column, the primary first), demotion, drift,
    quarantine, loss scale and precision reason are kept in its entry and read back as
    written; last_run.json is written too."""
    folder = _folder(tmp_path)
    gate = GateReport(
        "rejected",
        "worse on the golden set",
        candidate=ScoresOn("golden", {"log_loss": 0.7, "brier": 0.2}, reported={"auc": 0.61}),
        served=ScoresOn("golden", {"log_loss": 0.5, "brier": 0.1}, reported={"auc": 0.74}),
        served_id="c1",
        candidate_id="c2",
    )
    drift = DriftReport(10, 100, {}, {"reward": 0.4}, {"reward": 0.2}, ("reward",), 0.0, 0.1, False)
    result = replace(
        RAN,
        precision_used="bf16",
        precision_reason="the guard's memory: fp16 demoted",
        loss_scale=1024.0,
        skipped_steps=3,
        quarantined=2,
        demotions=(Demotion("fp16", "bf16", "overflow_rate", 12, 10),),
        gate=gate,
        drift=drift,
    )
    folder.save_run(result.history_entry(2.0, "daemon"))
    (entry,) = folder.history().entries
    assert entry.run == folder.last_run()
    assert entry.run.precision_reason == "the guard's memory: fp16 demoted"
    assert (entry.loss_scale, entry.skipped_steps, entry.quarantined) == (1024.0, 3, 2)
    assert entry.demotions == ("fp16 to bf16 at step 12: overflow_rate",)
    assert entry.drift == "drift flagged: features reward"
    assert entry.gate is not None and entry.gate.outcome == "rejected"
    assert entry.gate.primary == "log_loss"
    assert list(entry.gate.candidate.items()) == [("log_loss", 0.7), ("brier", 0.2), ("auc", 0.61)]
    assert entry.gate.served == {"log_loss": 0.5, "brier": 0.1, "auc": 0.74}
    assert (entry.gate.candidate_id, entry.gate.served_id) == ("c2", "c1")


def test_a_judged_score_is_its_loss_and_nan_is_none(tmp_path: Path) -> None:
    """A judged agent's gate is told by its primary loss column (here the one column,
    ``loss``); a loss scale that is not finite is kept as None (JSON has no NaN)."""
    folder = _folder(tmp_path)
    gate = GateReport("promoted", "the first model", candidate=ScoresOn("current", {"loss": 0.3}))
    result = replace(RAN, gate=gate, loss_scale=math.inf)
    folder.save_run(result.history_entry(1.0, "daemon"))
    (entry,) = folder.history().entries
    assert entry.gate is not None and entry.gate.primary == "loss"
    assert (entry.gate.candidate, entry.gate.served) == ({"loss": 0.3}, {})
    assert entry.loss_scale is None
