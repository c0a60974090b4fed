"""The last run's one-line reason reads the result's typed fields, never its extra."""

from __future__ import annotations

from dataclasses import replace

from genesis_fp16.metrics.last_run import result_reason
from genesis_fp16_infrastructure.contract.train_result import TrainResult

UP_TO_DATE = TrainResult(
    agent="se_darwin", precision_requested="auto", precision_used="fp32",
    precision_reason="r", device="cpu", steps=0, skipped_steps=0, overflow_rate=0.0,
    loss_scale=1.0, final_train_loss=0.1, eval={}, samples_per_second=0.0,
    wall_seconds=0.1, checkpoint=None, quarantined=0, up_to_date=True,
)  # fmt: skip


def test_an_up_to_date_run_says_why_from_its_typed_field() -> None:
    """``up_to_date_against`` gives the reason; an agent's extra with the same key does
    not (the daemon reads no extra); without it the reason is plain."""
    why = replace(UP_TO_DATE, up_to_date_against="the served model saw every record")
    assert result_reason(why) == "up to date: the served model saw every record"
    only_extra = replace(UP_TO_DATE, extra={"up_to_date_against": "from extra"})
    assert result_reason(only_extra) == result_reason(UP_TO_DATE) == "up to date"
