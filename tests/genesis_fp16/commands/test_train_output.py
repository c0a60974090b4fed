"""`train`'s text summary: its first line is what became of the run, in a few words."""

from __future__ import annotations

import dataclasses
import math

from fake_results import train_result

from genesis_fp16.commands.train_output import verdict
from genesis_fp16_infrastructure.contract.plugin_api import TrainResult
from genesis_fp16_infrastructure.contract.reports import GateComparison, GateReport, GateScores
from genesis_fp16_infrastructure.recipes.retrain import gate


def _gate(*comparisons: GateComparison) -> GateReport:
    """The gate record a run's result carries, as promotion.judge builds it."""
    return gate.decide(comparisons).report(served_id="20261124T000000Z-served")


def _out(record: GateReport, outcome: str) -> TrainResult:
    return train_result(gate=record, steps=40, eval={"auc": 0.9}, rejected=outcome == "rejected")


def _comparison(name: str, cand_auc: float, auc_upper: float, ll_upper: float) -> GateComparison:
    worse = auc_upper > gate.MARGIN_AUC or ll_upper > gate.MARGIN_LOG_LOSS
    return GateComparison(
        name,
        GateScores(cand_auc, 0.01, 0.50, 400),
        GateScores(0.920, 0.01, 0.48, 400),
        gate.MARGIN_AUC,
        gate.MARGIN_LOG_LOSS,
        not worse,
        "the gate's long reason, " * 8,
        auc_upper,
        ll_upper,
    )


def test_a_rejected_candidate_names_the_criterion_that_failed_and_its_tolerance() -> None:
    """Worse by log-loss: the log-loss pair, how much worse at most, the margin; worse by
    AUC alone: the AUC pair. Never the gate's whole reason."""
    by_loss = verdict(_out(_gate(_comparison("held_out", 0.924, 0.0, 0.031)), "rejected"))
    assert by_loss == (
        "rejected: log-loss 0.500 vs 0.480, up to 0.031 worse, tolerance 0.01; "
        "the served model stays"
    )
    by_auc = verdict(_out(_gate(_comparison("held_out", 0.880, 0.045, 0.0)), "rejected"))
    assert by_auc.startswith("rejected: AUC 0.880 vs 0.920, up to 0.045 worse, tolerance 0.02")


def test_a_served_candidate_reads_auc_against_served_and_names_the_set_among_several() -> None:
    """Promoted on two sets: the first set's AUC pair and tolerance, and which set it was."""
    record = _gate(
        _comparison("held_out", 0.924, 0.001, 0.0), _comparison("newest", 0.93, 0.0, 0.0)
    )
    assert verdict(_out(record, "success")) == (
        "served: AUC 0.924 vs 0.920, tolerance 0.02 (held_out records)"
    )


def test_without_auc_the_log_loss_carries_the_line() -> None:
    """A set with too few of a class has no AUC margin (NaN → null): log-loss instead."""
    comparison = _comparison("held_out", 0.924, math.nan, 0.0)
    record = _gate(dataclasses.replace(comparison, delta_auc=math.nan))
    assert verdict(_out(record, "success")) == "served: log-loss 0.500 vs 0.480, tolerance 0.01"


def test_an_inconclusive_candidate_is_kept_not_called_worse() -> None:
    """Issue 62: an inconclusive verdict reads as kept, with the records it needs, and
    never as rejected."""
    record = GateReport("inconclusive", "too few records", records_needed=900)
    line = verdict(_out(record, "success"))
    assert line == (
        "inconclusive: kept, judged again when about 900 records show it; the served model stays"
    )
    assert "reject" not in line and "worse" not in line
