"""The contract's records: each reads back from its own JSON, keeps the JSON keys the
``train --json`` object had before they were typed, and refuses bad JSON in one line."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from genesis_fp16_infrastructure.contract.reports import (
    DataReport,
    DriftReport,
    GateComparison,
    GateReport,
    LiveFigures,
    LiveReport,
    ScoresOn,
    TrainResult,
)
from genesis_fp16_infrastructure.record_codec import ReportError
from genesis_fp16_infrastructure.training.reports import (
    Calibration,
    Demotion,
    EarlyStopReport,
    FaultBundle,
    Measured,
)

COMPARISON = GateComparison(
    "held_out", passed=True, reason="no worse", metric="log_loss", margin=0.01000000049
)
CANDIDATE = ScoresOn("held_out", {"log_loss": 0.50000049, "brier": 0.2}, 400, {"auc": 0.81234567})
RECORDS = [
    DataReport(40, "abc", "changed", previous_records=30, new=10, removed=0, relabelled=0),
    DataReport(40, "abc", "first"),
    DriftReport(20, 30, {"new": 20, "reference": 30}, {"tool": 0.2}, {"tool": 0.1}, ("tool",),
                0.01, 0.05, False),
    GateReport("promoted", "no worse", (COMPARISON,), 1.23456, "bf16",
               CANDIDATE, ScoresOn("held_out", {"log_loss": 0.52, "brier": 0.21}, 400),
               "20261124T000000Z-served", "ckpt-00000040.pt", candidate_id="c1"),
    EarlyStopReport("loss", "min", 0.5, 8, 4, 1, 3, 2, "budget spent", {"loss": 0.6},
                    ((2, 0.7), (4, math.nan))),
    Demotion("fp16", "bf16", "overflow_rate", 40, 30, "12 of 20 steps overflowed"),
    Calibration("bf16", "measured", (Measured("bf16", "eager", 1.0, 0.9, 1.2, 5),), {"fp16": "no"},
                {"device": "cpu"}, 0.5, measured_at=1.0, cached=True),
    FaultBundle("/state/fault_bundles/b.pt", "first_nonfinite", 18, "fp16", 2048),
    LiveReport("m2", "m1", 295, 95, 0.05, True, rolled_back=True, now_served="m1",
               updated_at="2026-11-25T00:00:00Z", primary="log_loss",
               metrics={"log_loss": LiveFigures(295, 0.63, 0.43, 0.84, 0.01, 0.025, True,
                                                served_loss=0.95, previous_loss=0.32),
                        "brier": LiveFigures(295, 0.0, -0.1, 0.1, 0.01, 0.025, False)}),
]  # fmt: skip

# The keys train --json had for each record before issue 53 typed it (the dicts the
# producers wrote): docs, tests and stored results read these.
KEYS = {
    DataReport: {"records", "fingerprint", "change", "previous_records", "new", "removed",
                 "relabelled"},
    DriftReport: {"new_records", "reference_records", "sampled", "features", "thresholds",
                  "flagged", "label_shift", "label_shift_threshold", "label_shift_flagged"},
    GateReport: {"outcome", "reason", "comparisons", "seconds", "precision", "candidate",
                 "served", "served_id", "checkpoint", "candidate_id"},
    EarlyStopReport: {"metric", "mode", "best", "best_step", "evaluations", "since_best",
                      "patience", "every_steps", "stop_reason", "last", "history"},
    Demotion: {"from", "to", "reason", "step", "rollback_step", "detail"},
    FaultBundle: {"path", "reason", "step", "precision", "bytes"},
    # the dict judging.watch returns; issue 68: each loss column's figures in a map by
    # its name, where the one watched column's were beside the rest
    LiveReport: {"served", "against", "records", "new_records", "alpha", "regression",
                 "rolled_back", "held", "now_served", "updated_at", "primary", "metrics"},
    Calibration: {"chosen", "reason", "rows", "skipped", "key", "seconds", "measured_at",
                  "execution", "bound", "version", "remeasured", "init_s", "phases", "cached",
                  "revalidated"},
}  # fmt: skip


def _same(a: Any, b: Any) -> bool:
    """Equal, NaN equal to NaN at any depth."""
    return json.dumps(a, default=repr) == json.dumps(b, default=repr)


@pytest.mark.parametrize("record", RECORDS, ids=lambda r: type(r).__name__)
def test_each_record_reads_back_from_its_json_with_the_keys_it_had(record: Any) -> None:
    """to_json is plain JSON (NaN as null) with the keys the untyped dict had; from_json of
    it gives the record back (rounded figures stay as rounded)."""
    out = record.to_json()
    text = json.dumps(out, allow_nan=False)
    assert set(out) <= KEYS[type(record)]
    if type(record) is not DataReport or record.change != "first":
        assert set(out) == KEYS[type(record)]
    back = type(record).from_json(json.loads(text))
    assert back.to_json() == out
    if type(record) not in (GateReport,):  # the gate's figures are rounded in its JSON
        assert _same(back, record)


def test_the_gate_json_holds_its_figures_as_maps_by_metric() -> None:
    """Issue 68: a model's figures are ``{metric: figure}`` maps (the loss columns, the
    primary first, then what is reported beside them), rounded to 6 places, no field
    named for one agent and no NaN filler; the comparison's name under "set", its
    column under "metric", seconds to 4 places."""
    out = RECORDS[3].to_json()
    comparison = out["comparisons"][0]
    assert comparison == {"set": "held_out", "passed": True, "reason": "no worse",
                          "metric": "log_loss", "margin": 0.01}  # fmt: skip
    assert out["seconds"] == 1.2346
    assert out["candidate"] == {"set": "held_out", "losses": {"log_loss": 0.5, "brier": 0.2},
                                "records": 400, "reported": {"auc": 0.812346},
                                "primary": "log_loss"}  # fmt: skip
    assert list(GateReport.from_json(out).candidate.losses) == ["log_loss", "brier"]  # type: ignore[union-attr]
    assert "candidate_id" not in GateReport("rejected", "worse").to_json()


@pytest.mark.parametrize(
    ("written", "losses", "reported"),
    [  # a judged verdict before loss columns (auc reported, log_loss a NaN filler)
        ({"set": "held_out", "auc": 0.91, "log_loss": None, "records": 9, "loss": 0.2},
         {"loss": 0.2}, {"auc": 0.91}),
        # se_darwin's own gate, before issue 68 (AUC with its s.e., the log-loss)
        ({"set": "held_out", "auc": 0.8, "auc_se": 0.01, "log_loss": 0.4, "records": 9},
         {"log_loss": 0.4}, {"auc": 0.8}),
        ({"set": "its run's evaluation", "auc": None, "log_loss": None}, {}, {}),
    ],
)  # fmt: skip
def test_scores_written_before_loss_columns_read_into_the_maps(
    written: dict[str, Any], losses: dict[str, float], reported: dict[str, float]
) -> None:
    """A verdict's (or the pointer's) scores written by an earlier version read: its loss
    (else its log-loss) as the one loss column, its AUC as reported, NaN fillers left
    out; a whole verdict with such scores reads too."""
    scores = ScoresOn.from_json(written)
    assert (dict(scores.losses), dict(scores.reported)) == (losses, reported)
    verdict = GateReport.from_json({"outcome": "promoted", "reason": "r", "candidate": written})
    assert verdict.candidate == scores


def test_an_older_verdict_file_reads_with_its_unknown_keys_left_out() -> None:
    """A verdict written by an older version (or a rollback's, with keys this record does
    not know: its stamps are lifecycle_records.Verdict's) reads: the keys it knows, the
    rest ignored, never a refusal."""
    old = {"outcome": "rolled_back", "reason": "live_regression", "live": {"records": 3},
           "gate_outcome": "promoted", "decided_at_s": 5.0, "future_key": 1}  # fmt: skip
    report = GateReport.from_json(old)
    assert (report.outcome, report.reason, report.comparisons) == (
        "rolled_back",
        "live_regression",
        (),
    )


@pytest.mark.parametrize(
    ("kind", "data", "line"),
    [
        (Demotion, {"from": "fp16", "to": "fp8", "reason": "r", "step": 1, "rollback_step": 0},
         "Demotion.to: one of 'fp32', 'bf16', 'fp16' expected, got 'fp8'"),
        (Demotion, {"from": "fp16", "to": "bf16", "step": 1, "rollback_step": 0},
         "Demotion: 'reason' missing"),
        (Demotion, ["fp16", "bf16"], "Demotion: an object expected, got list ['fp16', 'bf16']"),
        (DataReport, {"records": "40", "fingerprint": "a", "change": "first"},
         "DataReport.records: int expected, got str '40'"),
        (DataReport, {"records": True, "fingerprint": "a", "change": "first"},
         "DataReport.records: int expected, got True"),
        (GateReport, {"outcome": "promoted", "reason": "r", "comparisons": [{"passed": True}]},
         "GateReport.comparisons[0]: 'set' missing"),
        (EarlyStopReport, {**RECORDS[4].to_json(), "history": [[2, 0.5, 9]]},
         "EarlyStopReport.history[0]: 2 items expected, got 3"),
        (DriftReport, {**RECORDS[2].to_json(), "features": {"tool": "far"}},
         "DriftReport.features['tool']: float expected, got str 'far'"),
        (Calibration, {**RECORDS[6].to_json(), "version": 1},
         "Calibration: version 1, expected 4"),
    ],
    ids=["fp8", "missing", "not_object", "str_int", "bool_int", "nested_missing",
         "history_shape", "str_float", "old_cache"],
)  # fmt: skip
def test_bad_json_is_refused_in_one_line_naming_the_place(kind: Any, data: Any, line: str) -> None:
    """The record and the place inside it, what it should hold and what it held; a
    ReportError (a ValueError), one line."""
    with pytest.raises(ReportError) as raised:
        kind.from_json(data)
    assert str(raised.value) == line and isinstance(raised.value, ValueError)


def test_train_result_json_holds_each_record_once_and_reads_back_typed() -> None:
    """The result's JSON has each record under its own field (no copy in extra); read
    back, the fields are the records again."""
    data, drift, gate, early, demotion, calibration, live = (
        RECORDS[i] for i in (0, 2, 3, 4, 5, 6, 8)
    )
    result = TrainResult(
        agent="a", precision_requested="auto", precision_used="bf16", precision_reason="r",
        device="cpu", steps=40, skipped_steps=0, overflow_rate=0.0, loss_scale=1.0,
        final_train_loss=0.1, eval={"auc": 0.8}, samples_per_second=1.0, wall_seconds=1.0,
        checkpoint=None, quarantined=0, demotions=(demotion,), data=data, drift=drift,
        gate=gate, early_stop=early, precision_calibration=calibration, extra={"note": 1},
        live=live, up_to_date_against="nothing new",
    )  # fmt: skip
    out = json.loads(json.dumps(result.to_json(), allow_nan=False))
    assert out["extra"] == {"note": 1} and out["gate"]["outcome"] == "promoted"
    assert out["demotions"] == [demotion.to_json()] and out["data"] == data.to_json()
    back = TrainResult.from_json(out)
    assert (back.data, back.drift, back.demotions) == (data, drift, (demotion,))
    assert back.gate is not None and back.gate.to_json() == gate.to_json()
    assert back.precision_calibration == calibration
    assert back.early_stop is not None and _same(back.early_stop, early)
    assert (back.live, back.up_to_date_against) == (live, "nothing new")
    assert out["live"]["primary"] == "log_loss" and out["live"]["now_served"] == "m1"


# A served.json's ``live`` entry as the watch wrote it before its columns were a map
# (one column, its figures beside the report's; se_darwin, two segments).
OLD_LIVE = {
    "score": "loss", "metric": "log_loss", "records": 412, "served_loss": 0.41,
    "previous_loss": 0.38, "difference": 0.03, "lower": 0.012, "upper": 0.048,
    "margin": 0.01, "alpha": 0.05, "evidence": 55.2, "records_needed": None,
    "segments": [{"name": "coder", "records": 200, "difference": 0.05, "lower": 0.02,
                  "upper": 0.08, "alpha": 0.0015625, "evidence": 700.0,
                  "records_needed": None, "regression": True},
                 {"name": "qa", "records": 212, "difference": 0.01, "lower": -0.02,
                  "upper": 0.04, "alpha": 0.0015625, "evidence": 1.2,
                  "records_needed": 900, "regression": False}],
    "self_test": {"replays": 200, "records": 412, "false_rollbacks": 1, "rate": 0.005,
                  "lower": 0.0009, "upper": 0.0278},
    "regression": True, "against": "m1", "new_records": 112,
    "updated_at": "2026-11-20T10:00:00Z", "served": "m2", "rolled_back": True, "held": None,
    "now_served": "m1",
}  # fmt: skip


def test_a_live_report_of_one_column_reads_as_the_map_of_that_column() -> None:
    """A live report written before the map (served.json's ``live``, a run's history or
    a rolled-back verdict) reads without loss: every figure it held is its one column's
    or the report's, and the one-line view the pages read shows the same figures."""
    live = LiveReport.from_json(OLD_LIVE)
    assert (live.primary, list(live.metrics), live.regressed) == ("log_loss", ["log_loss"],
                                                                  ("log_loss",))  # fmt: skip
    column = live.watched
    assert (column.records, column.served_loss, column.previous_loss) == (412, 0.41, 0.38)
    assert (column.difference, column.lower, column.upper, column.margin) == (
        0.03, 0.012, 0.048, 0.01)  # fmt: skip
    assert (column.evidence, column.alpha, column.regression) == (55.2, 0.05, True)
    assert column.segments is not None and [s.name for s in column.segments] == ["coder", "qa"]
    assert column.segments[0].regression and column.segments[1].records_needed == 900
    assert live.self_test is not None and live.self_test.false_rollbacks == 1
    assert (live.served, live.against, live.now_served, live.rolled_back) == (
        "m2", "m1", "m1", True)  # fmt: skip
    assert (live.records, live.new_records, live.updated_at) == (412, 112, OLD_LIVE["updated_at"])
    again = LiveReport.from_json(json.loads(json.dumps(live.to_json())))
    assert again == live
    kept = live.figures_json()  # as a served entry keeps it: what the watch did left out
    assert not {"served", "rolled_back", "held", "now_served"} & set(kept)
    assert LiveReport.from_json({**kept, "served": "m2"}).metrics == live.metrics


def test_a_live_report_whose_primary_is_no_column_is_refused() -> None:
    """The primary must name one of the columns: refused in one line otherwise."""
    data = {**RECORDS[8].to_json(), "primary": "auc"}
    with pytest.raises(ReportError, match="LiveReport: primary 'auc' is not one of"):
        LiveReport.from_json(data)
