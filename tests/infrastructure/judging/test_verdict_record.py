"""A gate report becomes its verdict record field by field (``verdict.verdict_of``), no
JSON in between, and the verdict file it writes is byte for byte the one the writer
before wrote: the report's JSON with the comparisons' figures, read as a verdict."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest

from genesis_fp16_infrastructure.agent_folder import files
from genesis_fp16_infrastructure.agent_folder.layout import VERDICT
from genesis_fp16_infrastructure.agent_folder.lifecycle_records import (
    Finding,
    Outcome,
    Verdict,
    stamped,
)
from genesis_fp16_infrastructure.contract.reports import GateComparison, GateReport, ScoresOn
from genesis_fp16_infrastructure.judging.gate import Paired
from genesis_fp16_infrastructure.judging.verdict import verdict_of

COMPARISON = GateComparison(
    "held_out", passed=True, reason="no worse", metric="log_loss", margin=0.01000000049
)
SCORES = ScoresOn("held_out", {"log_loss": 0.50000049, "brier": 0.2}, 400, {"auc": 0.81234567})
PAIRED = Paired("held_out", 400, 0.5000001234, 0.52, -0.0199998766, 0.001234567, 0.01, True,
                -0.04123456, finding=Finding.NO_WORSE)  # fmt: skip
NAN_PAIRED = Paired("recent", 3, math.nan, 0.5, math.nan, math.nan, 0.01, None)

REPORTS = {
    "promoted": (
        GateReport(Outcome.PROMOTED, "no worse", (COMPARISON,), 1.23456789, "bf16", SCORES,
                   ScoresOn("held_out", {"log_loss": 0.52}, 400), "m1", "ckpt-0000000040.pt",
                   candidate_id="c1", evidence="held_out"),
        [PAIRED],
    ),
    "inconclusive": (
        GateReport(Outcome.INCONCLUSIVE, "too few", (COMPARISON, COMPARISON), 0.5, "fp32",
                   SCORES, None, "m1", None, candidate_id="c2", records_needed=900,
                   judged_on="digest", evidence="training_data"),
        [PAIRED, NAN_PAIRED],
    ),
    "first model": (GateReport(Outcome.PROMOTED, "the first model", candidate=SCORES), []),
    "closed": (GateReport(Outcome.UNDECIDED, "not continued", served_id="m1",
                          candidate_id="c3"), []),
    "refused": (GateReport(Outcome.UNDECIDED, "no scores", precision="fp16"), []),
}  # fmt: skip


def _as_before(report: GateReport, judged: list[Paired]) -> Verdict:
    """What the writer before built: the report's JSON and the comparisons', read."""
    return Verdict.from_json(report.to_json() | {"judged": [c.to_json() for c in judged]})


@pytest.mark.parametrize("case", sorted(REPORTS))
def test_a_verdict_made_from_its_report_writes_the_file_as_before(
    case: str, tmp_path: Path
) -> None:
    report, judged = REPORTS[case]
    before, now = _as_before(report, judged), verdict_of(report, judged)
    assert now.to_json() == before.to_json()
    written = {}
    for name, verdict in (("before", before), ("now", now)):
        written[name] = tmp_path / name / "verdict.json"
        files.write_json(written[name], VERDICT, verdict.to_json())
    assert written["now"].read_bytes() == written["before"].read_bytes()
    assert stamped(now).to_json().keys() == stamped(before).to_json().keys()
    assert now.candidate is report.candidate and now.comparisons is report.comparisons


def test_every_field_of_the_report_is_taken() -> None:
    """A field added to the report and not taken would be lost from the file: the cases
    above set each one, and this names them."""
    fields = {f.name for f in dataclasses.fields(GateReport)}
    set_somewhere = {
        f
        for report, _ in REPORTS.values()
        for f in fields
        if getattr(report, f) not in (None, (), 0.0)
    }
    assert set_somewhere == fields
