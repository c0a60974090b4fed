"""`train`'s text summary: its first line is what became of the run, in a few words."""

from __future__ import annotations

from fake_results import train_result

from genesis_fp16.commands.train import verdict
from genesis_fp16.plugin_api import TrainResult
from genesis_fp16_infrastructure.api import GateReport
from genesis_fp16_infrastructure.judging.gate import Paired, decide


def _gate(*comparisons: Paired) -> GateReport:
    """The gate record a run's result carries, as the judged run builds it."""
    outcome, reason, settled = decide(comparisons)
    return GateReport(
        outcome,
        reason,
        comparisons=tuple(c.comparison() for c in settled),
        served_id="20261124T000000Z-served",
    )


def _out(record: GateReport, outcome: str) -> TrainResult:
    return train_result(gate=record, steps=40, eval={"auc": 0.9}, rejected=outcome == "rejected")


def _paired(name: str, candidate: float, difference: float, se: float) -> Paired:
    """Candidate against served on 400 records, worse by ``difference`` (s.e. ``se``)."""
    return Paired(
        name,
        400,
        candidate,
        candidate - difference,
        difference,
        difference + 1.645 * se,
        0.01,
        None,
        difference - 1.645 * se,
    )


def test_a_rejected_candidate_names_the_set_that_failed_and_its_figures() -> None:
    """Shown worse: the failing set's loss pair, its bounds and the margin; never the
    gate's whole reason."""
    line = verdict(_out(_gate(_paired("held_out", 0.50, 0.03, 0.005)), "rejected"))
    assert line.startswith("rejected: held_out: loss 0.5 vs served 0.47 on 400 records"), line
    assert "shown worse beyond the margin 0.01" in line and line.endswith("the served model stays")


def test_a_served_candidate_reads_the_passing_sets_figures() -> None:
    """Promoted on two sets: the first passing set's loss pair, within the margin."""
    record = _gate(_paired("held_out", 0.40, -0.02, 0.004), _paired("golden", 0.30, -0.01, 0.002))
    line = verdict(_out(record, "success"))
    assert line.startswith("served: held_out: loss 0.4 vs served 0.42 on 400 records"), line
    assert line.endswith("within the margin 0.01")


def test_the_first_model_reports_its_auc() -> None:
    """The first model has nothing to beat: its run's AUC is reported (not gated)."""
    record = GateReport("promoted", "the first model")
    assert (
        verdict(_out(record, "success")) == "served: the first model, nothing to beat (AUC 0.900)"
    )


def test_an_inconclusive_candidate_is_kept_not_called_worse() -> None:
    """Issue 62: an inconclusive verdict reads as kept, with the records it needs, and
    never as rejected."""
    record = GateReport("inconclusive", "too few records", records_needed=900)
    line = verdict(_out(record, "success"))
    assert line == (
        "inconclusive: kept, judged again when about 900 records show it; the served model stays"
    )
    assert "reject" not in line and "worse" not in line
